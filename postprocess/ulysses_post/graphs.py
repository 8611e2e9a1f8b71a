"""`graphs REPORT`: layers replayed as graphs against the same layers issued op by op.

Every run that has an op-by-op twin in the same report (the ablation `no-graphs`: run
`X` and run `X+no-graphs`) gives one row: whether X's layers were replayed (and how many
fell back), the layer median of both (critical path over ranks), op-by-op / graphs (above
1: the graphs are faster), and rank 0's host time to enqueue a layer in both. Same run,
same GPU, same data: the ratio is the graphs' own effect.
"""

from __future__ import annotations

import sys
from typing import TextIO

import numpy as np

from . import formats
from .report import Report, Run

FIELDS = ("case", "run", "graphs", "replays", "divergences", "layer_ms_graphs", "layer_ms_op_by_op",
          "layer_speedup", "enqueue_ms_graphs", "enqueue_ms_op_by_op", "parity")


def _enqueue(run: Run) -> float:
    return float(np.median(run.host_enqueue_ms)) if run.host_enqueue_ms is not None else float("nan")


def rows(report: Report, cases: list[str] | None) -> list[dict]:
    out = []
    for case in report.select(cases):
        for run in case.runs:
            if run.ablation:
                continue
            twin = case.run(run.name + "+no-graphs")
            if twin is None:
                continue
            g, o = run.layer_median, twin.layer_median
            out.append({"case": case.name, "run": run.name, "graphs": run.graphs or "-", "replays": run.graph_replays,
                        "divergences": run.graph_divergences, "layer_ms_graphs": g, "layer_ms_op_by_op": o,
                        "layer_speedup": o / g if g > 0 else float("nan"), "enqueue_ms_graphs": _enqueue(run),
                        "enqueue_ms_op_by_op": _enqueue(twin),
                        "parity": "PASS" if run.parity_pass and twin.parity_pass else "FAIL"})
    return out


def graphs(report: Report, cases: list[str] | None, fmt: str = "table", out: TextIO = sys.stdout) -> None:
    rs = rows(report, cases)
    if formats.write_records(fmt, FIELDS, rs, out):
        return
    if not rs:
        out.write("no run has an op-by-op twin (run the ablation no-graphs beside it)\n")
        return
    out.write(f"{'case':24} {'run':22} {'graphs':8} {'replays':>7} {'div':>4} {'layer ms':>9} {'op-by-op':>9} "
              f"{'speedup':>8} {'enq ms':>8} {'op-by-op':>9} parity\n")
    for r in rs:
        out.write(f"{r['case'][:24]:24} {r['run'][:22]:22} {r['graphs'][:8]:8} {r['replays']:7d} {r['divergences']:4d} "
                  f"{r['layer_ms_graphs']:9.4f} {r['layer_ms_op_by_op']:9.4f} {r['layer_speedup']:8.2f} "
                  f"{r['enqueue_ms_graphs']:8.4f} {r['enqueue_ms_op_by_op']:9.4f} {r['parity']}\n")
