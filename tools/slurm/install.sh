#!/usr/bin/env bash
# Installs SLURM (Debian slurm-wlm: slurmctld, slurmd, client tools) and munge for the one-node
# test cluster. Exit status 77 means it cannot be installed here (not root, no apt-get, no
# package source), which the SLURM test reports as a skip outside CI.
set -euo pipefail

installed() {
  command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged
} >/dev/null

installed && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "install.sh: root is needed to install slurm-wlm and munge" >&2
  exit 77
fi
if ! command -v apt-get >/dev/null; then
  echo "install.sh: no apt-get here; install SLURM and munge with the system's package manager" >&2
  exit 77
fi

export DEBIAN_FRONTEND=noninteractive
install_packages() {
  timeout 900 apt-get install -y -q --no-install-recommends \
    -o Acquire::Retries=3 -o DPkg::Lock::Timeout=300 slurm-wlm munge
}
# A fresh machine has no package lists and an old list may name removed versions: update
# only when installing from the present lists fails.
if ! install_packages; then
  if ! timeout 600 apt-get update -q -o Acquire::Retries=3 || ! install_packages; then
    echo "install.sh: apt-get could not install slurm-wlm and munge" >&2
    exit 77
  fi
fi
installed || { echo "install.sh: slurm-wlm installed, but its daemons are missing" >&2; exit 77; }
