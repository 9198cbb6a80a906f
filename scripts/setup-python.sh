#!/usr/bin/env bash
# Creates .venv at the repository root with the packages of scripts/requirements-test.txt (from PyPI).
# Idempotent: does nothing when the venv already matches the requirements file.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=scripts/requirements-test.txt
STAMP=.venv/.requirements.sha256
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "setup-python: .venv is up to date"
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "setup-python: installing python3-venv"
  apt-get update -qq && apt-get install -y -qq python3-venv
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r "$REQ"
echo "$want" > "$STAMP"
echo "setup-python: installed $(tr '\n' ' ' < <(grep -v '^#' "$REQ"))into .venv"
