"""The one-H100 data of the twenty-third session kept in docs/measured/2026-12-07-h100-b460a49-lane-trials/
(its README): three changes to the single-tile lane-rows walk measured beside b460a49's own bench in the
same calls, all withdrawn, and Nsight Compute's counters for the walk as shipped. Stored data: this
times nothing.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import h5py
from helpers import ncu_lane_kernel, norm_table_rows, why_lines

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "measured" / "2026-12-07-h100-b460a49-lane-trials"
KINDS, DTYPES, LAYOUTS = ("layer", "rms", "none"), ("bf16", "fp16"), ("fused", "separate")
ROWS = 16896 * 42  # head rows of one view (M16896 H42 D72)


def cells(name: str) -> dict[tuple[str, str, str], float]:
    """(kind, dtype, layout) -> % of the copy bound of the row "(vector, lane rows 1t, Q+K one launch)"."""
    bound, rows = norm_table_rows((FOLDER / name).read_text(), "lane rows 1t, Q+K one launch)")
    assert 2.9 < bound < 3.1, (name, bound)  # an H100's copy bound, as in every other H100 run
    assert {shape for _, shape, _, _ in rows} == {"H42 D72"}, (name, sorted(rows))
    out = {(kind, dtype, layout): pct for (kind, _, dtype, layout), pct in rows.items()}
    assert set(out) == {(k, d, lay) for k in KINDS for d in DTYPES for lay in LAYOUTS}, (name, sorted(out))
    return out


def runs(call: int, variant: str) -> list[dict[tuple[str, str, str], float]]:
    return [cells(f"call{call}-{variant}-run{r}.txt") for r in (1, 2, 3)]


def mean(rs, key) -> float:
    return statistics.mean(r[key] for r in rs)


def readme_row(call: int, key, *columns) -> str:
    return f"| {call} | {key[0]} | {key[1]} | {key[2]} | " + " | ".join(
        " / ".join(f"{r[key]:.1f}" for r in col) for col in columns) + " |"


def test_partial_sums_move_no_cell_beyond_the_runs_spread():
    base, sums = runs(3, "base"), runs(3, "sums")
    for key in base[0]:
        assert abs(mean(sums, key) - mean(base, key)) < 1.0, (key, mean(base, key), mean(sums, key))
    fused = [r[("layer", d, "fused")] - b[("layer", d, "fused")] for r, b in zip(sums, base) for d in DTYPES]
    assert round(min(fused), 1) == -1.7 and round(max(fused), 1) == 2.5
    # The changed runs alone spread over more than the change moved them.
    assert round(max(r[("layer", "bf16", "fused")] for r in sums) - min(r[("layer", "bf16", "fused")] for r in sums),
                 1) == 3.5


def test_the_l2_prefetch_of_the_next_tile_loses_seventeen_points_or_more_everywhere():
    base, pre = runs(3, "base"), runs(3, "sums-prefetch")
    losses = [mean(base, key) - mean(pre, key) for key in base[0]]
    assert 17.0 < min(losses) and max(losses) < 23.0, (min(losses), max(losses))
    assert min(r[k] for r in pre for k in r) == 62.9 and max(r[k] for r in pre for k in r) == 68.3
    assert min(r[k] for r in base for k in r) == 80.8 and max(r[k] for r in base for k in r) == 91.2


def test_the_index_walk_gains_nothing():
    base, walk = runs(5, "base"), runs(5, "index-walk")
    for d in DTYPES:
        for lay in LAYOUTS:
            key = ("layer", d, lay)
            assert mean(walk, key) <= mean(base, key) + 0.3, (key, mean(base, key), mean(walk, key))
    loss = [b[("none", d, "separate")] - w[("none", d, "separate")] for b, w in zip(base, walk) for d in DTYPES]
    assert round(min(loss), 1) == 0.5 and round(max(loss), 1) == 1.8


def test_below_85_on_this_host_only_the_fused_layernorm_cells():
    for call in (3, 5):
        for r in runs(call, "base"):
            for d in DTYPES:
                assert r[("layer", d, "separate")] >= 85 and r[("layer", d, "fused")] < 85
    fused = [r[("layer", d, "fused")] for c in (3, 5) for r in runs(c, "base") for d in DTYPES]
    assert min(fused) == 80.8 and max(fused) == 84.1
    sep = [r[("layer", d, "separate")] for c in (3, 5) for r in runs(c, "base") for d in DTYPES]
    assert min(sep) == 85.6 and max(sep) == 86.7


def test_the_readme_tables_are_the_stored_runs():
    readme = (FOLDER / "README.md").read_text()
    b3, s3, p3 = runs(3, "base"), runs(3, "sums"), runs(3, "sums-prefetch")
    for key in [("layer", d, lay) for d in DTYPES for lay in LAYOUTS] + [("rms", "bf16", "fused"),
                                                                          ("none", "bf16", "fused")]:
        assert readme_row(3, key, b3, s3, p3) in readme, key
    b5, w5 = runs(5, "base"), runs(5, "index-walk")
    for key in [("layer", d, lay) for d in DTYPES for lay in LAYOUTS] + [("none", "bf16", "separate")]:
        assert readme_row(5, key, b5, w5) in readme, key


def ncu(name: str) -> dict[str, float]:
    return ncu_lane_kernel((FOLDER / name).read_text())


def test_nsight_compute_layernorm_issues_the_most_and_reads_the_least():
    lay, lay5, rms, rope = (ncu(f) for f in ("call4-ncu-layer.txt", "call5-ncu-layer-base.txt", "call4-ncu-rms.txt",
                                             "call4-ncu-rope-only.txt"))
    # Thread instructions a head row: LayerNorm's first launch is one view, the others' two.
    per_row = [round(x["Executed Instructions"] * 32 / (n * ROWS)) for x, n in ((lay, 1), (rms, 2), (rope, 2))]
    assert per_row == [1978, 1579, 1196]
    assert lay["Executed Instructions"] == lay5["Executed Instructions"] == 43_858_848
    assert lay["DRAM Throughput"] < 72 < 76 < rms["DRAM Throughput"] < rope["DRAM Throughput"] < 79
    busy = [100 - x["No Eligible"] for x in (lay, lay5, rms, rope)]
    assert min(busy[:2]) > 60 > 49 > busy[2] > 48 > 38 > busy[3] > 37, busy
    assert [x["Registers Per Thread"] for x in (lay, rms, rope)] == [48, 47, 56]
    assert all(x["Local Memory Spilling Requests"] == 0 for x in (lay, lay5, rms, rope))
    readme = (FOLDER / "README.md").read_text()
    assert f"| {per_row[0]} | {per_row[1]} | {per_row[2]} |" in readme


def test_the_index_walk_costs_registers_and_occupancy():
    base, walk = ncu("call5-ncu-layer-base.txt"), ncu("call5-ncu-layer-index-walk.txt")
    assert (base["Registers Per Thread"], walk["Registers Per Thread"]) == (48, 53)
    assert walk["Achieved Occupancy"] < base["Achieved Occupancy"]
    assert round(100 * (walk["Executed Instructions"] / base["Executed Instructions"] - 1), 1) == 1.0


def test_each_trial_is_kept_as_a_patch_of_the_kernels():
    for name in ("trial-sums.diff", "trial-sums-prefetch.diff", "trial-index-walk.diff"):
        text = (FOLDER / name).read_text()
        files = re.findall(r"^\+\+\+ b/(\S+)", text, re.M)
        assert files == ["kernels/cuda_kernels.cu"], (name, files)
    assert "cp.async.bulk.prefetch.L2" in (FOLDER / "trial-sums-prefetch.diff").read_text()
    assert "cp.async.bulk.prefetch.L2" not in (FOLDER / "trial-sums.diff").read_text()


def test_bench_kernels_says_why_each_cell_stays_below_85():
    text = (FOLDER / "call6-why-bench.txt").read_text()
    assert "code 392974e523f3-dirty" in text  # a9b739f's bench, built before its commit
    why = why_lines(text)
    assert len(why) == 2
    with h5py.File(FOLDER / "call6-why-bench.h5") as f:
        g = f["norm_rope_table"]
        a = {k: list(g.attrs[k]) for k in ("kind", "dtype", "layout", "qk_one_launch_of_bound",
                                            "qk_same_walk_rope_only_of_bound", "stream_one_launch_of_bound", "bytes")}
    table = {(str(k), str(d), str(lay)): i for i, (k, d, lay) in enumerate(zip(a["kind"], a["dtype"], a["layout"]))}
    # Exactly the cells below 85% in one launch have a line, each agreeing with the stored table.
    below = sorted(key for key, i in table.items() if a["qk_one_launch_of_bound"][i] < 0.85)
    assert below == sorted((m[1], m[4], m[5]) for m in why) == [("layer", "bf16", "fused"), ("layer", "fp16", "fused")]
    for m in why:
        i = table[(m[1], m[4], m[5])]
        cell, rope = float(m[7]), float(m[17])
        assert m[6] == "lane rows 1t, Q+K one launch" and (int(m[2]), int(m[3])) == (72, 42)
        assert abs(cell - 100 * a["qk_one_launch_of_bound"][i]) < 0.051
        assert abs(rope - 100 * a["qk_same_walk_rope_only_of_bound"][i]) < 0.051
        assert abs(float(m[16]) - 100 * a["stream_one_launch_of_bound"][i]) < 0.051
        assert abs(float(m[8]) - a["bytes"][i] / 1e6) < 0.051
        assert abs(float(m[18]) - (rope - cell)) < 0.11  # the printed cost is the gap between the two
        assert (int(m[11]), int(m[12]), int(m[13])) == (48, 10, 40)
        # The same walk with RoPE only is the RoPE-only cell's own lane-rows-1t row of this run.
        rope_row = cells("call6-why-bench.txt")[("none", m[4], m[5])]
        assert abs(rope_row - rope) < 0.051
    assert [float(m[18]) for m in why] == [3.1, 4.6]
    # On separate views the walk with RoPE only reaches 90.4-90.6%, LayerNorm there 85.1-85.7%.
    sep = [(a["qk_same_walk_rope_only_of_bound"][table[("layer", d, "separate")]],
            a["qk_one_launch_of_bound"][table[("layer", d, "separate")]]) for d in DTYPES]
    assert [round(100 * r, 1) for r, _ in sep] == [90.4, 90.6] and [round(100 * c, 1) for _, c in sep] == [85.1, 85.7]
    readme = (FOLDER / "README.md").read_text()
    for m in why:
        assert m[0] in readme
