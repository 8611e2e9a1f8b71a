"""The one-H100 data of the fifteenth session kept in docs/measured/2026-12-06-h100-efc29b6/ (its
README): bench_kernels' graph-node sequences (lib/report/node_sequences.hpp) in four benches of two
calls. What they found: a hop costs the same behind a copy as behind an empty kernel; a timed record
costs time behind a wait; the staged layer's one-rank IPC scatter costs more than twice as much per
sequence in a graph of twenty as in a graph of one. Stored data: this times nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import bench_latency_rows

MEASURED = Path(__file__).resolve().parents[2] / "docs" / "measured" / "2026-12-06-h100-efc29b6"
BENCHES = ["host-speed-graphs-floor-u1-efc29b6.h5", "host-speed-graphs-floor-u1-lean-efc29b6.h5",
           "bench-latency-f5f65a2-1.h5", "bench-latency-f5f65a2-2.h5"]
HOP = "a hop through ordering events after each"
STAGED = "a staged layer's one-rank IPC scatter after each"


@pytest.mark.parametrize("bench", BENCHES)
def test_a_hop_costs_the_same_behind_a_copy_as_behind_an_empty_kernel(bench):
    """A round trip through ordering events, beyond what it follows: under a microsecond as graph
    edges and op by op, whether it follows an empty kernel or a copy of 1 MB, within 0.15 us."""
    r = bench_latency_rows(MEASURED / bench)
    for way in ("graph", "streams"):
        behind_kernel = r[f"{way}: empty kernels, {HOP}"] - r[f"{way}: empty kernels"]
        behind_copy = r[f"{way}: 1 MB copies, {HOP}"] - r[f"{way}: 1 MB copies"]
        assert 0.3 < behind_kernel < 1.0 and 0.3 < behind_copy < 1.0, (way, behind_kernel, behind_copy)
        assert abs(behind_kernel - behind_copy) < 0.15, (way, behind_kernel, behind_copy)
    # A timed record after either costs 2-2.8 us: the copy is work, as the kernel is.
    for work in ("empty kernels", "1 MB copies"):
        record = r[f"graph: {work}, an event recorded after each"] - r[f"graph: {work}"]
        assert 2.0 < record < 2.8, (work, record)


@pytest.mark.parametrize("bench", BENCHES[2:])
def test_records_behind_waits_cost_and_a_large_graph_costs_its_events_more(bench):
    """A timed record behind a write and wait, or behind an ordering hop, costs over 1.2 us (the
    simulator charges nothing there); the staged scatter costs over twice as much beyond its kernel
    in a graph of twenty as in a graph of one, op by op the same within 0.6 us."""
    r = bench_latency_rows(MEASURED / bench)
    e = "empty kernels"
    behind_word = r[f"graph: {e}, a stream write and wait, then an event recorded after each"] - \
        r[f"graph: {e}, a stream write and wait after each"]
    behind_hop = r[f"graph: {e}, a hop through ordering events, then an event recorded after each"] - \
        r[f"graph: {e}, {HOP}"]
    assert 1.2 < behind_word < 2.5 and 1.2 < behind_hop < 2.5, (behind_word, behind_hop)
    one = "one empty kernel a graph"
    in_twenty = r[f"graph: {e}, {STAGED}"] - r[f"graph: {e}"]
    in_one = r[f"graph: {one}, a staged layer's one-rank IPC scatter after it"] - r[f"graph: {one}"]
    assert 10 < in_one < 14 and in_twenty > 2 * in_one, (in_one, in_twenty)
    op_twenty = r[f"streams: {e}, {STAGED}"] - r[f"streams: {e}"]
    op_one = r[f"streams: {one}, a staged layer's one-rank IPC scatter after it"] - r[f"streams: {one}"]
    assert abs(op_twenty - op_one) < 0.6, (op_twenty, op_one)


def test_the_readme_table_is_these_files():
    """Every figure of the README's staged-scatter and hop rows is one of these files'."""
    readme = (MEASURED / "README.md").read_text()
    for bench in BENCHES:
        r = bench_latency_rows(MEASURED / bench)
        for what in (f"empty kernels, {STAGED}", f"empty kernels, {HOP}", f"1 MB copies, {HOP}"):
            for way in ("graph", "streams"):
                assert f"{r[f'{way}: {what}']:.2f}" in readme, (bench, way, what)


def test_a_second_sequence_in_the_graph_doubles_what_each_costs():
    """Call 3 (3c00ff4, another H100): the staged scatter costs under 13 us a sequence in a graph
    of one, over 1.8 times that from two sequences a graph on, and within a third more again at
    twenty; op by op the same within 0.3 us at every size. One timed record behind a kernel costs
    under 1.5 us in a graph of one kernel and over 2 in a graph of twenty."""
    r = bench_latency_rows(MEASURED / "bench-latency-3c00ff4.h5")
    g = {n: r[f"graph: {n}"] for n in ("one empty kernel a graph", "five empty kernels a graph", "empty kernels")}
    one = r["graph: one empty kernel a graph, a staged layer's one-rank IPC scatter after it"] - \
        g["one empty kernel a graph"]
    two = r["graph: two empty kernels a graph, a staged layer's one-rank IPC scatter after each"] - 1.1
    five = r["graph: five empty kernels a graph, a staged layer's one-rank IPC scatter after each"] - \
        g["five empty kernels a graph"]
    twenty = r[f"graph: empty kernels, {STAGED}"] - g["empty kernels"]
    assert 10 < one < 13 and two > 1.8 * one and five > two and twenty < 1.34 * two, (one, two, five, twenty)
    streams = [r["streams: one empty kernel a graph, a staged layer's one-rank IPC scatter after it"],
               r["streams: five empty kernels a graph, a staged layer's one-rank IPC scatter after each"],
               r[f"streams: empty kernels, {STAGED}"]]
    assert max(streams) - min(streams) < 0.3, streams
    single = r["graph: one empty kernel a graph, an event recorded after it"] - g["one empty kernel a graph"]
    in_twenty = r["graph: empty kernels, an event recorded after each"] - g["empty kernels"]
    assert single < 1.5 < 2.0 < in_twenty, (single, in_twenty)
