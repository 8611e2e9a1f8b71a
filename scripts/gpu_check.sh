#!/usr/bin/env bash
# The one GPU check: on the GPU machine, configure and build the CUDA targets in
# build-gpu, run every GPU test, the kernel benchmark and (when the app has --mode gpu)
# a representative deck, then print a summary table last. Full logs go to $OUT when set
# (the device tool's output folder), else to build-gpu/logs.
#
#   scripts/gpu_check.sh            # from the repository root or anywhere
#
# Kokkos: where the machine has none, the Debian packages carried in .kokkos/*.deb
# (apt-get download libtrilinos-kokkos-dev libtrilinos-kokkos-13.2) are unpacked into
# .kokkos/root and used through Kokkos_ROOT. cuDNN SDPA needs the cudnn-frontend headers
# in .cache/cudnn-frontend/include (see kernels/CMakeLists.txt); if that build fails,
# the check rebuilds without it and says so.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
LOG=${OUT:-$ROOT/build-gpu/logs}
mkdir -p "$LOG"
JOBS=${JOBS:-16}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# NVLink multicast can put a shared host's GPUs out of service: never on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

SUMMARY=()
note() { SUMMARY+=("$(printf '%-44s | %s' "$1" "$2")"); }
# run_step NAME LOGFILE TIMEOUT CMD...: appends the command's output to LOGFILE.
run_step() {
  local name=$1 log=$2 limit=$3
  shift 3
  echo "=== $name: $*" >>"$log"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local verdict=PASS
  [ $rc -ne 0 ] && verdict="FAIL (rc $rc)"
  [ $rc -eq 124 ] && verdict="TIMEOUT (${limit}s)"
  note "$name" "$verdict, $((SECONDS - t0))s"
  echo "=== $name: $verdict" >>"$log"
  return $rc
}

{
  echo "host: $(hostname)  date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  nvcc --version | tail -2
  cmake --version | head -1
} >"$LOG/env.log" 2>&1

# --- Kokkos
KOKKOS_ARGS=()
if [ ! -f /usr/include/trilinos/Kokkos_Core.hpp ] && ls .kokkos/*.deb >/dev/null 2>&1; then
  mkdir -p .kokkos/root
  for f in .kokkos/*.deb; do dpkg -x "$f" .kokkos/root; done
  KOKKOS_ARGS=(-DKokkos_ROOT="$ROOT/.kokkos/root/usr" -DULYSSES_KOKKOS_INCLUDE="$ROOT/.kokkos/root/usr/include/trilinos")
  note "kokkos" "carried Debian packages (.kokkos/root)"
fi

# --- configure and build
BUILD_LOG=$LOG/build.log
: >"$BUILD_LOG"
CONF=(cmake -S . -B build-gpu -DULYSSES_CUDA=ON -DULYSSES_TESTS=ON -DCMAKE_BUILD_TYPE=Release "${KOKKOS_ARGS[@]}")
TARGETS=(test_cuda_kernels test_cuda_device bench_kernels)
built=0
if run_step "configure" "$BUILD_LOG" 300 "${CONF[@]}" -DULYSSES_CUDNN_SDPA=ON; then
  if run_step "build (cuDNN SDPA on)" "$BUILD_LOG" 420 cmake --build build-gpu --target "${TARGETS[@]}" -j"$JOBS"; then
    built=1
  elif run_step "configure without cuDNN SDPA" "$BUILD_LOG" 300 "${CONF[@]}" -DULYSSES_CUDNN_SDPA=OFF &&
    run_step "build (cuDNN SDPA off)" "$BUILD_LOG" 900 cmake --build build-gpu --target "${TARGETS[@]}" -j"$JOBS"; then
    built=1
  fi
fi
grep -E "cuDNN|NCCL|Kokkos headers" "$BUILD_LOG" | sort -u >>"$LOG/env.log"

# --- GPU tests and benchmark
TEST_LOG=$LOG/tests.log
: >"$TEST_LOG"
if [ $built -eq 1 ]; then
  T=build-gpu/tests
  run_step "test_cuda_kernels" "$TEST_LOG" 600 "$T/test_cuda_kernels"
  for np in 1 2 4; do
    run_step "test_cuda_device np$np" "$TEST_LOG" 300 mpirun -np "$np" --oversubscribe "$T/test_cuda_device"
  done
  run_step "bench_kernels" "$LOG/bench.log" 600 "$T/bench_kernels"
fi

# --- the app, when it can run on GPUs
APP_LOG=$LOG/app.log
: >"$APP_LOG"
if run_step "build ulysses-ipc" "$APP_LOG" "${APP_BUILD_LIMIT:-240}" cmake --build build-gpu --target ulysses-ipc -j"$JOBS"; then
  APP=build-gpu/app/ulysses-ipc
  if "$APP" --help 2>&1 | grep -q -- "--mode"; then
    run_step "app default.h5 np1 --mode gpu" "$APP_LOG" 600 mpirun -np 1 "$APP" inputs/default.h5 --mode gpu \
      -o "$LOG/report-np1.h5"
    run_step "app default.h5 np2 --mode gpu (shared GPU)" "$APP_LOG" 600 mpirun -np 2 --oversubscribe "$APP" \
      inputs/default.h5 --mode gpu --allow-shared-gpu -o "$LOG/report-np2.h5"
  else
    note "app" "no --mode gpu yet: not run"
  fi
fi

# --- summary, last
{
  echo
  echo "GPU check summary (logs in $LOG)"
  printf '%s\n' "----------------------------------------------+--------------------"
  printf '%s\n' "${SUMMARY[@]}"
  if [ -s "$LOG/bench.log" ]; then
    echo
    grep -E "^(kernel|---|attention|norm|gemm|cudaMemcpy|device)" "$LOG/bench.log"
  fi
} | tee "$LOG/summary.txt"
grep -q "FAIL\|TIMEOUT" "$LOG/summary.txt" && exit 1
exit 0
