#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv, exactly as CI tested it:
#  1. every package pinned in requirements/lock.txt, hash-checked, nothing resolved anew (`make lock`
#     refreshes the lock; see docs/dependencies.md);
#  2. torch from requirements/torch.txt as a CPU build (scripts/cpu-torch.sh), unless .venv has a torch
#     already: GPU users install their own torch into .venv before running this, and it is kept;
#  3. attnscope itself, editable, without touching a dependency; then a check that .venv holds what the
#     lock pins. Extras beyond the lock's (ATTNSCOPE_EXTRAS=test,demo,real) are added on top, the locked
#     versions held fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cpu-torch.sh
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
LOCK=requirements/lock.txt
EXTRAS=${ATTNSCOPE_EXTRAS:-test,demo}
locked_extras=$(sed -n 's/^# extras: //p' "$LOCK")

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.attnscope-installed"
want="$(cat pyproject.toml "$LOCK" requirements/torch.txt | sha1sum | cut -d' ' -f1) $EXTRAS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c "import attnscope, torch" 2>/dev/null; then
  exit 0
fi
lock_py=$(sed -n 's/^# python: //p' "$LOCK")
have_py=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$lock_py" != "$have_py" ]; then
  echo "setup: warning: the lock was made and tested with Python $lock_py, this is $have_py (PYTHON=python$lock_py picks another)" >&2
fi
echo "setup: installing the locked dependencies ($LOCK)" >&2
"$VENV/bin/python" -m pip install -q --require-hashes --no-deps -r "$LOCK"
install_cpu_torch "$VENV/bin/python"
echo "setup: installing attnscope (editable)" >&2
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
if [ "$EXTRAS" != "$locked_extras" ]; then
  echo "setup: adding extras [$EXTRAS] on top of the lock's [$locked_extras] (not locked)" >&2
  constraints=$(mktemp); trap 'rm -f "$constraints"' EXIT
  grep -E '^[A-Za-z0-9]' "$LOCK" | sed 's/ \\$//' > "$constraints"
  "$VENV/bin/python" -m pip install -q -c "$constraints" -e ".[$EXTRAS]"
fi
"$VENV/bin/python" scripts/check_env.py "$LOCK"
echo "$want" > "$stamp"
