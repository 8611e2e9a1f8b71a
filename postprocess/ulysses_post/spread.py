"""`spread REPORT REPORT ...`: the same run measured in several reports, how far apart.

A run (case and run name, the same layer shape, issued the same way: replayed as a graph or
op by op; `X+no-graphs` is run X op by op, as every run of a report made before graphs) that
two or more reports hold gives one row: each report's layer median (critical
path over ranks), their smallest, largest and largest / smallest. Reports of one deck on one
kind of machine made in different sessions say how reproducible a layer time is there; no
model of that machine can predict a run closer than its own measurements agree (docs/model.md).
Runs whose layers differ (shape fields, degree) are not put together: they are listed apart.
"""

from __future__ import annotations

import sys
from typing import TextIO

import numpy as np

from . import formats, text
from .compare import field_differences
from .report import Case, Report, Run

NO_GRAPHS = "+no-graphs"
FIELDS = ("case", "run", "issued", "reports", "min_ms", "median_ms", "max_ms", "max_over_min", "min_in", "max_in")


def issued(run: Run) -> str:
    """How most of the run's timed layers were issued: replayed as a graph, or op by op."""
    timed = run.repeats * run.iterations
    return "graph replay" if timed > 0 and 2 * run.graph_replays > timed else "op by op"


def _name(report: Report) -> str:
    return report.path.rsplit("/", 1)[-1]


def spread(reports: list[Report], case_names: list[str] | None = None) -> tuple[list[dict], list[str]]:
    """The rows (runs in 2+ reports) and the notes (runs left apart because their layers differ)."""
    groups: dict[tuple[str, str, str], list[tuple[Report, Case, Run]]] = {}
    for r in reports:
        for c in r.select(case_names) if case_names else r.cases:
            for run in c.runs:
                # "X+no-graphs" is X issued op by op: the same run as X of a report made before graphs
                name = run.name[:-len(NO_GRAPHS)] if run.name.endswith(NO_GRAPHS) else run.name
                groups.setdefault((c.name, name, issued(run)), []).append((r, c, run))
    rows, notes = [], []
    for (case, name, how), members in groups.items():
        first = members[0][1]
        same = []
        for r, c, run in members:
            diffs = field_differences(first, c)
            if diffs:
                notes.append(f"case {case} run {name} in {_name(r)}: the layers differ from {_name(members[0][0])}: "
                             + ", ".join(diffs))
            else:
                same.append((r, c, run))
        if len(same) < 2:
            continue
        ms = np.array([run.layer_median for _, _, run in same])
        lo, hi = int(np.argmin(ms)), int(np.argmax(ms))
        rows.append({"case": case, "run": name, "issued": how, "reports": len(same), "min_ms": float(ms[lo]),
                     "median_ms": float(np.median(ms)), "max_ms": float(ms[hi]),
                     "max_over_min": float(ms[hi] / ms[lo]) if ms[lo] > 0 else float("nan"),
                     "min_in": _name(same[lo][0]), "max_in": _name(same[hi][0])})
    rows.sort(key=lambda x: (x["case"], x["issued"], x["run"]))
    return rows, notes


def summary(rows: list[dict]) -> list[str]:
    """One line per way of issuing: how many runs, and the median, 90th percentile and worst max/min."""
    out = []
    for how in ("graph replay", "op by op"):
        f = np.array([r["max_over_min"] for r in rows if r["issued"] == how])
        if f.size:
            p50, p90 = np.percentile(f, [50, 90])
            out.append(f"{how}: {f.size} runs in 2+ reports, max/min of their layer medians: median {p50:.3f}, "
                       f"90th percentile {p90:.3f}, worst {f.max():.3f}")
    return out


def write(reports: list[Report], case_names: list[str] | None, fmt: str = "table", out: TextIO | None = None) -> None:
    out = out or sys.stdout
    rows, notes = spread(reports, case_names)
    if fmt == "csv":
        for n in notes:
            sys.stderr.write(f"ulysses-post: {n}\n")
        formats.write_csv(FIELDS, rows, out)
        return
    if fmt == "json":
        formats.write_json({"kind": "ulysses-post spread", "format_version": formats.FORMAT_VERSION,
                            "reports": [r.path for r in reports], "rows": rows, "notes": notes,
                            "summary": summary(rows)}, out)
        return
    if fmt == "markdown":
        lines = formats.markdown_table(FIELDS, rows) if rows else ["(no run is in two reports)"]
        lines += [""] + [f"- {x}" for x in summary(rows) + notes] if rows or notes else []
        out.write("\n".join(lines) + "\n")
        return
    lines = ["layer median in ms (critical path) of the same run in several reports; issued: how most of its "
             "timed layers ran"]
    table = [[r["case"], r["run"], r["issued"], str(r["reports"]), text.ms(r["min_ms"]), text.ms(r["median_ms"]),
              text.ms(r["max_ms"]), f"{r['max_over_min']:.3f}", r["min_in"], r["max_in"]] for r in rows]
    lines += text.table(["case", "run", "issued", "n", "min", "median", "max", "max/min", "min in", "max in"], table,
                        left=2) if rows else ["(no run is in two reports)"]
    lines += [""] + summary(rows) + notes if rows or notes else []
    out.write("\n".join(lines) + "\n")
