"""The one-H100 data of the thirteenth session kept in docs/measured/2026-12-06-h100-2f6777f/ (its
README): bench_kernels' new floor-op rows of the scatter at one rank (NCCL's all-to-all on a
one-rank communicator, a stream write and wait) in both calls and in the benches beside the two
floor reports (what `model validate --gpu` reads), the lane-rows pick's GPU tests, the norm+RoPE
table's cells below 85%, and the floor as graphs against op by op. Stored data: this times nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import bench_latency_rows, floor_graph_speedups

MEASURED = Path(__file__).resolve().parents[2] / "docs" / "measured" / "2026-12-06-h100-2f6777f"
NCCL = "floor op: NCCL all-to-all at one rank"
MEMOP = "floor op: a stream write and wait of a 64-bit word"


def text_rows(name: str) -> dict[str, float]:
    """`way: what` -> us, from a bench_kernels text's latency rows."""
    rows = {}
    for line in (MEASURED / name).read_text().splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) >= 6 and f[0] == "latency" and f[4].endswith(" us"):
            rows[f[1]] = float(f[4].split()[0])
    return rows


def h5_rows(name: str) -> dict[str, float]:
    """`way: what` -> us, from a bench_kernels -o file's latency rows."""
    return bench_latency_rows(MEASURED / name)


@pytest.mark.parametrize("source", ["bench_kernels-2f6777f.txt", "bench-latency-2f6777f-2.txt",
                                    "host-speed-graphs-floor-u1-2f6777f.h5",
                                    "host-speed-graphs-floor-u1-lean-2f6777f.h5"])
def test_nccl_at_one_rank_costs_a_third_of_the_fitted_fixed_cost_as_a_graph_node(source: str) -> None:
    """The README: 1.5 us as a graph node, 2.5-2.7 op by op (768 KB copy included), against
    h100-sxm's 4.5 us; a write and a wait 2.9-3.0 as nodes, 2.5-2.7 op by op."""
    rows = text_rows(source) if source.endswith(".txt") else h5_rows(source)
    assert 1.3 <= rows["graph: " + NCCL] <= 1.7, rows["graph: " + NCCL]
    assert 2.4 <= rows["streams: " + NCCL] <= 2.8, rows["streams: " + NCCL]
    assert 2.8 <= rows["graph: " + MEMOP] <= 3.1, rows["graph: " + MEMOP]
    assert 2.4 <= rows["streams: " + MEMOP] <= 2.8, rows["streams: " + MEMOP]
    assert rows["graph: empty kernels"] < rows["streams: empty kernels"]


def test_the_lane_rows_pick_passed_its_gpu_tests() -> None:
    text = (MEASURED / "gpu-tests-2f6777f.txt").read_text()
    assert "[  PASSED  ] 4 tests." in text and "FAILED" not in text
    for name in ("NormRopeLaneRowsWalk", "NormRopeFlatWalk", "NormRopeQkOneLaunchMatchesTwoLaunches",
                 "NormRopeLayerNorm16BitPickFollowsTheGpusBandwidth"):
        assert f"[       OK ] CudaKernelsTest.{name}" in text, name


def test_four_norm_rope_cells_stay_below_85_percent() -> None:
    text = (MEASURED / "bench_kernels-2f6777f.txt").read_text()
    assert "with Q and K in one launch (the layer under baseline, v-first, v-project-first): 4 of 72" in text


@pytest.mark.parametrize("report,lo,hi", [("graphs-floor-u1-2f6777f.h5", 1.37, 1.46),
                                           ("graphs-floor-u1-lean-2f6777f.h5", 1.73, 1.81)])
def test_the_floor_with_graphs_is_the_readmes(report: str, lo: float, hi: float) -> None:
    """Layer medians, replayed against op by op (the no-graphs twin), per run."""
    speedups = floor_graph_speedups(MEASURED / report)
    assert len(speedups) == 6
    assert lo < min(speedups) and max(speedups) < hi, speedups
