"""The one-H100 data of the fourteenth session kept in docs/measured/2026-12-06-h100-54ff11e/ (its
README): bench_kernels' graph-node rows of the one-rank IPC handshake behind an empty kernel and of
a write and wait on the kernel's own stream, in the two benches run beside the floor reports (what
`model validate --gpu` reads), and the floor as graphs against op by op. Stored data: this times
nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import bench_latency_rows, floor_graph_speedups

MEASURED = Path(__file__).resolve().parents[2] / "docs" / "measured" / "2026-12-06-h100-54ff11e"
EMPTY = "empty kernels"
HANDSHAKE = "empty kernels, the one-rank IPC handshake after each"
INLINE = "empty kernels, a stream write and wait after each"
ORDERING_HOP = "empty kernels, a hop through ordering events after each"
MEMOP = "floor op: a stream write and wait of a 64-bit word"
BENCHES = ["host-speed-graphs-floor-u1-54ff11e.h5", "host-speed-graphs-floor-u1-lean-54ff11e.h5"]


def h5_rows(name: str) -> dict[str, float]:
    """`way: what` -> us, from a bench_kernels -o file's latency rows."""
    return bench_latency_rows(MEASURED / name)


@pytest.mark.parametrize("bench", BENCHES)
def test_the_handshakes_hops_cost_nothing_as_graph_edges(bench):
    """As a graph the handshake behind a kernel (three ordering records across to a high-priority
    stream, a write and wait there, a record back) takes what the write and wait take on the
    kernel's own stream, within 0.3 us; both 3.5-4 us beyond the kernel, where the fitted machine
    charges the handshake's hops alone 7.9 + 3.0 us (README)."""
    r = h5_rows(bench)
    empty = r[f"graph: {EMPTY}"]
    handshake = r[f"graph: {HANDSHAKE}"] - empty
    inline = r[f"graph: {INLINE}"] - empty
    assert 0.9 < empty < 1.2, empty
    assert 3.5 < handshake < 4.0 and 3.5 < inline < 4.0, (handshake, inline)
    assert abs(handshake - inline) < 0.3, (handshake, inline)
    # The round trip through ordering events alone: under a microsecond as graph edges.
    assert 0 < r[f"graph: {ORDERING_HOP}"] - empty < 1.0, r[f"graph: {ORDERING_HOP}"]
    # Both more than the write and wait alone, back to back (2.9-3.0 us a pair as nodes).
    assert 2.8 < r[f"graph: {MEMOP}"] < 3.1 < inline + 0.1, r[f"graph: {MEMOP}"]
    # The README's table: its figures are these files'.
    readme = (MEASURED / "README.md").read_text()
    for x in (r[f"graph: {HANDSHAKE}"], r[f"graph: {INLINE}"], r[f"streams: {HANDSHAKE}"]):
        assert f"{x:.2f}" in readme, (bench, x)


@pytest.mark.parametrize("name, lo, hi", [("graphs-floor-u1-lean-54ff11e.h5", 2.2, 3.3),
                                          ("graphs-floor-u1-54ff11e.h5", 1.7, 2.1)])
def test_the_floor_with_graphs_in_the_same_run(name, lo, hi):
    """Every run's layer replayed as a graph against its no-graphs twin, parity passing."""
    speedups = floor_graph_speedups(MEASURED / name)
    assert len(speedups) == 6, speedups
    assert all(lo <= s <= hi for s in speedups), speedups
