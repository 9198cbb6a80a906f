#!/usr/bin/env bash
# Prints the JAVA_HOME of a JDK that can build and run the Lucene baseline.
#   find-jdk.sh [MIN [MAX]]     feature versions, default MIN=21 (Lucene 10 needs 21+), no MAX
#   LUCENE_BASELINE_JAVA_HOME  if set, used as is.
#   otherwise the newest JDK with MIN <= version <= MAX among $JAVA_HOME, the javac on PATH,
#   /usr/lib/jvm/* and /opt/*jdk* (the Temurin 25 JDK here; JDK 17 for MIN=MAX=17).
set -euo pipefail
min="${1:-21}"
max="${2:-999}"
if [ -n "${LUCENE_BASELINE_JAVA_HOME:-}" ]; then
  echo "$LUCENE_BASELINE_JAVA_HOME"; exit 0
fi
feature() { # major version of a JDK home, or 0
  local v
  v="$("$1/bin/java" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/{print $2; exit}')" || true
  echo "${v:-0}" | cut -d. -f1
}
best=""; bestv=0
cands=()
[ -n "${JAVA_HOME:-}" ] && cands+=("$JAVA_HOME")
if command -v javac >/dev/null 2>&1; then
  cands+=("$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")")
fi
for d in /usr/lib/jvm/* /opt/*jdk* /opt/java/*; do [ -d "$d" ] && cands+=("$d"); done
for d in "${cands[@]}"; do
  [ -x "$d/bin/java" ] && [ -x "$d/bin/javac" ] || continue
  v="$(feature "$d")"
  if [ "$v" -ge "$min" ] && [ "$v" -le "$max" ] && [ "$v" -gt "$bestv" ]; then best="$d"; bestv="$v"; fi
done
if [ -z "$best" ]; then
  echo "find-jdk.sh: no JDK with $min <= version <= $max found (set LUCENE_BASELINE_JAVA_HOME)" >&2; exit 1
fi
echo "$best"
