#!/usr/bin/env bash
# ulysses-ipc on a workstation, without Slurm: one rank per GPU when nvidia-smi sees GPUs,
# else 4 simulated ranks on the CPU; runs a deck, names the report by date, and prints
# the summary table.
#
#   jobscripts/run-local.sh [DECK.h5] [extra ulysses-ipc options...]
#
# DECK.h5 defaults to inputs/flux-dev-1024.h5 with GPUs and inputs/default.h5 without.
# Environment: NP (ranks), ULYSSES_IPC (binary), ULYSSES_OUTDIR (where the report lands),
# ULYSSES_MODE (auto|sim|gpu), PYTHON. The report is out/report-<date>.h5.
set -euo pipefail

# Repository root: this script lives in <root>/jobscripts.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The application binary (build it first: ./scripts/setup.sh).
APP=${ULYSSES_IPC:-$ROOT/build/app/ulysses-ipc}
# Where reports land.
OUTDIR=${ULYSSES_OUTDIR:-$ROOT/out}
# auto: GPUs when every rank sees a usable one, else simulation mode.
MODE=${ULYSSES_MODE:-auto}
# The Python that runs the summary (needs h5py, numpy, matplotlib).
PYTHON=${PYTHON:-python3}
# GPUs nvidia-smi lists (0 without a driver or without nvidia-smi).
GPUS=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  GPUS=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
# Ranks: one per GPU, else 4 simulated GPUs (any count works in simulation mode).
if ((GPUS > 0)); then NP=${NP:-$GPUS}; else NP=${NP:-4}; fi
# The deck: the first argument unless it is an option, else one that suits the machine.
if [[ $# -gt 0 && $1 != -* ]]; then
  DECK=$1
  shift
elif ((GPUS > 0)); then
  DECK=$ROOT/inputs/flux-dev-1024.h5
else
  DECK=$ROOT/inputs/default.h5
fi
# The report, named by the local date and time of the run.
REPORT=$OUTDIR/report-$(date +%Y%m%d-%H%M%S).h5
# mpirun options: more ranks than cores is fine for simulated ranks, which mostly wait.
MPIRUN_OPTS=(-np "$NP")
if ((NP > $(nproc))); then MPIRUN_OPTS+=(--oversubscribe); fi

# NVLink SHARP (multicast) off: never multicast on the shared test machines, where it
# can take a host's GPUs out of service for everyone.
export NCCL_NVLS_ENABLE=0
# Open MPI refuses to run as root (containers, CI) unless told it is intended.
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# The post-processing package straight from the source tree (no pip install needed).
export PYTHONPATH=$ROOT/postprocess${PYTHONPATH:+:$PYTHONPATH}

[[ -x $APP ]] || { echo "run-local.sh: no ulysses-ipc binary at $APP: run ./scripts/setup.sh, or set ULYSSES_IPC" >&2; exit 2; }
[[ -f $DECK ]] || { echo "run-local.sh: no deck at $DECK" >&2; exit 2; }
mkdir -p "$OUTDIR"
echo "run-local.sh: $GPUS GPU(s) seen, $NP rank(s), mode $MODE, deck $DECK, report $REPORT"

# The app's exit code, which mpirun passes on: 0 ok, 5 parity failed (the report is still
# written), else no report; 1 is mpirun's own (README.md, "Exit codes").
rc=0
mpirun "${MPIRUN_OPTS[@]}" "$APP" "$DECK" -o "$REPORT" --mode "$MODE" "$@" || rc=$?
if [[ -f $REPORT ]]; then
  "$PYTHON" -m ulysses_post summarize "$REPORT"
fi
exit "$rc"
