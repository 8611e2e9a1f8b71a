#!/usr/bin/env bash
# The GPU check's one-rank runs, modelled on a described machine (issue #19): the decks of
# scripts/gpu_check.sh's ablations and graphs sections (scripts/gpu_decks.sh writes both),
# each run's layer and stages replayed by the model, every figure MODELLED with the band the
# leave-one-out spread gives it (docs/model-loo.md). Written *before* a GPU run of a machine
# the model was not fitted to, it is a prediction that the run tests; given the GPU check's
# reports afterwards (--measured DIR: build-gpu/logs/reports, or a stored copy), it prints
# measured beside modelled, the error and whether the measured layer lies in the band, and a
# summary line.
#   ./scripts/model_gpu_check.sh [--machine NAME|FILE] [--measured DIR] [--markdown]
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
OUT=${OUT:-${BUILD_DIR:-build}/model-gpu-check}
MACHINE=h100-sxm ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --machine) MACHINE=$2; shift 2 ;;
    --measured) ARGS+=(--measured "$2"); shift 2 ;;
    --markdown) ARGS+=(--markdown); shift ;;
    *) echo "model_gpu_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH="$PWD/postprocess:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
rm -rf "$OUT"
mkdir -p "$OUT"
# shellcheck source=scripts/gpu_decks.sh disable=SC1091  # linted on its own
. scripts/gpu_decks.sh
gpu_decks "$APP" "$OUT/decks" >"$OUT/decks.log" 2>&1 || { echo "model_gpu_check: writing the decks failed ($OUT/decks.log)" >&2; exit 1; }
model() {  # model NAME DECK [args...]: $OUT/NAME.h5, named as gpu_check names the GPU's report
  local name=$1 deck=$2 rc=0
  shift 2
  mpirun -np 1 --oversubscribe "$APP" "$OUT/decks/$deck.h5" --mode model --machine "$MACHINE" -o "$OUT/$name.h5" \
    --quiet "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  [[ $rc -eq 6 ]] || { echo "model_gpu_check: --mode model of $deck exited $rc ($OUT/$name.log)" >&2; exit 1; }
}
for r in "${GPU_ABLATION_RUNS[@]}" "${GPU_GRAPH_RUNS[@]}"; do  # the GPU check's own runs (gpu_decks.sh)
  read -r -a w <<<"$r"
  model "${w[@]}"
done
python3 scripts/model_gpu_check.py --machine "$MACHINE" --loo docs/model-loo.md "${ARGS[@]}" "$OUT"/*.h5
