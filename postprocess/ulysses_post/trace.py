"""`trace`: each run's traced layer as Chrome Trace Event JSON, the format the Perfetto UI
and chrome://tracing open (and the PyTorch profiler, Nsight exports and JAX write).

Layout of the file:
- one process per rank and time source: "rank R (measured)" from the events around each
  op (CPU times in simulation mode, and said so), "rank R (modelled on MACHINE)" from the
  simulator's replay; the measured block first, each named with its case and run;
- one thread per stream of the rank, named by what runs on it ("stream 3: copy, high
  priority"), plus a "host" thread for the host's waits and two threads for the stage
  spans ("stages" and "layer") of the pipeline's own stage accounting;
- one complete ("X") slice per op, named for what it is, its args carrying bytes, flops,
  the achieved rate and the op's place in the report (`op` = index in the rank's trace);
- flows (Perfetto's flow v2: `bind_id` with `flow_out`/`flow_in`) from every epoch write
  to each wait it releases, and from every event record to each wait on it. A flow ends
  on a zero-length marker at the end of the wait ("epoch 7 released", "event ready"),
  not on the wait itself: a wait starts before its release, and the trace processor
  drops a flow whose end it meets before its start.

Measured times count from each rank's own layer start (no common clock across ranks), so
a cross-rank arrow that would end before it starts is left out and counted in the
file's `otherData` (the trace processor would drop it). Host syncs are not timed by the
device's events, so a measured process has no host thread: its host syncs are counted in
`otherData` instead of being drawn at invented times. A measured op's args carry `host_us`,
how long its call held the host (its enqueue); memory calls (allocations, exports, frees)
have a measured host time but no device times, so `otherData.runs[].host_calls_measured`
lists them per rank, named, with that time. Times are written in whole nanoseconds (start
and end each rounded), so that ops back to back on a stream stay properly nested for the
trace processor, from the layer's start, or from the earliest op when one starts before it
(Perfetto drops negative timestamps; `otherData.time_origin_ns` says where time 0 is).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import optrace
from .report import STAGES, Case, Report, ReportError, Run, TracedLayer

# The order in which each schedule submits its tensors to the scatter, and the order of the
# projection's output columns in the GEMMs it runs (lib/schedule.cpp: the fused projection
# is issued as its Q/K columns, then V's; v-project-first and v-first-split start with V):
# copies, all-to-alls and GEMMs are named for their tensors by their place in these orders.
SUBMIT_ORDER = {"baseline": ("Q", "K", "V"), "v-first": ("V", "Q", "K"), "v-project-first": ("V", "Q", "K"),
                "v-first-split": ("V", "Q", "K")}
PROJECTION_COLUMNS = {"baseline": "QKV", "v-first": "QKV", "v-project-first": "VQK", "v-first-split": "VQK"}
_COLLECTIVE_NAMES = {"all_to_all": "all-to-all", "all_reduce": "all-reduce", "send_recv": "send/recv"}
VIEWS = ("measured", "modeled")

# Thread ids besides the streams' (stream i is thread i + 1).
_TID_HOST, _TID_STAGES, _TID_LAYER = 10_000, 10_001, 10_002


def _ns(ms: float) -> int:
    return int(round(ms * 1e6))


def time_origin_ns(runs: list[Run]) -> int:
    """Where the file's time 0 lies, in ns of the report's clock: 0, or earlier when an op
    starts before the layer's start (a measured event on the host device can), since the
    trace processor drops negative timestamps."""
    starts = [np.nanmin(col) for r in runs if r.traced is not None
              for col in (r.traced.ops.get(f"op_{v}_start_ms") for v in VIEWS)
              if col is not None and np.isfinite(col).any()]
    return min(0, int(math.floor(min(starts, default=0.0) * 1e6)))


@dataclass
class RankView:
    """One rank's ops with everything the slices need, in issue order."""

    rank: int
    rows: np.ndarray  # indices into the report's op_* columns
    ops: np.ndarray  # optrace.OP_DTYPE
    prior_writes: list[tuple[int, int, int]]
    names: list[str] = field(default_factory=list)


def _column(traced: TracedLayer, name: str) -> np.ndarray:
    if name not in traced.ops:
        raise KeyError(f"traced_layer has no dataset '{name}'")
    return traced.ops[name]


def rank_views(run: Run, where: str) -> list[RankView]:
    """Each rank's ops from the columns and the byte form, checked against each other."""
    t = run.traced
    assert t is not None
    rank_col = _column(t, "op_rank")
    if not t.rank_bytes:
        raise ReportError(f"{where}: traced_layer has no trace_rank<R> datasets (docs/report.md)")
    views = []
    for r, b in enumerate(t.rank_bytes):
        try:
            parsed = optrace.parse(b)
        except optrace.TraceBytesError as e:
            raise ReportError(f"{where}: traced_layer/trace_rank{r}: {e}") from None
        rows = np.flatnonzero(rank_col == r)
        if parsed.rank != r or len(parsed.ops) != len(rows):
            raise ReportError(f"{where}: traced_layer/trace_rank{r} holds rank {parsed.rank} with {len(parsed.ops)} "
                              f"ops, the op_* columns {len(rows)} ops of rank {r}: the report is inconsistent")
        for col, fld in (("op_kind", "kind"), ("op_stream", "stream"), ("op_waits_for", "waits_for")):
            if not np.array_equal(_column(t, col)[rows], parsed.ops[fld]):
                raise ReportError(f"{where}: traced_layer: {col} of rank {r} disagrees with trace_rank{r}")
        views.append(RankView(rank=r, rows=rows, ops=parsed.ops, prior_writes=parsed.prior_writes))
    covered = sum(len(v.rows) for v in views)
    if covered != len(rank_col):
        raise ReportError(f"{where}: traced_layer: {len(rank_col) - covered} ops of ranks without a trace_rank<R>")
    return views


class _Namer:
    """Names the ops of one rank by what they are, walking them in issue order."""

    def __init__(self, run: Run, case: Case, t: TracedLayer) -> None:
        self.t = t
        self.schedule = run.schedule
        a = case.attrs
        # One tensor's projection columns on a rank: heads x head_dim, split by tensor parallelism.
        self.unit = int(np.asarray(a.get("heads", 0)).reshape(-1)[0]) * int(
            np.asarray(a.get("head_dim", 0)).reshape(-1)[0]) // max(case.tp, 1)

    def kind(self, op: np.void) -> str:
        return self.t.kind_names[int(op["kind"])]

    def names(self, v: RankView) -> list[str]:
        ops = v.ops
        kernels = [i for i in range(len(ops)) if self.kind(ops[i]) == "kernel"]
        compute = int(ops[kernels[0]]["stream"]) if kernels else 0
        attention = next((i for i in kernels if self.t.kernel_names[int(ops[i]["kernel"])] == "attention"), len(ops))
        tensors = self._submissions(v, compute, attention)
        gemm_names = self._projection_gemms(ops, [i for i in kernels if i < attention])
        norms = [i for i in kernels if self.t.kernel_names[int(ops[i]["kernel"])] == "norm_rope" and i < attention]
        scatter_collectives = [i for i in range(attention) if self.kind(ops[i]) == "collective"]
        submit = SUBMIT_ORDER.get(self.schedule, ())
        out = []
        for i, op in enumerate(ops):
            phase = "scatter" if i < attention else "gather"
            k = self.kind(op)
            if k == "kernel":
                kk = self.t.kernel_names[int(op["kernel"])]
                if kk == "gemm":
                    out.append(gemm_names.get(i, "output projection GEMM" if i > attention else "GEMM"))
                elif kk == "norm_rope":
                    # Q's then K's, or both in one launch (the schedules that norm them together).
                    which = (" " + "QK"[norms.index(i)] if len(norms) == 2 and i in norms
                             else " Q+K" if len(norms) == 1 and i in norms else "")
                    out.append(f"norm+RoPE{which}")
                elif kk == "convert":
                    out.append("convert (dtype)")
                else:
                    out.append(kk if kk != "none" else "kernel")
            elif k == "copy":
                of = f" of {tensors[i]}" if tensors.get(i) else (" of O" if phase == "gather" else "")
                src, dst = self._mem_ranks(v, i)
                if src == dst == v.rank:
                    out.append(f"local copy{of}")
                elif dst not in (v.rank, -1):
                    out.append(f"copy{of} to rank {dst}")
                else:
                    out.append(f"copy{of} from rank {src}")
            elif k == "collective":
                c = self._collective(op)
                name = _COLLECTIVE_NAMES.get(c, c)
                if c != "all_to_all":
                    pass  # e.g. tensor parallelism's all-reduce: named as it is
                elif phase == "scatter" and len(scatter_collectives) == len(submit):
                    name += f" of {submit[scatter_collectives.index(i)]}"
                elif phase == "scatter" and len(scatter_collectives) == 1 and submit:
                    name += " of Q, K, V"  # the three tensors in one call
                else:
                    name += f" ({phase})"
                out.append(name)
            elif k == "write_value":
                dst = int(self.t.ops["op_dst_rank"][v.rows[i]])
                out.append(f"write epoch {int(op['value'])} to rank {dst}" if dst >= 0
                           else f"write epoch {int(op['value'])}")
            elif k == "wait_value":
                peer = int(op["label_peer"])
                out.append(f"wait epoch {int(op['value'])}" + (f" (group rank {peer})" if peer >= 0 else ""))
            elif k == "event_record":
                out.append("event record")
            elif k == "stream_wait_event":
                w = int(op["waits_for"])
                out.append(f"wait for event of stream {int(ops[w]['stream'])}" if w >= 0 else "wait for event")
            elif k == "host_sync":
                out.append("host sync")
            elif k == "host_call":
                out.append(self._host_call(v, i))
            else:
                out.append(k)
        return out

    def _host_call(self, v: RankView, i: int) -> str:
        """"host call free_vmm (99.0 MiB)": its kind from `op_host_call` where the report has it."""
        names, row = self.t.host_call_names, v.rows[i]
        c = int(self.t.ops["op_host_call"][row]) if "op_host_call" in self.t.ops else -1
        what = names[c] if 0 < c < len(names) else "memory"
        size = float(v.ops[i]["bytes"])
        return f"host call {what}" + (f" ({size / 2**20:.1f} MiB)" if size > 0 else "")

    def _collective(self, op: np.void) -> str:
        names = self.t.collective_names
        c = int(op["collective"])
        return names[c] if 0 <= c < len(names) else "collective"

    def _mem_ranks(self, v: RankView, i: int) -> tuple[int, int]:
        row = v.rows[i]
        return int(self.t.ops["op_src_rank"][row]), int(self.t.ops["op_dst_rank"][row])

    def _projection_gemms(self, ops: np.ndarray, kernels: list[int]) -> dict[int, str]:
        """The projection's GEMMs named by the tensors whose columns each writes ("QK GEMM",
        "V GEMM"): they run through the schedule's column order, a GEMM of N columns taking
        the next N. A projection split otherwise (or not adding up to Q, K and V) is named
        "projection GEMM"."""
        gemms = [i for i in kernels if self.t.kernel_names[int(ops[i]["kernel"])] == "gemm"]
        order = PROJECTION_COLUMNS.get(self.schedule, "")
        n = [int(ops[i]["dims"][1]) for i in gemms]
        if not order or self.unit <= 0 or sum(n) != len(order) * self.unit:
            return {i: "projection GEMM" for i in gemms}
        out, col = {}, 0
        for i, cols in zip(gemms, n):
            tensors = order[col // self.unit:(col + cols - 1) // self.unit + 1]
            out[i] = f"{tensors} GEMM"
            col += cols
        return out

    def _submissions(self, v: RankView, compute: int, attention: int) -> dict[int, str]:
        """The tensor of every scatter copy: a submission starts where a copy stream waits
        for an event the compute stream recorded (the producer's "ready") and copies follow
        (a wait with no copy after it, such as the layer's start, starts none); the k-th is
        the schedule's k-th submitted tensor. Left unnamed when the count does not match."""
        submit = SUBMIT_ORDER.get(self.schedule)
        if not submit:
            return {}
        ops = v.ops
        k, last_target, pending, tensor_of = -1, None, None, {}
        for i in range(attention):
            op = ops[i]
            kind = self.kind(op)
            if kind == "stream_wait_event" and int(op["stream"]) != compute:
                w = int(op["waits_for"])
                if w >= 0 and int(ops[w]["stream"]) == compute and self.kind(ops[w]) == "event_record":
                    if w != last_target:
                        pending = w
            elif kind == "copy":
                if pending is not None:
                    k, last_target, pending = k + 1, pending, None
                if k >= 0:
                    tensor_of[i] = k
        if k + 1 != len(submit):
            return {}
        return {i: submit[j] for i, j in tensor_of.items()}


def _stream_names(t: TracedLayer, v: RankView, kinds: list[str]) -> dict[int, str]:
    """'stream 3: copy, high priority': a stream is named by what runs on it."""
    out = {}
    streams = sorted({int(s) for s in v.ops["stream"] if s >= 0})  # a stream without ops has no thread
    for s in streams:
        on = {kinds[i] for i in range(len(v.ops)) if int(v.ops[i]["stream"]) == s}
        if "kernel" in on:
            what = "compute"
        elif "copy" in on or "collective" in on:
            what = "copy"
        elif on & {"write_value", "wait_value"}:
            what = "epoch handshake"
        else:
            what = "events only"
        if t.stream_high_priority.get((v.rank, s)):
            what += ", high priority"
        out[s] = f"stream {s}: {what}"
    return out


@dataclass
class _Slice:
    name: str
    tid: int
    start: float
    end: float
    args: dict[str, Any]


def _rate_args(op: np.void, dur_ms: float) -> dict[str, Any]:
    args: dict[str, Any] = {"bytes": float(op["bytes"]), "flops": float(op["flops"])}
    if dur_ms > 0:
        if op["bytes"] > 0:
            args["achieved_GB_per_s"] = float(op["bytes"]) / (dur_ms * 1e-3) / 1e9
        if op["flops"] > 0:
            args["achieved_TFLOP_per_s"] = float(op["flops"]) / (dur_ms * 1e-3) / 1e12
    return args


def _stage_spans(t: TracedLayer, rank: int, ends: np.ndarray) -> tuple[list[tuple[str, str, float, float]], list[str]]:
    """The rank's stages as spans: each stage is a sum of (end of op a - end of op b)
    pairs (stage_terms); each pair becomes one span. Stages not of that form are left out
    and named in the second list."""
    if t.stage_terms is None:
        return [], []
    spans, skipped = [], []
    rows = t.stage_terms[t.stage_terms[:, 0] == rank]
    for s, stage in enumerate(STAGES):
        terms = rows[rows[:, 1] == s]
        plus = sorted(float(ends[int(op)]) for op, c in zip(terms[:, 2], terms[:, 3]) if c == 1)
        minus = sorted(float(ends[int(op)]) for op, c in zip(terms[:, 2], terms[:, 3]) if c == -1)
        if len(plus) != len(minus) or len(plus) + len(minus) != len(terms) or not all(
                np.isfinite(plus + minus)):
            skipped.append(stage)
            continue
        for j, (a, b) in enumerate(zip(minus, plus)):
            label = stage if len(plus) == 1 else f"{stage} ({j + 1} of {len(plus)})"
            spans.append((stage, label, a, b))
    return spans, skipped


class _Writer:
    def __init__(self, origin_ns: int) -> None:
        self.events: list[dict[str, Any]] = []
        self.other: dict[str, Any] = {}
        self.origin_ns = origin_ns
        self._pid = 0
        self._flow = 0
        self._deferred: list[tuple[int, _Slice, str, dict[str, Any]]] = []

    def next_flow_id(self) -> int:
        self._flow += 1
        return self._flow

    def process(self, name: str) -> int:
        self._pid += 1
        self.events.append({"ph": "M", "name": "process_name", "pid": self._pid, "args": {"name": name}})
        self.events.append({"ph": "M", "name": "process_sort_index", "pid": self._pid,
                            "args": {"sort_index": self._pid}})
        return self._pid

    def thread(self, pid: int, tid: int, name: str) -> None:
        self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        self.events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                            "args": {"sort_index": tid}})

    def defer(self, pid: int, s: _Slice, cat: str, flow: dict[str, Any]) -> None:
        """A flow's end, written after every op: at equal times the trace processor then
        meets the flow's start first."""
        self._deferred.append((pid, s, cat, flow))

    def finish(self) -> None:
        for pid, s, cat, flow in self._deferred:
            self.slice(pid, s, cat, flow)
        self._deferred = []

    def slice(self, pid: int, s: _Slice, cat: str, flow: dict[str, Any] | None = None) -> None:
        t0, t1 = _ns(s.start) - self.origin_ns, _ns(s.end) - self.origin_ns
        e = {"ph": "X", "name": s.name, "cat": cat, "pid": pid, "tid": s.tid, "ts": t0 / 1000,
             "dur": max(t1 - t0, 0) / 1000, "args": s.args}
        if flow:
            e.update(flow)
        self.events.append(e)


def _view_label(report: Report, t: TracedLayer, view: str) -> str:
    if view == "modeled":
        return f"modelled on {t.machine}"
    return "measured, CPU times of a simulated run" if report.simulated else "measured"


def _views(t: TracedLayer) -> list[str]:
    out = []
    if t.measured:
        out.append("measured")
    if t.modeled and np.isfinite(_column(t, "op_modeled_end_ms")).any():
        out.append("modeled")
    return out


def _releases(t: TracedLayer, views: list[RankView], view: str) -> dict[tuple[int, int], Any]:
    """For every epoch wait (rank, op): the write (rank, op) that releases it, as the
    simulator decides: of the writes to the same word with a value >= the wait's, the one
    that ends first in this view's times, a write from before the layer first of all.
    "before": released by a write from before the layer; None: no write of its word at all."""
    end_col = _column(t, f"op_{view}_end_ms")
    writes: dict[tuple[int, int, int], list[tuple[int, float, int, int]]] = {}
    for v in views:
        for mem, offset, value in v.prior_writes:  # done before the layer: they end at -inf
            writes.setdefault(optrace.word_key(mem, offset, v.rank), []).append((value, -math.inf, v.rank, -1))
        for i, op in enumerate(v.ops):
            if t.kind_names[int(op["kind"])] == "write_value":
                key = optrace.word_key(int(op["word_mem"]), int(op["word_offset"]), v.rank)
                writes.setdefault(key, []).append((int(op["value"]), float(end_col[v.rows[i]]), v.rank, i))
    out = {}
    for v in views:
        for i, op in enumerate(v.ops):
            if t.kind_names[int(op["kind"])] != "wait_value":
                continue
            key = optrace.word_key(int(op["word_mem"]), int(op["word_offset"]), v.rank)
            cands = [(end, r, j) for value, end, r, j in writes.get(key, []) if value >= int(op["value"])
                     and not math.isnan(end)]
            first = min(cands) if cands else None
            out[(v.rank, i)] = None if first is None else "before" if first[0] == -math.inf else first[1:]
    return out


class _RunExport:
    """One run's traced layer into the writer: per time source, each rank's process."""

    def __init__(self, w: _Writer, report: Report, case: Case, run: Run) -> None:
        where = f"{report.path}: case '{case.name}' run '{run.name}'"
        t = run.traced
        if t is None:
            raise ReportError(f"{where}: no traced layer (docs/report.md, traced_layer), nothing to export")
        if "op_rank" not in t.ops or len(t.ops["op_rank"]) == 0:
            raise ReportError(f"{where}: the traced layer holds no ops")
        self.w, self.report, self.case, self.run, self.t = w, report, case, run, t
        self.views = rank_views(run, where)
        namer = _Namer(run, case, t)
        for v in self.views:
            v.names = namer.names(v)
        self.available = _views(t)
        if not self.available:
            raise ReportError(f"{where}: the traced layer has neither measured nor modelled op times "
                              f"({t.model_note or 'not modelled'})")
        self.info: dict[str, Any] = {"case": case.name, "run": run.name, "schedule": run.schedule,
                                     "transport_used": run.transport_used, "views": self.available,
                                     "machine": t.machine or None, "model_note": t.model_note or None}

    def write(self) -> None:
        for view in self.available:
            self.view = view
            self.start = _column(self.t, f"op_{view}_start_ms")
            self.end = _column(self.t, f"op_{view}_end_ms")
            self.release = _releases(self.t, self.views, view)
            self.flows = self._flows()
            # One bind id per source op, shared by every wait it releases (Perfetto takes
            # one that reads as a number).
            self.bind = {src: f"0x{self.w.next_flow_id():x}" for src in dict.fromkeys(self.flows.values())}
            self.untimed: dict[str, int] = {}
            for v in self.views:
                self._rank(v)
            if self.untimed:
                self.info.setdefault("ops_without_times", {})[view] = self.untimed
        self.w.other.setdefault("runs", []).append(self.info)

    def _timed(self, v: RankView, i: int) -> bool:
        row = v.rows[i]
        return bool(math.isfinite(float(self.start[row])) and math.isfinite(float(self.end[row])))

    def _flows(self) -> dict[tuple[int, int], tuple[int, int]]:
        """wait (rank, op) -> the op that releases it, for waits that get an arrow: an
        epoch wait released by a write in the layer, an event wait (or host sync) whose
        event record has times; both ends timed. Measured times of different ranks have
        no common clock (each counts from its own rank's layer start), so a release on
        another rank can appear to start after the wait ended: the trace processor drops
        such an arrow, so it is left out here and counted in `flows_not_drawn`."""
        out, backwards = {}, 0
        for v in self.views:
            for i, op in enumerate(v.ops):
                if not self._timed(v, i):
                    continue
                kind = self.t.kind_names[int(op["kind"])]
                src = None
                if kind == "wait_value" and isinstance(self.release[(v.rank, i)], tuple):
                    src = self.release[(v.rank, i)]
                elif kind in ("stream_wait_event", "host_sync") and int(op["waits_for"]) >= 0:
                    if self._timed(v, int(op["waits_for"])):
                        src = (v.rank, int(op["waits_for"]))
                if src is None:
                    continue
                src_start = float(self.start[self.views[src[0]].rows[src[1]]])
                if _ns(float(self.end[v.rows[i]])) < _ns(src_start):
                    backwards += 1
                    continue
                out[(v.rank, i)] = src
        if backwards:
            self.info.setdefault("flows_not_drawn", {})[self.view] = backwards
        return out

    def _rank(self, v: RankView) -> None:
        label = _view_label(self.report, self.t, self.view)
        pid = self.w.process(f"{self.case.name}/{self.run.name}: rank {v.rank} ({label})")
        kinds = [self.t.kind_names[int(o["kind"])] for o in v.ops]
        for s, name in _stream_names(self.t, v, kinds).items():
            self.w.thread(pid, s + 1, name)
        if any(k in ("host_sync", "host_call") and self._timed(v, i) for i, k in enumerate(kinds)):
            self.w.thread(pid, _TID_HOST, "host")
        for i in range(len(v.ops)):
            if self._timed(v, i):
                self._op(pid, v, i, kinds[i])
            else:
                self.untimed[kinds[i]] = self.untimed.get(kinds[i], 0) + 1
        if self.view == "measured":
            self._host_calls(v, kinds)
        self._stages(pid, v)

    def _op(self, pid: int, v: RankView, i: int, kind: str) -> None:
        op, row = v.ops[i], v.rows[i]
        t0, t1 = float(self.start[row]), float(self.end[row])
        args = _rate_args(op, t1 - t0)
        args.update({"op": i, "rank": v.rank, "kind": kind, "start_ms": t0, "end_ms": t1, "times": self.view})
        if kind in ("kernel", "copy"):
            args["dims"] = [int(d) for d in op["dims"]]
        host_us = float(op["measured_host_us"]) if self.view == "measured" else math.nan
        if math.isfinite(host_us):
            args["host_us"] = host_us  # how long its call held the host (its enqueue)
        if kind in ("write_value", "wait_value"):
            args["epoch"] = int(op["value"])
        if kind == "wait_value":
            src = self.release[(v.rank, i)]
            args["released_by"] = ("a write from before the traced layer" if src == "before" else
                                   "no write of its word (not released in this trace)" if src is None else
                                   f"rank {src[0]} op {src[1]} ({self.views[src[0]].names[src[1]]})")
        elif kind in ("stream_wait_event", "host_sync"):
            args["waits_for_op"] = int(op["waits_for"])
        tid = _TID_HOST if int(op["stream"]) < 0 else int(op["stream"]) + 1
        out_flow = {"bind_id": self.bind[(v.rank, i)], "flow_out": True} if (v.rank, i) in self.bind else None
        self.w.slice(pid, _Slice(v.names[i], tid, t0, t1, args), cat=f"op,{self.view}", flow=out_flow)
        src = self.flows.get((v.rank, i))
        if src is not None:
            marker = f"epoch {int(op['value'])} released" if kind == "wait_value" else "event ready"
            self.w.defer(pid, _Slice(marker, tid, t1, t1, {"wait_op": i, "rank": v.rank, "times": self.view}),
                         cat=f"release,{self.view}", flow={"bind_id": self.bind[src], "flow_in": True})

    def _host_calls(self, v: RankView, kinds: list[str]) -> None:
        """A memory call has a measured host time but no device times, so no place on the
        timeline: listed in `otherData`, per rank in issue order, with its name."""
        calls = [{"op": i, "name": v.names[i], "host_us": float(op["measured_host_us"])}
                 for i, op in enumerate(v.ops)
                 if kinds[i] == "host_call" and math.isfinite(float(op["measured_host_us"]))]
        if calls:
            self.info.setdefault("host_calls_measured", {})[f"rank {v.rank}"] = calls

    def _stages(self, pid: int, v: RankView) -> None:
        spans, skipped = _stage_spans(self.t, v.rank, self.end[v.rows])
        if spans:
            self.w.thread(pid, _TID_STAGES, "stages")
            self.w.thread(pid, _TID_LAYER, "layer")
        total: dict[str, float] = {}
        for stage, _, a, b in spans:
            total[stage] = total.get(stage, 0.0) + (b - a)
        for stage, label, a, b in spans:
            args = {"stage": stage, "stage_ms": total[stage], "times": self.view}
            tid = _TID_LAYER if stage == "layer" else _TID_STAGES
            self.w.slice(pid, _Slice(label, tid, a, b, args), cat=f"stage,{self.view}")
        if skipped:
            self.info.setdefault("stages_not_drawn", {})[f"rank {v.rank} {self.view}"] = skipped


def select_runs(report: Report, case_names: list[str] | None,
                run_names: list[str] | None) -> Iterator[tuple[Case, Run]]:
    cases = report.select(case_names)
    found = set()
    for case in cases:
        for run in case.runs:
            if not run_names or run.name in run_names:
                found.add(run.name)
                yield case, run
    missing = [n for n in (run_names or []) if n not in found]
    if missing:
        known = sorted({r.name for c in cases for r in c.runs})
        raise ReportError(f"{report.path}: no run {', '.join(missing)} in the chosen case(s) "
                          f"(runs: {', '.join(known)})")


def export(report: Report, case_names: list[str] | None = None, run_names: list[str] | None = None) -> dict[str, Any]:
    """The Chrome Trace Event JSON object (a dict) of the chosen runs' traced layers."""
    chosen = list(select_runs(report, case_names, run_names))
    w = _Writer(time_origin_ns([r for _, r in chosen]))
    if not chosen:
        raise ReportError(f"{report.path}: no run to export (the report holds no runs)")
    for case, run in chosen:
        _RunExport(w, report, case, run).write()
    w.finish()
    notes = []
    if report.simulated:
        notes.append("measured times are CPU times of a simulated run (simulation mode), not GPU figures")
    if any(r.traced is not None and r.traced.modeled for _, r in chosen):
        notes.append("processes named 'modelled on MACHINE' are MODELLED by the simulator (docs/model.md), "
                     "not measured")
    notes.append("host syncs are not timed by device events: measured processes leave them out "
                 "(ops_without_times counts them); modelled processes draw them on the 'host' thread")
    if w.origin_ns:
        notes.append(f"time 0 of this file is {-w.origin_ns} ns before the layer's start (an op began before it)")
    w.other.update({"time_origin_ns": w.origin_ns, "report": report.path,
                    "software": f"ulysses-ipc {report.software_version}",
                    "mode": report.mode, "date": report.date, "world_size": report.world_size, "notes": notes})
    return {"traceEvents": w.events, "displayTimeUnit": "ns", "otherData": w.other}


def write(report: Report, path: str, case_names: list[str] | None = None, run_names: list[str] | None = None) -> int:
    """Writes the JSON file; returns the number of runs written."""
    doc = export(report, case_names, run_names)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))
    return len(doc["otherData"]["runs"])
