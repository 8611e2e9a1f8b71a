#!/usr/bin/env bash
# Calibration and the leave-one-out check of the machine model (docs/model.md):
#  1. --mode model traces of every stored GPU report's cases (scripts/model_traces.sh),
#     paired with their reports, benches and protocols by scripts/model_pairs.sh;
#  2. h200-nvlink.json = the prior (h200-nvlink-prior.json) fitted to every stored report,
#     with the current code's norm+RoPE profile (docs/measured/2026-12-02-h200-head/bench_kernels-6e0f353.h5, code 6e0f353)
#     and the GEMM rates by shape (docs/measured/2026-12-02-h200-gemm/bench_kernels-gemm-59e55b4.h5) as its own;
#  3. leave-one-out: for each report, the prior fitted to the others predicts it.
# Prints the leave-one-out table (markdown) on stdout, ending with the per-report-and-stage
# table and the summary line; writes the fitted machine only with --write (then re-derives
# h100-sxm.json and the multi-node files from it). The fits replay their cases on every core
# (`--jobs`, the same fit at any number): at 24 reports (456 runs, 21 free parameters) the 11
# folds and the fit of --write took 20.8 minutes on 2 cores (2026-12-05).
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
T=$(./scripts/model_traces.sh 2>/dev/null | tail -1)
# shellcheck source=scripts/model_pairs.sh disable=SC1091  # linted on its own
. scripts/model_pairs.sh
if [[ ${1:-} == --write ]]; then
  "$APP" model calibrate --machine inputs/machines/h200-nvlink-prior.json "${PAIRS[@]}" "${RATES[@]}" \
    -o "$T/h200-nvlink.json" >&2
  python3 - "$T/h200-nvlink.json" inputs/machines/h200-nvlink.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "h200-nvlink"
m["description"] = ("One node of NVIDIA H200 SXM GPUs joined by NVLink 4 (NV18 between the measured pair; an 8-GPU "
                    "HGX node reaches every peer through NVSwitch at the same per-GPU rate). Rates from bench_kernels "
                    "(norm+RoPE: the current code's profile, docs/measured/2026-12-02-h200-head/bench_kernels-6e0f353.h5, code 6e0f353; "
                    "GEMM rates by shape: docs/measured/2026-12-02-h200-gemm/bench_kernels-gemm-59e55b4.h5) "
                    "and the GPU notes; NCCL's ceilings from public measurements; fixed costs and shares fitted, inside "
                    "their physical ranges, to every stored GPU report (two H200s of 2026-11-29, one H200 of "
                    "2026-12-01, 2026-12-02 and 2026-12-05) by scripts/model_loo.sh --write (docs/model.md).")
json.dump(m, open(sys.argv[2], "w"), indent=2)
open(sys.argv[2], "a").write("\n")
PY
  python3 inputs/machines/derive.py
fi
"$APP" model loo --machine inputs/machines/h200-nvlink-prior.json "${PAIRS[@]}" "${RATES[@]}" --markdown
