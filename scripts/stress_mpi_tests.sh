#!/usr/bin/env bash
# Hunts load-dependent failures of the MPI test binaries: each runs RUNS times at 4 ranks
# beside HOGS busy loops (CI runs 4 ranks on 2 cores, next to another test). A failure on
# any rank prints its own lines, tagged [rank k] (tests/test_main.cpp).
#   ./scripts/stress_mpi_tests.sh [RUNS] [HOGS] [TEST...]   # defaults: 5 runs, 2 busy loops, every MPI binary
# Needs a build (scripts/test.sh or cmake --build build). Logs: $OUT (default build/stress).
# Exit 1 when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
HOGS=${2:-2}
shift $(($# < 2 ? $# : 2))
BUILD=${BUILD_DIR:-build}
OUT=${OUT:-$BUILD/stress}
TESTS=("$@")
if [[ ${#TESTS[@]} -eq 0 ]]; then
  TESTS=(test_host_device_mpi test_transport test_simulator test_graphs test_tracing test_deck_wire)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none
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
  bin=$BUILD/tests/$t
  [[ -x $bin ]] || { echo "stress: $bin not built" >&2; exit 2; }
  bad=0
  for ((i = 1; i <= RUNS; ++i)); do
    log=$OUT/$t.$i.log
    if ! timeout 900 mpiexec --oversubscribe -np 4 "$bin" >"$log" 2>&1; then
      bad=$((bad + 1))
      grep -E '^\[rank [0-9]+\] FAILED|\[  FAILED  \]' "$log" | sort -u | head -5 || true
    fi
  done
  echo "stress: $t failed $bad of $RUNS at 4 ranks beside $HOGS busy loops (logs: $OUT/$t.*.log)"
  [[ $bad -eq 0 ]] || failed=1
done
exit $failed
