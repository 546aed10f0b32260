# Paths and helpers shared by start.sh and stop.sh (sourced, not run).
SLURM_CONF_FILE=/etc/slurm/slurm.conf
# First line of the slurm.conf start.sh writes; any other slurm.conf is left alone.
CONF_MARK="# Written by tools/slurm/start.sh: a test cluster of two nodes on this machine (127.0.0.1)."
SLURMCTLD_PID=/run/slurmctld.pid
MUNGED_PID=/run/munge/munged.pid
SLURM_LOG_DIR=/var/log/slurm
JOBCOMP_LOG="$SLURM_LOG_DIR/jobcomp.log"
# Two slurmd daemons on this machine, each its own node: NODE alone is the partition of the
# one-node jobs, both together the partition of multi-node jobs.
NODE=localhost
SECOND_NODE=localhost2
PARTITION=debug
MULTINODE_PARTITION=multinode

# slurmd_pid NODE: the pid file of that node's slurmd (SlurmdPidFile, with %n for the node).
slurmd_pid() { echo "/run/slurmd-$1.pid"; }

# pid_alive PIDFILE NAME: the PID in PIDFILE runs a process called NAME (pid files go stale,
# and a stale PID may belong to something else by now). A zombie counts as stopped: in a
# container, PID 1 may never reap the daemons.
pid_alive() {
  local pid
  [[ -r $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$2" ]] || return 1
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]
}

conf_is_ours() {
  [[ -f $SLURM_CONF_FILE ]] && [[ "$(head -n 1 "$SLURM_CONF_FILE")" == "$CONF_MARK" ]]
}
