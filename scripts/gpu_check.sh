#!/usr/bin/env bash
# The one GPU check: on the GPU machine, configure and build the CUDA targets in
# build-gpu, run every GPU test, the kernel benchmark and (when the app has --mode gpu)
# a representative deck, then print a summary table last. Full logs go to $OUT when set
# (the device tool's output folder), else to build-gpu/logs.
#
#   scripts/gpu_check.sh            # from the repository root or anywhere
#   STEPS="build tests" scripts/gpu_check.sh    # only some sections (the build always runs)
#   KERNEL_TESTS='-*StagedWalk*' scripts/gpu_check.sh   # a gtest filter for test_cuda_kernels
#   PREBUILT=DIR scripts/gpu_check.sh   # binaries built elsewhere: no configure or build here
#
# PREBUILT names a folder holding test_cuda_kernels, test_cuda_device, bench_kernels and
# ulysses-ipc, built for this GPU's architecture on another machine (a CUDA build with cuDNN
# SDPA, CMakeCache's ULYSSES_CUDA_ARCH); the check then spends no GPU time compiling. The
# Kokkos runtime those binaries link is found on the system or in the carried .kokkos/root.
#
# Sections (STEPS, default all): tests (GPU unit tests), bench (kernel benchmark, and the
# peer link with two GPUs or more), sanitize (compute-sanitizer), app (the app on one GPU:
# 1 rank, and 2 and 4 ranks sharing it), ablations (one rank: every transport, schedule
# and ablation at Ulysses1, and the latency floor), graphs (one GPU: layers replayed as
# CUDA graphs against op by op, the ablation no-graphs, in the same run: the latency floor,
# FLUX 1024 and 2048 at Ulysses1 under v-first, v-first-split and v-project-first, FLUX 1024
# at Ulysses2 on two ranks sharing the GPU), multi (with two GPUs or more: one GPU per rank,
# IPC and VMM against NCCL at Ulysses2 on the model decks, and the 4-rank layouts on the
# GPUs there are), soak (not in the default list, ~4-5 min: FLUX 1024 for 10,000 layers a
# run at 1 rank and 2 ranks sharing the GPU, over ipc and vmm, with memory, RSS and fds
# sampled: scripts/soak.sh; SOAK_LAYERS=N for fewer). The one-GPU sections pin every rank
# to the first visible GPU, so a machine with several GPUs also runs what the one-GPU
# machine runs.
#
# Kokkos and CLI11: where the machine has none, the Debian packages carried in
# .kokkos/*.deb (apt-get download libtrilinos-kokkos-dev libtrilinos-kokkos-13.2
# libcli11-dev) are unpacked into .kokkos/root and used through Kokkos_ROOT and CLI11_DIR. cuDNN SDPA needs the cudnn-frontend headers
# in .cache/cudnn-frontend/include (see kernels/CMakeLists.txt); if that build fails,
# the check rebuilds without it and says so.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
# Logs and reports stay in build-gpu/logs; with $OUT set (the device tool, which takes
# back at most 8 files) they travel as one archive plus the summary.
LOG=$ROOT/build-gpu/logs
mkdir -p "$LOG"
JOBS=${JOBS:-16}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# NVLink multicast can put a shared host's GPUs out of service: never on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

STEPS=" ${STEPS:-tests bench sanitize app ablations graphs multi} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
# The GPUs this process may use, and the first of them for the one-GPU sections.
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  NGPU=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
  FIRST_GPU=${CUDA_VISIBLE_DEVICES%%,*}
else
  FIRST_GPU=0
fi
ONE_GPU=(env CUDA_VISIBLE_DEVICES="$FIRST_GPU")  # a prefix that run_step's `timeout` can exec
PY=python3
[ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python

SUMMARY=()
note() { SUMMARY+=("$(printf '%-44s | %s' "$1" "$2")"); }
# run_step NAME LOGFILE TIMEOUT CMD...: appends the command's output to LOGFILE.
run_step() {
  local name=$1 log=$2 limit=$3
  shift 3
  echo "=== $name [$(date -u +%T)]: $*" >>"$log"
  [ -n "${OUT:-}" ] && { printf '%s\n' "${SUMMARY[@]}"; echo "running: $name"; } >"$OUT/summary-so-far.txt"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local verdict=PASS
  [ $rc -ne 0 ] && verdict="FAIL (rc $rc)"
  [ $rc -eq 124 ] && verdict="TIMEOUT (${limit}s)"
  note "$name" "$verdict, $((SECONDS - t0))s"
  echo "=== $name [$(date -u +%T)]: $verdict" >>"$log"
  # The device tool returns $OUT even when the call is cut off at its time limit: keep
  # the summary so far and the end of this step's log there after every step.
  if [ -n "${OUT:-}" ]; then
    printf '%s\n' "${SUMMARY[@]}" >"$OUT/summary-so-far.txt"
    tail -n 200 "$log" >"$OUT/last-step.log"
  fi
  return $rc
}

{
  echo "host: $(hostname)  date: $(date -u +%FT%TZ)"
  # The host's CPU: the near-empty layer op by op is set by the host's calls, and hosts differ
  # (docs/model.md, "A report's own host").
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) usable cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader 2>&1
  nvcc --version | tail -2
  cmake --version | head -1
} >"$LOG/env.log" 2>&1
# The GPUs' clocks, power and throttle reasons every 200 ms for the whole check (clocks.csv),
# beside each step's start and end times in its log ("=== NAME [HH:MM:SS]"): the layer's
# attention ran 9-12% below the same run's bench at FLUX 2048's shape on one H100, which
# power-capped clocks would explain (docs/model.md, "A second H100 at 0ccee14").
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 >"$LOG/clocks.csv" 2>&1 &
SMI_PID=$!
trap 'kill "$SMI_PID" 2>/dev/null' EXIT

# --- Kokkos
KOKKOS_ARGS=()
if { [ ! -f /usr/include/trilinos/Kokkos_Core.hpp ] || [ ! -f /usr/include/CLI/CLI.hpp ]; } &&
  ls .kokkos/*.deb >/dev/null 2>&1; then
  mkdir -p .kokkos/root
  for f in .kokkos/*.deb; do dpkg -x "$f" .kokkos/root; done
fi
if [ ! -f /usr/include/trilinos/Kokkos_Core.hpp ] && [ -d .kokkos/root/usr/include/trilinos ]; then
  KOKKOS_ARGS=(-DKokkos_ROOT="$ROOT/.kokkos/root/usr" -DULYSSES_KOKKOS_INCLUDE="$ROOT/.kokkos/root/usr/include/trilinos")
  note "kokkos" "carried Debian packages (.kokkos/root)"
fi
# CLI11 (header-only, both command lines): libcli11-dev's .deb carried in .kokkos/ too.
if [ ! -f /usr/include/CLI/CLI.hpp ] && [ -d .kokkos/root/usr/share/cmake/CLI11 ]; then
  KOKKOS_ARGS+=(-DCLI11_DIR="$ROOT/.kokkos/root/usr/share/cmake/CLI11")
  note "cli11" "carried Debian package (.kokkos/root)"
fi

# --- configure and build (or binaries built elsewhere)
BUILD_LOG=$LOG/build.log
: >"$BUILD_LOG"
T=build-gpu/tests
APP=build-gpu/app/ulysses-ipc
if [ -n "${PREBUILT:-}" ]; then
  T=$PREBUILT
  APP=$PREBUILT/ulysses-ipc
  if [ -d .kokkos/root ]; then
    KOKKOS_LIB=$(find "$ROOT/.kokkos/root" -name 'libtrilinos_kokkoscore.so*' | head -1)
    if [ -n "$KOKKOS_LIB" ]; then
      LD_LIBRARY_PATH=$(dirname "$KOKKOS_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      export LD_LIBRARY_PATH
    fi
  fi
  note "build" "prebuilt binaries in $PREBUILT"
fi
CONF=(cmake -S . -B build-gpu -DULYSSES_CUDA=ON -DULYSSES_TESTS=ON -DCMAKE_BUILD_TYPE=Release "${KOKKOS_ARGS[@]}")
TARGETS=(test_cuda_kernels test_cuda_device bench_kernels)
# Sections of the app alone (STEPS="ablations graphs", say) build the app and bench_kernels
# (its latency rows time the host beside the floor's runs): the device time the GPU tests'
# compiles would take is not spent.
want tests || want sanitize || TARGETS=(ulysses-ipc bench_kernels)
built=0
if [ -n "${PREBUILT:-}" ]; then
  run_step "prebuilt binaries load" "$BUILD_LOG" 60 "$APP" --version && built=1
elif run_step "configure" "$BUILD_LOG" 300 "${CONF[@]}" -DULYSSES_CUDNN_SDPA=ON; then
  if run_step "build (cuDNN SDPA on)" "$BUILD_LOG" 420 cmake --build build-gpu --target "${TARGETS[@]}" -j"$JOBS"; then
    built=1
  elif run_step "configure without cuDNN SDPA" "$BUILD_LOG" 300 "${CONF[@]}" -DULYSSES_CUDNN_SDPA=OFF &&
    run_step "build (cuDNN SDPA off)" "$BUILD_LOG" 900 cmake --build build-gpu --target "${TARGETS[@]}" -j"$JOBS"; then
    built=1
  fi
fi
grep -E "cuDNN|NCCL|Kokkos headers" "$BUILD_LOG" | sort -u >>"$LOG/env.log"
# Binaries built elsewhere: the code they were built from and the libraries they load here.
if [ -n "${PREBUILT:-}" ]; then
  { "$APP" --version; ldd "$APP" | grep -E "cudnn|nccl|cublas|kokkos"; } >>"$LOG/env.log" 2>&1
fi

# --- GPU tests and benchmark
TEST_LOG=$LOG/tests.log
: >"$TEST_LOG"
if [ $built -eq 1 ] && want tests; then
  run_step "test_cuda_kernels" "$TEST_LOG" 600 "${ONE_GPU[@]}" "$T/test_cuda_kernels" --gtest_filter="${KERNEL_TESTS:-*}"
  for np in 1 2 4; do
    run_step "test_cuda_device np$np (one GPU)" "$TEST_LOG" 300 "${ONE_GPU[@]}" mpirun -np "$np" --oversubscribe \
      -x CUDA_VISIBLE_DEVICES "$T/test_cuda_device"
  done
fi
if [ $built -eq 1 ] && want bench; then
  # Fresh logs: a warm machine keeps build-gpu/logs between calls, and the torch step reads
  # this call's bench row from bench.log.
  : >"$LOG/bench.log"
  : >"$LOG/bench-norm-4608.log"
  : >"$LOG/torch-sdpa.log"
  run_step "bench_kernels" "$LOG/bench.log" 600 "$T/bench_kernels" -o "$LOG/bench.h5"
  # norm+RoPE again at FLUX 1024's size (4608 tokens, the graphs section's deck): the model
  # takes the 16896-token rates for every size, and on one H100 FLUX 1024's norm stage ran
  # at that rate with no fixed cost left (docs/model.md, "A second H100 at 0ccee14").
  run_step "bench_kernels norm at 4608 tokens" "$LOG/bench-norm-4608.log" 300 "$T/bench_kernels" --sections norm \
    --norm-tokens 4608 -o "$LOG/bench-norm-4608.h5"
  # Our attention against cuDNN SDPA through PyTorch on the same GPU in the same call (issue
  # #22): bench_kernels' own cuDNN row on the anchor shape beside torch's, and the ratio.
  if [ -x /opt/torch/.venv/bin/python ]; then
    run_step "torch SDPA beside ours" "$LOG/torch-sdpa.log" 180 env PYTHONUNBUFFERED=1 /opt/torch/.venv/bin/python \
      scripts/torch_sdpa_bench.py --bench-log "$LOG/bench.log" -o "$LOG/torch-sdpa.h5"
  else
    note "torch SDPA beside ours" "not run: no /opt/torch/.venv"
  fi
fi

# --- compute-sanitizer over the GPU tests (memcheck, racecheck)
if [ $built -eq 1 ] && command -v compute-sanitizer >/dev/null 2>&1 && want sanitize; then
  SAN_LOG=$LOG/sanitizer.log
  : >"$SAN_LOG"
  run_step "memcheck test_cuda_kernels" "$SAN_LOG" 420 "${ONE_GPU[@]}" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$T/test_cuda_kernels"
  # Our kernels only: racecheck flags cuDNN's own SDPA kernels (wgmma/TMA code it cannot
  # model), so attention runs on the project's kernel here.
  run_step "racecheck test_cuda_kernels (own kernels)" "$SAN_LOG" 420 "${ONE_GPU[@]}" env ULYSSES_ATTENTION=reference \
    compute-sanitizer --tool racecheck --error-exitcode 9 "$T/test_cuda_kernels" --gtest_filter='*Norm*:*Reference*:*Convert*'
  run_step "memcheck test_cuda_device np2" "$SAN_LOG" 300 "${ONE_GPU[@]}" mpirun -np 2 --oversubscribe -x CUDA_VISIBLE_DEVICES \
    compute-sanitizer --tool memcheck --error-exitcode 9 "$T/test_cuda_device"
fi

# --- the app in GPU mode: one rank (NCCL and the whole pipeline on the GPU, V copied to
# itself on the copy engine), and 2 and 4 ranks sharing the one GPU (IPC functional
# evidence only: time-sliced, no performance figures; NCCL refuses shared GPUs, so the
# nccl transport, gather and TP all-reduce run over MPI staged through the host).
APP_LOG=$LOG/app.log
: >"$APP_LOG"
mkdir -p "$LOG/reports"
app_built=0
if [ -n "${PREBUILT:-}" ]; then
  app_built=$built
elif { want app || want ablations || want graphs || want multi || want soak; } &&
  run_step "build ulysses-ipc" "$APP_LOG" "${APP_BUILD_LIMIT:-240}" cmake --build build-gpu --target ulysses-ipc -j"$JOBS"; then
  app_built=1
fi
app_run() {  # app_run NAME NP DECK [args...]: every rank on the first visible GPU
  local name=$1 np=$2 deck=$3
  shift 3
  run_step "app $name" "$APP_LOG" "${APP_LIMIT:-300}" "${ONE_GPU[@]}" mpirun -np "$np" --oversubscribe -x CUDA_VISIBLE_DEVICES \
    "$APP" "$deck" --mode gpu -o "$LOG/reports/$name.h5" "$@"
}
if [ $app_built -eq 1 ] && want app; then
  app_run default-np1 1 inputs/default.h5
  app_run default-np2-shared 2 inputs/default.h5 --allow-shared-gpu
  app_run default-np4-shared 4 inputs/default.h5 --allow-shared-gpu
  app_run protocol-np2-shared 2 inputs/protocol.h5 --allow-shared-gpu
  app_run protocol-np4-shared 4 inputs/protocol.h5 --allow-shared-gpu
  # One rank: the model decks' layouts need 2 ranks or more, so a Ulysses1 copy of the
  # FLUX case (V still goes through the copy engine, to the rank itself).
  "$APP" deck new --preset flux-dev-1024 --name flux-dev-1024.u2 --ulysses 1 --transports nccl,ipc,vmm \
    -o "$LOG/flux-1024-u1.h5" >>"$APP_LOG" 2>&1
  app_run flux-1024-np1 1 "$LOG/flux-1024-u1.h5"
  app_run flux-1024-np2-shared 2 inputs/flux-dev-1024.h5 --allow-shared-gpu --case flux-dev-1024.u2
  for twin in inputs/*-sim.h5; do  # every model family's structure (head_dim 64/72/128, norms) on the GPU
    app_run "$(basename "$twin" .h5)-np2-shared" 2 "$twin" --allow-shared-gpu --quiet
  done
  # The hierarchical transport, ranks sharing the GPU as declared nodes (functional
  # evidence): 2 ranks as 2 nodes of 1, 4 ranks as 2 nodes of 2; nccl, hier and V-major
  # over 4 denoising steps, the gather over hier too. NCCL cannot run between ranks on one
  # GPU, so hier's inter-node phase (and the nccl transport) go over MPI staged through
  # host memory (the report's collectives = mpi); inside a node the IPC protocol runs
  # between the ranks sharing the GPU.
  "$APP" deck new --name hier --batch 2 --seq-len 1024 --heads 8 --head-dim 64 --ulysses 0 \
    --transports nccl,hier,hier-vmajor --schedules baseline,v-first --warmup 1 --iterations 2 --steps 4 \
    --full-steps 1 --step-similarity 0.99 -o "$LOG/hier.h5" >>"$APP_LOG" 2>&1
  app_run hier-np2-shared-2x1 2 "$LOG/hier.h5" --allow-shared-gpu --ranks-per-node 1 --gather ipc
  app_run hier-np4-shared-2x2 4 "$LOG/hier.h5" --allow-shared-gpu --ranks-per-node 2 --gather ipc
fi

# --- one rank on one GPU: every transport, schedule and ablation on a Ulysses1 FLUX 2048
# layer, and the latency floor (a near-empty layer). At Ulysses1 a rank's own slice is all
# of the scatter: these show what the producers' own-slice writes, the schedules and each
# ablated part cost on one GPU (peer copies and the link need several GPUs: multi).
# The session's host speed beside a floor run: op by op the near-empty layer is the host's
# enqueue time, and one machine's sessions differed by 1.6x there (docs/model.md, "How far the
# measurements agree"); bench_kernels' latency rows (host enqueue per event hop, memory op,
# copy) in the same call are what a model of the host would scale by.
host_speed() {  # host_speed NAME: $LOG/host-speed-NAME.h5
  run_step "host speed beside $1 (bench_kernels latency)" "$APP_LOG" 120 "$T/bench_kernels" --sections latency \
    -o "$LOG/host-speed-$1.h5"
}
# The one-GPU decks of both sections (scripts/gpu_decks.sh: scripts/model_gpu_check.sh models
# the same ones on a described machine).
DECKS=$LOG/decks
if [ $app_built -eq 1 ] && { want ablations || want graphs; }; then
  # shellcheck source=scripts/gpu_decks.sh disable=SC1091  # linted on its own
  . scripts/gpu_decks.sh
  gpu_decks "$APP" "$DECKS" >>"$APP_LOG" 2>&1
fi
gpu_runs() {  # gpu_runs RUN...: each "REPORT DECK [args]" at one rank; the host's speed beside each floor
  local r w
  for r in "$@"; do
    read -r -a w <<<"$r"
    app_run "${w[0]}" 1 "$DECKS/${w[1]}.h5" --quiet "${w[@]:2}"
    # Beside each floor run, the lean one too: a host's speed moved within seconds on one H100
    # (docs/measured/2026-12-06-h100-f4dd6c5), so each report gets the measurement next to it.
    if [[ ${w[0]} == *floor-u1 || ${w[0]} == *floor-u1-lean ]]; then host_speed "${w[0]}"; fi
  done
}
if [ $app_built -eq 1 ] && want ablations; then
  gpu_runs "${GPU_ABLATION_RUNS[@]}"
fi

# --- graphs: every layer after the first steady one replayed as a CUDA graph (the handshake's
# writes and waits updated each launch), against the same layers op by op (no-graphs) in the
# same run, on one GPU: the near-empty layer, FLUX 1024 and 2048 at Ulysses1, and FLUX 1024 at
# Ulysses2 with two ranks sharing the GPU (function only: time-sliced). The table
# (ulysses-post graphs): layer medians of both, op-by-op / graphs, host enqueue time.
if [ $app_built -eq 1 ] && want graphs; then
  # Among them the floor timed as a whole (--stage-timing off): no event between stages, each
  # of which is a node of ~2.2 us in a graph (bench_kernels' graph rows), op by op and as graphs.
  gpu_runs "${GPU_GRAPH_RUNS[@]}"
  app_run graphs-flux-dev-1024-np2-shared 2 "$DECKS/graphs-flux-dev-1024-u2.h5" --allow-shared-gpu --gather ipc --quiet
  for r in "$LOG"/reports/graphs-*.h5; do
    [ -f "$r" ] || continue
    echo "$(basename "$r" .h5):"
    PYTHONPATH=$ROOT/postprocess "$PY" -m ulysses_post graphs "$r"
  done >"$LOG/graphs-table.txt" 2>&1
fi

# --- several GPUs: one GPU per rank. Each model deck is rewritten to compare nccl, ipc
# and vmm under all three schedules; the cases whose layout fits the rank count run
# (Ulysses2 at 2 ranks; Ulysses4 and TP2+Ulysses2 at 4; Ulysses8 at 8). Where the GPUs
# are fewer than 4, the 4-rank protocol deck runs with two ranks a GPU (functional).
MULTI_LOG=$LOG/multi.log
: >"$MULTI_LOG"
if [ $app_built -eq 1 ] && want multi && [ "$NGPU" -ge 2 ]; then
  nvidia-smi topo -m >>"$LOG/env.log" 2>&1
  run_step "test_cuda_device np2 (GPU per rank)" "$MULTI_LOG" 300 mpirun -np 2 "$T/test_cuda_device"
  multi_run() {  # multi_run NAME NP DECK [args...]
    local name=$1 np=$2 deck=$3
    shift 3
    run_step "gpus $name" "$MULTI_LOG" "${APP_LIMIT:-300}" mpirun -np "$np" --oversubscribe \
      "$APP" "$deck" --mode gpu -o "$LOG/reports/multi-$name.h5" "$@"
  }
  multi_run protocol-np2 2 inputs/protocol.h5
  # hier with NCCL between the GPUs: 2 GPUs as 2 declared nodes of 1 (and 2 x 2 on 4 GPUs),
  # the same deck as the shared-GPU runs above, then FLUX.1-dev's Ulysses4 case over 2 x 2.
  [ -f "$LOG/hier.h5" ] && multi_run hier-np2-2x1 2 "$LOG/hier.h5" --ranks-per-node 1 --gather ipc
  if [ "$NGPU" -ge 4 ]; then
    [ -f "$LOG/hier.h5" ] && multi_run hier-np4-2x2 4 "$LOG/hier.h5" --ranks-per-node 2 --gather ipc
    "$APP" deck new --preset flux-dev-1024 --name flux-dev-1024.u4 --transports nccl,hier \
      -o "$LOG/flux-1024-hier.h5" >>"$MULTI_LOG" 2>&1
    multi_run flux-1024-hier-np4-2x2 4 "$LOG/flux-1024-hier.h5" --ranks-per-node 2
  fi
  if [ "$NGPU" -lt 4 ]; then
    multi_run "protocol-np4-on-${NGPU}gpus" 4 inputs/protocol.h5 --allow-shared-gpu
  else
    multi_run protocol-np4 4 inputs/protocol.h5
  fi
  for np in 2 4 8; do
    [ "$np" -gt "$NGPU" ] && break
    for preset in flux-dev-1024 flux-dev-2048 hunyuanvideo-720p; do
      iters=()  # the video layer takes ~0.2 s at Ulysses2: fewer layers
      [ "$preset" = hunyuanvideo-720p ] && iters=(--warmup 3 --iterations 10 --repeats 2)
      "$APP" deck new --preset "$preset" --transports nccl,ipc,vmm --schedules baseline,v-first,v-first-split \
        "${iters[@]}" -o "$LOG/$preset-all.h5" >>"$MULTI_LOG" 2>&1
      multi_run "$preset-np$np" "$np" "$LOG/$preset-all.h5"
    done
  done
fi


# --- the soak: one run per rank count and transport, every rank on the first visible GPU
# (two ranks share it: time-sliced, so their layer times are functional evidence only).
# Each run: 10 repeats of (20 warmup + 1000 timed) layers, /proc sampled every 0.1 s and
# nvidia-smi every 0.2 s (each answer with its own time); the verdict (growth after the
# first window, the layer's p90/p10 and p50 across 10 windows, parity: docs/soak.md) is the
# step's exit status. Measured 2026-12-02: 18-20 s a run at one rank, 86 s at two sharing
# the GPU (docs/measured/2026-12-02-h200-kern22-soak); a probe before each run cuts its
# layers where they would take over SOAK_BUDGET_S (150 s; 0: no probe). SOAK_POST_ARGS
# passes tolerances on.
SOAK_DIR=$LOG/soak
if [ $app_built -eq 1 ] && want soak; then
  rm -rf "$SOAK_DIR"
  for np in 1 2; do
    for t in ipc vmm; do
      run_step "soak np$np $t (${SOAK_LAYERS:-10000} layers)" "$LOG/soak.log" "${SOAK_LIMIT:-300}" "${ONE_GPU[@]}" \
        env SOAK_MODE=gpu SOAK_NP=$np SOAK_TRANSPORTS=$t SOAK_APP="$APP" SOAK_DIR="$SOAK_DIR" PY="$PY" \
        SOAK_LAYERS="${SOAK_LAYERS:-10000}" scripts/soak.sh
    done
  done
  [ -n "${OUT:-}" ] && [ -f "$SOAK_DIR/soak-windows.csv" ] && cp "$SOAK_DIR/soak-windows.csv" "$OUT/soak-windows.csv"
fi

if [ $app_built -eq 1 ]; then
  # One GPU per rank: each transport's scatter against NCCL's under the same schedule
  # ("scatter x") and against the link bound, the bytes a rank sends over bench_kernels'
  # measured peer rate with both directions busy ("link bound").
  LINK_GBS=$(grep -m1 "peer 2D copy, both directions" "$LOG/bench.log" 2>/dev/null | awk -F'|' '{print $5}' | awk '{print $1}')
  "$PY" - "$LOG/reports" >"$LOG/app-table.txt" 2>&1 <<'PYEOF'
import glob, sys
import h5py, numpy as np
print(f"{'report':22} {'case':22} {'run':20} {'used':5} {'attn':10} {'parity':6} {'max_abs':>9} "
      f"{'proj':>7} {'norm':>7} {'scat':>7} {'attn':>7} {'gath':>7} {'oproj':>7} {'layer':>8} {'V/QK ovl':>8} "
      f"{'V copy':>7} {'hidden':>6}")
def verdict(a):  # approximate runs (hier-vmajor) are judged by approx_pass, never as exact parity
    if str(a.get("parity_kind", "exact")) == "approximate":
        return "~PASS" if a.get("approx_pass", 0) else "~FAIL"
    return "PASS" if a["parity_pass"] else "FAIL"
for path in sorted(glob.glob(sys.argv[1] + "/*.h5")):
    with h5py.File(path, "r") as f:
        for case in f.attrs["cases"]:
            g = f["cases"][case]
            for run in g.attrs["runs"]:
                a = g[run].attrs
                med = a["median_ms"]
                ov = np.median(g[run]["v_overlap_ms"][...]) if "v_overlap_ms" in g[run] else float("nan")
                vc = np.median(g[run]["v_copy_ms"][...]) if "v_copy_ms" in g[run] else float("nan")
                print(f"{path.split('/')[-1][:-3]:22} {case[:22]:22} {run[:20]:20} {a['transport_used']:5} "
                      f"{str(a.get('attention', ''))[:10]:10} {verdict(a):6} "
                      f"{a['parity_max_abs']:9.2e} " + " ".join(f"{m:7.3f}" for m in med[:6]) +
                      f" {med[6]:8.3f} {ov:8.3f} {vc:7.3f} {100 * ov / vc if vc > 0 else float('nan'):5.0f}%")

PYEOF
  for r in "$LOG"/reports/multi-*.h5; do
    [ -f "$r" ] || continue
    echo
    PYTHONPATH=$ROOT/postprocess "$PY" -m ulysses_post summarize "$r" ${LINK_GBS:+--link-gbs "$LINK_GBS"}
  done >>"$LOG/app-table.txt" 2>&1
fi

# --- the GPU's clocks and power per step (ulysses-post clocks), then the summary, last
kill "$SMI_PID" 2>/dev/null
PYTHONPATH=$ROOT/postprocess "$PY" -m ulysses_post clocks "$LOG/clocks.csv" "$LOG"/*.log >"$LOG/clocks-table.txt" 2>&1
{
  echo
  echo "GPU check summary (logs in $LOG)"
  printf '%s\n' "----------------------------------------------+--------------------"
  printf '%s\n' "${SUMMARY[@]}"
  if [ -s "$LOG/app-table.txt" ]; then
    echo
    echo "app runs (median ms per stage; shared-GPU runs are functional evidence only)"
    cat "$LOG/app-table.txt"
  fi
  if [ -s "$LOG/graphs-table.txt" ]; then
    echo
    echo "graphs against op by op, same run (layer median ms; speedup = op-by-op / graphs; enqueue: rank 0's host ms)"
    cat "$LOG/graphs-table.txt"
  fi
  if [ -s "$LOG/torch-sdpa.log" ]; then
    echo
    echo "attention, ours (bench_kernels) against cuDNN SDPA through PyTorch, same GPU, same call"
    grep -E "^torch sdpa|^ours" "$LOG/torch-sdpa.log"
  fi
  if [ -s "$LOG/clocks-table.txt" ]; then
    echo
    echo "clocks and power per step (busy samples of clocks.csv; a layer's attention runs at its step's SM clock)"
    cat "$LOG/clocks-table.txt"
  fi
  if [ -s "$SOAK_DIR/soak-table.txt" ]; then
    echo
    echo "soak (per window: samples; the floors of GPU memory.used, the ranks' own GPU MiB, host RSS, fds and"
    echo "threads, the largest over ranks; the layer's p10/p50/p90; every run's windows in $SOAK_DIR/soak-windows.csv)"
    cat "$SOAK_DIR/soak-table.txt"
  fi
  if [ -s "$LOG/bench.log" ]; then
    echo
    sed -n '/^section /,/^device:/p' "$LOG/bench.log"
  fi
} | tee "$LOG/summary.txt"
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/gpu-logs.tgz" -C "$ROOT/build-gpu" logs
  cp "$LOG/summary.txt" "$OUT/summary.txt"
fi
grep -q "FAIL\|TIMEOUT" "$LOG/summary.txt" && exit 1
exit 0
