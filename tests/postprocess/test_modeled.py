"""summarize and plot on the modelled figures: in simulation and model mode the modelled
stages come first and are labelled modelled; a model-mode report never shows a parity
verdict; the Gantt chart of the traced layer is drawn from the modelled op times (and,
where measured, from the measured ones). Expected values come from h5py directly."""

from __future__ import annotations

import csv
import io

import h5py
import numpy as np
from helpers import png_is_drawn, run_cli


def modeled_critical(path, case, run):
    with h5py.File(path, "r") as f:
        return f["cases"][case][run]["traced_layer"]["modeled_stage_ms"][()].max(axis=0)


def test_summarize_shows_modelled_figures_first_and_labelled(app_report):
    r = run_cli("summarize", str(app_report))
    assert r.rc == 0, r.err
    out = r.out
    assert "MODELED on h200-nvlink" in out and "Modeled, not measured" in out
    assert out.index("MODELED on") < out.index("CPU times of the simulated run")
    # The modelled layer of ipc.baseline as the report holds it.
    crit = modeled_critical(app_report, "tiny", "ipc.baseline")
    row = next(line for line in out[out.index("MODELED on"):].splitlines() if "ipc -> ipc" in line and "baseline" in line)
    assert f"{crit[6]:.3f}" in row.split()


def test_model_mode_report_has_no_parity_verdict_and_says_modelled(model_report):
    r = run_cli("summarize", str(model_report))
    assert r.rc == 0, r.err
    assert "model mode: every time is MODELLED" in r.out and "parity: not computed" in r.out
    assert "PASS" not in r.out and "FAIL" not in r.out
    c = run_cli("summarize", str(model_report), "--csv")
    assert c.rc == 0 and "MODELLED" in c.err
    rows = list(csv.DictReader(io.StringIO(c.out)))
    assert rows and all(row["parity_computed"] == "0" and row["parity_pass"] == "0" for row in rows)
    for row in rows:
        crit = modeled_critical(model_report, row["case"], row["run"])
        assert np.isclose(float(row["layer_modeled_ms"]), crit[6])
        assert row["modeled_machine"] == "h200-nvlink"


def test_plot_draws_the_gantt_chart_of_the_traced_layer(app_report, model_report, tmp_path):
    for report, names in ((model_report, ["tiny.gantt-modeled.png"]),
                          (app_report, ["tiny.gantt-modeled.png", "tiny.gantt-measured.png"])):
        out = tmp_path / report.stem
        r = run_cli("plot", str(report), "-o", str(out))
        assert r.rc == 0, r.err
        for n in names:
            assert (out / n).is_file(), r.out
            assert png_is_drawn(out / n) is None
        if report == app_report:  # modelled first outside GPU mode
            assert r.out.index("gantt-modeled") < r.out.index("gantt-measured")


def test_a_report_claiming_parity_it_did_not_compute_is_refused(model_report, tmp_path):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(model_report.read_bytes())
    with h5py.File(bad, "r+") as f:
        g = f["cases"]["tiny"]["ipc.baseline"]
        g.attrs["parity_pass"] = 1
    r = run_cli("summarize", str(bad))
    assert r.rc == 2 and "parity_computed = 0" in r.err
