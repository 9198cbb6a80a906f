#!/usr/bin/env bash
# Builds the two benchmark baselines (idempotent):
#   bench/lucene/target/lucene-baseline.jar      (run it with bench/lucene/lucene-baseline)
#   bench/tantivy/target/release/tantivy-baseline
# Installs nothing outside the repo except Maven's ~/.m2 and cargo's registry downloads.
#
#   build.sh [lucene|tantivy|all]     (default all; one build at a time)
#   LUCENE_PROFILE=lucene9            build Lucene 9.12.x for JDK 17 instead of Lucene 10 (JDK 21+)
#   LUCENE_BASELINE_JAVA_HOME=DIR     JDK used to build (and, recorded, to run) the Lucene baseline
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"   # .../bench
what="${1:-all}"

build_lucene() {
  local dir="$root/lucene" jh prof=() mopts=""
  if [ "${LUCENE_PROFILE:-}" = "lucene9" ]; then
    prof=(-Plucene9); jh="$("$dir/find-jdk.sh" 17 17)"      # Lucene 9.12.x on JDK 17
  else
    jh="$("$dir/find-jdk.sh" 21)"                           # Lucene 10.x on the newest JDK >= 21
  fi
  command -v mvn >/dev/null || { echo "build.sh: mvn not found (apt-get install maven)" >&2; exit 1; }
  echo "== lucene baseline: JDK $jh, profile ${prof[*]:-default (Lucene 10)}" >&2
  # Maven 3.8's bundled Guava calls sun.misc.Unsafe: silence JDK 24+'s warnings about it
  if "$jh/bin/java" --sun-misc-unsafe-memory-access=allow -version >/dev/null 2>&1; then
    mopts="--sun-misc-unsafe-memory-access=allow"
  fi
  local log rc
  log="$(mktemp)"
  set +e
  (cd "$dir" && JAVA_HOME="$jh" MAVEN_OPTS="${MAVEN_OPTS:-} $mopts" mvn -q -B "${prof[@]}" clean package) >"$log" 2>&1
  rc=$?
  set -e
  sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -v '^[[:space:]]*$' >&2 || true   # strip Maven's colour codes
  rm -f "$log"
  [ "$rc" = 0 ] || { echo "build.sh: lucene build failed (mvn exit $rc)" >&2; exit 1; }
  echo "$jh" > "$dir/target/java-home"
  echo "   -> $dir/target/lucene-baseline.jar (run: $dir/lucene-baseline ...)" >&2
}

build_tantivy() {
  local dir="$root/tantivy"
  command -v cargo >/dev/null || { echo "build.sh: cargo not found" >&2; exit 1; }
  echo "== tantivy baseline (standalone cargo project, target dir $dir/target)" >&2
  # its own [workspace] table keeps cargo inside bench/tantivy: the spirit workspace is never built here
  local locked=(); [ -f "$dir/Cargo.lock" ] && locked=(--locked)
  (cd "$dir" && CARGO_TARGET_DIR="$dir/target" nice -n 10 cargo build -q --release "${locked[@]}")
  echo "   -> $dir/target/release/tantivy-baseline" >&2
}

case "$what" in
  lucene) build_lucene ;;
  tantivy) build_tantivy ;;
  all) build_lucene; build_tantivy ;;
  *) echo "usage: build.sh [lucene|tantivy|all]" >&2; exit 2 ;;
esac
