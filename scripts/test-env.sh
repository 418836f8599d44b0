#!/usr/bin/env bash
# The default suite in a venv of its own, at the edges of pyproject.toml's ranges (docs/dependencies.md):
#   scripts/test-env.sh lowest [PYTEST ARGS]  .venv-lowest: every direct dependency at its lower bound
#   scripts/test-env.sh latest [PYTEST ARGS]  .venv-latest: the newest versions the ranges allow
# Both hold torch at the CPU build scripts/setup.sh installs (torch==2.13.0), installed first, so pip
# never pulls PyPI's CUDA build. Set FRESH=1 to rebuild the venv from nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: scripts/test-env.sh lowest|latest [PYTEST ARGS]}
shift
case "$MODE" in lowest|latest) ;; *) echo "test-env: MODE is lowest or latest, not '$MODE'" >&2; exit 2 ;; esac
PY=${PYTHON:-python3}
VENV=.venv-$MODE
EXTRAS=${ATTNSCOPE_EXTRAS:-test,demo}
export TORCH=${TORCH:-2.13.0}

[ "${FRESH:-}" = 1 ] && rm -rf "$VENV"
if [ ! -x "$VENV/bin/python" ]; then
  echo "test-env: creating $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "test-env: installing torch==$TORCH (CPU build)" >&2
  "$VENV/bin/python" -m pip install -q "torch==$TORCH"
fi
"$VENV/bin/python" scripts/dep_bounds.py "$MODE" "$EXTRAS" > "$VENV/constraints.txt"
echo "test-env: installing attnscope[$EXTRAS] ($MODE)" >&2
if [ "$MODE" = lowest ]; then
  "$VENV/bin/python" -m pip install -q -c "$VENV/constraints.txt" -e ".[$EXTRAS]"
else
  "$VENV/bin/python" -m pip install -q --upgrade --upgrade-strategy eager -c "$VENV/constraints.txt" -e ".[$EXTRAS]"
fi
"$VENV/bin/python" -m pip check
echo "test-env: $MODE versions on $("$VENV/bin/python" --version), $(date -u +%F)" >&2
"$VENV/bin/python" scripts/dep_bounds.py versions "$EXTRAS" | tee "$VENV/versions.txt" >&2
exec "$VENV/bin/python" -m pytest -m "not slow and not slurm" -n "${PYTEST_WORKERS:-2}" "$@"
