"""The one-H200 data kept in docs/measured/2026-12-01-h200/ (docs/measurements.md,
"2026-12-01"): the ablation report and the Gantt report load with every consistency
check of the loader, every run passed parity, the Gantt report's traced layers carry
measured GPU op times (events around each op) and modelled ones, and `summarize` still
gives the figures measurements.md quotes. Stored data: this times nothing.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from ulysses_post import load_report
from ulysses_post.summarize import summarize

MEASURED = Path(__file__).resolve().parents[2] / "docs" / "measured" / "2026-12-01-h200"
DOCS = MEASURED.parents[1] / "measurements.md"
ABLATIONS = "own-slice-copy no-pitched-copies no-grouped-handshake normal-priority no-target-cache".split()


def rows_of(name: str) -> dict[tuple[str, str], list[str]]:
    """summarize's measured rows, keyed by (transport, schedule[+ablation])."""
    out = io.StringIO()
    summarize(load_report(str(MEASURED / name)), None, "table", out)
    rows = {}
    for line in out.getvalue().split("MODELED")[0].splitlines():
        f = line.split()
        if len(f) > 4 and f[1] == "->":
            rows[(f[0], f[3])] = f
    return rows


def test_the_ablation_report_has_every_run_and_each_passed_parity() -> None:
    report = load_report(str(MEASURED / "flux-2048-u1-ablations.h5"))
    assert report.mode == "gpu" and report.world_size == 1 and not report.simulated
    (case,) = report.cases
    names = {r.name for r in case.runs}
    for t in ("nccl", "nccl-ce", "ipc", "vmm"):
        for s in ("baseline", "v-first", "v-project-first"):
            assert f"{t}.{s}" in names
            for a in ABLATIONS[:3]:
                assert f"{t}.{s}+{a}" in names
            for a in ABLATIONS[3:]:
                assert (f"{t}.{s}+{a}" in names) == (t in ("ipc", "vmm")), (t, s, a)
    assert len(case.runs) == 60
    for run in case.runs:
        assert run.parity_pass and run.parity_max_abs == 0.0, run.name


def test_the_gantt_report_has_measured_op_times_on_the_gpu() -> None:
    report = load_report(str(MEASURED / "gantt-flux-2048-u1.h5"))
    assert report.mode == "gpu" and report.world_size == 1
    (case,) = report.cases
    assert len(case.runs) == 9
    for run in case.runs:
        t = run.traced
        assert run.parity_pass and t is not None and t.measured and t.modeled, run.name
        on_gpu = t.ops["op_stream"] >= 0  # host ops (stream -1, e.g. the closing host sync) have no events
        assert on_gpu.sum() >= 20 and not on_gpu.all(), run.name
        start, end = t.ops["op_measured_start_ms"][on_gpu], t.ops["op_measured_end_ms"][on_gpu]
        assert np.all(np.isfinite(start)) and np.all(end >= start), run.name
        # The traced layer takes about what a timed layer takes (not CPU time, not zero).
        span = end.max() - start.min()
        assert 0.8 * run.median_ms[6] < span < 1.2 * run.median_ms[6], (run.name, span)  # [6]: the layer
        if run.transport in ("ipc", "vmm"):  # the scatter's own high-priority stream
            assert any(t.stream_high_priority.values()), run.name


# docs/measurements.md's 2026-12-01 tables: each begins with a header naming its report
# ("| FLUX 2048 U1 run |", "| floor U1 run |") and gives, per run, the stage medians below
# as summarize prints them (ms). Every row the docs quote is checked, not a chosen few.
TABLES = {"FLUX 2048 U1 run": "flux-2048-u1-ablations.h5", "floor U1 run": "floor-u1.h5"}
DOC_COLUMNS = ["proj", "norm_rope", "scatter", "attention", "layer"]
# summarize's columns after the schedule: projection, proj, norm_rope, scatter, attention,
# gather, out_proj, layer.
SUMMARY_COLUMN = {"proj": 5, "norm_rope": 6, "scatter": 7, "attention": 8, "layer": 11}


def quoted_rows() -> list[tuple[str, str, list[str]]]:
    """(report, run, cells) for each row of the docs' 2026-12-01 tables."""
    section = DOCS.read_text().split("## 2026-12-01")[1].split("\n## ")[0]
    rows, report = [], None
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            report = None
        elif cells[0] in TABLES:
            report = TABLES[cells[0]]
            assert cells[1:6] == ["proj", "norm+RoPE", "scatter", "attention", "layer"], line
        elif report and not set(cells[0]) <= set("-:"):
            rows.append((report, cells[0], cells[1:6]))
    return rows


def test_the_docs_quote_both_reports() -> None:
    reports = [r for r, _, _ in quoted_rows()]
    assert reports.count("flux-2048-u1-ablations.h5") >= 10 and reports.count("floor-u1.h5") >= 4


@pytest.mark.parametrize("report,run,cells", quoted_rows(), ids=[f"{q[0][:-3]}:{q[1]}" for q in quoted_rows()])
def test_summarize_gives_the_figures_the_docs_quote(report: str, run: str, cells: list[str]) -> None:
    transport, schedule = run.split(".", 1)
    row = rows_of(report)[(transport, schedule)]
    assert cells == [row[SUMMARY_COLUMN[c]] for c in DOC_COLUMNS], (report, run)
