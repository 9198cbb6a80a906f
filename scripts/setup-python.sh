#!/usr/bin/env bash
# Creates .venv at the repository root with the pinned packages of scripts/requirements-test.txt (from PyPI):
# opensearch-py and pytest for tests/clients, playwright for tests/browser.
# Idempotent: when .venv already holds exactly these requirements (a stamp file records the hash of the
# requirements file and the Python version it was installed for), it checks the venv still works and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

REQ=scripts/requirements-test.txt
VENV=.venv
STAMP=$VENV/.requirements.sha256
PY=${PYTHON:-python3}

say() { echo "setup-python: $*"; }

command -v "$PY" >/dev/null 2>&1 || { say "no $PY on PATH"; exit 1; }
want="$(sha256sum "$REQ" | cut -d' ' -f1) $("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

# Keep the venv out of git.
if ! grep -qxF "$VENV/" .gitignore 2>/dev/null; then
  echo "$VENV/" >> .gitignore
  say "added $VENV/ to .gitignore"
fi

# Up to date: same requirements, same Python, and the venv's interpreter still imports the packages.
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
  && "$VENV/bin/python" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("opensearchpy", "pytest", "playwright"))))' >/dev/null 2>&1; then
  say "$VENV is up to date ($(grep -v '^#' "$REQ" | grep -v '^$' | tr '\n' ' '))"
  exit 0
fi

# The venv module (and ensurepip, which venv needs to install pip) may be missing on Debian's python3.
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  say "python venv module missing: installing python3-venv (apt)"
  if ! apt-get install -y -qq python3-venv >/dev/null 2>&1; then
    say "apt-get install failed; running apt-get update first"
    apt-get update -qq
    apt-get install -y -qq python3-venv >/dev/null
  fi
fi

# A venv whose interpreter no longer runs (Python removed or moved) is rebuilt from scratch.
if [ -d "$VENV" ] && ! "$VENV/bin/python" -c 'pass' >/dev/null 2>&1; then
  say "$VENV is broken: recreating it"
  rm -rf "$VENV"
fi
if [ -d "$VENV" ]; then
  say "updating $VENV (requirements changed or not yet installed)"
else
  say "creating $VENV with $("$PY" --version 2>&1)"
  "$PY" -m venv "$VENV"
fi

rm -f "$STAMP"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
echo "$want" > "$STAMP"
say "installed into $VENV: $("$VENV/bin/python" -m pip freeze --disable-pip-version-check \
  | grep -iE '^(opensearch-py|pytest|playwright)==' | tr '\n' ' ')"
