"""The one-H100 bench of the sixteenth session kept in docs/measured/2026-12-06-h100-0348cac/ (its
README): a staged scatter after the last of forty kernels in one graph costs what it costs in a graph
of one kernel, not what it costs among twenty such sequences. Stored data: this times nothing.
"""

from __future__ import annotations

from pathlib import Path

from helpers import bench_latency_rows

MEASURED = Path(__file__).resolve().parents[2] / "docs" / "measured" / "2026-12-06-h100-0348cac"
STAGED = "a staged layer's one-rank IPC scatter"


def test_a_scatter_among_forty_kernels_costs_what_it_costs_in_a_graph_of_one():
    """Per sequence, beyond the kernels of its own graph size: among forty kernels within 1.5 us of
    the graph of one (10-14 us), and under half of what each of twenty in a graph costs."""
    r = bench_latency_rows(MEASURED / "lat.h5")
    forty = (r[f"graph: forty empty kernels a graph, {STAGED} after the last"] -
             r["graph: forty empty kernels a graph"]) * 40
    one = r[f"graph: one empty kernel a graph, {STAGED} after it"] - r["graph: one empty kernel a graph"]
    twenty = r[f"graph: empty kernels, {STAGED} after each"] - r["graph: empty kernels"]
    assert 10 < one < 14 and abs(forty - one) < 1.5 and twenty > 2 * forty, (forty, one, twenty)
    two_records = (r["graph: forty empty kernels a graph, two events recorded after the last"] -
                   r["graph: forty empty kernels a graph"]) * 40
    two_in_twenty = r["graph: empty kernels, two events recorded after each"] - r["graph: empty kernels"]
    assert two_records < 3.0 < 3.5 < two_in_twenty, (two_records, two_in_twenty)


def test_the_readme_gives_these_figures():
    readme = (MEASURED / "README.md").read_text()
    r = bench_latency_rows(MEASURED / "lat.h5")
    for what in (f"forty empty kernels a graph, {STAGED} after the last", "forty empty kernels a graph"):
        assert f"{r['graph: ' + what]:.3f}" in readme, what
