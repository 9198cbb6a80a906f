#!/usr/bin/env python3
"""Report of `bench/run.sh interleave`: spirit's and Tantivy's query loops, alternated on one core.

Reads OUTDIR/loops.jsonl (one line per engine, category and round: the geometric mean over the category's
queries of each one's mean latency in that round's loop, and the arithmetic mean) and OUTDIR/meta.json;
prints markdown: per category the median over the rounds of each engine's geometric mean, the ratio of the
medians, and the median and range of the per-round ratios (each round's two loops ran back to back, so a
round's ratio sees one machine state). With the task file as a second argument, also the queries furthest
from Tantivy in each category (from each loop's per-query means, where the lines have them).
"""
import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
tasks = Path(sys.argv[2]) if len(sys.argv) > 2 else None
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


def task_queries(path, per_category=100):
    """The first `per_category` distinct queries of each category, as both loops select them."""
    cats = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        cat, rest = line.split(":", 1)
        q = rest.split("#", 1)[0].strip()
        qs = cats.setdefault(cat.strip(), [])
        if q and len(qs) < per_category and q not in qs:
            qs.append(q)
    return cats


per_query = {}
for r in rows:
    if "per_query_us" in r:
        per_query.setdefault((r["category"], r["engine"]), {})[r["round"]] = r["per_query_us"]
if tasks is not None and per_query:
    texts = task_queries(tasks)
    print("\nQueries furthest from Tantivy: per query, the median over the rounds of spirit's mean over Tantivy's"
          " (the five highest per category).\n")
    print("| workload | query | spirit µs | Tantivy µs | spirit / Tantivy |")
    print("|---|---|---:|---:|---:|")
    for c in cats:
        s, t = per_query.get((c, "spirit"), {}), per_query.get((c, "tantivy"), {})
        both = sorted(set(s) & set(t))
        if not both or any(len(s[r]) != len(t[r]) for r in both):
            continue
        n = len(s[both[0]])
        med = [(statistics.median(s[r][i] / max(t[r][i], 1e-3) for r in both),
                statistics.median(s[r][i] for r in both), statistics.median(t[r][i] for r in both), i)
               for i in range(n)]
        for ratio, ms, mt, i in sorted(med, reverse=True)[:5]:
            q = texts.get(c, [])[i] if i < len(texts.get(c, [])) else f"#{i}"
            print(f"| {c} | `{q}` | {ms:.1f} | {mt:.1f} | {ratio:.2f} |")
