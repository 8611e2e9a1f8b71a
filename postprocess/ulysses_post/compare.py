"""`compare A B`: the layer median of every run two reports share, side by side.

A ratio alone hides noise, so each side also shows the spread (p10..p90) of its
per-repeat medians: a difference inside both spreads is not a difference.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from . import formats, stats, text
from .report import Case, Report, Run

# Case fields whose difference makes an A/B a comparison of different layers.
_SHAPE_FIELDS = ("batch", "seq_len", "heads", "head_dim", "dtype", "qk_norm", "rope", "fused_qkv", "tp")


def _verdict(a: Run, b: Run) -> str:
    """Whether B's per-repeat band lies wholly outside A's; needs 2+ repeats on each side."""
    if a.repeats < 2 or b.repeats < 2:
        return "no spread (<2 repeats)"
    a_lo, a_hi = stats.spread(a.repeat_medians())
    b_lo, b_hi = stats.spread(b.repeat_medians())
    if b_hi < a_lo:
        return "B faster"
    if b_lo > a_hi:
        return "B slower"
    return "within spread"


def field_differences(a: Case, b: Case) -> list[str]:
    diffs = []
    for name in _SHAPE_FIELDS:
        va, vb = a.attrs.get(name), b.attrs.get(name)
        if not np.array_equal(np.asarray(va), np.asarray(vb)):
            diffs.append(f"{name} {text.attr_text(va)} vs {text.attr_text(vb)}")
    if a.degree != b.degree:
        diffs.append(f"ulysses degree {a.degree} vs {b.degree}")
    return diffs


def _header(label: str, r: Report) -> str:
    return f"{label}: {r.path}  (ulysses-ipc {r.software_version}, {r.date}, mode {r.mode}, world size {r.world_size})"


CSV_FIELDS = ["case", "run", "a_median_ms", "a_p10_ms", "a_p90_ms", "a_repeats", "b_median_ms", "b_p10_ms",
              "b_p90_ms", "b_repeats", "ratio_b_over_a", "verdict"]


@dataclass
class Comparison:
    """What two reports share and what differs: the rows, then the lists beside them."""

    rows: list[dict[str, object]]  # one per run in both, fields CSV_FIELDS
    only_in_a: list[str]  # "case X" or "case X run Y"
    only_in_b: list[str]
    layer_differences: list[str]  # "case X: the layers differ: ..."


def _side(prefix: str, run: Run) -> dict[str, object]:
    lo, hi = stats.spread(run.repeat_medians())
    return {f"{prefix}_median_ms": run.layer_median, f"{prefix}_p10_ms": lo, f"{prefix}_p90_ms": hi,
            f"{prefix}_repeats": run.repeats}


def comparison(a: Report, b: Report, case_names: list[str] | None = None) -> Comparison:
    c = Comparison([], [], [], [])
    b_names = {cb.name for cb in b.cases}
    for ca in a.select(case_names):
        if ca.name not in b_names:
            c.only_in_a.append(f"case {ca.name}")
            continue
        cb = b.case(ca.name)
        diffs = field_differences(ca, cb)
        if diffs:
            c.layer_differences.append(f"case {ca.name}: the layers differ: " + ", ".join(diffs))
        for ra in ca.runs:
            rb = cb.run(ra.name)
            if rb is None:
                c.only_in_a.append(f"case {ca.name} run {ra.name}")
                continue
            c.rows.append({"case": ca.name, "run": ra.name, **_side("a", ra), **_side("b", rb),
                           "ratio_b_over_a": stats.ratio(rb.layer_median, ra.layer_median),
                           "verdict": _verdict(ra, rb)})
        c.only_in_b += [f"case {ca.name} run {rb.name}" for rb in cb.runs if ca.run(rb.name) is None]
    a_names = {ca.name for ca in a.cases}
    if not case_names:
        c.only_in_b += [f"case {cb.name}" for cb in b.cases if cb.name not in a_names]
    return c


def _notes(a: Report, b: Report) -> list[str]:
    out = []
    if a.mode != b.mode:
        out.append(f"WARNING: A ran in mode {a.mode}, B in mode {b.mode}: the times are not comparable")
    if a.simulated or b.simulated:
        out.append(f"NOTE: {text.SIM_NOTE}")
    if a.model_only or b.model_only:
        out.append(f"NOTE: {text.MODEL_NOTE}")
    return out


def _write_text(a: Report, b: Report, c: Comparison, out: TextIO) -> None:
    lines = [_header("A", a), _header("B", b), *_notes(a, b)]
    lines += ["", "layer median in ms (critical path); spread = p10..p90 of the per-repeat medians; "
              "ratio = B / A (< 1: B faster)"]
    rows = [[r["case"], r["run"], text.ms(r["a_median_ms"]), f"{text.ms(r['a_p10_ms'])}..{text.ms(r['a_p90_ms'])} "
             f"(n={r['a_repeats']})", text.ms(r["b_median_ms"]), f"{text.ms(r['b_p10_ms'])}..{text.ms(r['b_p90_ms'])} "
             f"(n={r['b_repeats']})", text.factor(r["ratio_b_over_a"]), r["verdict"]] for r in c.rows]
    headers = ["case", "run", "A median", "A spread", "B median", "B spread", "B/A", "verdict"]
    lines += text.table(headers, rows, left=2) if rows else ["(no run is in both reports)"]
    only = [f"{x}: only in A" for x in c.only_in_a] + [f"{x}: only in B" for x in c.only_in_b]
    if c.layer_differences or only:
        lines.append("")
    lines += c.layer_differences + only
    out.write("\n".join(lines) + "\n")


def compare(a: Report, b: Report, case_names: list[str] | None = None, out: TextIO | None = None,
            fmt: str = "table") -> None:
    out = out or sys.stdout  # looked up at call time, so that redirection works
    c = comparison(a, b, case_names)
    if fmt == "csv":
        for note in _notes(a, b) + c.layer_differences:
            sys.stderr.write(f"ulysses-post: {note}\n")  # stdout stays machine-readable
        formats.write_csv(CSV_FIELDS, c.rows, out)
    elif fmt == "json":
        from .summarize import provenance_record

        formats.write_json({"kind": "ulysses-post compare", "format_version": formats.FORMAT_VERSION,
                            "a": provenance_record(a), "b": provenance_record(b), "notes": _notes(a, b),
                            "rows": c.rows, "only_in_a": c.only_in_a, "only_in_b": c.only_in_b,
                            "layer_differences": c.layer_differences}, out)
    elif fmt == "markdown":
        lines = [f"A = **{a.path}** (mode {a.mode}), B = **{b.path}** (mode {b.mode}); layer medians in ms "
                 "(critical path), p10/p90 of the per-repeat medians, ratio = B / A (< 1: B faster)", ""]
        lines += [f"> {n}" for n in _notes(a, b)] + ([""] if _notes(a, b) else [])
        lines += formats.markdown_table(CSV_FIELDS, c.rows) if c.rows else ["(no run is in both reports)"]
        extra = (c.layer_differences + [f"{x}: only in A" for x in c.only_in_a]
                 + [f"{x}: only in B" for x in c.only_in_b])
        lines += ([""] + [f"- {x}" for x in extra]) if extra else []
        out.write("\n".join(lines) + "\n")
    else:
        _write_text(a, b, c, out)
