#!/usr/bin/env bash
# The quick start's modelled table against one H200 (issue #19, docs/model.md "The default
# deck against one H200"): the shipped default deck (inputs/default.h5, what
# scripts/quickstart.sh runs) replayed by the model at 1 rank of the machine (default
# h200-nvlink), beside what one H200 measured for the same layers at 1 rank: the
# `default-np1` rows of the GPU check's app tables (docs/measured/2026-12-01-h200/app-table.txt,
# code a1e8f92; docs/measured/2026-12-01-h200-merged/app-table-ce2b450.txt, code ce2b450) and
# the report docs/measured/2026-12-02-h200-normqk/default-np1-89d5171.h5 (code 89d5171).
# Prints one row per run (each measurement, the modelled layer, the error against their
# mean) and a summary line; exits 1 when a layer is off by more than the tolerance
# (--tolerance PCT, default 15), 0 with --report (print only).
#   ./scripts/model_default_check.sh [--machine NAME|FILE] [--tolerance PCT] [--report]
set -euo pipefail
cd "$(dirname "$0")/.."
APP=${ULYSSES_IPC:-${BUILD_DIR:-build}/app/ulysses-ipc}
OUT=${OUT:-${BUILD_DIR:-build}/model-default-check}
MACHINE=h200-nvlink TOL=15 REPORT=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --machine) MACHINE=$2; shift 2 ;;
    --tolerance) TOL=$2; shift 2 ;;
    --report) REPORT=1; shift ;;
    *) echo "model_default_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH="$PWD/postprocess${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's ulysses_post
mkdir -p "$OUT"
rc=0
# --graphs off: the stored layers were measured op by op (before graphs, 97376f9), and
# --mode model models a layer as a graph replay wherever the GPU run would replay it.
mpirun -np 1 --oversubscribe "$APP" inputs/default.h5 --mode model --graphs off --machine "$MACHINE" \
  -o "$OUT/default-np1.h5" --quiet >"$OUT/default-np1.log" 2>&1 || rc=$?
[[ $rc -eq 6 ]] || { echo "model_default_check: --mode model exited $rc (log: $OUT/default-np1.log)" >&2; exit 1; }
python3 - "$OUT/default-np1.h5" "$MACHINE" "$TOL" "$REPORT" <<'PY'
import sys
import numpy as np
from ulysses_post.report import load_report

report, machine, tol, report_only = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
TABLES = [("a1e8f92", "docs/measured/2026-12-01-h200/app-table.txt"),
          ("ce2b450", "docs/measured/2026-12-01-h200-merged/app-table-ce2b450.txt")]
# The report of 89d5171 (graphs on, but 2 of each run's 3 timed layers issued op by op: the
# first is watched, the next captured; its medians are op-by-op layers, as modelled here).
REPORTS = [("89d5171", "docs/measured/2026-12-02-h200-normqk/default-np1-89d5171.h5")]
CODES = [c for c, _ in TABLES] + [c for c, _ in REPORTS]
measured = {}  # (case, run) -> {code: layer ms}
for code, path in TABLES:
    for line in open(path):
        cells = line.split()
        if len(cells) >= 14 and cells[0] == "default-np1":
            measured.setdefault((cells[1], cells[2]), {})[code] = float(cells[13])
for code, path in REPORTS:
    for case in load_report(path).cases:
        for run in case.runs:
            measured.setdefault((case.name, run.name), {})[code] = float(np.median(np.asarray(run.stage_ms)[..., -1]))
rows, worst = [], 0.0
for case in load_report(report).cases:
    for run in case.runs:
        key = (case.name, run.name)
        if key not in measured:
            continue
        modelled = float(np.median(np.asarray(run.stage_ms)[..., -1]))
        m = measured[key]
        mean = sum(m.values()) / len(m)
        err = modelled / mean - 1
        worst = max(worst, abs(err))
        rows.append((case.name, run.name, [m.get(c) for c in CODES], modelled, err))
if not rows:
    sys.exit("model_default_check: no run of the default deck matches a default-np1 row of the stored tables")
print("| case | run | " + " | ".join(f"measured {c} (ms)" for c in CODES) + f" | modelled on {machine} (ms) | error vs their mean |")
print("|---|---|" + "---|" * len(CODES) + "---|---|")
fmt = lambda v: "-" if v is None else f"{v:.3f}"
for case, run, ms, mod, err in rows:
    print(f"| {case} | {run} | " + " | ".join(fmt(v) for v in ms) + f" | {mod:.3f} | {100 * err:+.1f}% |")
within = sum(abs(r[4]) <= tol / 100 for r in rows)
print(f"\nsummary: {within} of {len(rows)} default-deck layers (1 rank) within {tol:g}% of one H200's "
      f"(worst {100 * worst:.1f}%)")
sys.exit(0 if report_only or within == len(rows) else 1)
PY
