#!/usr/bin/env python3
"""Report of `bench/run.sh interleave`: spirit's and Tantivy's query loops, alternated on one core.

Reads OUTDIR/loops.jsonl (one line per engine, category and round: the geometric mean over the category's
queries of each one's mean latency in that round's loop, and the arithmetic mean) and OUTDIR/meta.json;
prints markdown: per category the median over the rounds of each engine's geometric mean, the ratio of the
medians, and the median and range of the per-round ratios (each round's two loops ran back to back, so a
round's ratio sees one machine state).
"""
import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
meta = json.loads((out / "meta.json").read_text())
rows = [json.loads(line) for line in (out / "loops.jsonl").read_text().splitlines() if line.strip()]
cats = list(dict.fromkeys(r["category"] for r in rows))
by = {}
for r in rows:
    by.setdefault((r["category"], r["engine"]), {})[r["round"]] = r["geomean_us"]

print("# spirit vs Tantivy, interleaved query loops\n")
for k in ("command", "commit", "data", "date", "machine"):
    print(f"- {k}: {meta.get(k, '?')}")
rounds = max(r["round"] for r in rows)
print(f"- rounds: {rounds}; in each, every category's queries (the first 100 distinct of the task file) looped"
      " by spirit, then by Tantivy, on one core, after one untimed pass; top-10 BM25 on `body`, both indexes"
      " force-merged to one segment\n")
print("Geometric-mean latency per query in µs (over the category's queries, each one's mean over a round's"
      " passes; the median over the rounds); ratio < 1: spirit is faster. `loops.jsonl` also has each"
      " round's arithmetic mean.\n")
print("| workload | spirit | Tantivy | spirit / Tantivy (medians) | per-round ratio: median (min–max) |")
print("|---|---:|---:|---:|---|")
for c in cats:
    s, t = by.get((c, "spirit"), {}), by.get((c, "tantivy"), {})
    both = sorted(set(s) & set(t))
    if not both:
        continue
    ms, mt = statistics.median(s[r] for r in both), statistics.median(t[r] for r in both)
    ratios = [s[r] / t[r] for r in both]
    print(f"| {c} | {ms:.1f} | {mt:.1f} | {ms / mt:.2f} | {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}–{max(ratios):.2f}) |")
