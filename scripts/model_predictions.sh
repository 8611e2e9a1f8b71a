#!/usr/bin/env bash
# Every prediction page from HEAD in one command (docs/model.md, "Predictions"):
#   ./scripts/model_predictions.sh            # writes docs/predictions.md and docs/predictions-hier.md
#   ./scripts/model_predictions.sh --check    # CI: a deterministic subset regenerated and compared
# docs/predictions.md: every shipped GPU deck (the presets that are not simulation-sized,
# and the default deck) with every transport (nccl, nccl-ce, ipc, vmm, hier) under every
# schedule, modelled (--mode model: full shapes, no data) on 4 and 8 ranks of h200-nvlink;
# each run replayed by `ulysses-ipc model predict` for its most sensitive parameter, and
# each layer and scatter given a band from the leave-one-out spread (docs/model-loo.md,
# made by scripts/model_loo.sh). docs/predictions-hier.md: scripts/model_hier.sh (2 and 4
# nodes). Every figure is MODELLED. A few minutes on 2 cores; --check well under one.
# Reports go to $OUT (default build/predictions). hier-vmajor (approximate) is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
OUT=${OUT:-${BUILD_DIR:-build}/predictions}
MACHINE=h200-nvlink
CHECK=0
[[ ${1:-} == --check ]] && CHECK=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
if [[ $CHECK == 1 ]]; then
  PRESETS=(flux-dev-1024)  # the subset CI regenerates: every transport and schedule of one deck, 4 and 8 ranks
else
  mapfile -t PRESETS < <("$APP" deck presets | sed -n 's/^\([A-Za-z0-9_.+-]*\) (.*/\1/p' | grep -v -e '-sim$' -e '^protocol$')
fi
T0=$SECONDS
reports=()
for p in "${PRESETS[@]}"; do
  "$APP" deck new --preset "$p" --transports nccl,nccl-ce,ipc,vmm,hier \
    --schedules baseline,v-first,v-project-first,v-first-split -o "$OUT/$p.deck.h5" >/dev/null
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
"$APP" model predict --machine "$MACHINE" "${reports[@]}" -o "$OUT/predict.json"
table() {
  PYTHONPATH=postprocess${PYTHONPATH:+:$PYTHONPATH} python3 scripts/predictions_table.py --predict "$OUT/predict.json" \
    --loo docs/model-loo.md --seconds $((SECONDS - T0)) "$@"
}
if [[ $CHECK == 1 ]]; then
  table --section "$MACHINE" "${reports[@]}" >"$OUT/check.md"
  # Every table line of the subset must stand, unchanged, in the committed page.
  missing=$(grep '^|' "$OUT/check.md" | grep -v -x -F -f docs/predictions.md || true)
  if [[ -n $missing ]]; then
    echo "model_predictions --check: docs/predictions.md differs from what HEAD's model gives; lines not found:" >&2
    echo "$missing" | head -20 >&2
    echo "regenerate: ./scripts/model_predictions.sh" >&2
    exit 1
  fi
  echo "model_predictions --check: $(grep -c '^|' "$OUT/check.md") lines of ${PRESETS[*]} match docs/predictions.md"
  exit 0
fi
table "$MACHINE" "${reports[@]}" >docs/predictions.md
./scripts/model_hier.sh >docs/predictions-hier.md
echo "model_predictions: wrote docs/predictions.md (${#reports[@]} reports) and docs/predictions-hier.md in $((SECONDS - T0)) s"
