#!/usr/bin/env bash
# Installs what tests/slurm/run_jobs.sh needs (idempotent): Debian's Slurm 22.05 daemons
# and client, and munge. Called by .ci/run; not by scripts/setup.sh, since running the
# program needs no Slurm. No service is started: the test starts its own daemons.
set -euo pipefail
need=()
for pkg in slurmctld slurmd slurm-client munge; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "tests/slurm/install.sh: installing ${need[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  # policy-rc.d-less images would start the services: the test does not want them.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
