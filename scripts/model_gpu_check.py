#!/usr/bin/env python3
"""Table of scripts/model_gpu_check.sh: each modelled run's layer (with its leave-one-out band)
and stages; with --measured DIR, the GPU's report of the same name beside it, the error, and
whether the measured layer lies inside the band. MODELLED figures are labelled so."""
import argparse
import math
import os

from predictions_table import NEAREST, band, loo_rows
from ulysses_post.report import STAGES, load_report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--machine", required=True)
    ap.add_argument("--loo", required=True)
    ap.add_argument("--measured")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("reports", nargs="+")
    a = ap.parse_args()
    rows = loo_rows(a.loo)["layer"]
    layer = STAGES.index("layer")
    shown = ["scatter", "norm_rope", "attention"]
    head = ["report", "run", "modelled layer ms (band)"] + [f"mod. {s}" for s in shown]
    if a.measured:
        head += ["measured layer ms", "error", "in band"] + [f"meas. {s}" for s in shown]
    out, n, within10, inband = [], 0, 0, 0
    for path in a.reports:
        name = os.path.basename(path)[:-3]
        mod = load_report(path)
        meas = None
        if a.measured:
            mpath = os.path.join(a.measured, name + ".h5")
            meas = load_report(mpath) if os.path.exists(mpath) else None
        for case in mod.cases:
            mcase = next((c for c in meas.cases if c.name == case.name), None) if meas else None
            for r in case.runs:
                c = r.traced.modeled_critical_ms()
                lo, hi = band(c[layer], rows)
                cells = [name, r.name, f"{c[layer]:.4f} ({lo:.4f}-{hi:.4f})"]
                cells += [f"{c[STAGES.index(s)]:.4f}" for s in shown]
                mr = next((x for x in mcase.runs if x.name == r.name), None) if mcase else None
                if a.measured and mr is not None:
                    m = mr.median_ms
                    err = c[layer] / m[layer] - 1
                    n += 1
                    inside = lo <= m[layer] <= hi
                    within10 += abs(err) <= 0.10
                    inband += inside
                    cells += [f"{m[layer]:.4f}", f"{100 * err:+.1f}%", "yes" if inside else "no"]
                    cells += ["nan" if math.isnan(m[STAGES.index(s)]) else f"{m[STAGES.index(s)]:.4f}" for s in shown]
                elif a.measured:
                    cells += ["-", "-", "-"] + ["-"] * len(shown)
                out.append(cells)
    print(f"MODELLED on {a.machine}: the GPU check's one-rank runs (scripts/gpu_decks.sh); 90% band: the range of the "
          f"leave-one-out errors of the {NEAREST} measured reports nearest in size, a run each ({a.loo})")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for cells in out:
            print("| " + " | ".join(cells) + " |")
    else:
        w = [max(len(h), *(len(c[i]) for c in out)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
        for cells in out:
            print("  ".join(x.ljust(w[i]) for i, x in enumerate(cells)))
    if a.measured:
        print(f"summary: {n} runs measured; layer within 10%: {within10} of {n}; measured layer inside the band: "
              f"{inband} of {n}")


if __name__ == "__main__":
    main()
