#!/usr/bin/env bash
# The browser test: installs Debian's chromium (apt) and Playwright (PyPI, into .venv; it never downloads a
# browser of its own), starts `spirit serve`, loads the bundled 2,000-document sample through the HTTP API,
# and drives the web page: type a query, see highlighted results, charts drawn. Saves docs/screenshot.png
# (SPIRIT_SCREENSHOT overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  echo "test-browser: installing chromium (apt)"
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
bash scripts/setup-python.sh
BIN=${SPIRIT_BIN:-target/debug/spirit}
[ -x "$BIN" ] || cargo build -q -p spirit-cli
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
# Load the bundled sample (luceneutil lines: title, date, body separated by tabs) through _bulk.
.venv/bin/python - "$URL" <<'PY'
import gzip, json, sys, urllib.request
url = sys.argv[1]
lines = gzip.open("crates/spirit-cli/data/sample.lines.gz", "rt", encoding="utf-8").read().splitlines()
body = []
for i, line in enumerate(lines[1:] if lines and lines[0].startswith("FIELDS_HEADER") else lines):
    parts = line.split("\t")
    if len(parts) < 3:
        continue
    body.append(json.dumps({"index": {"_index": "wiki", "_id": str(i)}}))
    body.append(json.dumps({"title": parts[0], "date": parts[1], "body": parts[2]}))
req = urllib.request.Request(url + "/_bulk", data=("\n".join(body) + "\n").encode(), headers={"Content-Type": "application/x-ndjson"})
r = json.load(urllib.request.urlopen(req))
assert not r["errors"], r
print(f"loaded {len(body) // 2} documents into [wiki]")
PY
SPIRIT_URL=$URL .venv/bin/python -m pytest tests/browser -q -p no:cacheprovider
echo "browser test ok"
