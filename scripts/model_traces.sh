#!/usr/bin/env bash
# The --mode model traces of every stored GPU report's cases (docs/measured/), for
# `ulysses-ipc model calibrate|validate|loo` (docs/model.md). Each deck is the one that
# made the measured report (docs/measured/2026-11-29-h200x2/README.md), run at the same
# 2 ranks with no data: a few seconds in all. Writes $OUT (default build/model-traces).
# The reports were measured before the producers wrote their own slices (commit 396d179):
# the own-slice-copy ablation runs that protocol, and `ulysses-ipc model --ablation
# own-slice-copy` joins them to the measured runs. The one-H200 reports of 2026-12-01
# ran the current protocol (code of a1e8f92): their decks (scripts/gpu_check.sh, section
# ablations) are traced as they are, at 1 rank.
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
OUT=${OUT:-${BUILD_DIR:-build}/model-traces}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
run_model() {  # deck report [ranks [args...]]: exit 6 is --mode model's success (modelled only, no parity)
  local rc=0 deck=$1 report=$2 np=${3:-2}
  shift $(($# < 3 ? $# : 3))
  mpirun -np "$np" --oversubscribe "$APP" "$deck" --mode model -o "$report" --quiet "$@" >/dev/null 2>&1 || rc=$?
  [[ $rc -eq 6 ]] || { echo "model_traces: $deck exited $rc" >&2; exit 1; }
}
for p in flux-dev-1024 flux-dev-2048 hunyuanvideo-720p; do
  "$APP" deck new --preset "$p" --transports nccl,ipc,vmm --schedules baseline,v-first,v-first-split \
    --ablations own-slice-copy -o "$OUT/$p.deck.h5" >/dev/null
  run_model "$OUT/$p.deck.h5" "$OUT/multi-$p-np2.h5"
done
"$APP" deck new --name floor --seq-len 256 --heads 8 --head-dim 64 --dtype bf16 --ulysses 2 \
  --transports nccl,ipc,vmm --schedules baseline,v-first --ablations own-slice-copy -o "$OUT/floor.deck.h5" >/dev/null
run_model "$OUT/floor.deck.h5" "$OUT/floor-np2.h5"
ABL=own-slice-copy,no-pitched-copies,no-grouped-handshake,normal-priority,no-target-cache
"$APP" deck new --preset flux-dev-2048 --name flux-dev-2048.u2 --ulysses 1 --transports nccl,nccl-ce,ipc,vmm \
  --schedules baseline,v-first,v-project-first --ablations "$ABL" -o "$OUT/flux-2048-u1.deck.h5" >/dev/null
run_model "$OUT/flux-2048-u1.deck.h5" "$OUT/flux-2048-u1-ablations.h5" 1
"$APP" deck new --name floor --seq-len 256 --heads 8 --head-dim 64 --dtype bf16 --ulysses 1 \
  --transports nccl,nccl-ce,ipc,vmm --schedules baseline,v-first --ablations own-slice-copy,no-grouped-handshake \
  -o "$OUT/floor-u1.deck.h5" >/dev/null
run_model "$OUT/floor-u1.deck.h5" "$OUT/floor-u1.h5" 1
# The one-rank reports stored since (FROM_REPORT in scripts/model_pairs.sh, the one list
# of them): each traced from its own cases (`deck from-report`), at one rank, under its own
# file name.
# shellcheck disable=SC2034  # read by model_pairs.sh
T=$OUT
# shellcheck source=scripts/model_pairs.sh disable=SC1091  # linted on its own
. scripts/model_pairs.sh
# A report timed with --stage-timing off is traced so too (its layer holds none of the stage
# timing's records; the model's pairing refuses a trace timed otherwise).
lean() {  # report: exit 0 when its runs were timed with --stage-timing off (their stage_timing)
  python3 -c 'import sys, h5py
f = h5py.File(sys.argv[1], "r")
sys.exit(not any(r.attrs.get("stage_timing") == "off" for c in f["cases"].values() for r in c.values()))' "$1"
}
for r in "${FROM_REPORT[@]}"; do
  n=$(basename "$r" .h5)
  "$APP" deck from-report "$r" -o "$OUT/$n.deck.h5" >/dev/null
  args=()
  if lean "$r"; then args=(--stage-timing off); fi
  run_model "$OUT/$n.deck.h5" "$OUT/$n.h5" 1 "${args[@]}"
done
echo "$OUT"
