#!/usr/bin/env bash
# The committed Unicode table (common/unicode_table.inc) is what scripts/gen_unicode_table.py
# prints, run with tiktoken: the Python of scripts/setup_tiktoken.sh's environment
# (scripts/test.sh runs it); skipped without.
# Usage: unicode_table.sh ROOT
set -euo pipefail
ROOT=$1
PY="$ROOT/third_party_local/pypi/venv/bin/python"
[[ -x $PY ]] && "$PY" -c 'import tiktoken' 2> /dev/null ||
  { echo "skipped: no tiktoken in $PY (scripts/setup_tiktoken.sh fetches it)"; exit 77; }
exec "$PY" "$ROOT/scripts/gen_unicode_table.py" --check "$ROOT/common/unicode_table.inc"
