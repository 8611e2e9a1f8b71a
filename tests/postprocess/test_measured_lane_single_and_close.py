"""The one-H100 data of the twentieth session kept in docs/measured/2026-12-07-h100-716e41a/ (its
README): the single-tile lane-rows walk ("lane rows 1t") beside lane rows and the pick in two runs,
which made it 16-bit LayerNorm's pick at head_dim 72 (kernels/cuda_kernels.cu); bench_kernels'
rows for a fresh export's descriptor closed, the source of host_close_export_us; and the FLUX 2048
layer at one rank with and without the target cache, whose per-call host times leave the GPU
waiting for what no traced call held the host for: the exporter's close of its own descriptor.
Stored data: this times nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "docs" / "measured" / "2026-12-07-h100-716e41a"
TABLE = "The lane-rows walk (a lane a head), Q and K in one launch"
RUN = "cases/flux-dev-2048.u2/"


def lane_table(run: int) -> dict[tuple[str, int, str, str], tuple[float, float, float | None]]:
    """(kind, D, dtype, layout) -> (the pick's %, lane rows' %, lane rows 1t's % or None)."""
    text = (MEASURED / f"norm-tables-716e41a-run{run}.txt").read_text()
    bound = float(re.search(r"bound = ([\d.]+) TB/s device copy", text).group(1))
    assert 2.9 < bound < 3.1, bound  # the H100's copy bound, as every other H100 run
    cells = {}
    for line in text.split(TABLE, 1)[1].splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) == 9 and f[0] in ("none", "rms", "layer"):
            cells[(f[0], int(f[1]), f[2], f[3])] = (float(f[5].rstrip("%")), float(f[6].rstrip("%")),
                                                     None if f[7] == "-" else float(f[7].rstrip("%")))
    assert len(cells) == 36, sorted(cells)  # 3 kinds x head_dim 64, 72 x 3 dtypes x 2 layouts
    return cells


def test_lane_rows_1t_leads_lane_rows_everywhere_and_the_pick_at_layernorm_d72() -> None:
    runs = [lane_table(1), lane_table(2)]
    readme = (MEASURED / "README.md").read_text()
    for cell in runs[0]:
        kind, d, dt, layout = cell
        (p1, l1, s1), (p2, l2, s2) = (r[cell] for r in runs)
        if dt == "fp32":
            assert s1 is None and s2 is None, cell  # 16-bit types only
            continue
        assert s1 > l1 and s2 > l2, cell  # ahead of lane rows in every 16-bit cell-run (48 of 48)
        if kind == "layer" and d == 72:
            # Ahead of the pick (lane rows then) by 3.2-5.6 points in both runs: the new pick.
            lead = (round(s1 - p1, 1), round(s2 - p2, 1))
            assert 3.2 <= min(lead) and max(lead) <= 5.6, (cell, p1, s1, p2, s2)
            assert f"| {dt} | {layout} | {p1:.1f} / {p2:.1f} | {s1:.1f} / {s2:.1f} |" in readme, cell
        else:
            # Elsewhere it is behind the pick or at most 1.6 points ahead of it (RoPE only at 72
            # separate, LayerNorm at 64 separate), within the runs' spread (up to 2.7 points): the
            # pick stays.
            assert round(max(s1 - p1, s2 - p2), 1) <= 1.6, (cell, p1, s1, p2, s2)
    # Fused 16-bit LayerNorm at 72 stays below 85% with it; separate reaches 85.9-87.1.
    fused = [r[("layer", 72, dt, "fused")][2] for r in runs for dt in ("bf16", "fp16")]
    separate = [r[("layer", 72, dt, "separate")][2] for r in runs for dt in ("bf16", "fp16")]
    assert max(fused) < 85 and min(separate) >= 85.9


def alloc_rows(what: str) -> list[float]:
    """The host times (us) of one alloc row at 2, 32 and 128 MiB, in that order."""
    out = []
    for line in (MEASURED / "alloc-716e41a.txt").read_text().splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) > 4 and f[0] == "alloc" and f[1] == what:
            out.append(float(f[4].split()[0]))
    assert len(out) == 3, (what, out)
    return out


def test_a_fresh_exports_close_costs_what_the_machine_charges() -> None:
    close = alloc_rows("vmm target: close of that descriptor (idle GPU)")
    assert close == [519.877, 598.388, 607.425]
    export = alloc_rows("vmm target: export of a fresh allocation (idle GPU)")
    assert all(0.7 < c / e < 0.9 for c, e in zip(close, export)), (close, export)  # about an export's time
    # The machine files charge the median of these rows and two more hosts' (the same 598.4 us):
    # test_measured_check_6cf8e34.py pins the nine rows and the value.
    for name in ("h200-nvlink", "h200-nvlink-prior", "h100-sxm"):
        p = json.loads((ROOT / "inputs" / "machines" / f"{name}.json").read_text())["parameters"]
        c = p["host_close_export_us"]
        assert c["value"] == round(float(np.median(close)), 1) and c["range"][0] == round(min(close), 1), name
        assert "alloc-716e41a.txt" in c["source"], name


def lags(run: str, report: str = "flux-2048-u1-cache-716e41a.h5") -> list[float]:
    """Each kernel's GPU start less the host time every traced op up to it (its own launch too) held
    the host for, in us, op by op from the layer's first event: where the GPU was idle before a
    kernel, how long the host spent on what no traced call accounts for, so far."""
    with h5py.File(MEASURED / report, "r") as f:
        t = f[RUN + run + "/traced_layer"]
        kinds = [k.decode() if isinstance(k, bytes) else k for k in t["op_kind"].attrs["names"]]
        kind, host, start = t["op_kind"][:], t["op_measured_host_us"][:], t["op_measured_start_ms"][:] * 1e3
        assert (t["op_rank"][:] == 0).all()
    out, held = [], 0.0
    for k, h, s in zip(kind, host, start):
        held += 0.0 if np.isnan(h) else h
        if kinds[k] == "kernel":
            out.append(s - held)
    return out


def test_the_gpu_waits_for_an_untraced_close_after_each_vmm_export() -> None:
    with h5py.File(MEASURED / "flux-2048-u1-cache-716e41a.h5", "r") as f:
        for run in ("ipc.baseline", "ipc.baseline+no-target-cache", "vmm.baseline", "vmm.baseline+no-target-cache"):
            assert f[RUN + run].attrs["parity_pass"] == 1, run
    # ipc without the cache (no descriptor): the first GEMM starts within 20 us of what the traced
    # calls held the host for.
    assert abs(lags("ipc.baseline+no-target-cache")[0]) < 20
    # vmm without it: 0.62 ms more before the projection (one export, then its close), 1.33 ms more
    # before norm+RoPE (two; the GPU idle since the projection), about a close's bench time
    # (520-607 us) each. Kernels: the two projection GEMMs, then norm+RoPE.
    v = lags("vmm.baseline+no-target-cache")
    first, second = v[0], v[2] - v[0]
    assert 600 < first < 640 and 1300 < second < 1350, v[:3]
    readme = (MEASURED / "README.md").read_text()
    assert f"{first / 1e3:.2f} ms" in readme and f"{second / 1e3:.2f} ms" in readme


def test_with_the_close_traced_the_host_calls_account_for_the_gpus_wait() -> None:
    report = "flux-2048-u1-vmm-close-d78655a.h5"
    with h5py.File(MEASURED / report, "r") as f:
        assert f.attrs["software_version"] == "95617baa2982-dirty"  # the tree committed as d78655a
        t = f[RUN + "vmm.baseline+no-target-cache/traced_layer"]
        names = [k.decode() if isinstance(k, bytes) else k for k in t["op_host_call"].attrs["names"]]
        calls = [names[c] for c in t["op_host_call"][:] if c]
        closes = [h for c, h in zip(t["op_host_call"][:], t["op_measured_host_us"][:])
                  if c and names[c] == "close_export"]
        for run in ("vmm.baseline", "vmm.baseline+no-target-cache"):
            assert f[RUN + run].attrs["parity_pass"] == 1, run
    # Each export is followed by its close, each close taking about its bench time (520-607 us).
    assert [c for c in calls if c in ("export_fd", "close_export")] == ["export_fd", "close_export"] * 3
    assert [round(h, 1) for h in closes] == [608.1, 669.8, 542.8]
    v = lags("vmm.baseline+no-target-cache", report)
    first, second = v[0], v[2] - v[0]
    assert 0 < first < 50 and 0 < second < 150, v[:3]  # 0.62 and 1.33 ms before the close was traced
    readme = (MEASURED / "README.md").read_text()
    assert f"{first / 1e3:.2f} ms after" in readme and f"{second / 1e3:.2f} ms after" in readme
