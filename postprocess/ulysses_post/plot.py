"""`plot`: PNG figures of a report: stage bars, a per-rank timeline of one layer, a
per-stream Gantt chart of each run's traced layer (measured on the GPU, modelled where a
machine was modelled; modelled first in simulation and model mode), and speedup against
Ulysses degree.

Only what the report holds is drawn. It stores per-stage durations of each timed layer
on each rank, not start times, so the timeline lays a rank's stages back to back in
stage order and says so; the V/QK overlap is drawn as an amount inside the norm_rope
segment, since its position there is not recorded.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from . import stats
from .report import STAGES, Case, Report, Run

# Stages that tile a layer on the compute stream (the last one, `layer`, is their span).
_PARTS = STAGES[:-1]
_STAGE_COLORS = dict(zip(STAGES, ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#7f7f7f")))
_DPI = 110


def _mode_note(reports: list[Report]) -> str:
    modes = sorted({r.mode for r in reports})
    if modes == ["model"]:
        return "model mode: every time MODELED (no data ran)"
    if modes == ["sim"]:
        return "simulation mode: CPU times of a simulated run, not GPU figures"
    if "sim" in modes:
        return "MIXED modes " + ", ".join(modes) + ": simulated CPU times are not GPU figures"
    return "mode " + ", ".join(modes)


def _run_label(run: Run) -> str:
    used = f" (ran {run.transport_used})" if run.fell_back else ""
    return run.name + used


def _save(fig: Figure, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=_DPI)
    return path


def stage_bars(report: Report, case: Case, out_dir: str) -> str:
    """Grouped bars: per stage, one bar per run at its median, whiskers p10..p90."""
    fig = Figure(figsize=(min(14.0, 8.0 + 0.8 * len(case.runs)), 5.0))
    ax = fig.add_subplot()
    n = max(1, len(case.runs))
    width = 0.8 / n
    x = np.arange(len(STAGES))
    colors = [f"C{i % 10}" for i in range(n)]
    for i, run in enumerate(case.runs):
        med = run.median_ms
        err = np.vstack([med - run.p10_ms, run.p90_ms - med])
        ax.bar(x + (i - (n - 1) / 2) * width, med, width, yerr=err, capsize=2, color=colors[i],
               label=_run_label(run), edgecolor="black", linewidth=0.4)
    ax.set_xticks(x, list(STAGES))
    ax.set_ylabel("ms (critical path: slowest rank per layer)")
    ax.set_title(f"case {case.name}: stage medians per run, whiskers p10..p90\n"
                 f"{case.shape}, ulysses {case.degree}, tp {case.tp}; {_mode_note([report])}", fontsize=9)
    ax.legend(fontsize=8, ncol=2 if n > 3 else 1)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, out_dir, f"{case.name}.stages.png")


def representative_layer(run: Run) -> tuple[int, int]:
    """(repeat, iteration) of the timed layer whose critical-path layer time is nearest the median."""
    crit = run.stage_ms[..., run.stage("layer")].max(axis=2)  # (repeats, iterations)
    flat = int(np.nanargmin(np.abs(crit - run.layer_median))) if np.isfinite(run.layer_median) else 0
    return divmod(flat, run.iterations)


def timeline(report: Report, case: Case, out_dir: str) -> str:
    """Per run, each rank's stages of one layer back to back on the compute stream."""
    n = max(1, len(case.runs))
    ranks = max((r.ranks for r in case.runs), default=1)
    fig = Figure(figsize=(11.0, 1.1 + n * (0.55 + 0.32 * ranks)))
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    any_overlap = False
    drawn_ends: list[float] = []
    for ax, run in zip(axes, case.runs):
        if run.stage_ms.size == 0:
            ax.set_title(f"{_run_label(run)}: no timed layers", fontsize=8, loc="left")
            continue
        rep, it = representative_layer(run)
        layer = run.stage_ms[rep, it]  # (ranks, stages)
        for rank in range(run.ranks):
            start = 0.0
            for stage in _PARTS:
                d = float(layer[rank, run.stage(stage)])
                ax.barh(rank, d, left=start, height=0.6, color=_STAGE_COLORS[stage], edgecolor="white", linewidth=0.3)
                if stage == "norm_rope" and run.v_overlap_ms is not None:
                    ov = float(run.v_overlap_ms[rep, it, rank])
                    if ov > 0:
                        any_overlap = True
                        ax.add_patch(Rectangle((start, rank - 0.3), min(ov, d), 0.6, fill=False, hatch="////",
                                               edgecolor="black", linewidth=0.0))
                start += d
            total = float(layer[rank, run.stage("layer")])
            drawn_ends.append(max(start, total))
            ax.plot([total, total], [rank - 0.4, rank + 0.4], color="black", linewidth=1.2)
            label = f"layer {total:.3f} ms"
            if run.v_overlap_ms is not None:
                label += f"; V/QK overlap {float(run.v_overlap_ms[rep, it, rank]):.3f} ms"
            ax.text(max(start, total), rank, "  " + label, va="center", fontsize=7)
        ax.set_yticks(range(run.ranks), [f"rank {r}" for r in range(run.ranks)], fontsize=7)
        ax.set_ylim(run.ranks - 0.5, -0.5)
        ax.set_title(f"{_run_label(run)}: repeat {rep}, iteration {it} (layer nearest the median "
                     f"{run.layer_median:.3f} ms)", fontsize=8, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("ms from the start of the layer (stage durations laid end to end)")
    # Room on the right of the longest drawn layer for the per-rank labels.
    right = max(drawn_ends, default=0.0)
    axes[-1].set_xlim(0, right * 1.5 if np.isfinite(right) and right > 0 else 1.0)
    handles: list[Artist] = [Patch(color=_STAGE_COLORS[s], label=s) for s in _PARTS]
    handles.append(Line2D([], [], color="black", marker="|", linestyle="none", markersize=10,
                          label="end of the stage 'layer'"))
    if any_overlap:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="////",
                             label="V scatter during norm_rope (amount; position not recorded)"))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle(f"case {case.name}: one layer per rank, stage durations from stage_ms laid back to back "
                 f"(the report holds durations, not start times)\n{_mode_note([report])}", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return _save(fig, out_dir, f"{case.name}.timeline.png")


# Op categories of the Gantt chart, in legend order.
_OP_COLORS = {"gemm": "#4e79a7", "norm_rope": "#f28e2b", "attention": "#76b7b2", "convert": "#edc948",
              "copy (same GPU)": "#b07aa1", "copy (to/from a peer)": "#e15759", "collective": "#59a14f",
              "memset": "#9c755f", "wait (event or epoch word)": "#d3d3d3", "write (epoch word)": "#000000"}


def _op_category(traced, i: int) -> str | None:
    ops = traced.ops
    kind = traced.kind_names[int(ops["op_kind"][i])]
    if kind == "kernel":
        k = traced.kernel_names[int(ops["op_kernel"][i])]
        return k if k in _OP_COLORS else "gemm"
    if kind == "copy":
        rank = int(ops["op_rank"][i])
        local = int(ops["op_src_rank"][i]) == rank and int(ops["op_dst_rank"][i]) == rank
        return "copy (same GPU)" if local else "copy (to/from a peer)"
    if kind == "collective":
        return "collective"
    if kind == "memset":
        return "memset"
    if kind in ("wait_value", "stream_wait_event"):
        return "wait (event or epoch word)"
    if kind == "write_value":
        return "write (epoch word)"
    return None  # event records and host syncs take no stream time


def gantt(report: Report, case: Case, out_dir: str, which: str) -> str | None:
    """Per run, every rank's streams in the traced layer: one bar per op from its start to
    its end, `which` = "modeled" or "measured" times. None when no run has such times."""
    runs = [r for r in case.runs if r.traced is not None and "op_rank" in r.traced.ops
            and (r.traced.modeled if which == "modeled" else r.traced.measured)]
    if not runs:
        return None
    key0, key1 = (f"op_{which}_start_ms", f"op_{which}_end_ms")
    heights = []
    for run in runs:
        ops = run.traced.ops
        heights.append(len({(int(a), int(b)) for a, b in zip(ops["op_rank"], ops["op_stream"]) if b >= 0}))
    fig = Figure(figsize=(12.0, 1.2 + sum(0.9 + 0.28 * h for h in heights)))
    axes = fig.subplots(len(runs), 1, squeeze=False, gridspec_kw={"height_ratios": [max(1, h) for h in heights]})[:, 0]
    used: set[str] = set()
    for ax, run in zip(axes, runs):
        t = run.traced
        ops = t.ops
        rows = sorted({(int(a), int(b)) for a, b in zip(ops["op_rank"], ops["op_stream"]) if b >= 0})
        where = {rs: i for i, rs in enumerate(rows)}
        for i in range(len(ops["op_rank"])):
            cat = _op_category(t, i)
            s0, s1 = float(ops[key0][i]), float(ops[key1][i])
            if cat is None or not (np.isfinite(s0) and np.isfinite(s1)) or int(ops["op_stream"][i]) < 0:
                continue
            y = where[(int(ops["op_rank"][i]), int(ops["op_stream"][i]))]
            width = max(s1 - s0, 0.0)
            if cat == "write (epoch word)":
                ax.plot([s0, s0], [y - 0.35, y + 0.35], color=_OP_COLORS[cat], linewidth=0.8)
            else:
                ax.barh(y, width, left=s0, height=0.7 if not cat.startswith("wait") else 0.3,
                        color=_OP_COLORS[cat], edgecolor="none")
            used.add(cat)
        labels = [f"rank {r} stream {s}" + (" (high)" if t.stream_high_priority.get((r, s)) else "") for r, s in rows]
        ax.set_yticks(range(len(rows)), labels, fontsize=6)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        note = f"modeled on {t.machine}" if which == "modeled" else (
            "measured on the GPU (events around each op)" if report.mode == "gpu" else "CPU times of the simulated run")
        ax.set_title(f"{_run_label(run)}: {note}", fontsize=8, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("ms from the start of the traced layer" + (" (MODELED)" if which == "modeled" else ""))
    handles = [Patch(color=c, label=k) for k, c in _OP_COLORS.items() if k in used]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=7, frameon=False)
    title = ("MODELED per-stream timeline" if which == "modeled" else "measured per-stream timeline")
    fig.suptitle(f"case {case.name}: {title} of one traced layer per run, every rank's streams\n"
                 f"{case.shape}, ulysses {case.degree}, tp {case.tp}; {_mode_note([report])}", fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return _save(fig, out_dir, f"{case.name}.gantt-{which}.png")


@dataclass(frozen=True)
class _Point:
    case: str
    run: str
    degree: int
    speedup: float
    layer_ms: float
    is_baseline: bool  # the run speedups of its case are measured against


def _points(reports: list[Report], case_names: list[str] | None) -> list[_Point]:
    pts = []
    for report in reports:
        for case in report.cases:
            if case_names and case.name not in case_names:
                continue
            base = case.baseline()
            pts += [_Point(case.name, run.name, case.degree, case.speedup(run), run.layer_median, run is base)
                    for run in case.runs]
    return pts


def speedup_vs_degree(reports: list[Report], case_names: list[str] | None, out_dir: str) -> str | None:
    """Speedup over each case's baseline run, and layer median, against the Ulysses degree.

    Drawn only when the reports hold at least two degrees; a line joins the per-degree
    median of one (case, run) when several reports give the same degree.
    """
    pts = _points(reports, case_names)
    degrees = sorted({p.degree for p in pts})
    if len(degrees) < 2:
        return None
    fig = Figure(figsize=(12.0, 5.0))
    ax_s, ax_t = fig.subplots(1, 2)
    keys = list(dict.fromkeys((p.case, p.run) for p in pts))
    cases = list(dict.fromkeys(p.case for p in pts))
    runs = list(dict.fromkeys(p.run for p in pts))
    markers = "osD^v<>ph*"
    for case, run in keys:
        mine = [p for p in pts if p.case == case and p.run == run]
        ds = sorted({p.degree for p in mine})
        style = dict(color=f"C{runs.index(run) % 10}", marker=markers[cases.index(case) % len(markers)],
                     linestyle=("-", "--", ":", "-.")[cases.index(case) % 4], label=f"{case} / {run}")
        panels = [(ax_t, "layer_ms")] if all(p.is_baseline for p in mine) else [(ax_s, "speedup"), (ax_t, "layer_ms")]
        for ax, attr in panels:
            ys = [stats.median(np.array([getattr(p, attr) for p in mine if p.degree == d])) for d in ds]
            ax.plot(ds, ys, **style)
    for ax in (ax_s, ax_t):
        ax.set_xscale("log", base=2)
        ax.set_xticks(degrees, [str(d) for d in degrees])
        ax.minorticks_off()
        ax.set_xlabel("Ulysses degree")
        ax.grid(alpha=0.3)
    ax_s.axhline(1.0, color="black", linewidth=0.8)
    ax_s.set_ylabel("speedup of the layer median over the case's nccl.baseline\n(its first run where it has none)")
    ax_t.set_ylabel("layer median, ms (critical path)")
    ax_t.set_ylim(bottom=0)
    ax_t.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(f"speedup and layer time against Ulysses degree ({len(reports)} report(s)); "
                 f"{_mode_note(reports)}", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir, "speedup-vs-degree.png")


def plot(report: Report, out_dir: str, case_names: list[str] | None, extra: list[Report]) -> list[str]:
    """Writes every figure that the reports can support; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for case in report.select(case_names):
        if not case.runs:
            continue
        # Modelled first where the report's own times are not GPU times.
        order = ("measured", "modeled") if report.mode == "gpu" else ("modeled", "measured")
        for which in order:
            path = gantt(report, case, out_dir, which)
            if path:
                written.append(path)
        written.append(stage_bars(report, case, out_dir))
        written.append(timeline(report, case, out_dir))
    reports = [report, *extra]
    if len({r.mode for r in reports}) > 1:
        sys.stderr.write("ulysses-post: warning: the reports mix modes " + ", ".join(sorted({r.mode for r in reports}))
                         + "; speedup-vs-degree says so in its title\n")
    speed = speedup_vs_degree(reports, case_names, out_dir)
    if speed is None:
        sys.stderr.write("ulysses-post: speedup-vs-degree not drawn: every case has the same Ulysses degree "
                         "(pass reports of other degrees with --reports)\n")
    else:
        written.append(speed)
    return written
