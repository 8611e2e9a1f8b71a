"""`compare A B`: the layer median of every run two reports share, side by side.

A ratio alone hides noise, so each side also shows the spread (p10..p90) of its
per-repeat medians: a difference inside both spreads is not a difference.
"""

from __future__ import annotations

import sys
from typing import TextIO

import numpy as np

from . import stats, text
from .report import Case, Report, Run

# Case fields whose difference makes an A/B a comparison of different layers.
_SHAPE_FIELDS = ("batch", "seq_len", "heads", "head_dim", "dtype", "qk_norm", "rope", "fused_qkv", "tp")


def _spread(run: Run) -> str:
    lo, hi = stats.spread(run.repeat_medians())
    return f"{text.ms(lo)}..{text.ms(hi)} (n={run.repeats})"


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


def _field_differences(a: Case, b: Case) -> list[str]:
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


def compare(a: Report, b: Report, case_names: list[str] | None = None, out: TextIO | None = None) -> None:
    out = out or sys.stdout  # looked up at call time, so that redirection works
    lines = [_header("A", a), _header("B", b)]
    if a.mode != b.mode:
        lines.append(f"WARNING: A ran in mode {a.mode}, B in mode {b.mode}: the times are not comparable")
    if a.simulated or b.simulated:
        lines.append(f"NOTE: {text.SIM_NOTE}")
    lines += ["", "layer median in ms (critical path); spread = p10..p90 of the per-repeat medians; "
              "ratio = B / A (< 1: B faster)"]

    a_cases = a.select(case_names)
    b_names = {c.name for c in b.cases}
    rows, only, notes = [], [], []
    for ca in a_cases:
        if ca.name not in b_names:
            only.append(f"case {ca.name}: only in A")
            continue
        cb = b.case(ca.name)
        diffs = _field_differences(ca, cb)
        if diffs:
            notes.append(f"case {ca.name}: the layers differ: " + ", ".join(diffs))
        for ra in ca.runs:
            rb = cb.run(ra.name)
            if rb is None:
                only.append(f"case {ca.name} run {ra.name}: only in A")
                continue
            rows.append([ca.name, ra.name, text.ms(ra.layer_median), _spread(ra), text.ms(rb.layer_median),
                         _spread(rb), text.factor(stats.ratio(rb.layer_median, ra.layer_median)), _verdict(ra, rb)])
        only += [f"case {ca.name} run {rb.name}: only in B" for rb in cb.runs if ca.run(rb.name) is None]
    a_names = {c.name for c in a.cases}
    if not case_names:
        only += [f"case {cb.name}: only in B" for cb in b.cases if cb.name not in a_names]

    headers = ["case", "run", "A median", "A spread", "B median", "B spread", "B/A", "verdict"]
    lines += text.table(headers, rows, left=2) if rows else ["(no run is in both reports)"]
    if notes or only:
        lines.append("")
    lines += notes + only
    out.write("\n".join(lines) + "\n")
