#!/usr/bin/env bash
# The job scripts of jobscripts/ under a real Slurm (Debian's slurm-wlm 22.05 and munge):
# a private two-node Slurm on this machine (tests/slurm/cluster.sh: two slurmd, 'n1' and
# 'n2', 4 CPUs each), and what a user checks after sbatch --wait:
#   1. slurm-1node-4gpu.sbatch in simulation mode on its default deck (flux-dev-sim.h5):
#      job exit code 0, the output file, the report (4 ranks of one MPI world that srun
#      --mpi=pmix started, every run passing parity), the summary and the plots;
#   2. the same script on a run that fails parity: job exit code 5, the report written;
#   3. slurm-2node.sbatch on its default deck (the Ulysses8 twin over nccl and hier, 8
#      ranks in blocks of 4 per node): exit 0, parity, and the hier runs served by hier
#      (the MPI library sees the two nodes);
#   4. the templates' mpirun alternative inside a job (the world-size check must let it be);
#   5. exit codes through srun for the faults of README.md's table.
# Daemons are stopped and the temporary directory removed on every exit (trap).
#
#   tests/slurm/run_jobs.sh BUILD_DIR
# Without Slurm or munge installed: exit 77 (ctest: skipped), or 1 when
# ULYSSES_REQUIRE_SLURM=1 (CI installs them first: tests/slurm/install.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$PWD
BUILD=$(cd "${1:?usage: tests/slurm/run_jobs.sh BUILD_DIR}" && pwd)
APP=$BUILD/app/ulysses-ipc
PY=${PYTHON:-python3}

for cmd in munged mungekey slurmctld slurmd sbatch srun sinfo squeue scancel; do
  if ! command -v "$cmd" >/dev/null; then
    if [[ ${ULYSSES_REQUIRE_SLURM:-0} == 1 ]]; then
      echo "run_jobs.sh: $cmd not found, and ULYSSES_REQUIRE_SLURM=1 (tests/slurm/install.sh installs it)" >&2
      exit 1
    fi
    echo "run_jobs.sh: SKIPPED: $cmd not found (tests/slurm/install.sh installs Slurm and munge)"
    exit 77
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ulysses-slurm.XXXXXX")
# shellcheck disable=SC1091  # linted on its own
source "$REPO/tests/slurm/cluster.sh"
finish() {
  local rc=$?
  if ((rc != 0)) && [[ -d $work/cluster/log ]]; then
    echo "run_jobs.sh: FAILED (exit $rc); the daemons' logs end:" >&2
    tail -n 15 "$work"/cluster/log/*.log >&2 || true
  fi
  slurm_stop
  rm -rf "$work"
}
trap finish EXIT
fail() { echo "run_jobs.sh: FAIL: $*" >&2; exit 1; }

slurm_start "$work/cluster" n1 n2
echo "Slurm $(sinfo -V | cut -d' ' -f2) up: $(sinfo -h -N -o '%N %T %c' | tr '\n' ' ')"

# What every job takes from the environment (sbatch exports it): the tree, the binary,
# where the results go, simulation mode, root allowed for Open MPI.
export ULYSSES_ROOT=$REPO ULYSSES_IPC=$APP ULYSSES_OUTDIR=$work/out ULYSSES_MODE=sim PYTHON=$PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A node without GPUs, CPUs of one core per rank: what simulation mode needs of the
# templates' GPU-node requests (jobscripts/README.md, "Simulation mode on CPU nodes").
CPU_NODE=(--gpus-per-node=0 --cpus-per-task=1)

# submit NAME SBATCH_ARGS...: sbatch --wait, in the background or not; its job id and
# exit code go to $work/NAME.job and $work/NAME.rc, for result NAME.
submit() {
  local name=$1
  shift
  local t0=$SECONDS out rc=0
  out=$(sbatch --wait --parsable --output="$work/$name-%j.out" "$@") || rc=$?
  echo "${out%%;*}" >"$work/$name.job"
  echo "$rc" >"$work/$name.rc"
  echo "$name: job ${out%%;*} exit $rc after $((SECONDS - t0)) s"
}
# result NAME: sets JOB and RC of a finished submit.
result() {
  JOB=$(cat "$work/$1.job")
  RC=$(cat "$work/$1.rc")
  [[ $JOB =~ ^[0-9]+$ ]] || fail "$1: sbatch gave no job id: $JOB"
}

# check_report REPORT RANKS NODES: every run passed parity; world and hosts as given.
check_report() {
  "$PY" - "$@" <<'EOF'
import sys, h5py
path, ranks, nodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with h5py.File(path, "r") as f:
    assert f.attrs["mode"] == "sim", f.attrs["mode"]
    assert int(f.attrs["world_size"]) == ranks, f.attrs["world_size"]
    runs = 0
    for case in f.attrs["cases"]:
        g = f["cases"][case]
        for run in g.attrs["runs"]:
            a = g[run].attrs
            assert a["parity_pass"] == 1, (case, run, dict(a))
            # ipc and hier serve where they were asked: a one-node job's groups lie in
            # one node (ipc), the two-node job's group spans two nodes of 4 (hier).
            if a["transport"] in ("ipc", "hier"):
                assert a["transport_used"] == a["transport"], (case, run, a["fallback_reason"])
            runs += 1
    assert runs > 0, "no run in the report"
print(f"  report: {runs} runs at {ranks} ranks on {nodes} node(s), parity passed")
EOF
}

check_outputs() {  # check_outputs NAME: the output file, the summary, the plots of job $JOB
  local name=$1 outfile=$work/$1-$JOB.out
  [[ -s $outfile ]] || fail "$name: no output file $outfile"
  grep -q "^job $JOB on " "$outfile" || fail "$name: the output file lacks the job line"
  grep -q "parity PASS" "$outfile" || fail "$name: the output file shows no passing run"
  if grep -q "parity FAIL" "$outfile"; then fail "$name: a run failed parity"; fi
  local summary=$work/out/report-$JOB.txt plots=$work/out/report-$JOB-plots
  [[ -s $summary ]] || fail "$name: no summary $summary"
  grep -qi "simulation" "$summary" || fail "$name: the summary does not say the times are simulated"
  local pngs
  pngs=$(find "$plots" -name '*.png' -size +1k 2>/dev/null | wc -l)
  ((pngs > 0)) || fail "$name: no plot in $plots"
  for png in "$plots"/*.png; do
    [[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$name: $png is not a PNG"
  done
  echo "  output file, summary ($(wc -l <"$summary") lines) and $pngs plots"
}

# Three one-node jobs at once, on the two nodes as Slurm places them (sbatch --wait
# polls ever more slowly, so waiting for them in turn would triple the time):
#  1. the one-node template, simulation mode, its default deck;
#  2. the same on a run that fails parity: the job's exit code is the app's 5;
#  4. mpirun inside a job, the templates' alternative to srun --mpi=pmix.
submit 1node "${CPU_NODE[@]}" jobscripts/slurm-1node-4gpu.sbatch &
waiting=($!)
ULYSSES_TEST_CORRUPT_RANK=1 submit parity "${CPU_NODE[@]}" jobscripts/slurm-1node-4gpu.sbatch "$REPO/inputs/default.h5" &
waiting+=($!)
submit mpirun -N 1 -n 4 --wrap "mpirun -np 4 '$APP' '$REPO/inputs/default.h5' -o '$work/mpirun.h5' --case small-bf16" &
waiting+=($!)
wait "${waiting[@]}"  # these three only: the daemons are children of this shell too

result 1node
((RC == 0)) || { cat "$work/1node-$JOB.out" >&2; fail "1node: job exit $RC"; }
check_report "$work/out/report-$JOB.h5" 4 1
check_outputs 1node

result parity
((RC == 5)) || { cat "$work/parity-$JOB.out" >&2; fail "parity: job exit $RC, not 5"; }
[[ -f $work/out/report-$JOB.h5 && -s $work/out/report-$JOB.txt ]] || fail "parity: no report or summary"
grep -q "parity FAIL" "$work/parity-$JOB.out" || fail "parity: the output does not say which run failed"
echo "  parity failure: exit 5, report and summary written"

result mpirun
((RC == 0)) || { cat "$work/mpirun-$JOB.out" >&2; fail "mpirun in a job: exit $RC"; }
check_report "$work/mpirun.h5" 4 1

# 3. The two-node template on two slurmd of this host. Open MPI's shared-memory BTL
# keys its segments by host and node-local rank, which collide when two "nodes" are one
# host: TCP between all ranks here (a real cluster needs nothing of the kind).
OMPI_MCA_btl=self,tcp submit 2node "${CPU_NODE[@]}" jobscripts/slurm-2node.sbatch
result 2node
((RC == 0)) || { cat "$work/2node-$JOB.out" >&2; fail "2node: job exit $RC"; }
[[ -f $work/out/deck-$JOB.h5 ]] || fail "2node: the job did not write its deck"
grep -q "^job $JOB on n\[1-2\]: 8 ranks" "$work/2node-$JOB.out" || fail "2node: the job did not run on n1 and n2"
check_report "$work/out/report-$JOB.h5" 8 2
check_outputs 2node

# --- 5. exit codes through srun (README.md, "Exit codes")
"$PY" "$REPO/tests/slurm/srun_exit_codes.py" "$APP" "$work"
echo "run_jobs.sh: every job and exit code as expected"
