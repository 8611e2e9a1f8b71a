"""Helpers of the post-processing tests: the CLI as a user runs it, a PNG check, a stored floor
report's graphs against op by op, a stored bench's latency rows, and its why-below-85% lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib.image
import numpy as np

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "postprocess"


@dataclass
class Result:
    """What one CLI invocation returned."""

    rc: int
    out: str
    err: str


def run_cli(*args: str, timeout: float = 120) -> Result:
    """`python3 -m ulysses_post ARGS` in a subprocess, as a user would run it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_DIR), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "ulysses_post", *args], capture_output=True, text=True, env=env,
                       timeout=timeout)
    return Result(p.returncode, p.stdout, p.stderr)


def png_is_drawn(path: Path) -> str | None:
    """None when `path` is a non-blank PNG; else what is wrong with it."""
    data = path.read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return f"{path}: no PNG signature"
    img = matplotlib.image.imread(str(path))
    if len(np.unique(img.reshape(-1, img.shape[-1]), axis=0)) < 2:
        return f"{path}: blank image (one pixel value)"
    return None


def floor_graph_speedups(report: Path) -> list[float]:
    """A stored GPU report of the floor deck run with graphs and the no-graphs ablation: per run,
    the op-by-op twin's layer median over the replayed run's. Asserts each replayed run replayed
    graphs and passed parity."""
    import h5py

    speedups = []
    with h5py.File(report, "r") as f:
        c = f["cases/floor"]
        for run in c.attrs["runs"]:
            if run.endswith("+no-graphs"):
                continue
            g, twin = c[run], c[run + "+no-graphs"]
            assert g.attrs["graphs"] == "on" and g.attrs["graph_replays"] > 0 and g.attrs["parity_pass"] == 1, run
            layer = lambda x: float(np.median(x["stage_ms"][()][..., 6]))  # noqa: E731
            speedups.append(layer(twin) / layer(g))
    return speedups


def bench_latency_rows(path: Path) -> dict[str, float]:
    """`way: what` -> us, from a bench_kernels -o file's latency rows."""
    import h5py

    with h5py.File(path, "r") as f:
        a = f["bench_kernels"].attrs
        dec = lambda v: [x.decode() if isinstance(x, bytes) else str(x) for x in v]  # noqa: E731
        return {w: float(r) for s, w, u, r in zip(dec(a["section"]), dec(a["what"]), dec(a["unit"]), a["rate"])
                if s == "latency" and u == "us"}


def norm_table_rows(bench_text: str, label: str) -> tuple[float, dict[tuple[str, str, str, str], float]]:
    """The copy bound (TB/s) and, for each norm+RoPE row of a bench_kernels printout whose walk reads
    `label` (e.g. "lane rows 1t, Q+K one launch)" or "the pick, Q+K one launch)"), (kind, "H42 D72",
    dtype, layout) -> % of that bound."""
    bound = float(re.search(r"bound = ([\d.]+) TB/s device copy", bench_text).group(1))
    out = {}
    for line in bench_text.splitlines():
        if label not in line:
            continue
        f = [x.strip() for x in line.split("|")]
        kind = f[1].split(" (")[0].removeprefix("norm+RoPE ")
        shape = f[2].split()
        assert shape[0] == "M16896", shape
        out[(kind, f"{shape[1]} {shape[2]}", shape[3], shape[4])] = float(f[5].rstrip("%"))
    return bound, out


# The Nsight Compute figures the lane-rows trials read, each with the unit ncu prints beside it.
NCU_UNITS = {"Duration": "us", "DRAM Throughput": "%", "Executed Instructions": "inst", "No Eligible": "%",
             "Active Warps Per Scheduler": "warp", "Eligible Warps Per Scheduler": "warp",
             "Registers Per Thread": "register/thread", "Achieved Occupancy": "%",
             "Local Memory Spilling Requests": ""}


def ncu_lane_kernel(text: str) -> dict[str, float]:
    """NCU_UNITS' figures from an `ncu -c 1` printout of one 16-bit lane-rows kernel launch."""
    assert text.count("norm_rope_lane_kernel<__nv_bfloat16, ") == 2  # profiled once, named at its start and result
    out = {}
    for k, unit in NCU_UNITS.items():
        m = re.search(rf"^\s+{k}\s+{re.escape(unit)}\s+([\d,.]+)\s*$", text, re.M)
        assert m, k
        out[k] = float(m.group(1).replace(",", ""))
    return out


# One line of bench_kernels' "why below 85% with Q and K in one launch" block (a9b739f): kind, D, H,
# dtype, layout, walk, % of the copy bound, MB, ms, TB/s, registers, blocks, warps, shared KB, KB in
# flight, the streaming kernel %; for a cell with a norm whose walk was measured with RoPE only, that
# rate, the points between, and whether that walk is itself below 85% (groups 17-19; None for a
# RoPE-only cell or a walk not measured so).
WHY_LINE = re.compile(
    r"^  (\w+) D(\d+) H(\d+) (\w+) (\w+), ([^:]+): ([\d.]+)% \(([\d.]+) MB read and written in ([\d.]+) ms, "
    r"([\d.]+) TB/s\); (\d+) registers, (\d+) blocks \((\d+) warps\) a multiprocessor, ([\d.]+) KB shared a "
    r"block, (\d+) KB in flight a multiprocessor; the streaming kernel over the same views ([\d.]+)%; the same "
    r"walk with RoPE only (?:([\d.]+)%, so the norm's arithmetic costs ([\d.]+) points on this walk"
    r"( \(and the walk itself is below 85%\))?|is this cell: the walk over these views is what holds it"
    r"|not measured)$")


def why_lines(bench_text: str) -> list[re.Match]:
    """The why-below-85% lines of a bench_kernels printout, each matched whole by WHY_LINE."""
    block = bench_text.split("why below 85% with Q and K in one launch", 1)[1].splitlines()[1:]
    lines = [line for line in block if line.startswith("  ")]
    matches = [WHY_LINE.match(line) for line in lines]
    assert lines and all(matches), lines[:3]
    return matches


def why_lines_agree_with_table(bench_text: str, table: dict) -> list[tuple[str, int, str, str]]:
    """Each why line of a bench_kernels printout agrees with the norm_rope_table attributes of the same
    run (`table`: attribute name -> values): its walk, its rate, the streaming and the same-walk RoPE-only
    rates, and the printed cost as the gap between the two. Returns the lines' cells (kind, head_dim,
    dtype, layout), sorted."""
    cells = list(zip(table["kind"], table["head_dim"], table["dtype"], table["layout"]))
    index = {(str(k), int(d), str(t), str(lay)): i for i, (k, d, t, lay) in enumerate(cells)}
    keys = []
    for m in why_lines(bench_text):
        key = (m[1], int(m[2]), m[4], m[5])
        i = index[key]
        assert m[6] == table["qk_one_launch_kernel"][i]
        assert abs(float(m[7]) - 100 * table["qk_one_launch_of_bound"][i]) < 0.051
        assert abs(float(m[16]) - 100 * table["stream_one_launch_of_bound"][i]) < 0.051
        assert abs(float(m[17]) - 100 * table["qk_same_walk_rope_only_of_bound"][i]) < 0.051
        assert abs(float(m[18]) - (float(m[17]) - float(m[7]))) < 0.11
        keys.append(key)
    return sorted(keys)
