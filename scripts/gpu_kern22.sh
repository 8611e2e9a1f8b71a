#!/usr/bin/env bash
# Issue #22's norm+RoPE work on one GPU, in one call of the device tool (about 6 minutes
# on one H200 with 16 cores: build ~140 s, bench ~40 s, tests ~170 s; every step bounded):
# build test_cuda_kernels and bench_kernels in build-gpu (as scripts/gpu_kernels_check.sh
# does), then bench_kernels' norm section first (the % of the copy bound table for every
# kind, head_dim, dtype and layout, as the layer runs it (two launches) and with Q and K
# in one launch, beside the streaming bounds of one and two launches), then the norm+RoPE
# GPU tests (the LayerNorm variance fix, Q and K in one launch, every walk against the
# float64 reference); with STEPS memcheck also compute-sanitizer memcheck over the
# quicker norm+RoPE tests (~1 more minute). Outputs in $OUT (else build-gpu/logs/kern22):
# summary.txt, norm_rope_table.txt, bench_kernels.txt/.h5, test_cuda_kernels.txt,
# memcheck_norm.txt; logs.tgz with those, env.txt and clocks.csv (the GPU's clocks every
# 200 ms).
#
#   scripts/gpu_kern22.sh                                 # build, bench, tests
#   STEPS="bench tests memcheck" scripts/gpu_kern22.sh    # and memcheck
#
# Needs what gpu_kernels_check.sh needs: .kokkos/*.deb (where Kokkos is not installed)
# and .cache/cudnn-frontend (cuDNN SDPA; the norm tests do not use it, the build does).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
LOG=$ROOT/build-gpu/logs/kern22
mkdir -p "$LOG"
JOBS=${JOBS:-16}
STEPS=" ${STEPS:-bench tests} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
SUMMARY=()
step() {  # step NAME LIMIT CMD...: output to $LOG/NAME.txt
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$LOG/$name.txt" 2>&1
  local rc=$?
  local verdict="FAIL (rc $rc)"
  if [ $rc -eq 0 ]; then verdict=PASS; elif [ $rc -eq 124 ]; then verdict="TIMEOUT (${limit}s)"; fi
  SUMMARY+=("$(printf '%-22s | %s, %ss' "$name" "$verdict" $((SECONDS - t0)))")
  printf '%s\n' "${SUMMARY[@]}" >"$LOG/summary.txt"
  [ -n "${OUT:-}" ] && tar czf "$OUT/logs.tgz" -C "$ROOT/build-gpu/logs" kern22
  return $rc
}

{
  echo "date: $(date -u +%FT%TZ)  revision: $(cat REVISION 2>/dev/null || git rev-parse HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv 2>&1
} >"$LOG/env.txt"
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
# About 2-3 minutes from nothing with 16 cores (cuda_kernels.cu's instantiations dominate).
step configure 150 cmake -S . -B build-gpu -DULYSSES_CUDA=ON -DULYSSES_TESTS=ON -DCMAKE_BUILD_TYPE=Release \
  -DULYSSES_CUDNN_SDPA=ON "${KOKKOS_ARGS[@]}" &&
  step build 240 cmake --build build-gpu --target test_cuda_kernels bench_kernels -j"$JOBS"
T=build-gpu/tests
if [ -x "$T/bench_kernels" ] && want bench; then
  step bench_kernels 150 "$T/bench_kernels" --sections norm -o "$LOG/bench_kernels.h5"
  sed -n '/^norm+RoPE table/,/^1-lnch:/p' "$LOG/bench_kernels.txt" >"$LOG/norm_rope_table.txt"
fi
if [ -x "$T/test_cuda_kernels" ]; then
  want tests && step test_cuda_kernels 240 "$T/test_cuda_kernels" --gtest_filter='*NormRope*:*ConvertFromF32*'
  want memcheck && command -v compute-sanitizer >/dev/null &&
    step memcheck_norm 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$T/test_cuda_kernels" \
      --gtest_filter='*NormRopeQkOneLaunch*:*NormRopeAllKindsBothKernels*:*NormRopeVectorKernelPaths*:*NormRopeAcrossHeadsPipelinedRows*'
fi
kill "$SMI" 2>/dev/null
{
  echo
  echo "summary ($(cat REVISION 2>/dev/null || git rev-parse --short HEAD 2>/dev/null))"
  printf '%s\n' "${SUMMARY[@]}"
  grep -h "PASSED\|FAILED\|ERROR SUMMARY\|seed" "$LOG/test_cuda_kernels.txt" "$LOG/memcheck_norm.txt" 2>/dev/null |
    grep -v "^\[ seed" | tail -12
  grep -h "FAILED\|Failure\|error" "$LOG/test_cuda_kernels.txt" 2>/dev/null | head -12
  cat "$LOG/norm_rope_table.txt" 2>/dev/null
} | tee -a "$LOG/summary.txt"
if [ -n "${OUT:-}" ]; then
  # At most 8 files come back from the device tool: these 6 and logs.tgz.
  for f in summary.txt norm_rope_table.txt bench_kernels.txt bench_kernels.h5 test_cuda_kernels.txt memcheck_norm.txt; do
    [ -f "$LOG/$f" ] && cp "$LOG/$f" "$OUT/"
  done
  tar czf "$OUT/logs.tgz" -C "$ROOT/build-gpu/logs" kern22
fi
grep -q "FAIL\|TIMEOUT" "$LOG/summary.txt" && exit 1
exit 0
