#!/usr/bin/env bash
# The test command: the Rust test suite, then the HTTP server driven by the official opensearch-py client and
# the web page driven by a real browser (both install what they need: a Python venv from PyPI, chromium from
# Debian's packages).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
cargo build -q -p spirit-cli
bash scripts/test-clients.sh
SPIRIT_SCREENSHOT=${SPIRIT_SCREENSHOT:-/tmp/spirit-screenshot.png} bash scripts/test-browser.sh
