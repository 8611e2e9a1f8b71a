"""scripts/model_gpu_check.sh: the GPU check's one-rank decks modelled on a machine, and with
--measured the stored GPU reports of the same decks beside them. The errors it prints are
recomputed here from the two reports with plain h5py."""
import math
import re
import shutil
import subprocess

import h5py

from conftest import REPO, mpi_env

# The stored one-H200 reports of the graphs section at 295c17a, under the names the GPU check
# gives them (the script matches modelled and measured reports by name).
STORED = REPO / "docs/measured/2026-12-05-h200-graphnodes"
NAMES = ["graphs-floor-u1", "graphs-flux-dev-1024-u1"]


def layer_medians(path):
    with h5py.File(path, "r") as f:
        return {(c, r): float(f["cases"][c][r].attrs["median_ms"][-1])
                for c in f.attrs["cases"] for r in f["cases"][c].attrs["runs"]}


def test_measured_beside_modelled(app, tmp_path):
    measured = tmp_path / "measured"
    measured.mkdir()
    for n in NAMES:
        shutil.copy(STORED / f"{n}-295c17a.h5", measured / f"{n}.h5")
    out = tmp_path / "out"
    p = subprocess.run([str(REPO / "scripts/model_gpu_check.sh"), "--machine", "h200-nvlink", "--measured",
                        str(measured)], capture_output=True, text=True, timeout=600,
                       env=mpi_env({"ULYSSES_IPC": app, "OUT": str(out)}))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("MODELLED on h200-nvlink")
    rows = {}
    for line in lines[2:]:
        cells = line.split()
        if len(cells) >= 10 and cells[0] in NAMES:  # the band '(lo-hi)' is a cell of its own here
            rows[(cells[0], cells[1])] = cells
    meas = {n: layer_medians(measured / f"{n}.h5") for n in NAMES}
    n_meas = sum(len(v) for v in meas.values())
    assert len(rows) == n_meas  # every measured run has its modelled row, matched by name
    within = 0
    for (name, run), cells in rows.items():
        (m,) = [v for (c, r), v in meas[name].items() if r == run]
        assert float(cells[7]) == round(m, 4)
        mod = layer_medians(out / f"{name}.h5")
        (c,) = [v for (cc, r), v in mod.items() if r == run]
        # The modelled report's median is its modelled layer: the printed one, whose error is
        # recomputed here.
        assert math.isclose(float(cells[2]), c, abs_tol=6e-5)
        err = 100 * (float(cells[2]) / m - 1)
        assert abs(float(cells[8].rstrip("%")) - err) < 0.2
        lo, hi = map(float, cells[3].strip("()").split("-"))
        assert cells[9] == ("yes" if lo <= round(m, 4) <= hi else "no") or abs(m - lo) < 1e-4 or abs(m - hi) < 1e-4
        within += abs(err) <= 10
    s = re.search(r"summary: (\d+) runs measured; layer within 10%: (\d+) of", p.stdout)
    assert s and int(s.group(1)) == n_meas and int(s.group(2)) == within
    # Runs of the other decks (not given) are printed without a measured figure.
    assert any(line.startswith("graphs-flux-dev-2048-u1") and line.split()[-1] == "-" for line in lines)


def test_unknown_argument_is_refused():
    p = subprocess.run([str(REPO / "scripts/model_gpu_check.sh"), "--bogus"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown argument '--bogus'" in p.stderr
