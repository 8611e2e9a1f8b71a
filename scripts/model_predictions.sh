#!/usr/bin/env bash
# Predictions before measurement (docs/predictions.md): every shipped model deck, with
# nccl, ipc and vmm under every schedule, modelled (--mode model) on 4 and 8 ranks
# of the machine (default h200-nvlink: an 8-GPU H200 NVLink node, fitted to the two-H200
# reports). Ulysses4 and TP2+Ulysses2 run on 4 ranks, Ulysses8 on 8. Writes the table to
# stdout (markdown) and the reports to $OUT (default build/predictions). About a minute.
#   ./scripts/model_predictions.sh > docs/predictions.md
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
OUT=${OUT:-${BUILD_DIR:-build}/predictions}
MACHINE=${MACHINE:-h200-nvlink}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
reports=()
for p in flux-dev-1024 flux-dev-2048 sd3-medium-1024 pixart-alpha-1024 hunyuanvideo-720p wan2.1-14b-480p \
         wan2.1-14b-720p wan2.1-1.3b-480p cogvideox-5b-720x480; do
  "$APP" deck new --preset "$p" --transports nccl,ipc,vmm --schedules baseline,v-first,v-project-first,v-first-split \
    -o "$OUT/$p.deck.h5" >/dev/null
  for np in 4 8; do
    r="$OUT/$p-np$np.h5"
    rc=0
    mpirun -np "$np" --oversubscribe "$APP" "$OUT/$p.deck.h5" --mode model --machine "$MACHINE" -o "$r" --quiet \
      >"$OUT/$p-np$np.log" 2>&1 || rc=$?
    if [[ $rc -eq 6 ]]; then
      reports+=("$r")
    elif ! grep -q "no case of the deck can run on $np rank" "$OUT/$p-np$np.log"; then
      echo "model_predictions: $p on $np ranks exited $rc (log: $OUT/$p-np$np.log)" >&2
      exit 1
    fi
  done
done
PYTHONPATH=postprocess${PYTHONPATH:+:$PYTHONPATH} python3 scripts/predictions_table.py "$MACHINE" "${reports[@]}"
