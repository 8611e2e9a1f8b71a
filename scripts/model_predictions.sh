#!/usr/bin/env bash
# Every prediction page from HEAD in one command (docs/model.md, "Predictions"):
#   ./scripts/model_predictions.sh            # writes docs/predictions.md, docs/predictions-h100.md
#                                             # and docs/predictions-hier.md
#   ./scripts/model_predictions.sh --check    # CI: a deterministic subset regenerated and compared
# docs/predictions.md (h200-nvlink, the fitted machine) and docs/predictions-h100.md
# (h100-sxm, derived from it: inputs/machines/derive.py): every shipped GPU deck (the
# presets that are not simulation-sized, and the default deck) with every transport (nccl,
# nccl-ce, ipc, vmm, hier) under every schedule, modelled (--mode model: full shapes, no
# data) on 4 and 8 ranks of the machine; each run replayed by `ulysses-ipc model predict`
# (medians over start skews, the most sensitive parameters), and each layer and scatter
# given a band from the leave-one-out spread (docs/model-loo.md, made by
# scripts/model_loo.sh). docs/predictions-hier.md: scripts/model_hier.sh (2 and 4 nodes).
# Every figure is MODELLED. A few minutes on 2 cores; --check well under one.
# Reports go to $OUT/<machine> (default build/predictions). hier-vmajor (approximate) is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
OUT=${OUT:-${BUILD_DIR:-build}/predictions}
PAGES=(h200-nvlink=docs/predictions.md h100-sxm=docs/predictions-h100.md)  # machine=page
CHECK=0
[[ ${1:-} == --check ]] && CHECK=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ $CHECK == 1 ]]; then
  PRESETS=(flux-dev-1024)  # the subset CI regenerates: every transport and schedule of one deck, 4 and 8 ranks
else
  mapfile -t PRESETS < <("$APP" deck presets | sed -n 's/^\([A-Za-z0-9_.+-]*\) (.*/\1/p' | grep -v -e '-sim$' -e '^protocol$')
fi

# page MACHINE PAGE: every preset on 4 and 8 ranks of MACHINE, replayed, written to PAGE
# (with --check: the subset's table lines must each stand, unchanged, in PAGE).
page() {
  local machine=$1 page=$2 out=$OUT/$1 t0=$SECONDS p np r rc
  local reports=()
  mkdir -p "$out"
  for p in "${PRESETS[@]}"; do
    "$APP" deck new --preset "$p" --transports nccl,nccl-ce,ipc,vmm,hier \
      --schedules baseline,v-first,v-project-first,v-first-split -o "$out/$p.deck.h5" >/dev/null
    for np in 4 8; do
      r="$out/$p-np$np.h5"
      rc=0
      mpirun -np "$np" --oversubscribe "$APP" "$out/$p.deck.h5" --mode model --machine "$machine" -o "$r" --quiet \
        >"$out/$p-np$np.log" 2>&1 || rc=$?
      if [[ $rc -eq 6 ]]; then
        reports+=("$r")
      elif ! grep -q "no case of the deck can run on $np rank" "$out/$p-np$np.log"; then
        echo "model_predictions: $p on $np ranks of $machine exited $rc (log: $out/$p-np$np.log)" >&2
        exit 1
      fi
    done
  done
  "$APP" model predict --machine "$machine" "${reports[@]}" -o "$out/predict.json"
  local table=(env "PYTHONPATH=postprocess${PYTHONPATH:+:$PYTHONPATH}" python3 scripts/predictions_table.py
               --predict "$out/predict.json" --loo docs/model-loo.md)
  if [[ $CHECK == 1 ]]; then
    "${table[@]}" --section "$machine" "${reports[@]}" >"$out/check.md"
    local missing
    if [[ ! -s $page ]] || ! grep -q '^|' "$out/check.md"; then
      echo "model_predictions --check: $page missing or empty, or no table from $machine" >&2
      echo "regenerate: ./scripts/model_predictions.sh" >&2
      exit 1
    fi
    missing=$(grep '^|' "$out/check.md" | grep -v -x -F -f "$page" || true)
    if [[ -n $missing ]]; then
      echo "model_predictions --check: $page differs from what HEAD's model gives on $machine; lines not found:" >&2
      echo "$missing" | head -20 >&2
      echo "regenerate: ./scripts/model_predictions.sh" >&2
      exit 1
    fi
    echo "model_predictions --check: $(grep -c '^|' "$out/check.md") lines of ${PRESETS[*]} on $machine match $page"
    return
  fi
  "${table[@]}" --seconds $((SECONDS - t0)) "$machine" "${reports[@]}" >"$page"
  echo "model_predictions: wrote $page (${#reports[@]} reports) in $((SECONDS - t0)) s"
}

T0=$SECONDS
for mp in "${PAGES[@]}"; do page "${mp%%=*}" "${mp#*=}"; done
[[ $CHECK == 1 ]] && exit 0
./scripts/model_hier.sh >docs/predictions-hier.md
echo "model_predictions: wrote docs/predictions-hier.md; every page in $((SECONDS - T0)) s"
