#!/usr/bin/env bash
# Calibration and the leave-one-out check of the machine model (docs/model.md):
#  1. --mode model traces of every stored two-H200 report's cases (scripts/model_traces.sh);
#  2. h200-nvlink.json = the prior (h200-nvlink-prior.json) fitted to every stored report;
#  3. leave-one-out: for each report, the prior fitted to the others predicts it.
# Prints the leave-one-out table (markdown) on stdout; writes the fitted machine only with
# --write (then re-derives h100-sxm.json and h200-2node.json from it). Takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
M=docs/measured/2026-11-29-h200x2
T=$(./scripts/model_traces.sh 2>/dev/null | tail -1)
pairs=(--pair "$M/multi-flux-dev-1024-np2.h5=$T/multi-flux-dev-1024-np2.h5"
       --pair "$M/multi-flux-dev-2048-np2.h5=$T/multi-flux-dev-2048-np2.h5"
       --pair "$M/multi-hunyuanvideo-720p-np2.h5=$T/multi-hunyuanvideo-720p-np2.h5"
       --pair "$M/latency-floor/floor-np2.h5=$T/floor-np2.h5")
if [[ ${1:-} == --write ]]; then
  "$APP" model calibrate --machine inputs/machines/h200-nvlink-prior.json --ablation own-slice-copy "${pairs[@]}" \
    -o "$T/h200-nvlink.json" >&2
  python3 - "$T/h200-nvlink.json" inputs/machines/h200-nvlink.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "h200-nvlink"
m["description"] = ("One node of NVIDIA H200 SXM GPUs joined by NVLink 4 (NV18 between the measured pair; an 8-GPU "
                    "HGX node reaches every peer through NVSwitch at the same per-GPU rate). Rates from bench_kernels "
                    "and the GPU notes of 2026-11-29; fixed costs and shares fitted to the four two-H200 reports of "
                    "docs/measured/ by scripts/model_loo.sh --write (docs/model.md).")
json.dump(m, open(sys.argv[2], "w"), indent=2)
open(sys.argv[2], "a").write("\n")
PY
  python3 inputs/machines/derive.py
fi
"$APP" model loo --machine inputs/machines/h200-nvlink-prior.json --ablation own-slice-copy "${pairs[@]}" --markdown
