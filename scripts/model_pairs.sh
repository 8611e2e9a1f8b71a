# Sourced by the model scripts: the stored GPU reports (docs/measured/) paired with their
# --mode model traces ($T, made by scripts/model_traces.sh), each with the bench_kernels
# file of the code that measured it (its norm+RoPE rate) and, for the reports measured
# before the producers wrote their own slices, the ablation that runs that protocol.
# Sets PAIRS (the arguments of `ulysses-ipc model calibrate|validate|loo`) and RATES (the
# --rates arguments: the current code's bench_kernels file, the machine's own norm+RoPE
# profile, and the bench of GEMM rates by shape, its GEMM profile).
M2=docs/measured/2026-11-29-h200x2
M1=docs/measured/2026-12-01-h200
# shellcheck disable=SC2034  # read by the scripts that source this file
RATES=(--rates docs/measured/2026-12-02-h200-head/bench_kernels-6e0f353.h5
       --rates docs/measured/2026-12-02-h200-gemm/bench_kernels-gemm-59e55b4.h5)
PAIRS=()
for r in multi-flux-dev-1024-np2 multi-flux-dev-2048-np2 multi-hunyuanvideo-720p-np2 latency-floor/floor-np2; do
  PAIRS+=(--pair "$M2/$r.h5=$T/${r#latency-floor/}.h5" --bench "$M2/$r.h5=$M2/bench_kernels.h5"
          --ablation "$M2/$r.h5=own-slice-copy")
done
for r in flux-2048-u1-ablations floor-u1; do
  PAIRS+=(--pair "$M1/$r.h5=$T/$r.h5" --bench "$M1/$r.h5=$M1/bench_kernels.h5")
done
# The same two decks on one H200 at the current code (6e0f353: Q and K normed in one launch,
# layers replayed as CUDA graphs), with that code's bench.
# Leave-one-out leaves each out with its 2026-12-01 sibling and every other report of the
# same deck on this machine (--group NAME-h200, below): one deck on one machine, one session
# all but predicting another.
M3=docs/measured/2026-12-02-h200-head
for r in flux-2048-u1-ablations floor-u1; do
  PAIRS+=(--pair "$M3/$r-6e0f353.h5=$T/$r.h5" --bench "$M3/$r-6e0f353.h5=$M3/bench_kernels-6e0f353.h5"
          --group "$M1/$r.h5=${r%-ablations}-h200" --group "$M3/$r-6e0f353.h5=${r%-ablations}-h200")
done
# Every one-rank report stored since (traced from its own cases by scripts/model_traces.sh,
# deck from-report), each with the bench of the code that measured it: 0fb166f (two
# launches), cdebad3 (graphs; two launches: kern22-soak's bench of that code), d95a287 and
# 89d5171 (Q and K in one launch), 6e0f353, and 59e55b4 (its norm+RoPE kernel that of
# 6e0f353: no kernel change between them). Reports of one deck on one machine are left out
# together (one deck family, --group): the floor, FLUX 2048 and FLUX 1024 at Ulysses1, the
# default deck. Two ranks sharing the GPU (graphs-flux-dev-1024-np2-shared) are time-sliced:
# functional, not performance, and not paired.
MK=docs/measured/2026-12-01-h200-kernels22 MG=docs/measured/2026-12-02-h200-graphs
MN=docs/measured/2026-12-02-h200-normqk MH=docs/measured/2026-12-02-h200-gemm
FROM_REPORT=()  # these reports, which scripts/model_traces.sh traces from their own cases
add_pair() {  # report bench group
  local r=$1 b=$2 g=$3 n
  n=$(basename "$r" .h5)
  PAIRS+=(--pair "$r=$T/$n.h5" --bench "$r=$b" --group "$r=$g")
  FROM_REPORT+=("$r")
}
add_pair "$M1/gantt-flux-2048-u1.h5" "$M1/bench_kernels.h5" flux-2048-u1-h200
add_pair "$MK/flux-2048-u1-schedules-0fb166f.h5" "$MK/bench_kernels-0fb166f.h5" flux-2048-u1-h200
add_pair "$MG/graphs-flux-dev-2048-u1.h5" docs/measured/2026-12-02-h200-kern22-soak/bench_kernels.h5 flux-2048-u1-h200
add_pair "$MN/flux-2048-u1-schedules-d95a287.h5" "$MN/bench_kernels-d95a287.h5" flux-2048-u1-h200
add_pair "$M3/flux-2048-u1-schedules-6e0f353.h5" "$M3/bench_kernels-6e0f353.h5" flux-2048-u1-h200
add_pair "$MG/graphs-floor-u1.h5" docs/measured/2026-12-02-h200-kern22-soak/bench_kernels.h5 floor-u1-h200
add_pair "$MN/floor-u1-89d5171.h5" "$MN/bench_kernels-89d5171.h5" floor-u1-h200
add_pair "$MH/graphs-floor-u1-59e55b4.h5" "$M3/bench_kernels-6e0f353.h5" floor-u1-h200
add_pair "$MG/graphs-flux-dev-1024-u1.h5" docs/measured/2026-12-02-h200-kern22-soak/bench_kernels.h5 flux-1024-u1-h200
add_pair "$MN/flux-1024-u1-89d5171.h5" "$MN/bench_kernels-89d5171.h5" flux-1024-u1-h200
add_pair "$MN/default-np1-89d5171.h5" "$MN/bench_kernels-89d5171.h5" default-u1-h200
add_pair "$MH/default-steady-np1-59e55b4.h5" "$M3/bench_kernels-6e0f353.h5" default-u1-h200
# Code 295c17a (docs/measured/2026-12-05-h200-graphnodes): these decks' norm kind (per-head RMS)
# ran the same kernel as at 6e0f353 (the flat walk since changed other kinds only).
M5=docs/measured/2026-12-05-h200-graphnodes
add_pair "$M5/graphs-floor-u1-295c17a.h5" "$M3/bench_kernels-6e0f353.h5" floor-u1-h200
add_pair "$M5/graphs-flux-dev-1024-u1-295c17a.h5" "$M3/bench_kernels-6e0f353.h5" flux-1024-u1-h200
add_pair "$M5/graphs-flux-dev-2048-u1-295c17a.h5" "$M3/bench_kernels-6e0f353.h5" flux-2048-u1-h200
# Every report above was measured by code that recorded each event as a timed one, a node
# of its graph (before ordering events, 1433d31): replayed so (--timed-events).
TIMED=()
for ((i = 0; i + 1 < ${#PAIRS[@]}; ++i)); do
  if [[ ${PAIRS[i]} == --pair ]]; then TIMED+=(--timed-events "${PAIRS[i + 1]%%=*}"); fi
done
PAIRS+=("${TIMED[@]}")
# One H200 at 9d2ed1a (docs/measured/2026-12-05-h200-9d2ed1a): ordering events (a layer's
# joins are edges of its graph, not nodes: replayed as traced, not --timed-events), each with
# that code's own bench. Validated out of sample against the fit before it (docs/model.md, "The
# GPU check, predicted before it runs"), then moved into the fit of 2026-12-05 (seventh
# session). The lean floor (--stage-timing off) pairs its layer only.
M7=docs/measured/2026-12-05-h200-9d2ed1a
for n in graphs-floor-u1 graphs-floor-u1-lean graphs-flux-dev-1024-u1 graphs-flux-dev-2048-u1; do
  g=${n#graphs-}
  g=${g%-lean}
  g=${g/flux-dev-/flux-}
  PAIRS+=(--pair "$M7/$n-9d2ed1a.h5=$T/$n-9d2ed1a.h5" --bench "$M7/$n-9d2ed1a.h5=$M7/bench_kernels-9d2ed1a.h5"
          --group "$M7/$n-9d2ed1a.h5=$g-h200")
  FROM_REPORT+=("$M7/$n-9d2ed1a.h5")
done
# Another machine: one H100 at 629fb01 (docs/measured/2026-12-05-h100-ordering), never in PAIRS
# (h200-nvlink's fit, whose every pair is an H200's): `ulysses-ipc model validate --machine
# h100-sxm "${PAIRS_H100[@]}"` gives its stage errors out of sample (docs/model.md, "The GPU
# check, predicted before it runs"); no --bench: the machine file's own rates, as predicted.
# Its lean report (--stage-timing off) pairs its layer only.
# And one H100 at 0ccee14 (docs/measured/2026-12-05-h100-0ccee14) and one at 520fd4b
# (docs/measured/2026-12-05-h100-520fd4b): the same decks, code with ordering events; stored
# after h100-sxm.json last changed, so out of sample as well.
M6=docs/measured/2026-12-05-h100-ordering
M8=docs/measured/2026-12-05-h100-0ccee14
M9=docs/measured/2026-12-05-h100-520fd4b
PAIRS_H100=()
for n in graphs-floor-u1 graphs-floor-u1-lean graphs-flux-dev-1024-u1 graphs-flux-dev-2048-u1; do
  PAIRS_H100+=(--pair "$M6/$n-629fb01.h5=$T/$n-629fb01.h5" --pair "$M8/$n-0ccee14.h5=$T/$n-0ccee14.h5"
               --pair "$M9/$n-520fd4b.h5=$T/$n-520fd4b.h5")
  FROM_REPORT+=("$M6/$n-629fb01.h5" "$M8/$n-0ccee14.h5" "$M9/$n-520fd4b.h5")
done
# And the first ablations on an H100, at e20d86f (docs/measured/2026-12-05-h100-e20d86f: every
# transport, schedule and ablation at Ulysses1 for FLUX 2048 and the floor), predicted before
# they ran by docs/predictions-gpu-check-h100-refit.md.
M10=docs/measured/2026-12-05-h100-e20d86f
for n in flux-2048-u1-ablations floor-u1; do
  PAIRS_H100+=(--pair "$M10/$n-e20d86f.h5=$T/$n-e20d86f.h5")
  FROM_REPORT+=("$M10/$n-e20d86f.h5")
done
# And the FLUX graphs decks at 888d75e on an H100 (docs/measured/2026-12-05-h100-888d75e), the
# first run after the ordering-event rule (f8f0ebf), predicted before it ran by
# docs/predictions-gpu-check-h100-f8f0ebf.md.
M11=docs/measured/2026-12-05-h100-888d75e
for n in graphs-flux-dev-1024-u1 graphs-flux-dev-2048-u1; do
  PAIRS_H100+=(--pair "$M11/$n-888d75e.h5=$T/$n-888d75e.h5")
  FROM_REPORT+=("$M11/$n-888d75e.h5")
done
# One H200 at d658c00 (docs/measured/2026-12-06-h200-d658c00), stored after h200-nvlink.json last
# changed (0754f66) and predicted before it ran by docs/predictions-gpu-check-h200-d658c00.md:
# out of sample, never in PAIRS. The floor as graphs and op by op, every stage timed and timed as a
# whole (its lean report pairs its layer only); no --bench: the machine file's own rates.
M12=docs/measured/2026-12-06-h200-d658c00
PAIRS_H200_NEW=()
for n in graphs-floor-u1 graphs-floor-u1-lean; do
  PAIRS_H200_NEW+=(--pair "$M12/$n-d658c00.h5=$T/$n-d658c00.h5")
  FROM_REPORT+=("$M12/$n-d658c00.h5")
done
# H100 hosts with the floor as graphs and op by op, and bench_kernels' latency section run beside
# it, whose floor-op rows measure that host's call costs: HOSTS_H100 (`model validate ...
# "${PAIRS_H100[@]}" "${HOSTS_H100[@]}"`) replays each report with them in place of the
# machine's (docs/model.md, "A report's own host").
# The same benches' graph-node and floor-op rows measure that GPU's device costs: GPUS_H100
# (`... "${GPUS_H100[@]}"`) replays each report with them in place of the machine's (docs/model.md,
# "A report's own GPU").
HOSTS_H100=()
GPUS_H100=()
add_host_floor() {  # folder rev: its two floor reports, each with the bench beside it (the first's
  local n b          # where the lean one has none: before 4628581)
  for n in graphs-floor-u1 graphs-floor-u1-lean; do
    b=$1/host-speed-$n-$2.h5
    [ -f "$b" ] || b=$1/host-speed-graphs-floor-u1-$2.h5
    PAIRS_H100+=(--pair "$1/$n-$2.h5=$T/$n-$2.h5")
    HOSTS_H100+=(--host "$1/$n-$2.h5=$b")
    GPUS_H100+=(--gpu "$1/$n-$2.h5=$b")
    FROM_REPORT+=("$1/$n-$2.h5")
  done
}
# 1687652 (tenth session); then three hosts of the eleventh: b131772 (its floor-op figures one
# chain's mean, which misled), 8c1b2ab (a slow host; from this code on each figure is the median
# of 9 chains) and f4dd6c5 (a host whose speed moved within seconds).
add_host_floor docs/measured/2026-12-06-h100-1687652 1687652
add_host_floor docs/measured/2026-12-06-h100-b131772 b131772
add_host_floor docs/measured/2026-12-06-h100-8c1b2ab 8c1b2ab
add_host_floor docs/measured/2026-12-06-h100-f4dd6c5 f4dd6c5
# And a fifth host at 214dd42, the first with the bench beside each floor report.
add_host_floor docs/measured/2026-12-06-h100-214dd42 214dd42
# And a sixth at 847e34c (twelfth session; the layer's code as at 214dd42).
add_host_floor docs/measured/2026-12-06-h100-847e34c 847e34c
# And a seventh at 2f6777f (thirteenth session), the first whose benches time NCCL at one rank
# and a stream write and wait (db07774): under GPUS_H100 both replace the machine's.
add_host_floor docs/measured/2026-12-06-h100-2f6777f 2f6777f
# And an eighth at 54ff11e (fourteenth session), the first whose benches time the one-rank IPC
# handshake behind a kernel and a write and wait on the kernel's own stream, as graph nodes.
add_host_floor docs/measured/2026-12-06-h100-54ff11e 54ff11e
# A GPU check's one-rank decks on one H100 host (the graphs section's floors as above; the ablations
# of FLUX 2048 and the floor at Ulysses1; the FLUX graphs decks). The ablations deck's floor (floor-u1:
# every transport, schedule and ablation, op by op) had bench_kernels' latency section run beside it
# on its host too (host-speed-floor-u1-REV.h5): its call costs and device costs, as for the floors.
# (e20d86f's floor-u1 bench predates the floor-op rows, f5ae572: `--host` refuses it.)
add_check() {  # folder rev
  local n
  add_host_floor "$1" "$2"
  for n in flux-2048-u1-ablations floor-u1 graphs-flux-dev-1024-u1 graphs-flux-dev-2048-u1; do
    PAIRS_H100+=(--pair "$1/$n-$2.h5=$T/$n-$2.h5")
    FROM_REPORT+=("$1/$n-$2.h5")
  done
  HOSTS_H100+=(--host "$1/floor-u1-$2.h5=$1/host-speed-floor-u1-$2.h5")
  GPUS_H100+=(--gpu "$1/floor-u1-$2.h5=$1/host-speed-floor-u1-$2.h5")
}
# A ninth host at 6cf8e34 (twenty-first session; docs/measured/2026-12-07-h100-6cf8e34): the first
# GPU check run from binaries built elsewhere (gpu_check.sh PREBUILT): out of sample, as the H100
# reports above.
add_check docs/measured/2026-12-07-h100-6cf8e34 6cf8e34
# A tenth at 13524ab (twenty-third session; docs/measured/2026-12-07-h100-13524ab-layers): the same
# layer code; out of sample.
add_check docs/measured/2026-12-07-h100-13524ab-layers 13524ab
