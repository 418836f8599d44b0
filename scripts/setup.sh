#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv: everything attnscope needs, from its
# own files. CPU torch comes first (torch==2.13.0 is a CPU build on this machine's disk), so pip never
# pulls a multi-GB CUDA build; GPU users install their own torch into .venv before running this.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRAS=${ATTNSCOPE_EXTRAS:-test,demo}

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
fi
stamp="$VENV/.attnscope-installed"
want="$(cat pyproject.toml | sha1sum | cut -d' ' -f1) $EXTRAS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c "import attnscope, torch" 2>/dev/null; then
  exit 0
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup: installing torch==2.13.0 (CPU build)" >&2
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
fi
echo "setup: installing attnscope[$EXTRAS] (editable)" >&2
"$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
echo "$want" > "$stamp"
