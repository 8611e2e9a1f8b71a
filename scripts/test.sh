#!/usr/bin/env bash
# Every test, from nothing: set up, build, run ctest (unit, MPI at 1/2/4 ranks in
# simulation mode, end to end; GPU tests are labelled `gpu` and skipped without one),
# then the Python post-processing tests and the job-script lint.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD=${BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Two tests at a time (CTEST_PARALLEL_LEVEL to change it): on CI's 2 cores the suite took
# 1228 s one at a time (Slurm's jobs skipped) and 920 s two at a time (its 120 s in), every test
# passing either way; more at once oversubscribes the MPI tests' ranks.
ctest --test-dir "$BUILD" --output-on-failure -LE gpu -j"${CTEST_PARALLEL_LEVEL:-2}" "$@"
