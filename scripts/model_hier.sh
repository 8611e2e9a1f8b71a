#!/usr/bin/env bash
# Hierarchical against flat NCCL scatter across nodes (docs/predictions-hier.md), MODELLED:
# --mode model runs of model decks whose Ulysses group spans every node, nccl and hier
# under baseline and v-first, on h200-2node (2 x 8 H200, Ulysses16, 16 ranks) and
# h200-4node (4 x 8, Ulysses32 where the model has 32 heads or more, 32 ranks), the world
# declared as nodes of 8 (--ranks-per-node 8) so that hier's IPC phase stays inside a
# node. Writes markdown to stdout, reports to $OUT (default build/predictions-hier).
#   ./scripts/model_hier.sh > docs/predictions-hier.md   (run by scripts/model_predictions.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
OUT=${OUT:-${BUILD_DIR:-build}/predictions-hier}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
# preset:case (its shape; the Ulysses degree is set to the world)
SHAPES=(flux-dev-2048:flux-dev-2048.u8 hunyuanvideo-720p:hunyuanvideo-720p.u8 wan2.1-14b-720p:wan2.1-14b-720p.u8
        cogvideox-5b-720x480:cogvideox-5b-720x480.u8)
declare -A reports
for machine_np in h200-2node:16 h200-4node:32; do
  machine=${machine_np%%:*} np=${machine_np##*:}
  for shape in "${SHAPES[@]}"; do
    preset=${shape%%:*} case=${shape##*:}
    d="$OUT/$preset-u$np.deck.h5" r="$OUT/$preset-u$np.h5"
    if ! "$APP" deck new --preset "$preset" --name "$case" --ulysses "$np" --transports nccl,hier \
      --schedules baseline,v-first --warmup 0 --iterations 1 -o "$d" >"$OUT/$preset-u$np.deck.log" 2>&1; then
      # A model with fewer heads than ranks has no such layout (the deck's own check).
      grep -q "every rank needs a head" "$OUT/$preset-u$np.deck.log" && continue
      cat "$OUT/$preset-u$np.deck.log" >&2
      exit 1
    fi
    rc=0
    t=$SECONDS
    mpirun -np "$np" --oversubscribe "$APP" "$d" --mode model --machine "inputs/machines/$machine.json" --ranks-per-node 8 -o "$r" --quiet \
      >"$OUT/$preset-u$np.log" 2>&1 || rc=$?
    if [[ $rc -ne 6 ]]; then
      echo "model_hier: $preset at $np ranks exited $rc (log: $OUT/$preset-u$np.log)" >&2
      exit 1
    fi
    echo "model_hier: $preset Ulysses$np on $machine: $((SECONDS - t)) s" >&2
    reports[$machine]+=" $r"
  done
done
cat <<MD
# Hierarchical against flat NCCL scatter across nodes (MODELLED)

Every figure below is **modelled** by the simulator (docs/model.md), from \`--mode model\`
runs (full shapes, no data, the protocol for real) of model decks whose Ulysses group spans
every node: 2 x 8 H200 (Ulysses16) and 4 x 8 H200 (Ulysses32, for the models with at least
32 heads), one 400 Gb/s NIC per GPU, the world declared as nodes of 8. \`hier\` is the
TAPA-style transport (IPC inside a node, rail-aligned point-to-point between same-index
GPUs across nodes, chunked); \`nccl\` is NCCL's own all-to-all over the whole group. No
multi-node run exists: nothing here is measured, and the multi-node machine files are
specs and assumptions (docs/model.md, "What the model leaves out").

Made by \`./scripts/model_predictions.sh\` (this part: scripts/model_hier.sh).

Columns as in docs/predictions.md: the modelled critical path (slowest rank), ms, with its
band from the leave-one-out spread; \`layer x\`: nccl.baseline's layer / this run's;
\`scatter x\`: the nccl run's scatter / this run's, same schedule (above 1: hier faster);
the layer's and the scatter's most sensitive parameters with their elasticities. Written by scripts/model_predictions.sh. The cases keep their presets' names (\`.u8\`); the
Ulysses degree is the heading's. Where heads do not divide by the degree (24 heads over 16
ranks), ranks with fewer heads finish attention early and wait in the gather: stage
columns are each the slowest rank's and do not add up to the layer.

MD
for machine in h200-2node h200-4node; do
  echo "# $machine"
  echo
  # Each run's most sensitive parameter, and bands from the leave-one-out spread (as docs/predictions.md).
  # shellcheck disable=SC2086
  "$APP" model predict --machine "inputs/machines/$machine.json" ${reports[$machine]} -o "$OUT/$machine.predict.json"
  # shellcheck disable=SC2086
  PYTHONPATH=postprocess${PYTHONPATH:+:$PYTHONPATH} python3 scripts/predictions_table.py --section \
    --predict "$OUT/$machine.predict.json" --loo docs/model-loo.md "$machine" ${reports[$machine]}
done
