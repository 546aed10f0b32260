#!/usr/bin/env bash
# Starts a SLURM cluster of two nodes on this machine for tests: munged, slurmctld and two slurmd
# daemons run as plain daemons, without systemd. Partition "debug" is node localhost, for the
# one-node jobs; partition "multinode" is localhost and localhost2, for jobs that span two nodes
# (training.nodes: 2). Each node has all CPUs of the machine.
#
# Debian's slurmd is built without --enable-multiple-slurmd, yet two of them run side by side
# when each node has a name of its own (slurmd -N), its own port (Port=) and its own pid file,
# spool directory and log (%n in their paths).
#
# Accounting is off (no slurmdbd or database to install): sacct has no records, so Snakemake
# reads job states from squeue (slurm-status-command: squeue in profiles/slurm-local-test),
# which keeps finished jobs listed for MinJobAge. jobcomp/filetxt writes one line per finished
# job to /var/log/slurm/jobcomp.log, the record the test checks.
#
# Idempotent: daemons already running with the same configuration are kept. Returns once the
# nodes accept jobs. Exit status 77: SLURM cannot be installed or configured here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/common.sh"

if [[ $(id -u) -ne 0 ]]; then
  echo "start.sh: root is needed (installs packages, starts daemons)" >&2
  exit 77
fi
"$here/install.sh"
if [[ -e $SLURM_CONF_FILE ]] && ! conf_is_ours; then
  echo "start.sh: $SLURM_CONF_FILE was not written by this script; leaving that SLURM alone" >&2
  exit 77
fi

id slurm >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin slurm
install -d -o slurm -g slurm "$SLURM_LOG_DIR" /var/spool/slurmctld
install -d /var/spool/slurmd /etc/slurm
install -d -o munge -g munge -m 0755 /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  mungekey --create --keyfile /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi

# 90% of the memory: slurmd drains a node that reports less than RealMemory.
mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
# Twice the cores: the test jobs spend most of their time starting processes and waiting for
# status polls, so two jobs per core keep the machine busy (config_overrides below accepts it).
cpus=$((2 * $(nproc)))
conf="$CONF_MARK
ClusterName=local
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Trust the node line below rather than the detected topology (containers, cgroup limits).
SlurmdParameters=config_overrides
ReturnToService=2
# squeue status checks need finished jobs listed for at least 3x the first check's delay.
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP_LOG
SlurmctldPidFile=$SLURMCTLD_PID
SlurmdPidFile=$(slurmd_pid %n)
SlurmctldLogFile=$SLURM_LOG_DIR/slurmctld.log
SlurmdLogFile=$SLURM_LOG_DIR/slurmd-%n.log
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
# SLURM takes any node name for a lone node called localhost, so while the first node line is
# read a second NodeName=localhost would clash with it: localhost comes second.
NodeName=$SECOND_NODE NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 Port=6819 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
NodeName=$NODE NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 Port=6818 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=$MULTINODE_PARTITION Nodes=$NODE,$SECOND_NODE MaxTime=INFINITE State=UP"
if [[ ! -f $SLURM_CONF_FILE ]] || [[ "$(cat "$SLURM_CONF_FILE")" != "$conf" ]]; then
  "$here/stop.sh"  # running daemons would keep the old node definition
  printf '%s\n' "$conf" > "$SLURM_CONF_FILE"
fi

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "start.sh: timed out waiting for $what; logs in $SLURM_LOG_DIR" >&2
      tail -n 15 "$SLURM_LOG_DIR"/slurmctld.log "$SLURM_LOG_DIR"/slurmd.log >&2 2>/dev/null || true
      exit 1
    fi
    sleep 1
  done
}
munge_works() { munge -n </dev/null | unmunge; }
node_ready() {  # node_ready NODE
  local state
  state=$(sinfo -h -N -n "$1" -o %T | head -n 1)
  case $state in
    idle | mixed | allocated | completing) return 0 ;;
    down* | drain* | fail*) scontrol update NodeName="$1" State=RESUME ;;
  esac
  return 1
}

if ! pid_alive "$MUNGED_PID" munged; then
  # --force: a munged killed earlier leaves its socket behind.
  runuser -u munge -- /usr/sbin/munged --force
fi
wait_for 20 munged munge_works
pid_alive "$SLURMCTLD_PID" slurmctld || /usr/sbin/slurmctld
wait_for 30 slurmctld scontrol ping
for node in "$NODE" "$SECOND_NODE"; do
  pid_alive "$(slurmd_pid "$node")" slurmd || /usr/sbin/slurmd -N "$node"
done
for node in "$NODE" "$SECOND_NODE"; do
  wait_for 90 "node $node to accept jobs" node_ready "$node"
done
sinfo -N
