#!/usr/bin/env bash
# Stop the daemons started by start-slurm.sh (by their process ids).
PIDFILE=${SLURM_PIDFILE:-/tmp/attnscope-slurm.pids}
[ -f "$PIDFILE" ] || exit 0
tac "$PIDFILE" | while read -r pid; do kill "$pid" 2>/dev/null; done
rm -f "$PIDFILE"
