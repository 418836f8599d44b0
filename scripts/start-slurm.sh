#!/usr/bin/env bash
# Start a real one-node Slurm cluster on this machine (root, no systemd) for the `slurm`-marked tests.
# Installs slurm-wlm + munge from Debian when missing. Prints the daemons' pids to $SLURM_PIDFILE.
# Exit 0 when `sinfo` shows the node; non-zero (and a one-line reason) when Slurm cannot start here.
set -u
PIDFILE=${SLURM_PIDFILE:-/tmp/attnscope-slurm.pids}
say() { echo "start-slurm: $*" >&2; }

if [ "$(id -u)" != 0 ]; then say "needs root"; exit 1; fi
if ! command -v slurmctld >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { say "no apt-get"; exit 1; }
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge) >/tmp/attnscope-slurm-apt.log 2>&1 \
    || { say "could not install slurm-wlm (see /tmp/attnscope-slurm-apt.log)"; exit 1; }
fi

if sinfo -h >/dev/null 2>&1 && sinfo -h -o %t | grep -qE 'idle|mix|alloc'; then say "already running"; exit 0; fi

node_line=$(slurmd -C 2>/dev/null | head -n 1)
[ -n "$node_line" ] || node_line="NodeName=localhost CPUs=$(nproc) RealMemory=4000"
node_name=$(echo "$node_line" | sed -E 's/^NodeName=([^ ]+).*/\1/')
cpus=$(echo "$node_line" | sed -nE 's/.*CPUs=([0-9]+).*/\1/p'); cpus=${cpus:-$(nproc)}
mem=$(echo "$node_line" | sed -nE 's/.*RealMemory=([0-9]+).*/\1/p'); mem=${mem:-4000}
mem=$(( mem > 1000 ? mem - 500 : mem ))

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /run/munge /var/log
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=${node_name}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd.log
NodeName=${node_name} CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=${node_name} Default=YES MaxTime=INFINITE State=UP
CONF
chown munge:munge /run/munge 2>/dev/null || true
[ -f /etc/munge/munge.key ] || { /usr/sbin/mungekey -c 2>/dev/null || /usr/sbin/create-munge-key -f 2>/dev/null; }
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged || { say "munged failed"; exit 1; }
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld || { say "slurmctld failed"; exit 1; }
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd || { say "slurmd failed"; exit 1; }
{ pgrep -x munged; pgrep -x slurmctld; pgrep -x slurmd; } > "$PIDFILE" 2>/dev/null
for _ in $(seq 1 30); do
  if sinfo -h -o %t 2>/dev/null | grep -qE 'idle|mix|alloc'; then say "up (node ${node_name}, ${cpus} CPUs)"; exit 0; fi
  scontrol update nodename="${node_name}" state=resume >/dev/null 2>&1 || true
  sleep 1
done
say "node did not become idle (see /var/log/slurmctld.log)"; exit 1
