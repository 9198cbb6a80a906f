#!/usr/bin/env bash
# Starts `spirit serve` on a free loopback port with a fresh data directory and runs the opensearch-py client
# tests (tests/clients) against it. Needs the Python venv (scripts/setup-python.sh) and a built `spirit`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${SPIRIT_BIN:-target/debug/spirit}
[ -x "$BIN" ] || cargo build -q -p spirit-cli
bash scripts/setup-python.sh
DATA=$(mktemp -d)
LOG=$DATA/serve.log
"$BIN" serve --data "$DATA/data" --port 0 > "$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 1 100); do
  URL=$(grep -o 'http://[0-9.:]*' "$LOG" | head -1 || true)
  [ -n "$URL" ] && break
  sleep 0.1
done
[ -n "${URL:-}" ] || { echo "spirit serve did not start:"; cat "$LOG"; exit 1; }
echo "client tests against $URL"
SPIRIT_URL=$URL .venv/bin/python -m pytest tests/clients -q -p no:cacheprovider
# A graceful stop (SIGTERM) must close the indexes cleanly.
kill -TERM $PID
wait $PID
grep -q "spirit: closed" "$LOG" || { echo "spirit serve did not close cleanly:"; cat "$LOG"; exit 1; }
echo "client tests ok; server closed cleanly"
