#!/usr/bin/env bash
# A private Slurm on this machine, for tests (sourced): munged, slurmctld and one slurmd
# per node name, every file (keys, sockets, state, spool, logs, slurm.conf) under one
# directory, on ports that were free, so it neither needs nor touches /etc, systemd or
# another Slurm on the machine. Each node declares 4 CPUs whatever the machine has
# (SlurmdParameters=config_overrides): 4 tasks fit on a 2-core CI machine.
#
#   source tests/slurm/cluster.sh
#   slurm_start DIR n1 [n2 ...]   # exports SLURM_CONF; returns once every node is idle
#   ...sbatch, srun, squeue...
#   slurm_stop                    # cancels what is left, stops every daemon it started
#
# Several slurmd on one host: each gets its own node name (-N), port, spool and pid file.
# slurm_stop ends only the processes slurm_start started, by their ids.

SLURM_TEST_PIDS=()
SLURM_TEST_DIR=""

# A TCP port nothing listens on now.
slurm_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Waits up to $1 seconds for the command "${@:2}" to succeed.
slurm_wait_for() {
  local limit=$1
  shift
  local t0=$SECONDS
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - t0 < limit)) || return 1
    sleep 0.5
  done
}

slurm_nodes_idle() { [[ $(sinfo -h -N -t idle -o '%N' | wc -l) -eq $1 ]]; }
slurm_queue_empty() { [[ -z $(squeue -h -o %i) ]]; }

slurm_start() {
  local dir=$1
  shift
  local nodes=("$@")
  SLURM_TEST_DIR=$dir
  mkdir -p "$dir"/{munge,state,log}
  chmod 700 "$dir" "$dir/munge"
  local host
  host=$(hostname -s)

  # munge: a fresh key, a private socket.
  mungekey --create --keyfile="$dir/munge/munge.key" || return 1
  chmod 400 "$dir/munge/munge.key"
  munged --foreground --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    2>>"$dir/log/munged.stderr" &
  SLURM_TEST_PIDS+=($!)
  slurm_wait_for 20 test -S "$dir/munge/munge.socket" || { echo "cluster.sh: munged did not start" >&2; return 1; }

  local ctld_port node_lines="" n
  ctld_port=$(slurm_free_port)
  for n in "${nodes[@]}"; do
    mkdir -p "$dir/spool/$n" "$dir/tmp/$n"
    node_lines+="NodeName=$n NodeHostname=$host NodeAddr=127.0.0.1 Port=$(slurm_free_port) CPUs=4 RealMemory=1024 State=UNKNOWN"$'\n'
  done
  cat >"$dir/slurm.conf" <<EOF
ClusterName=uipctest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmdTimeout=60
$node_lines
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf

  slurmctld -D -i -f "$SLURM_CONF" 2>>"$dir/log/slurmctld.stderr" &
  SLURM_TEST_PIDS+=($!)
  for n in "${nodes[@]}"; do
    slurmd -D -N "$n" -f "$SLURM_CONF" 2>>"$dir/log/slurmd-$n.stderr" &
    SLURM_TEST_PIDS+=($!)
  done
  local want=${#nodes[@]}
  if ! slurm_wait_for 60 slurm_nodes_idle "$want"; then
    echo "cluster.sh: the nodes did not come up idle:" >&2
    sinfo -N -l >&2 || true
    tail -n 20 "$dir"/log/*.log >&2 || true
    return 1
  fi
}

slurm_stop() {
  [[ -n $SLURM_TEST_DIR ]] || return 0
  if [[ -n ${SLURM_CONF:-} ]]; then
    scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    slurm_wait_for 30 slurm_queue_empty || true
  fi
  local pid
  # Daemons in reverse order of their start: the slurmd first, munged last.
  for ((i = ${#SLURM_TEST_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${SLURM_TEST_PIDS[i]}
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  SLURM_TEST_PIDS=()
  SLURM_TEST_DIR=""
}
