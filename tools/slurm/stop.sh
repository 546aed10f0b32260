#!/usr/bin/env bash
# Stops the daemons of tools/slurm/start.sh by the PIDs in their pid files (never by name,
# so other processes with the same name are safe). Stopping what is not running is no error.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/common.sh"

if [[ -e $SLURM_CONF_FILE ]] && ! conf_is_ours; then
  echo "stop.sh: $SLURM_CONF_FILE was not written by start.sh; leaving that SLURM alone" >&2
  exit 1
fi

stop_daemon() {  # stop_daemon PIDFILE NAME
  pid_alive "$1" "$2" || return 0
  local pid
  pid=$(<"$1")
  kill -TERM "$pid"
  for _ in $(seq 1 30); do
    pid_alive "$1" "$2" || return 0
    sleep 1
  done
  echo "stop.sh: $2 ($pid) ignored SIGTERM for 30 s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

for node in "$NODE" "$SECOND_NODE"; do
  stop_daemon "$(slurmd_pid "$node")" slurmd
done
stop_daemon "$SLURMCTLD_PID" slurmctld
stop_daemon "$MUNGED_PID" munged
