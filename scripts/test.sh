#!/usr/bin/env bash
# Every test, from nothing: set up, build, run ctest (unit, MPI at 1/2/4 ranks in
# simulation mode, end to end; GPU tests are labelled `gpu` and skipped without one),
# then the Python post-processing tests and the job-script lint.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD=${BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$BUILD" --output-on-failure -LE gpu -j1 "$@"
