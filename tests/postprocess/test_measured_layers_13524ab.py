"""The GPU check's ablations and graphs sections kept in docs/measured/2026-12-07-h100-13524ab-layers/ (its
README), one H100: parity, graphs against op by op, and the model's out-of-sample check of the same runs.
Stored data: this times nothing."""

from __future__ import annotations

import re
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "measured" / "2026-12-07-h100-13524ab-layers"


def test_every_run_passes_parity() -> None:
    rows = [ln.split() for ln in (FOLDER / "app-table-13524ab.txt").read_text().splitlines()[1:] if ln.strip()]
    assert len(rows) == 148 and all(r[5] == "PASS" for r in rows)
    for name in ("graphs", "ablations"):
        summary = (FOLDER / f"gpu-check-summary-{name}-13524ab.txt").read_text()
        steps = re.findall(r"^(app .+?|host speed .+?)\s+\| (\w+), \d+s$", summary, re.M)
        assert steps and all(s == "PASS" for _, s in steps), steps


def test_graphs_against_op_by_op() -> None:
    speedups: dict[str, list[float]] = {}
    section = ""
    for line in (FOLDER / "graphs-table-13524ab.txt").read_text().splitlines():
        if line.endswith(":"):
            section = line[:-1]
        elif line.split() and line.split()[0] != "case":
            f = line.split()
            assert f[2] == "on" and f[-1] == "PASS", line
            speedups.setdefault(section, []).append(float(f[7]))
    got = {k: (min(v), max(v), len(v)) for k, v in speedups.items()}
    assert got == {"graphs-floor-u1": (2.09, 2.33, 6), "graphs-floor-u1-lean": (3.21, 3.39, 6),
                   "graphs-flux-dev-1024-u1": (1.02, 1.07, 9), "graphs-flux-dev-2048-u1": (0.99, 1.0, 9),
                   "graphs-flux-dev-1024-np2-shared": (1.35, 1.35, 2)}, got
    readme = (FOLDER / "README.md").read_text()
    for lo, hi in ((2.09, 2.33), (3.21, 3.39), (1.02, 1.07)):
        assert f"{lo:.2f}-{hi:.2f}x" in readme


def test_the_model_out_of_sample() -> None:
    text = (FOLDER / "model-gpu-check-h100-sxm-13524ab.txt").read_text()
    assert "summary: 144 runs measured; layer within 10%: 106 of 144; measured layer inside the band: 124 of 144" in text
    # Every FLUX run (60 ablations, 18 + 18 graphs) within 10% and inside its band; the misses are floors.
    flux = [ln.split() for ln in text.splitlines()
            if len(ln.split()) > 8 and ln.split()[0].startswith(("flux-2048-u1-ablations", "graphs-flux-dev"))]
    assert len(flux) == 96
    for f in flux:
        err = next(x for x in f if re.fullmatch(r"[+-][\d.]+%", x))
        assert abs(float(err.rstrip("%"))) <= 10 and "yes" in f, f
    readme = (FOLDER / "README.md").read_text()
    assert "**106 of 144**" in readme and "**124 of 144**" in readme
