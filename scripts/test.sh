#!/usr/bin/env bash
# The test command: set up .venv, then run the default suite (slow tests excluded). Slurm tests run
# too when a cluster started by scripts/start-slurm.sh is up (or ATTNSCOPE_TEST_SLURM=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
marks="not slow and not slurm"
if [ "${ATTNSCOPE_TEST_SLURM:-}" = 1 ] || [ -s "${SLURM_PIDFILE:-/tmp/attnscope-slurm.pids}" ]; then
  marks="not slow"
fi
exec .venv/bin/python -m pytest -m "$marks" -n "${PYTEST_WORKERS:-2}" "$@"
