"""A small report written with plain h5py, following docs/report.md field by field.

It lets the computations be tested on data whose every value the test controls,
independently of the app; the statistics stored here are computed with numpy straight
from the schema's definition (max over ranks, then numpy.percentile), not with the
package under test.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

STAGES = ["projection", "norm_rope", "scatter", "attention", "gather", "out_projection", "layer"]


def stage_times(rng: np.random.Generator, repeats: int, iterations: int, ranks: int, scale: float) -> np.ndarray:
    """Positive stage times whose `layer` is the sum of the other six, as the app measures them."""
    t = rng.uniform(0.1, 1.0, size=(repeats, iterations, ranks, 7)) * scale
    t[..., 6] = t[..., :6].sum(axis=-1)
    return t


def write_run(cg: h5py.Group, transport: str, schedule: str, stage_ms: np.ndarray,
              overlap: np.ndarray | None = None, transport_used: str | None = None,
              max_abs: float = 1e-3, rel_l2: float = 1e-4, parity_pass: int = 1) -> h5py.Group:
    g = cg.create_group(f"{transport}.{schedule}")
    used = transport_used or transport
    g.attrs.update(transport=transport, transport_used=used,
                   fallback_reason="" if used == transport else "simulated: no peer access",
                   gather_transport="nccl", schedule=schedule, projection="fused",
                   parity_pass=parity_pass, parity_max_abs=max_abs, parity_rel_l2=rel_l2, parity_finite=1,
                   handshakes_per_layer=1 if transport == "ipc" else 0, cache_hits=5, cache_misses=3,
                   cache_evictions=0, scatter_bytes_per_rank=3 * 1024 * 1024, gather_bytes_per_rank=1024 * 1024)
    r, i, p, _ = stage_ms.shape
    g.attrs.update(repeats=r, iterations=i, ranks=p)
    g.attrs["stages"] = STAGES
    crit = stage_ms.max(axis=2).reshape(-1, 7)
    med = np.percentile(crit, 50, axis=0)
    g.attrs["median_ms"] = med
    g.attrs["p10_ms"] = np.percentile(crit, 10, axis=0)
    g.attrs["p90_ms"] = np.percentile(crit, 90, axis=0)
    g.attrs["stats_units"] = "ms"
    g.attrs["scatter_bandwidth_gbs"] = 3 * 1024 * 1024 / (med[2] * 1e-3) / 1e9
    ds = g.create_dataset("stage_ms", data=stage_ms)
    ds.attrs.update(units="ms", stages=STAGES, dims=["repeat", "iteration", "rank", "stage"])
    if overlap is not None:
        ov = g.create_dataset("v_overlap_ms", data=overlap)
        ov.attrs.update(units="ms", dims=["repeat", "iteration", "rank"])
    return g


def write_case(f: h5py.File, name: str, ulysses: int, runs: list[str]) -> h5py.Group:
    cg = f.create_group(f"cases/{name}")
    cg.attrs.update(name=name, description="synthetic", batch=1, seq_len=256, heads=8, head_dim=64, dtype="bf16",
                    qk_norm="rms", norm_eps=1e-6, rope="1d", rope_theta=10000.0, fused_qkv=1, ulysses=ulysses,
                    tp=1, warmup=1, iterations=3, repeats=4, seed=np.uint64(1234), tol_max_abs=0.02,
                    tol_rel_l2=0.01, watchdog_s=60.0)
    cg.attrs["transports"] = ["nccl", "ipc"]
    cg.attrs["schedules"] = ["baseline", "v-first"]
    cg.attrs["runs"] = runs
    return cg


def write_report(path: Path, world_size: int = 2, mode: str = "sim", seed: int = 7, ulysses: int = 0,
                 repeats: int = 4, iterations: int = 3) -> Path:
    """Two cases: `a` with nccl.baseline, ipc.baseline (fell back to nccl), ipc.v-first
    (with V overlap); `b` without an nccl.baseline run (speedup against its first run)."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs.update(software="ulysses-ipc", software_version="synthetic-0", date="2025-01-01T00:00:00Z",
                       command_line="ulysses-ipc deck.h5 -o report.h5", mode=mode, deck="deck.h5",
                       world_size=world_size, schema_version=1)
        f.attrs["cases"] = ["a", "b"]
        f.attrs["hosts"] = ["node0"] * world_size
        f.attrs["devices"] = [f"simulated GPU {r}" for r in range(world_size)]
        f.create_group("versions").attrs.update(mpi="Open MPI 4.1", hdf5="1.10.8")
        shape = (repeats, iterations, world_size)
        ca = write_case(f, "a", ulysses, ["nccl.baseline", "ipc.baseline", "ipc.v-first"])
        write_run(ca, "nccl", "baseline", stage_times(rng, *shape, scale=2.0))
        write_run(ca, "ipc", "baseline", stage_times(rng, *shape, scale=1.5), transport_used="nccl")
        write_run(ca, "ipc", "v-first", stage_times(rng, *shape, scale=1.0),
                  overlap=rng.uniform(0.0, 0.1, size=shape))
        cb = write_case(f, "b", ulysses, ["ipc.v-first", "ipc.baseline"])
        write_run(cb, "ipc", "v-first", stage_times(rng, *shape, scale=1.0))
        write_run(cb, "ipc", "baseline", stage_times(rng, *shape, scale=3.0), max_abs=0.5, parity_pass=0)
    return path
