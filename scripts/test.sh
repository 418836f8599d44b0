#!/usr/bin/env bash
# The test command (`make test`): set up .venv from the lock, then run the default suite (slow tests
# excluded). Tests that need something this machine lacks are deselected here, each with its marker:
#   slurm    a Slurm cluster with an idle node (scripts/start-slurm.sh starts a one-node one)
#   browser  a headless Chromium on PATH (the HTML report's rendering tests)
#   gpu      a CUDA GPU that torch can see
# Extra arguments go to pytest (a later -m replaces the selection: `bash scripts/test.sh -m slurm`).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SKIP_SETUP:-}" = 1 ] || bash scripts/setup.sh  # scripts/test-env.sh sets up its own venv
PY=${VENV:-.venv}/bin/python
marks="not slow"
lacking=()
if ! { command -v srun >/dev/null && timeout 20 sinfo -h -o %t 2>/dev/null | grep -qE 'idle|mix|alloc'; }; then
  marks+=" and not slurm"; lacking+=("slurm")
fi
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  marks+=" and not browser"; lacking+=("browser")
fi
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  marks+=" and not gpu"; lacking+=("gpu")
fi
if [ ${#lacking[@]} -gt 0 ]; then
  echo "test: deselected the tests this machine cannot run: ${lacking[*]} (see scripts/test.sh)" >&2
fi
exec "$PY" -m pytest -m "$marks" -n "${PYTEST_WORKERS:-2}" "$@"
