#!/usr/bin/env python3
"""Writes to stdout a task file whose every category holds the same queries the harness takes from TASKS --
the first N distinct ones of the category, as every engine selects them (`Category: query # comment`, blank
and `#` lines skipped, the category before the first colon, the query before the first `#`, both trimmed) --
in the same order of categories, each category's queries rotated to start at its query OFFSET (mod its count).

`bench/run.sh` gives each real-time round its own offset: the engines time queries round-robin from the first
of each category, so a configuration that reopens often times only a workload's first few queries in a
window; rotating them makes its rounds time different ones.

usage: rotate_tasks.py TASKS N OFFSET
"""
import sys


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    path, n, offset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cats: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or ":" not in line:
                continue
            cat, rest = line.split(":", 1)
            query = rest.split("#", 1)[0].strip()
            if not query:
                continue
            qs = cats.setdefault(cat.strip(), [])
            if len(qs) < n and query not in qs:
                qs.append(query)
    for cat, qs in cats.items():
        k = offset % len(qs) if qs else 0
        for q in qs[k:] + qs[:k]:
            print(f"{cat}: {q}")


if __name__ == "__main__":
    main()
