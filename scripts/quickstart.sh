#!/usr/bin/env bash
# The main job, from nothing: set up, build, run the shipped default deck on 4 ranks
# (simulation mode where there is no GPU) and print a summary table of the report.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # CI and containers run as root
NP=${NP:-4}
REPORT=${REPORT:-out/default-report.h5}
mkdir -p "$(dirname "$REPORT")"
mpirun -np "$NP" --oversubscribe "${BUILD_DIR:-build}/app/ulysses-ipc" inputs/default.h5 -o "$REPORT" "$@"
if python3 -c 'import ulysses_post' >/dev/null 2>&1; then
  python3 -m ulysses_post summarize "$REPORT"
fi
