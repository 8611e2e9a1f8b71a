"""`ulysses-ipc deck from-report` as a user runs it: the deck of the cases a stored report ran,
read back with plain h5py (not our reader) and compared field by field with the report's own
case attributes; field options; and one message with exit 2 for each bad input."""
import pathlib
import subprocess

import h5py
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MEASURED = REPO / "docs" / "measured"
# The fields a deck case holds (docs/deck.md, "Case fields").
FIELDS = ["name", "description", "batch", "seq_len", "heads", "head_dim", "dtype", "qk_norm", "norm_eps", "rope",
          "rope_theta", "fused_qkv", "ulysses", "tp", "transports", "schedules", "warmup", "iterations", "repeats",
          "seed", "tol_max_abs", "tol_rel_l2", "watchdog_s", "ablations", "rank_order", "steps", "step_similarity",
          "full_steps", "vmajor_threshold", "vmajor_tol_rel_l2"]


def from_report(app, *args):
    return subprocess.run([app, "deck", "from-report", *map(str, args)], capture_output=True, text=True, timeout=60)


def value(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return [value(x) for x in v.tolist()] if v.ndim else value(v.item())
    if isinstance(v, (list, tuple)):
        return [value(x) for x in v]
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.integer, np.bool_, bool)):
        return int(v)
    return v


@pytest.mark.parametrize("report", ["2026-12-02-h200-gemm/default-steady-np1-59e55b4.h5",
                                    "2026-12-02-h200-normqk/flux-1024-u1-89d5171.h5",
                                    "2026-12-01-h200/floor-u1.h5"])
def test_every_case_field_of_the_report(app, tmp_path, report):
    out = tmp_path / "deck.h5"
    p = from_report(app, MEASURED / report, "-o", out)
    assert p.returncode == 0, p.stderr
    with h5py.File(MEASURED / report, "r") as r, h5py.File(out, "r") as d:
        names = [value(n) for n in r.attrs["cases"]]
        assert [value(n) for n in d.attrs["cases"]] == names
        compared = 0
        for n in names:
            rc, dc = r["cases"][n], d["cases"][n]
            for f in FIELDS:
                if f in rc.attrs:
                    want, got = value(rc.attrs[f]), value(dc.attrs[f])
                    if isinstance(want, float):
                        assert got == pytest.approx(want, rel=1e-6), (n, f)
                    else:
                        assert got == want, (n, f)
                    compared += 1
        # every field a current report stores: nothing silently defaulted
        assert compared == len(names) * len(FIELDS)
    assert "not in the report" not in p.stdout


def test_an_older_report_names_the_fields_it_lacks(app, tmp_path):
    out = tmp_path / "deck.h5"
    p = from_report(app, MEASURED / "2026-11-29-h200x2/latency-floor/floor-np2.h5", "-o", out)
    assert p.returncode == 0, p.stderr
    assert "not in the report, so the default: floor: ablations, floor: rank_order, floor: steps" in p.stdout
    with h5py.File(out, "r") as d:
        assert value(d["cases"]["floor"].attrs["seq_len"]) == 256
        assert value(d["cases"]["floor"].attrs["rank_order"]) == "tp_outer"


def test_field_options_override_every_case(app, tmp_path):
    out = tmp_path / "deck.h5"
    p = from_report(app, MEASURED / "2026-12-02-h200-gemm/default-steady-np1-59e55b4.h5", "--iterations", "7",
                    "--transports", "ipc", "-o", out)
    assert p.returncode == 0, p.stderr
    with h5py.File(out, "r") as d:
        for n in d["cases"]:
            assert value(d["cases"][n].attrs["iterations"]) == 7
            assert value(d["cases"][n].attrs["transports"]) == ["ipc"]
            assert value(d["cases"][n].attrs["warmup"]) == 20  # the report's, untouched


def test_bad_inputs(app, tmp_path):
    cases = []
    # a deck is not a report
    cases.append(([REPO / "inputs" / "default.h5"], "software: missing or not 'ulysses-ipc': not a report"))
    # no such file
    cases.append(([tmp_path / "absent.h5"], "absent.h5: cannot open: No such file or directory"))
    # not HDF5
    junk = tmp_path / "junk.h5"
    junk.write_text("not hdf5")
    cases.append(([junk], "junk.h5: not an HDF5 file"))
    # a report whose case lists a group that is not there
    broken = tmp_path / "broken.h5"
    with h5py.File(broken, "w") as f:
        f.attrs["software"] = "ulysses-ipc"
        f.attrs["cases"] = ["gone"]
        f.create_group("cases")
    cases.append(([broken], "there is no group /cases/gone"))
    # a report whose case holds a field out of range
    spoilt = tmp_path / "spoilt.h5"
    with h5py.File(MEASURED / "2026-12-01-h200/floor-u1.h5", "r") as r, h5py.File(spoilt, "w") as f:
        f.attrs["software"] = "ulysses-ipc"
        f.attrs["cases"] = ["floor"]
        g = f.create_group("cases/floor")
        for k, v in r["cases"]["floor"].attrs.items():
            g.attrs[k] = v
        g.attrs["heads"] = 0
    cases.append(([spoilt], "case 'floor': heads"))
    # an override the deck refuses
    cases.append(([MEASURED / "2026-12-01-h200/floor-u1.h5", "--iterations", "0"], "iterations: 0 is out of range"))
    for args, message in cases:
        out = tmp_path / "never.h5"
        p = from_report(app, *args, "-o", out)
        assert p.returncode == 2, (args, p.returncode, p.stdout, p.stderr)
        assert message in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) <= 2, p.stderr
        assert not out.exists()
