#!/usr/bin/env bash
# Hunts load-dependent failures of the MPI tests: each 4-rank ctest test (label gpu left
# out) runs RUNS times beside HOGS busy loops (CI runs 4 ranks on 2 cores, next to another
# test). The tests run through ctest, with the environment and mpiexec flags they are
# registered with (tests/CMakeLists.txt); a failure on any rank prints its own lines,
# tagged [rank k] (tests/test_main.cpp).
#   ./scripts/stress_mpi_tests.sh [RUNS] [HOGS] [TEST...]   # defaults: 5 runs, 2 busy loops, every 4-rank test
# TEST: a ctest name (test_transport.np4). Needs a build (scripts/test.sh or cmake --build
# build). Logs: $OUT (default build/stress). Exit 1 when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
HOGS=${2:-2}
shift $(($# < 2 ? $# : 2))
BUILD=${BUILD_DIR:-build}
OUT=${OUT:-$BUILD/stress}
TESTS=("$@")
if [[ ${#TESTS[@]} -eq 0 ]]; then
  mapfile -t TESTS < <(ctest --test-dir "$BUILD" -N -LE gpu -R '\.np4$' | sed -n 's/^ *Test *#[0-9]*: *//p')
fi
[[ ${#TESTS[@]} -gt 0 ]] || { echo "stress: no 4-rank tests in $BUILD (build first)" >&2; exit 2; }
mkdir -p "$OUT"
hogs=()
# shellcheck disable=SC2317  # run by the EXIT trap
stop_hogs() { if [[ ${#hogs[@]} -gt 0 ]]; then kill "${hogs[@]}" 2>/dev/null || true; fi; }
trap stop_hogs EXIT
for ((h = 0; h < HOGS; ++h)); do
  (while :; do :; done) &
  hogs+=($!)
done
failed=0
for t in "${TESTS[@]}"; do
  bad=0
  for ((i = 1; i <= RUNS; ++i)); do
    log=$OUT/$t.$i.log
    if ! ctest --test-dir "$BUILD" -R "^${t//./\\.}\$" --output-on-failure >"$log" 2>&1 \
      || ! grep -q "100% tests passed" "$log"; then
      bad=$((bad + 1))
      grep -E '^\[rank [0-9]+\] FAILED|\[  FAILED  \]' "$log" | sort -u | head -5 || true
    fi
  done
  echo "stress: $t failed $bad of $RUNS beside $HOGS busy loops (logs: $OUT/$t.*.log)"
  [[ $bad -eq 0 ]] || failed=1
done
exit $failed
