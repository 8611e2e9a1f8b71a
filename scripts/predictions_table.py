#!/usr/bin/env python3
"""The predictions tables of docs/predictions.md and docs/predictions-hier.md from --mode
model reports (every figure MODELLED).
Usage: predictions_table.py [--predict P.json --loo ERRORS.md --seconds S] MACHINE REPORT...
       predictions_table.py [...] --section MACHINE REPORT...   (one machine's tables, no page header)
       predictions_table.py --coverage TABLE...   (how often the bands hold, each report left out)
--predict: `ulysses-ipc model predict` of the same reports (each run's layer and scatter
as medians over start skews, its most sensitive parameters); --loo: a table of measured against
modelled runs (the leave-one-out's, docs/model-loo.md) whose spread of layer and scatter errors
gives each figure its band. See scripts/model_predictions.sh."""
import argparse
import json
import math
import subprocess

from ulysses_post.report import STAGES, load_report


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def blob(machine):
    return git("hash-object", f"inputs/machines/{machine}.json")[:12]


def loo_rows(path):
    """(measured, modelled / measured - 1, report) of the layer and of the scatter of every row of a
    table of measured against modelled runs (`model loo` or `model validate`, --markdown). A row
    whose scatter was not timed apart (a layer timed as a whole) gives its layer only."""
    layer, scatter = [], []
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or " / " not in cells[3] or cells[0] == "report":
            continue
        try:
            (lm, lp), (sm, sp) = (map(float, cells[3].split(" / ")), map(float, cells[4].split(" / ")))
        except ValueError:
            continue
        if lm > 0:
            layer.append((lm, lp / lm - 1, cells[0]))
        if sm > 0:
            scatter.append((sm, sp / sm - 1, cells[0]))
    if len({r for _, _, r in layer}) < NEAREST:
        raise SystemExit(f"{path}: rows of fewer than {NEAREST} reports: run scripts/model_loo.sh first")
    return {"layer": layer, "scatter": scatter}


NEAREST = 20  # the band of a figure: the errors of the NEAREST reports nearest to it in size, one run each


def band(v, rows):
    """(low, high): the range (smallest to largest) of the errors that the NEAREST reports give v,
    each report by its run nearest to v in measured size: a 90% prediction band. For exchangeable
    errors a new one lies inside the range of NEAREST others with probability (NEAREST - 1) /
    (NEAREST + 1) = 19/21 (order statistics; no distribution assumed), where the 5th to 95th
    percentile of 20 interpolated holds about 17.1/21 = 81% (docs/model.md, "Predictions"). A report
    is one session on one host, whose runs share that session's bias: the band spans sessions, not
    the runs of one."""
    errs, seen = [], set()
    for _, e, report in sorted(rows, key=lambda r: abs(math.log(r[0] / v))):
        if report not in seen:
            seen.add(report)
            errs.append(e)
            if len(errs) == NEAREST:
                break
    return v / (1 + max(errs)), v / (1 + min(errs))


def coverage(rows):
    """(inside, n): of the rows, how many measured layers lie inside the band that the other reports'
    rows give their modelled figure: the band tested the way a new session tests it."""
    inside = 0
    for measured, err, report in rows:
        lo, hi = band(measured * (1 + err), [r for r in rows if r[2] != report])
        inside += lo <= measured <= hi
    return inside, len(rows)


def banded(v, rows):
    """v with its band, as the tables print it."""
    lo, hi = band(v, rows)
    return f"{v:.3f} ({lo:.3f}-{hi:.3f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--section", action="store_true")
    ap.add_argument("--predict")
    ap.add_argument("--loo")
    ap.add_argument("--seconds", type=int)
    ap.add_argument("--coverage", nargs="+", metavar="TABLE",
                    help="print how often each table's measured layers lie inside the band its other reports give")
    ap.add_argument("machine", nargs="?")
    ap.add_argument("reports", nargs="*")
    a = ap.parse_args()
    if a.coverage:
        for path in a.coverage:
            inside, n = coverage(loo_rows(path)["layer"])
            print(f"{path}: {inside} of {n} measured layers ({100 * inside / n:.0f}%) inside the 90% band (the range of "
                  f"{NEAREST} reports' errors) that the other reports give them")
        return
    if not a.machine or not a.reports:
        ap.error("MACHINE and REPORT... are required (or --coverage TABLE...)")
    machine, paths = a.machine, a.reports
    predict = json.load(open(a.predict)) if a.predict else {}
    spread = loo_rows(a.loo) if a.loo else None
    layer, scatter = STAGES.index("layer"), STAGES.index("scatter")
    if a.section:
        out = [f"Modelled on `{machine}` (inputs/machines/{machine}.json, git blob {blob(machine)}).", ""]
    else:
        took = f" ({a.seconds} s on 2 CPU cores)" if a.seconds else ""
        described = json.load(open(f"inputs/machines/{machine}.json")).get("description", "")
        out = ["# Predictions before measurement (MODELLED)", "",
               f"Every figure below is **modelled** by the simulator (docs/model.md) on the machine `{machine}` "
               f"(inputs/machines/{machine}.json, git blob {blob(machine)}, as committed beside this file), from "
               "`--mode model` runs of every shipped GPU deck (the presets that are not simulation-sized, and the "
               "default deck) rewritten to nccl, nccl-ce, ipc, vmm and hier under every schedule (the ablations and "
               "the approximate hier-vmajor left out). No 4- or 8-GPU run existed when they were written: a later run "
               "with one GPU per rank tests the model, it must not tune it.", "",
               f"The machine: {described}", "",
               f"Made from HEAD by `./scripts/model_predictions.sh`{took}, which writes every prediction page "
               "(docs/predictions.md, docs/predictions-h100.md, docs/predictions-hier.md); "
               "`ctest -R predictions_current` fails when this page differs from what "
               "HEAD's model gives for flux-dev-1024 (every transport and schedule, 4 and 8 ranks).", "",
               "Columns: the modelled critical path (slowest rank) of the layer and of the scatter, ms, the "
               "median of five replays with the ranks' start skew (`start_skew_us`) at 0.8, 0.9, 1, 1.1 and 1.2 "
               "times the machine's (one replay of a multi-rank scatter moves in steps with where the ranks' "
               "copies meet on the links; a `--mode model` run itself prints the one replay at the machine's "
               "skew), each with its 90% band: the modelled figure divided by 1 + the largest and smallest of "
               f"the leave-one-out errors (docs/model-loo.md) that the {NEAREST} measured reports nearest to it "
               "in size give, each by its run nearest in size (a long attention-bound layer takes the spread of long layers, a near-empty one that of the latency "
               "floors; one run a report, so that the band spans sessions and hosts, not the runs of one): where "
               "the model ran short (or long) on every nearby report, the band lies above (or below) the figure "
               "itself; `layer x`: nccl.baseline's layer / this run's; `scatter x`: the "
               "nccl run's scatter / this run's, same schedule (both of medians); `norm_rope`, `attention`, "
               "`gather`: one replay at the machine's skew; `scatter ms over start skew +-20%`: the smallest and "
               "largest scatter of ten replays at 0.8 to 1.2 times the machine's skew: a spread here is what the "
               "median cannot promise (docs/model.md, \"Predictions\"); `layer most sensitive`: the machine "
               "parameter whose 5% step moves the layer most, with the elasticity d log(layer) / d "
               "log(parameter), each side of the step the median of five replays at 0.8-1.2 times the start "
               "skew: what to measure first on the real machine; `scatter most sensitive`: the same for the "
               "scatter, the figure a transport choice rests on (an elasticity beyond +-1 there is the copies "
               "meeting on the links in another order, not physics: docs/model.md, \"Predictions\").", ""]
    for path in paths:
        rep = load_report(path)
        sens = predict.get(path, {})
        for case in rep.cases:
            head = "| run | layer ms | scatter ms | norm_rope ms | attention ms | gather ms | layer x | scatter x |"
            rule = "|---|---|---|---|---|---|---|---|"
            if predict:
                head += " scatter ms over start skew +-20% | layer most sensitive | scatter most sensitive |"
                rule += "---|---|---|"
            out += [f"## {case.name}: {case.shape}, Ulysses{case.degree}" + (f" x TP{case.tp}" if case.tp > 1 else "")
                    + f", {rep.world_size} GPUs", "", head, rule]
            crit = {r.name: r.traced.modeled_critical_ms() for r in case.runs}
            # The layer and the scatter: with --predict, the median over start skews (one
            # replay of a multi-rank scatter moves in steps with where the copies meet).
            fig = {}
            for r in case.runs:
                if predict:
                    s = sens.get(f"{case.name}/{r.name}")
                    if s is None:
                        raise SystemExit(f"{a.predict}: no run {case.name}/{r.name} of {path}")
                    fig[r.name] = tuple(s["skew_median_ms"])
                else:
                    fig[r.name] = (crit[r.name][layer], crit[r.name][scatter])
            base = fig.get("nccl.baseline")
            for r in case.runs:
                c, (lf, sf) = crit[r.name], fig[r.name]
                nccl = fig.get(f"nccl.{r.schedule}")
                lx = f"{base[0] / lf:.3f}x" if base is not None else "-"
                sx = f"{nccl[1] / sf:.2f}x" if nccl is not None else "-"
                used = "" if r.transport_used == r.transport else f" (ran {r.transport_used})"
                lcell = banded(lf, spread["layer"]) if spread else f"{lf:.3f}"
                scell = banded(sf, spread["scatter"]) if spread else f"{sf:.3f}"
                row = (f"| {r.name}{used} | {lcell} | {scell} | {c[STAGES.index('norm_rope')]:.3f} | "
                       f"{c[STAGES.index('attention')]:.3f} | {c[STAGES.index('gather')]:.3f} | {lx} | {sx} |")
                if predict:
                    s = sens[f"{case.name}/{r.name}"]
                    lo, hi = s["skew_scatter_ms"]
                    row += (f" {lo:.3f}-{hi:.3f} | {s['sensitive']} ({s['elasticity']:+.2f}) | "
                            f"{s['scatter_sensitive']} ({s['scatter_elasticity']:+.2f}) |")
                out.append(row)
            out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
