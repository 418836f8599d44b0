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
. scripts/cpu-torch.sh
PY=${PYTHON:-python3}
VENV=.venv-$MODE
EXTRAS=${ATTNSCOPE_EXTRAS:-test,demo}
export TORCH=${TORCH:-$(grep -v '^#' requirements/torch.txt | head -n 1 | sed 's/^torch==//')}

[ "${FRESH:-}" = 1 ] && rm -rf "$VENV"
if [ ! -x "$VENV/bin/python" ]; then
  echo "test-env: creating $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
fi
install_cpu_torch "$VENV/bin/python"
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
SKIP_SETUP=1 VENV="$VENV" exec bash scripts/test.sh "$@"  # the same selection as make test
