"""The GPU reports kept in docs/measured/ (made on two H200s, one GPU per rank): they load
with every consistency check of the loader, and `summarize` still gives the figures that
docs/measurements.md quotes from them. Stored data, so this pins the analysis and the
documentation to each other; it times nothing.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from ulysses_post import load_report
from ulysses_post.summarize import summarize

MEASURED = Path(__file__).resolve().parents[2] / "docs" / "measured" / "2026-11-29-h200x2"
REPORTS = sorted(MEASURED.glob("multi-*.h5"))  # the reports (bench_kernels.h5 is a benchmark table)


def link_gbs() -> float:
    """bench_kernels' peer rate with both directions busy, as that run printed it."""
    text = (MEASURED / "bench_kernels.txt").read_text()
    m = re.search(r"^peer 2D copy, both directions at once\s*\|[^|]*\|[^|]*\|\s*([0-9.]+) GB/s", text, re.M)
    assert m, "the peer-link row is missing from bench_kernels.txt"
    return float(m.group(1))


def test_the_measured_reports_are_there() -> None:
    assert [p.name for p in REPORTS] == ["multi-flux-dev-1024-np2.h5", "multi-flux-dev-2048-np2.h5",
                                         "multi-hunyuanvideo-720p-np2.h5"]


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_gpu_reports_load_and_every_run_passed_parity(path: Path) -> None:
    report = load_report(str(path))
    assert report.mode == "gpu" and report.world_size == 2 and not report.simulated
    (case,) = report.cases
    assert [r.name for r in case.runs] == [f"{t}.{s}" for t in ("nccl", "ipc", "vmm")
                                           for s in ("baseline", "v-first", "v-first-split")]
    for run in case.runs:
        assert run.parity_pass and not run.fell_back, run.name


# docs/measurements.md, "Scatter, Ulysses2": (report, ipc baseline's scatter x and % of
# the link bound, vmm baseline's).
QUOTED = [("multi-flux-dev-1024-np2.h5", "1.70x", "38%", "1.80x", "40%"),
          ("multi-flux-dev-2048-np2.h5", "2.63x", "73%", "2.77x", "77%"),
          ("multi-hunyuanvideo-720p-np2.h5", "2.47x", "77%", "2.97x", "93%")]


@pytest.mark.parametrize("name,ipc_x,ipc_bound,vmm_x,vmm_bound", QUOTED, ids=[q[0] for q in QUOTED])
def test_summarize_gives_the_figures_the_docs_quote(name: str, ipc_x: str, ipc_bound: str, vmm_x: str,
                                                    vmm_bound: str) -> None:
    out = io.StringIO()
    summarize(load_report(str(MEASURED / name)), None, "table", out, link_gbs=link_gbs())
    rows = {tuple(line.split()[:4]): line.split() for line in out.getvalue().splitlines()}
    ipc, vmm = rows[("ipc", "->", "ipc", "baseline")], rows[("vmm", "->", "vmm", "baseline")]
    # Columns after the schedule: projection, 7 stages, p10, p90, speedup, scatter x, link bound.
    assert (ipc[15], ipc[16]) == (ipc_x, ipc_bound)
    assert (vmm[15], vmm[16]) == (vmm_x, vmm_bound)
    docs = (MEASURED.parents[1] / "measurements.md").read_text()
    assert f"{ipc_x}, {ipc_bound}" in docs.replace("**", "") and f"{vmm_x}, {vmm_bound}" in docs
