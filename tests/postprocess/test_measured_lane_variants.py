"""The one-H100 data of the seventeenth session kept in docs/measured/2026-12-07-h100-2ca3fea/ and
docs/measured/2026-12-07-h100-b56ee0a/ (their READMEs): three variants of the lane-rows walk measured
beside it in the same runs and withdrawn. Storing each head row from registers at its stride halves
the walk's rate; LayerNorm's statistics in one pass change it by no more than the runs' spread.
Stored data: this times nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

MEASURED = Path(__file__).resolve().parents[2] / "docs" / "measured"
DIRECT, ONE_PASS = MEASURED / "2026-12-07-h100-2ca3fea", MEASURED / "2026-12-07-h100-b56ee0a"
TABLE = "The lane-rows walk (a lane a head), Q and K in one launch"


def stored(folder: Path, what: str) -> str:
    """A stored file of the folder's call, named by its code: norm-tables-CODE-runN.txt, gpu-tests-CODE.txt."""
    code = folder.name.split("-")[-1]
    return (folder / (f"gpu-tests-{code}.txt" if what == "gpu-tests" else f"norm-tables-{code}-{what}.txt")).read_text()


def lane_table(folder: Path, run: int) -> dict[tuple[str, int, str, str], list[float | None]]:
    """(kind, D, dtype, layout) -> [pick %, lane rows %, the variants' % ...] of one run's table."""
    where = f"{folder.name} run{run}"
    text = stored(folder, f"run{run}")
    bound = float(re.search(r"bound = ([\d.]+) TB/s device copy", text).group(1))
    assert 2.9 < bound < 3.1, (where, bound)  # the H100's copy bound, as every other H100 run
    cells = {}
    for line in text.split(TABLE, 1)[1].splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) >= 9 and f[0] in ("none", "rms", "layer"):
            vals = [None if x == "-" else float(x.rstrip("%")) for x in f[5:-1]]
            cells[(f[0], int(f[1]), f[2], f[3])] = vals
    assert len(cells) == 36, (where, sorted(cells))  # 3 kinds x 2 head dims x 3 dtypes x 2 layouts
    return cells


def test_storing_from_registers_at_the_head_rows_stride_halves_the_walk():
    runs = [lane_table(DIRECT, 1), lane_table(DIRECT, 2)]
    for cells in runs:
        for (kind, D, dt, layout), (pick, lane, direct, direct1) in cells.items():
            if dt == "fp32":
                assert direct is None and direct1 is None
                continue
            # Half the rate at head_dim 72; at most 0.7 of it at 64 (49-55% against 78-83, LayerNorm).
            ratio = 0.52 if D == 72 else 0.7
            assert max(direct, direct1) < ratio * lane, (kind, D, dt, layout, lane, direct, direct1)
            if D == 72:
                assert 37 < direct < 43 and abs(direct1 - direct) < 0.5, (kind, dt, layout, direct, direct1)
                assert 77 < lane < 89
            else:
                assert 43 <= min(direct, direct1) and max(direct, direct1) < 55
    # The README's rows: lane rows, then lane direct, run 1 / run 2.
    readme = (DIRECT / "README.md").read_text()
    for dt in ("bf16", "fp16"):
        for layout in ("fused", "separate"):
            (_, l1, d1, _), (_, l2, d2, _) = (r[("layer", 72, dt, layout)] for r in runs)
            assert f"| {l1:.1f} / {l2:.1f} | {d1:.1f} / {d2:.1f} |" in readme, (dt, layout)


def test_one_pass_layernorm_moves_the_walk_within_the_runs_spread():
    runs = [lane_table(ONE_PASS, 1), lane_table(ONE_PASS, 2)]
    readme = (ONE_PASS / "README.md").read_text()
    for (kind, D, dt, layout), vals in runs[0].items():
        one_pass = [r[(kind, D, dt, layout)][2] for r in runs]
        lane = [r[(kind, D, dt, layout)][1] for r in runs]
        if kind != "layer" or dt == "fp32":
            assert one_pass == [None, None], (kind, D, dt, layout)
            continue
        for lp, op in zip(lane, one_pass):
            assert (0.0 if D == 72 else -0.7) <= round(op - lp, 1) <= (0.6 if D == 72 else 1.0), (D, dt, layout, lp, op)
            assert op < 85
        assert f"{lane[0]:.1f} / {lane[1]:.1f} | {one_pass[0]:.1f} / {one_pass[1]:.1f}" in readme, (D, dt, layout)
        # The spread the README names: a cell moves up to 1.3 points between the runs.
        assert abs(lane[0] - lane[1]) <= 1.3 and abs(one_pass[0] - one_pass[1]) <= 1.3
    # RMS's lane rows at head_dim 72, which LayerNorm's one pass does not reach.
    rms = [r[("rms", 72, dt, lay)][1] for r in runs for dt in ("bf16", "fp16") for lay in ("fused", "separate")]
    assert min(rms) == 80.5 and max(rms) == 84.6


def test_the_cells_below_85_percent_are_the_ones_the_readmes_name():
    """The norm table's count with Q and K in one launch, and the cells in it, per run."""
    want = {(DIRECT, 1): 5, (DIRECT, 2): 4, (ONE_PASS, 1): 6, (ONE_PASS, 2): 4}
    for (folder, run), n in want.items():
        text = stored(folder, f"run{run}")
        m = re.search(r"with Q and K in one launch \(the layer under [^)]*\): (\d+) of 48", text)
        assert m and int(m.group(1)) == n, (folder.name, run)
        below = [line.split("|") for line in text.splitlines() if line.endswith(" 1-lnch<85%")]
        assert len(below) == n
        # The four 16-bit LayerNorm head_dim 72 cells in every run; the rest RMS at head_dim 72, within
        # a point of 85%.
        layer = [f for f in below if f[0].strip() == "layer"]
        assert len(layer) == 4 and all(f[1].strip() == "72" and f[3].strip() != "fp32" for f in layer)
        assert all(f[1].strip() == "72" and 84 < float(f[20].strip().rstrip("%")) < 85 for f in below if f not in layer)
        assert f"{want[(folder, 1)]} and {want[(folder, 2)]} of its 48" in (folder / "README.md").read_text()


def test_the_gpu_tests_of_both_variants_passed():
    for folder, test in ((DIRECT, "NormRopeLaneVariants"), (ONE_PASS, "NormRopeLaneRowsOnePass")):
        text = stored(folder, "gpu-tests")
        assert f"[       OK ] CudaKernelsTest.{test} " in text
        assert "[  PASSED  ] 3 tests." in text and "FAILED" not in text
