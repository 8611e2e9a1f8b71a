"""Reading a ulysses-ipc run report (docs/report.md, schema version 1) into plain objects.

Every statistic the tools print or draw is recomputed here from the raw `stage_ms`
dataset with numpy, and cross-checked against what the writer stored as attributes
(`median_ms`, `p10_ms`, `p90_ms`, `scatter_bandwidth_gbs`, `parity_pass`): a report whose
attributes disagree with its own data is refused with a message naming the case, run
and field, because a silent mismatch would mean one of the two is wrong and we cannot
tell which.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from . import stats

SCHEMA_VERSION = 1
SOFTWARE = "ulysses-ipc"
# The writer's stage order (lib/report.cpp); a report with other names is refused, since
# every tool addresses stages by these names.
STAGES = ("projection", "norm_rope", "scatter", "attention", "gather", "out_projection", "layer")
BASELINE_RUN = "nccl.baseline"

# Tolerances of the stored-versus-recomputed cross-check. The writer computes the same
# percentiles in double precision, so anything beyond rounding noise is a real mismatch.
_RTOL = 1e-9
_ATOL = 1e-12


class ReportError(Exception):
    """A report that cannot be read or is inconsistent; the message is meant for the user."""


def _text(value: Any) -> str:
    """A string attribute as `str`, whether h5py stored it fixed- or variable-length."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray) and value.shape in ((), (1,)):
        return _text(value.reshape(-1)[0])
    return str(value)


def _texts(value: Any) -> list[str]:
    """A string-array attribute as a list of `str` (a scalar string becomes one element)."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        return [_text(arr.item())]
    return [_text(v) for v in arr.reshape(-1)]


def _number(value: Any) -> float:
    """A numeric scalar attribute (possibly a 1-element array) as a Python number."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise TypeError(f"expected a scalar, found shape {arr.shape}")
    return arr.reshape(-1)[0].item()


class _Reader:
    """Attribute access that turns a missing or mistyped attribute into a ReportError."""

    def __init__(self, path: str, where: str, obj: h5py.HLObject) -> None:
        self.path, self.where, self.obj = path, where, obj

    def fail(self, message: str) -> ReportError:
        return ReportError(f"{self.path}: {self.where}{message}")

    def raw(self, name: str) -> Any:
        if name not in self.obj.attrs:
            raise self.fail(f"missing attribute '{name}' (docs/report.md)")
        return self.obj.attrs[name]

    def text(self, name: str, default: str | None = None) -> str:
        if default is not None and name not in self.obj.attrs:
            return default
        return _text(self.raw(name))

    def texts(self, name: str, default: list[str] | None = None) -> list[str]:
        if default is not None and name not in self.obj.attrs:
            return default
        return _texts(self.raw(name))

    def integer(self, name: str) -> int:
        try:
            return int(_number(self.raw(name)))
        except (TypeError, ValueError) as e:
            raise self.fail(f"attribute '{name}': {e}") from None

    def number(self, name: str) -> float:
        try:
            return float(_number(self.raw(name)))
        except (TypeError, ValueError) as e:
            raise self.fail(f"attribute '{name}': {e}") from None

    def floats(self, name: str, n: int) -> np.ndarray:
        arr = np.asarray(self.raw(name), dtype=np.float64).reshape(-1)
        if arr.size != n:
            raise self.fail(f"attribute '{name}' has {arr.size} values, expected {n}")
        return arr


@dataclass
class TracedLayer:
    """The run's traced layer (docs/report.md, "traced_layer"): one layer's ops on every
    rank's streams, with measured times (GPU; CPU times in simulation mode) and, where a
    machine was modelled, modelled times and modelled stages (always labelled modelled)."""

    machine: str  # "" when not modelled (model_note says why)
    model_note: str
    measured: bool
    ops: dict[str, np.ndarray]  # op_rank, op_stream, op_kind, ..., one entry per op
    kind_names: list[str]
    kernel_names: list[str]
    collective_names: list[str]
    stream_high_priority: dict[tuple[int, int], bool]
    modeled_stage_ms: np.ndarray | None  # (ranks, 7)
    # (n, 4): rank, stage, op, coef: each rank's stages as sums of op end times.
    stage_terms: np.ndarray | None = None
    # Per rank, its trace in the exact byte form of model/trace.hpp (`trace_rank<R>`).
    rank_bytes: list[bytes] = field(default_factory=list)
    waits_before_trace: int = 0
    # `op_host_call`'s names (alloc_runtime, free_vmm, ...); empty in reports before it.
    host_call_names: list[str] = field(default_factory=list)

    @property
    def modeled(self) -> bool:
        return bool(self.machine) and self.modeled_stage_ms is not None

    def modeled_critical_ms(self) -> np.ndarray:
        """Per stage, the slowest rank's modelled time (the model's critical path)."""
        assert self.modeled_stage_ms is not None
        return self.modeled_stage_ms.max(axis=0)


@dataclass
class Run:
    """One transport x schedule of a case, with statistics recomputed from `stage_ms`."""

    name: str
    transport: str
    transport_used: str
    fallback_reason: str
    gather_transport: str
    schedule: str
    projection: str
    parity_pass: bool
    parity_finite: bool
    parity_max_abs: float
    parity_rel_l2: float
    scatter_bytes_per_rank: int
    scatter_bandwidth_gbs: float
    stage_ms: np.ndarray  # (repeats, iterations, ranks, 7)
    v_overlap_ms: np.ndarray | None  # (repeats, iterations, ranks), or None when not measured
    ablation: str = ""  # "" for the full design, else what this run switches off
    # An approximate run (V-major): judged by approx_pass against its own tolerance, never
    # an exact parity pass (parity_pass is 0).
    approximate: bool = False
    approx_pass: bool = False
    parity_computed: bool = True  # False in --mode model (no data): never a pass
    traced: TracedLayer | None = None
    # Graphs (docs/report.md): "on" or "off: <why>" ("" in reports before graphs), the
    # layers replayed, and rank 0's host enqueue time per timed layer (None when absent).
    graphs: str = ""
    graph_replays: int = 0
    graph_divergences: int = 0
    host_enqueue_ms: np.ndarray | None = None
    median_ms: np.ndarray = field(init=False)  # (7,), critical path over ranks
    p10_ms: np.ndarray = field(init=False)
    p90_ms: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.median_ms, self.p10_ms, self.p90_ms = stats.stage_percentiles(self.stage_ms)

    @property
    def repeats(self) -> int:
        return int(self.stage_ms.shape[0])

    @property
    def iterations(self) -> int:
        return int(self.stage_ms.shape[1])

    @property
    def ranks(self) -> int:
        return int(self.stage_ms.shape[2])

    @property
    def fell_back(self) -> bool:
        """Whether the scatter ran on another transport than the deck asked for."""
        return bool(self.fallback_reason) or self.transport_used != self.transport

    def stage(self, name: str) -> int:
        """Index of a stage on the last axis of `stage_ms`."""
        return STAGES.index(name)

    @property
    def layer_median(self) -> float:
        return float(self.median_ms[self.stage("layer")])

    def repeat_medians(self, stage: str = "layer") -> np.ndarray:
        """Per repeat, the median critical-path time of `stage`: the unit of run-to-run noise."""
        return stats.repeat_medians(self.stage_ms, self.stage(stage))

    def link_bound_fraction(self, link_gbs: float) -> float:
        """The scatter's link bound (bytes a rank sends / `link_gbs`) over its median: 1 is
        the bound. Under v-first schedules only the exposed part of the scatter is timed."""
        scatter = float(self.median_ms[self.stage("scatter")])
        return stats.ratio(self.scatter_bytes_per_rank / (link_gbs * 1e9) * 1e3, scatter)

    def v_overlap_median(self) -> float | None:
        """Median over every rank's timed layers of the V/QK overlap; None when not measured."""
        if self.v_overlap_ms is None:
            return None
        return stats.median(self.v_overlap_ms.reshape(-1))


@dataclass
class Case:
    """One case of the report: the deck's fields (as attributes) and its runs in run order."""

    name: str
    attrs: dict[str, Any]
    runs: list[Run]
    ulysses_deck: int  # as the deck gave it: 0 means all ranks / tp
    tp: int
    degree: int  # the Ulysses degree that ran (the deck's 0 resolved against the world size)
    shape: str  # the layer in one line, e.g. "B1 S4608 H24 D128 bf16, fused QKV"

    def run(self, name: str) -> Run | None:
        return next((r for r in self.runs if r.name == name), None)

    def baseline(self) -> Run | None:
        """The run speedups are measured against: nccl.baseline, else the first run."""
        return self.run(BASELINE_RUN) or (self.runs[0] if self.runs else None)

    def speedup(self, run: Run) -> float:
        """Baseline layer median over this run's: > 1 means this run is faster."""
        base = self.baseline()
        assert base is not None, "a case with a run has a baseline"
        return stats.ratio(base.layer_median, run.layer_median)

    def scatter_speedup(self, run: Run) -> float | None:
        """NCCL's scatter median over this run's, under the same schedule (the transports'
        own comparison); None when the case has no nccl run of that schedule."""
        nccl = self.run(f"nccl.{run.schedule}")
        if nccl is None:
            return None
        return stats.ratio(float(nccl.median_ms[nccl.stage("scatter")]), float(run.median_ms[run.stage("scatter")]))



@dataclass
class Report:
    """A whole report: provenance and cases in run order."""

    path: str
    software_version: str
    date: str
    mode: str
    world_size: int
    command_line: str
    deck: str
    hosts: list[str]
    devices: list[str]
    host_cpus: list[str]  # each rank's host processor; [] in reports before 2026-12-02
    versions: dict[str, str]
    cases: list[Case]

    @property
    def simulated(self) -> bool:
        return self.mode == "sim"

    @property
    def model_only(self) -> bool:
        """--mode model: every time in stage_ms is a modelled time (no data, no arithmetic)."""
        return self.mode == "model"

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.cases) or "none"
        raise ReportError(f"{self.path}: no case '{name}' (cases: {known})")

    def select(self, names: list[str] | None) -> list[Case]:
        """The named cases (in the order given), or every case when `names` is empty."""
        return [self.case(n) for n in names] if names else list(self.cases)


def _check_close(r: _Reader, name: str, stored: np.ndarray, computed: np.ndarray) -> None:
    if not np.allclose(stored, computed, rtol=_RTOL, atol=_ATOL, equal_nan=True):
        raise r.fail(f"attribute '{name}' {np.array2string(stored, precision=6)} disagrees with "
                     f"{np.array2string(computed, precision=6)} computed from stage_ms: "
                     "the report is inconsistent")


def _read_traced(r: _Reader, g: h5py.Group) -> TracedLayer | None:
    t = g.get("traced_layer")
    if not isinstance(t, h5py.Group):
        return None
    tr = _Reader(r.path, r.where + "traced_layer: ", t)
    ops = {k: np.asarray(t[k][()]) for k in t if k.startswith("op_") and isinstance(t[k], h5py.Dataset)}
    n = {v.shape for v in ops.values()}
    if len(n) > 1:
        raise tr.fail(f"the op_* datasets differ in length: {sorted(n)}")
    kinds = _texts(t["op_kind"].attrs["names"]) if "op_kind" in t else []
    kernels = _texts(t["op_kernel"].attrs["names"]) if "op_kernel" in t else []
    collectives = _texts(t["op_collective"].attrs["names"]) if "op_collective" in t else []
    host_calls = _texts(t["op_host_call"].attrs["names"]) if "op_host_call" in t else []
    prio = {}
    if "stream_rank" in t:
        for rk, ix, hp in zip(t["stream_rank"][()], t["stream_index"][()], t["stream_high_priority"][()]):
            prio[(int(rk), int(ix))] = bool(hp)
    modeled = np.asarray(t["modeled_stage_ms"][()], dtype=np.float64) if "modeled_stage_ms" in t else None
    if modeled is not None and (modeled.ndim != 2 or modeled.shape[1] != len(STAGES)):
        raise tr.fail(f"modeled_stage_ms has shape {modeled.shape}, expected (ranks, {len(STAGES)})")
    terms = np.asarray(t["stage_terms"][()], dtype=np.float64) if "stage_terms" in t else None
    if terms is not None and (terms.ndim != 2 or terms.shape[1] != 4):
        raise tr.fail(f"stage_terms has shape {terms.shape}, expected (n, 4)")
    rank_bytes = []
    while f"trace_rank{len(rank_bytes)}" in t:
        d = t[f"trace_rank{len(rank_bytes)}"]
        n_bytes = int(_number(d.attrs["bytes"]))
        words = np.asarray(d[()], dtype="<i8").tobytes()
        if not 0 <= n_bytes <= len(words):
            raise tr.fail(f"trace_rank{len(rank_bytes)}: byte count {n_bytes} outside its {len(words)} bytes")
        rank_bytes.append(words[:n_bytes])
    return TracedLayer(machine=tr.text("machine", ""), model_note=tr.text("model_note", ""),
                       measured=bool(tr.integer("measured")) if "measured" in t.attrs else False, ops=ops,
                       kind_names=kinds, kernel_names=kernels, collective_names=collectives,
                       stream_high_priority=prio, modeled_stage_ms=modeled,
                       stage_terms=terms, rank_bytes=rank_bytes,
                       waits_before_trace=tr.integer("waits_before_trace") if "waits_before_trace" in t.attrs else 0,
                       host_call_names=host_calls)


def _read_run(path: str, case: str, tolerances: tuple[float, float], g: h5py.Group) -> Run:
    r = _Reader(path, f"case '{case}' run '{g.name.rsplit('/', 1)[-1]}': ", g)
    if r.texts("stages") != list(STAGES):
        raise r.fail(f"stages {r.texts('stages')} are not the schema's {list(STAGES)}")
    ds = g.get("stage_ms")
    if not isinstance(ds, h5py.Dataset):
        raise r.fail("no dataset 'stage_ms'")
    shape = (r.integer("repeats"), r.integer("iterations"), r.integer("ranks"), len(STAGES))
    if ds.shape != shape:
        raise r.fail(f"stage_ms has shape {ds.shape}, expected (repeats, iterations, ranks, 7) = {shape}")
    stage_ms = np.asarray(ds[()], dtype=np.float64)
    overlap = None
    ov = g.get("v_overlap_ms")
    if ov is not None:
        if not isinstance(ov, h5py.Dataset) or ov.shape != shape[:3]:
            raise r.fail(f"v_overlap_ms has shape {getattr(ov, 'shape', None)}, expected {shape[:3]}")
        overlap = np.asarray(ov[()], dtype=np.float64)

    run = Run(name=g.name.rsplit("/", 1)[-1], transport=r.text("transport"),
              transport_used=r.text("transport_used"), fallback_reason=r.text("fallback_reason", ""),
              gather_transport=r.text("gather_transport", ""), schedule=r.text("schedule"),
              projection=r.text("projection", ""), parity_pass=bool(r.integer("parity_pass")),
              parity_finite=bool(r.integer("parity_finite")), parity_max_abs=r.number("parity_max_abs"),
              parity_rel_l2=r.number("parity_rel_l2"), scatter_bytes_per_rank=r.integer("scatter_bytes_per_rank"),
              scatter_bandwidth_gbs=r.number("scatter_bandwidth_gbs"), stage_ms=stage_ms, v_overlap_ms=overlap,
              ablation=r.text("ablation", ""), approximate=r.text("parity_kind", "exact") == "approximate",
              parity_computed=bool(r.integer("parity_computed")) if "parity_computed" in g.attrs else True,
              traced=_read_traced(r, g), graphs=r.text("graphs", ""),
              graph_replays=r.integer("graph_replays") if "graph_replays" in g.attrs else 0,
              graph_divergences=r.integer("graph_divergences") if "graph_divergences" in g.attrs else 0)
    he = g.get("host_enqueue_ms")
    if he is not None:
        if not isinstance(he, h5py.Dataset) or he.shape != shape[:2]:
            raise r.fail(f"host_enqueue_ms has shape {getattr(he, 'shape', None)}, expected {shape[:2]}")
        run.host_enqueue_ms = np.asarray(he[()], dtype=np.float64)
    if run.approximate:
        run.approx_pass = bool(r.integer("approx_pass"))
        if run.parity_pass:
            raise r.fail("parity_pass = 1 on an approximate run: the report is inconsistent")
        return run

    for name, computed in (("median_ms", run.median_ms), ("p10_ms", run.p10_ms), ("p90_ms", run.p90_ms)):
        _check_close(r, name, r.floats(name, len(STAGES)), computed)
    scatter = run.median_ms[STAGES.index("scatter")]
    bandwidth = run.scatter_bytes_per_rank / (scatter * 1e-3) / 1e9 if np.isfinite(scatter) and scatter > 0 else 0.0
    _check_close(r, "scatter_bandwidth_gbs", np.array([run.scatter_bandwidth_gbs]), np.array([bandwidth]))
    if not run.parity_computed:
        if run.parity_pass:
            raise r.fail("parity_pass = 1 although parity_computed = 0: the report is inconsistent")
        return run
    tol_max_abs, tol_rel_l2 = tolerances
    expected_pass = run.parity_finite and run.parity_max_abs <= tol_max_abs and run.parity_rel_l2 <= tol_rel_l2
    if expected_pass != run.parity_pass:
        raise r.fail(f"parity_pass = {int(run.parity_pass)} contradicts max_abs {run.parity_max_abs:.3g} "
                     f"(tolerance {tol_max_abs:.3g}), rel_l2 {run.parity_rel_l2:.3g} (tolerance {tol_rel_l2:.3g}), "
                     f"finite {int(run.parity_finite)}: the report is inconsistent")
    return run


def _read_case(path: str, world_size: int, g: h5py.Group) -> Case:
    name = g.name.rsplit("/", 1)[-1]
    r = _Reader(path, f"case '{name}': ", g)
    attrs = {k: g.attrs[k] for k in g.attrs}
    ulysses, tp = r.integer("ulysses"), r.integer("tp")
    degree = ulysses if ulysses > 0 else world_size // max(tp, 1)
    shape = (f"B{r.integer('batch')} S{r.integer('seq_len')} H{r.integer('heads')} D{r.integer('head_dim')} "
             f"{r.text('dtype')}, " + ("fused QKV" if r.integer("fused_qkv") else "separate Q/K/V"))
    tolerances = (r.number("tol_max_abs"), r.number("tol_rel_l2"))
    runs = []
    for run_name in r.texts("runs"):
        sub = g.get(run_name)
        if not isinstance(sub, h5py.Group):
            raise r.fail(f"run '{run_name}' is listed in 'runs' but has no group")
        runs.append(_read_run(path, name, tolerances, sub))
    return Case(name=name, attrs=attrs, runs=runs, ulysses_deck=ulysses, tp=tp, degree=degree, shape=shape)


def load_report(path: str) -> Report:
    """Reads and validates a report; every problem is a ReportError with a clear message."""
    if not os.path.exists(path):
        raise ReportError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ReportError(f"{path}: is a directory, not a report")
    try:
        is_hdf5 = h5py.is_hdf5(path)
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e}") from None
    if not is_hdf5:
        raise ReportError(f"{path}: not an HDF5 file (expected a ulysses-ipc report)")
    try:
        with h5py.File(path, "r") as f:
            return _read_report(path, f)
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e}") from None
    except (KeyError, TypeError, ValueError) as e:  # an object of the wrong kind or type where the schema has one
        raise ReportError(f"{path}: malformed report: {e}") from None


def _read_report(path: str, f: h5py.File) -> Report:
    r = _Reader(path, "", f)
    if "schema_version" not in f.attrs or _text(f.attrs.get("software", "")) != SOFTWARE:
        raise ReportError(f"{path}: not a ulysses-ipc report (no 'software = {SOFTWARE}' and 'schema_version' "
                          "root attributes; an input deck is not a report)")
    version = r.integer("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportError(f"{path}: unknown report schema_version {version} (this tool reads {SCHEMA_VERSION})")
    world_size = r.integer("world_size")
    cases_group = f.get("cases")
    case_names = r.texts("cases")
    cases = []
    for name in case_names:
        g = cases_group.get(name) if isinstance(cases_group, h5py.Group) else None
        if not isinstance(g, h5py.Group):
            raise ReportError(f"{path}: case '{name}' is listed in 'cases' but has no group /cases/{name}")
        cases.append(_read_case(path, world_size, g))
    versions_group = f.get("versions")
    versions = ({k: _text(v) for k, v in versions_group.attrs.items()}
                if isinstance(versions_group, h5py.Group) else {})
    return Report(path=path, software_version=r.text("software_version"), date=r.text("date"), mode=r.text("mode"),
                  world_size=world_size, command_line=r.text("command_line", ""), deck=r.text("deck", ""),
                  hosts=r.texts("hosts"), devices=r.texts("devices"),
                  host_cpus=r.texts("host_cpus", []), versions=versions, cases=cases)
