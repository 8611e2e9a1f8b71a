#!/usr/bin/env python3
"""The predictions tables of docs/predictions.md and docs/predictions-hier.md from --mode
model reports (every figure MODELLED).
Usage: predictions_table.py MACHINE REPORT...             (docs/predictions.md's page)
       predictions_table.py --section MACHINE REPORT...   (one machine's tables, no page header)
See scripts/model_predictions.sh and scripts/model_hier.sh."""
import subprocess
import sys

from ulysses_post.report import STAGES, load_report


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def blob(machine):
    return git("hash-object", f"inputs/machines/{machine}.json")[:12]


def main():
    section = sys.argv[1:2] == ["--section"]
    args = sys.argv[2:] if section else sys.argv[1:]
    machine, paths = args[0], args[1:]
    layer, scatter = STAGES.index("layer"), STAGES.index("scatter")
    if section:
        out = [f"Modelled on `{machine}` (inputs/machines/{machine}.json, git blob {blob(machine)}).", ""]
    else:
        out = ["# Predictions before measurement (MODELLED)", "",
               f"Every figure below is **modelled** by the simulator (docs/model.md) on the machine `{machine}` "
               f"(inputs/machines/{machine}.json, git blob {blob(machine)}, as committed beside this file), from "
               "`--mode model` runs of the shipped "
               "model decks rewritten to nccl, ipc and vmm under every schedule (the ablations left out). No 4- or 8-GPU "
               "run existed when they were written: a later run with one GPU per rank tests the model, it must not tune it.",
               "", "Made by `./scripts/model_predictions.sh > docs/predictions.md` (about a minute on 2 CPU cores).", "",
               "Columns: the modelled critical path (slowest rank) of the layer and of the scatter, ms; `layer x`: "
               "nccl.baseline's layer / this run's; `scatter x`: the nccl run's scatter / this run's, same schedule.", ""]
    for path in paths:
        rep = load_report(path)
        for case in rep.cases:
            out += [f"## {case.name}: {case.shape}, Ulysses{case.degree}" + (f" x TP{case.tp}" if case.tp > 1 else "")
                    + f", {rep.world_size} GPUs", "",
                    "| run | layer ms | scatter ms | norm_rope ms | attention ms | gather ms | layer x | scatter x |",
                    "|---|---|---|---|---|---|---|---|"]
            crit = {r.name: r.traced.modeled_critical_ms() for r in case.runs}
            base = crit.get("nccl.baseline")
            for r in case.runs:
                c = crit[r.name]
                nccl = crit.get(f"nccl.{r.schedule}")
                lx = f"{base[layer] / c[layer]:.3f}x" if base is not None else "-"
                sx = f"{nccl[scatter] / c[scatter]:.2f}x" if nccl is not None else "-"
                used = "" if r.transport_used == r.transport else f" (ran {r.transport_used})"
                out.append(f"| {r.name}{used} | {c[layer]:.3f} | {c[scatter]:.3f} | {c[STAGES.index('norm_rope')]:.3f} | "
                           f"{c[STAGES.index('attention')]:.3f} | {c[STAGES.index('gather')]:.3f} | {lx} | {sx} |")
            out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
