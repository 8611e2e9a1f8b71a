# Sourced by scripts/gpu_check.sh (which runs them on a GPU) and scripts/model_gpu_check.sh
# (which models them on a described machine, before the GPU run: a prediction that cannot
# have been fitted to it): the one-GPU decks of the GPU check's ablations and graphs sections,
# written by one function so that both run exactly the same cases.
#   gpu_decks APP DIR: DIR/flux-2048-u1-ablations.h5, floor-u1.h5 (ablations), graphs-floor-u1.h5,
#   graphs-flux-dev-1024-u1.h5, graphs-flux-dev-2048-u1.h5 (graphs; one rank each) and
#   graphs-flux-dev-1024-u2.h5 (two ranks sharing the GPU: function only).
# GPU_ABLATION_RUNS and GPU_GRAPH_RUNS: the one-rank runs of those decks, each
# "REPORT DECK [app arguments]" (the report's name, the deck's, what the run adds).
# shellcheck disable=SC2034  # read by the scripts that source this file
GPU_ABLATION_RUNS=("flux-2048-u1-ablations flux-2048-u1-ablations" "floor-u1 floor-u1")
# shellcheck disable=SC2034
GPU_GRAPH_RUNS=("graphs-floor-u1 graphs-floor-u1" "graphs-floor-u1-lean graphs-floor-u1 --stage-timing off"
                "graphs-flux-dev-1024-u1 graphs-flux-dev-1024-u1" "graphs-flux-dev-2048-u1 graphs-flux-dev-2048-u1")
gpu_decks() {
  local app=$1 dir=$2 preset
  mkdir -p "$dir"
  # Every transport, schedule and ablation on a Ulysses1 FLUX 2048 layer, and the latency floor.
  "$app" deck new --preset flux-dev-2048 --name flux-dev-2048.u2 --ulysses 1 --transports nccl,nccl-ce,ipc,vmm \
    --schedules baseline,v-first,v-project-first \
    --ablations own-slice-copy,no-pitched-copies,no-grouped-handshake,normal-priority,no-target-cache \
    --warmup 3 --iterations 20 --repeats 2 -o "$dir/flux-2048-u1-ablations.h5" || return
  "$app" deck new --name floor --seq-len 256 --heads 8 --head-dim 64 --dtype bf16 --ulysses 1 \
    --transports nccl,nccl-ce,ipc,vmm --schedules baseline,v-first --ablations own-slice-copy,no-grouped-handshake \
    --warmup 20 --iterations 200 --repeats 3 -o "$dir/floor-u1.h5" || return
  # Graphs against op by op (the ablation no-graphs) in one report.
  "$app" deck new --name floor --seq-len 256 --heads 8 --head-dim 64 --dtype bf16 --ulysses 1 \
    --transports nccl,ipc,vmm --schedules baseline,v-first --ablations no-graphs --warmup 20 --iterations 200 \
    --repeats 3 -o "$dir/graphs-floor-u1.h5" || return
  for preset in flux-dev-1024 flux-dev-2048; do
    "$app" deck new --preset "$preset" --name "$preset.u2" --ulysses 1 --transports nccl,ipc,vmm \
      --schedules v-first,v-first-split,v-project-first --ablations no-graphs --warmup 5 --iterations 50 --repeats 2 \
      -o "$dir/graphs-$preset-u1.h5" || return
  done
  "$app" deck new --preset flux-dev-1024 --name flux-dev-1024.u2 --transports ipc,vmm --schedules v-first \
    --ablations no-graphs --warmup 3 --iterations 20 --repeats 2 -o "$dir/graphs-flux-dev-1024-u2.h5"
}
