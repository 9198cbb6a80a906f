#!/usr/bin/env python3
"""Compare two static-mode result files (e.g. tantivy vs lucene): hit counts and top-k id lists.

usage: compare_static.py A.json B.json
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    ea, eb = a["engine"], b["engine"]
    total = count_diffs = same_lists = 0
    for cat, ca in a["categories"].items():
        cb = b["categories"].get(cat)
        if cb is None or "hit_counts" not in ca or "hit_counts" not in cb:
            continue
        for i, q in enumerate(ca["queries"]):
            if i >= len(cb["queries"]) or cb["queries"][i] != q:
                print(f"query lists differ in {cat} at {i}", file=sys.stderr)
                return 1
            total += 1
            ha, hb = ca["hit_counts"][i], cb["hit_counts"][i]
            ia, ib = ca.get("top_ids", [[]] * (i + 1))[i], cb.get("top_ids", [[]] * (i + 1))[i]
            same_lists += ia == ib
            if ha != hb:
                count_diffs += 1
                print(f"  hits  {cat:12} {q!r:32} {ea}={ha} {eb}={hb}")
            elif ia != ib:
                print(f"  top   {cat:12} {q!r:32} same hits, top-{len(ia)} overlap {len(set(ia) & set(ib))}")
    print(f"{total} queries: {count_diffs} hit-count differences, {same_lists} identical top-k lists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
