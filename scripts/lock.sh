#!/usr/bin/env bash
# Refresh requirements/lock.txt (`make lock`): resolve attnscope[test,demo] anew, at the newest versions
# pyproject.toml's ranges allow, in a throw-away venv beside the CPU torch of requirements/torch.txt, and pin
# every package with its hashes (scripts/lock.py). Then `make test` installs exactly that lock into .venv
# and runs the suite: commit the new lock only when it is green.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cpu-torch.sh
PY=${PYTHON:-python3}
EXTRAS=test,demo
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/venv"
V="$tmp/venv/bin/python"
"$V" -m pip install -q --upgrade pip setuptools wheel
install_cpu_torch "$V"
echo "lock: resolving attnscope[$EXTRAS]" >&2
"$V" -m pip install -q -e ".[$EXTRAS]"
"$V" -m pip uninstall -q -y attnscope
"$V" scripts/lock.py --out requirements/lock.txt --extras "$EXTRAS"
