#!/usr/bin/env bash
# The test command: the Rust test suite, then the HTTP server driven by the official opensearch-py client and
# the web page driven by a real browser (both install what they need: a Python venv from PyPI, chromium from
# Debian's packages).
set -euo pipefail
cd "$(dirname "$0")/.."
# A watchdog: a test that hangs (a deadlock) fails the run after SPIRIT_TEST_TIMEOUT seconds (default 45 min;
# the suite takes ~10 min on 2 cores) with the stacks of every thread of the test binaries still running
# (gdb, when installed), instead of stalling CI until its own limit.
limit=${SPIRIT_TEST_TIMEOUT:-2700}
cargo test --workspace &
tests=$!
( waited=0
  while kill -0 "$tests" 2>/dev/null; do
    if [ "$waited" -ge "$limit" ]; then
      echo "cargo test still running after ${limit}s: a hang; stacks of the running test binaries follow" >&2
      for pid in $(pgrep -f 'target/debug/deps/' || true); do
        ps -o pid=,args= -p "$pid" >&2 || true
        if command -v gdb > /dev/null; then
          gdb -batch -p "$pid" -ex "thread apply all bt" 2>/dev/null | grep -E '^(Thread|#)' >&2 || true
        fi
        kill -9 "$pid" 2>/dev/null || true
      done
      kill "$tests" 2>/dev/null || true
      break
    fi
    sleep 5
    waited=$((waited + 5))
  done ) &
watchdog=$!
status=0
wait "$tests" || status=$?
wait "$watchdog" || true
[ "$status" -eq 0 ] || { echo "cargo test failed (exit $status)" >&2; exit "$status"; }
# The query tests again with the portable kernels (codec::simd's AVX-512 ones off), so the engine's answers
# are checked on both paths whatever CPU runs this.
SPIRIT_SIMD=portable cargo test -q -p spirit --test pruning --test fast_paths
cargo build -q -p spirit-cli
bash scripts/test-clients.sh
SPIRIT_SCREENSHOT=${SPIRIT_SCREENSHOT:-/tmp/spirit-screenshot.png} bash scripts/test-browser.sh
