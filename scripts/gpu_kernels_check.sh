#!/usr/bin/env bash
# A lean GPU check for kernel work (issue #22), one call of the device tool: build the
# CUDA kernels' targets in build-gpu, then, each step bounded and logged to $OUT (else
# build-gpu/logs): the GPU kernel tests, compute-sanitizer memcheck over the norm+RoPE
# tests, the norm+RoPE and attention benchmark, cuDNN SDPA through PyTorch on the same GPU
# in the same run (with the GPU's clocks and power sampled throughout), and (STEPS app)
# the app's schedules side by side at FLUX 2048 Ulysses1. Prints a summary last.
#
#   STEPS="bench torch tests memcheck app" scripts/gpu_kernels_check.sh
#   STEPS="bench tests" BENCH_SECTIONS=norm TEST_FILTER='*NormRope*' scripts/gpu_kernels_check.sh
#                                  # norm+RoPE only (~6 min): its % of bound table, its tests
#
# scripts/gpu_check.sh stays the whole check; this one fits a short lease.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
# Logs in build-gpu/logs; with $OUT set (the device tool takes back at most 8 files) they
# travel as one archive, remade after every step so that a call cut short keeps them.
LOG=$ROOT/build-gpu/logs
mkdir -p "$LOG"
JOBS=${JOBS:-16}
STEPS=" ${STEPS:-bench torch tests memcheck app} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SUMMARY=()
step() {  # step NAME LIMIT CMD...: output to $LOG/NAME.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  SUMMARY+=("$(printf '%-28s | %s, %ss' "$name" "$([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc $rc)")" $((SECONDS - t0)))")
  printf '%s\n' "${SUMMARY[@]}" >"$LOG/summary.txt"
  [ -n "${OUT:-}" ] && tar czf "$OUT/logs.tgz" -C "$ROOT/build-gpu" logs
  return $rc
}

{
  echo "date: $(date -u +%FT%TZ)  revision: ${ULYSSES_REVISION:-$(git rev-parse HEAD 2>/dev/null)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv 2>&1
} >"$LOG/env.txt"
# The GPU's clocks, power and throttle reasons every 200 ms for the whole call.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 >"$LOG/clocks.csv" 2>&1 &
SMI=$!

KOKKOS_ARGS=()
if [ ! -f /usr/include/trilinos/Kokkos_Core.hpp ] && ls .kokkos/*.deb >/dev/null 2>&1; then
  mkdir -p .kokkos/root
  for f in .kokkos/*.deb; do dpkg -x "$f" .kokkos/root; done
  KOKKOS_ARGS=(-DKokkos_ROOT="$ROOT/.kokkos/root/usr" -DULYSSES_KOKKOS_INCLUDE="$ROOT/.kokkos/root/usr/include/trilinos"
    -DCLI11_DIR="$ROOT/.kokkos/root/usr/share/cmake/CLI11")
fi
TARGETS=(test_cuda_kernels bench_kernels)
want app && TARGETS+=(ulysses-ipc)
step configure 200 cmake -S . -B build-gpu -DULYSSES_CUDA=ON -DULYSSES_TESTS=ON -DCMAKE_BUILD_TYPE=Release \
  -DULYSSES_CUDNN_SDPA=ON "${KOKKOS_ARGS[@]}" &&
  step build 360 cmake --build build-gpu --target "${TARGETS[@]}" -j"$JOBS"
T=build-gpu/tests
# The tests first: a kernel is timed only once it is shown right.
if [ -x "$T/test_cuda_kernels" ]; then
  want tests && step test_cuda_kernels 300 "$T/test_cuda_kernels" --gtest_filter="${TEST_FILTER:-*}"
  want memcheck && command -v compute-sanitizer >/dev/null &&
    step memcheck_norm 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/test_cuda_kernels" \
      --gtest_filter='*NormRope*'
fi
if [ -x "$T/bench_kernels" ]; then
  want bench && step bench_kernels 240 "$T/bench_kernels" --sections "${BENCH_SECTIONS:-norm,attention}" -o "$LOG/bench_kernels.h5"
  # The norm+RoPE table (% of the copy bound of every kind, head dim, dtype and layout) on
  # its own, for the summary.
  sed -n '/^norm+RoPE table/,/^1-lnch:/p' "$LOG/bench_kernels.log" >"$LOG/norm_rope_table.txt"
  if want torch && [ -x /opt/torch/.venv/bin/python ]; then
    step torch_sdpa 120 env PYTHONUNBUFFERED=1 /opt/torch/.venv/bin/python scripts/torch_sdpa_bench.py \
      --bench-log "$LOG/bench_kernels.log" -o "$LOG/torch_sdpa.h5"
  fi
fi
APP=build-gpu/app/ulysses-ipc
if want app && [ -x "$APP" ]; then
  # The schedules side by side on one rank, V's copy and its overlap in the report.
  "$APP" deck new --preset flux-dev-2048 --name flux-dev-2048.u2 --ulysses 1 --transports ipc,nccl \
    --schedules baseline,v-first,v-first-split,v-project-first --warmup 3 --iterations 20 --repeats 2 \
    -o "$LOG/flux-2048-u1-schedules-deck.h5" >"$LOG/deck.log" 2>&1
  step app_schedules 200 mpirun -np 1 "$APP" "$LOG/flux-2048-u1-schedules-deck.h5" --mode gpu \
    -o "$LOG/flux-2048-u1-schedules.h5" --quiet
  PYTHONPATH=$ROOT/postprocess /opt/torch/.venv/bin/python -m ulysses_post summarize "$LOG/flux-2048-u1-schedules.h5" \
    >"$LOG/flux-2048-u1-schedules.txt" 2>&1
fi
kill "$SMI" 2>/dev/null
rm -f "$LOG/flux-2048-u1-schedules-deck.h5"
{
  echo
  echo "summary"
  printf '%s\n' "${SUMMARY[@]}"
  grep -h "PASSED\|FAILED\|ERROR SUMMARY" "$LOG/test_cuda_kernels.log" "$LOG/memcheck_norm.log" 2>/dev/null | tail -8
  [ -f "$LOG/torch_sdpa.log" ] && tail -12 "$LOG/torch_sdpa.log"
  grep -h "attention (ULYSSES" "$LOG/bench_kernels.log" 2>/dev/null
  sed -n '/^norm+RoPE table/,/^cells below/p' "$LOG/bench_kernels.log" 2>/dev/null | cut -c1-200
} | tee -a "$LOG/summary.txt"
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/logs.tgz" -C "$ROOT/build-gpu" logs
  cp "$LOG/summary.txt" "$OUT/"
  for f in bench_kernels.log bench_kernels.h5 flux-2048-u1-schedules.h5 flux-2048-u1-schedules.txt; do
    [ -f "$LOG/$f" ] && cp "$LOG/$f" "$OUT/"
  done
fi
grep -q "FAIL" "$LOG/summary.txt" && exit 1
exit 0
