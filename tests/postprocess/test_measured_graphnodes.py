"""The one-H200 data of 2026-12-05 kept in docs/measured/2026-12-05-h200-graphnodes/
(docs/measurements.md, "2026-12-05"): bench_kernels' graph-node rows give what an event
record costs a captured layer, the figure the machine model's `event_record_us` and its
range are read from (inputs/machines/h200-nvlink.json), and the floor's graphs against
op by op are the README's. Stored data: this times nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
from helpers import floor_graph_speedups

REPO = Path(__file__).resolve().parents[2]
MEASURED = REPO / "docs" / "measured" / "2026-12-05-h200-graphnodes"
HOST_SPEED = MEASURED / "host-speed-graphs-floor-u1-295c17a.h5"
FLOOR = MEASURED / "graphs-floor-u1-295c17a.h5"


def rates(path: Path) -> dict[str, float]:
    """bench_kernels' rows: what -> rate (us per kernel for the graph-node rows)."""
    with h5py.File(path, "r") as f:
        a = f["bench_kernels"].attrs
        return {str(w): float(r) for w, r in zip(a["what"], a["rate"])}


def test_an_event_record_costs_what_the_machine_says() -> None:
    r = rates(HOST_SPEED)
    alone, record = "empty kernels", "empty kernels, an event recorded after each"
    graph = r["graph: " + record] - r["graph: " + alone]
    streams = r["streams: " + record] - r["streams: " + alone]
    assert abs(graph - 2.22) < 0.005 and abs(streams - 2.00) < 0.005, (graph, streams)
    # A kernel node is cheaper in a graph than op by op; a record is the larger part of the pair.
    assert r["graph: " + alone] < r["streams: " + alone] and graph > 2 * r["graph: " + alone]
    p = json.loads((REPO / "inputs" / "machines" / "h200-nvlink.json").read_text())["parameters"]["event_record_us"]
    assert p["range"] == [round(streams, 2), round(graph, 2)], p["range"]
    assert p["range"][0] <= p["value"] <= p["range"][1] and "fit" not in p


def test_the_floor_with_graphs_is_the_readmes() -> None:
    """Layer medians, replayed against op by op (the no-graphs twin), per run: 1.42-1.55x."""
    speedups = floor_graph_speedups(FLOOR)
    assert len(speedups) == 6
    assert 1.41 < min(speedups) and max(speedups) < 1.56, speedups
