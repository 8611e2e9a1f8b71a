"""`summarize`: one table per case of a report, one row per run.

Answers the question the app exists for: per case, what each transport x schedule costs
stage by stage, how much faster than the NCCL baseline it is, and whether it is correct.
"""

from __future__ import annotations

import math
import sys
from typing import TextIO

from . import formats, text
from .report import BASELINE_RUN, SCHEMA_VERSION, STAGES, Case, Report, Run

# Short stage headers so that a row fits a wide terminal; the order is STAGES'.
_STAGE_HEADERS = ("proj", "norm_rope", "scatter", "attention", "gather", "out_proj", "layer")


def _transport(run: Run) -> str:
    """'ipc -> nccl*' when the scatter fell back (the footnote says why)."""
    mark = "*" if run.fell_back else ""
    return f"{run.transport} -> {run.transport_used}{mark}"


def _parity(run: Run) -> str:
    if not run.parity_computed:
        return "not computed"
    if run.approximate:  # judged by its own tolerance, never an exact pass
        verdict = "approx " + ("PASS" if run.approx_pass else "FAIL")
    else:
        verdict = "PASS" if run.parity_pass else "FAIL"
    return verdict if run.parity_finite else verdict + " (non-finite)"


def _baseline_note(case: Case) -> str:
    base = case.baseline()
    if base is None:
        return "no runs"
    if base.name == BASELINE_RUN:
        return f"speedup = layer median of {BASELINE_RUN} / layer median of the run"
    return f"speedup against the first run {base.name} (this case has no {BASELINE_RUN})"


def _scatter_x(case: Case, run: Run) -> str:
    x = case.scatter_speedup(run)
    return "-" if x is None else text.factor(x)


def _bound(run: Run, link_gbs: float) -> str:
    f = run.link_bound_fraction(link_gbs)
    return "-" if math.isnan(f) else f"{100 * f:.0f}%"


def modeled_lines(case: Case) -> list[str]:
    """The modelled stages of every run's traced layer (the simulator's replay under the
    report's machine): labelled modelled, never to be read as measured."""
    runs = [r for r in case.runs if r.traced is not None and r.traced.modeled]
    notes = [f"  {r.name}: {r.traced.model_note}" for r in case.runs
             if r.traced is not None and not r.traced.modeled and r.traced.model_note]
    if not runs:
        return (["  MODELED: no run of this case was modelled"] + notes) if notes else []
    machines = sorted({r.traced.machine for r in runs})
    crit = {r.name: r.traced.modeled_critical_ms() for r in runs}
    layer = STAGES.index("layer")
    scatter = STAGES.index("scatter")
    base = crit.get(BASELINE_RUN)
    headers = ["transport", "schedule", *_STAGE_HEADERS, "speedup", "scatter x"]
    rows = []
    for r in runs:
        c = crit[r.name]
        nccl = crit.get(f"nccl.{r.schedule}")
        rows.append([_transport(r), r.schedule, *(text.ms(float(v)) for v in c),
                     text.factor(float(base[layer] / c[layer])) if base is not None else "-",
                     text.factor(float(nccl[scatter] / c[scatter])) if nccl is not None else "-"])
    lines = [f"  MODELED on {', '.join(machines)}: one traced layer per run replayed by the simulator "
             "(docs/model.md); stage times of the slowest rank, ms. Modeled, not measured."]
    lines += ["  " + line for line in text.table(headers, rows, left=2)]
    return lines + notes


def case_lines(case: Case, link_gbs: float | None = None, mode: str = "gpu") -> list[str]:
    """The text block of one case: header, table, footnotes. In simulation and model mode
    the modelled figures come first; in model mode they are the only ones."""
    degree = f"ulysses {case.degree}" + (" (deck: 0 = all ranks / tp)" if case.ulysses_deck == 0 else "")
    shape = case.runs[0].stage_ms.shape if case.runs else (0, 0, 0)
    lines = [
        f"case {case.name}: {case.shape}, {degree}, tp {case.tp}; "
        f"{shape[0]} repeat(s) x {shape[1]} iteration(s) x {shape[2]} rank(s)",
    ]
    if mode == "model":
        lines += modeled_lines(case)
        lines.append("  parity: not computed (--mode model runs no data)")
        return lines
    if mode == "sim":
        lines += modeled_lines(case)
    what = "CPU times of the simulated run" if mode == "sim" else "measured"
    lines.append(f"  {what}: stage medians and layer p10/p90 in ms, of the critical path (per layer, the slowest "
                 "rank); " + _baseline_note(case))
    headers = ["transport", "schedule", "projection", *_STAGE_HEADERS, "layer p10", "layer p90", "speedup",
               "scatter x", *(["link bound"] if link_gbs else []), "parity", "max_abs", "rel_l2", "V/QK overlap"]
    rows = []
    for run in case.runs:
        layer = run.stage("layer")
        rows.append([_transport(run), run.schedule + (f"+{run.ablation}" if run.ablation else ""), run.projection or "-",
                     *(text.ms(v) for v in run.median_ms), text.ms(run.p10_ms[layer]), text.ms(run.p90_ms[layer]),
                     text.factor(case.speedup(run)), _scatter_x(case, run),
                     *([_bound(run, link_gbs)] if link_gbs else []), _parity(run), text.sci(run.parity_max_abs),
                     text.sci(run.parity_rel_l2), text.ms(run.v_overlap_median())])
    lines += ["  " + line for line in text.table(headers, rows, left=3)]
    for run in case.runs:
        if run.fell_back:
            lines.append(f"  * {run.name}: the scatter ran on {run.transport_used}, not {run.transport}: "
                         f"{run.fallback_reason or 'no reason given'}")
    lines.append("  scatter x: the nccl run's scatter median / this run's, same schedule ('-': no such run)")
    if link_gbs:
        lines.append(f"  link bound: (bytes a rank sends in the scatter / {link_gbs:g} GB/s) / scatter median; "
                     "under v-first schedules only the scatter's exposed part is timed")
    if any(r.v_overlap_ms is not None for r in case.runs):
        lines.append("  V/QK overlap: median over every rank's timed layers of the time the V scatter and "
                     "Q/K norm + RoPE ran at once ('-': not measured)")
    if mode == "gpu":
        lines += modeled_lines(case)
    return lines


def write_text(report: Report, cases: list[Case], out: TextIO, link_gbs: float | None = None) -> None:
    lines = text.provenance(report)
    for case in cases:
        lines += ["", *case_lines(case, link_gbs, report.mode)]
    if not cases:
        lines += ["", "(the report holds no cases)"]
    out.write("\n".join(lines) + "\n")


CSV_FIELDS = (["report", "mode", "world_size", "case", "ulysses_degree", "run", "transport", "transport_used",
               "fallback_reason", "schedule", "ablation", "projection", "repeats", "iterations", "ranks"]
              + [f"{s}_median_ms" for s in STAGES]
              + ["layer_p10_ms", "layer_p90_ms", "baseline_run", "speedup", "parity_pass", "parity_finite",
                 "parity_max_abs", "parity_rel_l2", "v_overlap_median_ms", "scatter_bandwidth_gbs",
                 "scatter_bytes_per_rank", "scatter_speedup_vs_nccl", "link_bound_fraction", "parity_computed",
                 "modeled_machine"]
              + [f"{s}_modeled_ms" for s in STAGES]
              + ["stage_times", "parity_kind", "approx_pass"])

# What the stage medians of a report's runs are (the `stage_times` field).
STAGE_TIMES = {"gpu": "measured", "sim": "cpu_simulated", "model": "modeled"}


def run_record(report: Report, case: Case, run: Run, link_gbs: float | None = None) -> dict[str, object]:
    """One run as a flat record with typed values (None where absent): the row of every
    machine-readable format (csv, json, markdown), field names as CSV_FIELDS."""
    layer = run.stage("layer")
    base = case.baseline()
    modeled = run.traced is not None and run.traced.modeled
    crit = run.traced.modeled_critical_ms() if modeled else None
    rec: dict[str, object] = {
        "report": report.path, "mode": report.mode, "world_size": report.world_size, "case": case.name,
        "ulysses_degree": case.degree, "run": run.name, "transport": run.transport,
        "transport_used": run.transport_used, "fallback_reason": run.fallback_reason, "schedule": run.schedule,
        "ablation": run.ablation, "projection": run.projection, "repeats": run.repeats,
        "iterations": run.iterations, "ranks": run.ranks,
        **{f"{s}_median_ms": float(v) for s, v in zip(STAGES, run.median_ms)},
        "layer_p10_ms": float(run.p10_ms[layer]), "layer_p90_ms": float(run.p90_ms[layer]),
        "baseline_run": base.name if base else None, "speedup": case.speedup(run),
        "parity_pass": run.parity_pass, "parity_finite": run.parity_finite, "parity_max_abs": run.parity_max_abs,
        "parity_rel_l2": run.parity_rel_l2, "v_overlap_median_ms": run.v_overlap_median(),
        "scatter_bandwidth_gbs": run.scatter_bandwidth_gbs, "scatter_bytes_per_rank": run.scatter_bytes_per_rank,
        "scatter_speedup_vs_nccl": case.scatter_speedup(run),
        "link_bound_fraction": run.link_bound_fraction(link_gbs) if link_gbs else None,
        "parity_computed": run.parity_computed, "modeled_machine": run.traced.machine if modeled else None,
        **{f"{s}_modeled_ms": (float(crit[i]) if crit is not None else None) for i, s in enumerate(STAGES)},
        "stage_times": STAGE_TIMES.get(report.mode, report.mode),
        "parity_kind": "approximate" if run.approximate else "exact",
        "approx_pass": run.approx_pass if run.approximate else None,
    }
    assert list(rec) == CSV_FIELDS
    return rec


def records(report: Report, cases: list[Case], link_gbs: float | None = None) -> list[dict[str, object]]:
    return [run_record(report, case, run, link_gbs) for case in cases for run in case.runs]


def write_csv(report: Report, cases: list[Case], out: TextIO, link_gbs: float | None = None) -> None:
    """One CSV row per run, for spreadsheets and scripts (full precision, no units in cells)."""
    formats.write_csv(CSV_FIELDS, records(report, cases, link_gbs), out)


def provenance_record(report: Report) -> dict[str, object]:
    return {"path": report.path, "software": "ulysses-ipc", "software_version": report.software_version,
            "schema_version": SCHEMA_VERSION, "date": report.date, "mode": report.mode,
            "world_size": report.world_size, "deck": report.deck, "hosts": report.hosts, "devices": report.devices,
            "host_cpus": report.host_cpus, "versions": report.versions, "command_line": report.command_line}


def notes(report: Report) -> list[str]:
    """The caveats a reader of the numbers must see (simulation, model-only)."""
    out = []
    if report.simulated:
        out.append(text.SIM_NOTE)
    if report.model_only:
        out.append(text.MODEL_NOTE)
    out.append("*_modeled_ms and modeled_machine: MODELLED by the simulator for the machine named "
               "(docs/model.md), not measured")
    return out


def write_json(report: Report, cases: list[Case], out: TextIO, link_gbs: float | None = None) -> None:
    """The summary as one JSON document following schemas/summary.schema.json."""
    formats.write_json({"kind": "ulysses-post summary", "format_version": formats.FORMAT_VERSION,
                        "report": provenance_record(report), "notes": notes(report),
                        "runs": records(report, cases, link_gbs)}, out)


# The columns of the markdown table: the dashboard view of a run (every field is in json/csv).
_MD_COLUMNS = (["case", "run", "schedule", "ablation", "transport_used"] + [f"{s}_median_ms" for s in STAGES]
               + ["layer_p10_ms", "layer_p90_ms", "speedup", "parity", "modeled_machine", "layer_modeled_ms"])


def write_markdown(report: Report, cases: list[Case], out: TextIO, link_gbs: float | None = None) -> None:
    """A GitHub-flavoured markdown table, one row per run, with the caveats above it."""
    times = STAGE_TIMES.get(report.mode, report.mode)
    lines = [f"**{report.path}**: ulysses-ipc {report.software_version}, {report.date}, mode {report.mode}, "
             f"world size {report.world_size}; stage medians in ms are {times.replace('_', ' ')} "
             "(critical path: slowest rank per layer)", ""]
    lines += [f"> {n}" for n in notes(report)] + [""]
    rows = []
    for rec in records(report, cases, link_gbs):
        parity = ("not computed" if not rec["parity_computed"] else
                  ("approx " + ("PASS" if rec["approx_pass"] else "FAIL")) if rec["parity_kind"] == "approximate"
                  else "PASS" if rec["parity_pass"] else "FAIL")
        rows.append({**rec, "parity": parity})
    lines += formats.markdown_table(_MD_COLUMNS, rows)
    out.write("\n".join(lines) + "\n")


def summarize(report: Report, case_names: list[str] | None, fmt: str = "table", out: TextIO | None = None,
              link_gbs: float | None = None) -> None:
    out = out or sys.stdout  # looked up at call time, so that redirection works
    cases = report.select(case_names)
    if fmt == "json":
        write_json(report, cases, out, link_gbs)  # the caveats are inside the document
    elif fmt == "markdown":
        write_markdown(report, cases, out, link_gbs)
    elif fmt == "csv":
        if report.simulated:
            # stdout stays machine-readable; the caveat goes where a person sees it.
            sys.stderr.write(f"ulysses-post: {report.path}: {text.SIM_NOTE}\n")
        if report.model_only:
            sys.stderr.write(f"ulysses-post: {report.path}: {text.MODEL_NOTE}\n")
        write_csv(report, cases, out, link_gbs)
    else:
        write_text(report, cases, out, link_gbs)
