"""`summarize` and `compare` in csv, json and markdown, read back as a dashboard would:
JSON validated with an independent validator (jsonschema) against the package's schema
files, CSV parsed with the csv module, and every value compared with the report read
here with h5py and numpy (not through the package under test)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import h5py
import jsonschema
import numpy as np
import pytest
from helpers import run_cli

SCHEMAS = Path(__file__).resolve().parents[2] / "postprocess" / "ulysses_post" / "schemas"
STAGES = ("projection", "norm_rope", "scatter", "attention", "gather", "out_projection", "layer")


def schema(name: str) -> dict:
    s = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(s)
    return s


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def expected(path: Path) -> dict[tuple[str, str], dict]:
    """Per (case, run): stage medians, layer p10/p90 and speedup from stage_ms; parity and
    modelled stages from the attributes and traced_layer datasets."""
    out = {}
    with h5py.File(path, "r") as f:
        for case in map(_text, f.attrs["cases"]):
            c = f["cases"][case]
            runs = [_text(r) for r in c.attrs["runs"]]
            crit = {r: c[r]["stage_ms"][()].max(axis=2).reshape(-1, 7) for r in runs}
            base = "nccl.baseline" if "nccl.baseline" in runs else runs[0]
            for r in runs:
                g = c[r]
                t = g.get("traced_layer")
                modeled = (t["modeled_stage_ms"][()].max(axis=0)
                           if t is not None and "modeled_stage_ms" in t and _text(t.attrs["machine"]) else None)
                out[(case, r)] = {
                    "median": np.median(crit[r], axis=0), "p10": np.percentile(crit[r][:, 6], 10),
                    "p90": np.percentile(crit[r][:, 6], 90),
                    "speedup": np.median(crit[base][:, 6]) / np.median(crit[r][:, 6]),
                    "schedule": _text(g.attrs["schedule"]), "transport_used": _text(g.attrs["transport_used"]),
                    "parity_pass": bool(g.attrs["parity_pass"]), "modeled": modeled,
                    "machine": _text(t.attrs["machine"]) if modeled is not None else None,
                    "repeats": g["stage_ms"].shape[0], "ablation": _text(g.attrs.get("ablation", b"")),
                }
    return out


def close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize("which", ["app_report", "model_report"])
def test_summarize_json_round_trip(which, request):
    path = request.getfixturevalue(which)
    r = run_cli("summarize", str(path), "--format", "json")
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    jsonschema.validate(doc, schema("summary"))
    exp = expected(path)
    assert len(doc["runs"]) == len(exp)
    with h5py.File(path, "r") as f:
        assert doc["report"]["mode"] == _text(f.attrs["mode"]) and doc["report"]["world_size"] == f.attrs["world_size"]
        assert doc["report"]["hosts"] == [_text(h) for h in f.attrs["hosts"]]
        # The app writes each rank's host processor; a report from before it has none.
        assert doc["report"]["host_cpus"] == [_text(c) for c in f.attrs.get("host_cpus", [])]
        assert len(doc["report"]["host_cpus"]) == doc["report"]["world_size"]
    mode = doc["report"]["mode"]
    assert {row["stage_times"] for row in doc["runs"]} == {{"sim": "cpu_simulated", "model": "modeled"}[mode]}
    for row in doc["runs"]:
        e = exp[(row["case"], row["run"])]
        for s, stage in enumerate(STAGES):
            assert close(row[f"{stage}_median_ms"], e["median"][s]), (row["run"], stage)
            assert close(row[f"{stage}_modeled_ms"], None if e["modeled"] is None else e["modeled"][s])
        assert close(row["layer_p10_ms"], e["p10"]) and close(row["layer_p90_ms"], e["p90"])
        assert close(row["speedup"], e["speedup"])
        assert row["schedule"] == e["schedule"] and row["transport_used"] == e["transport_used"]
        assert row["parity_pass"] is e["parity_pass"] and row["modeled_machine"] == e["machine"]
        assert row["ablation"] == e["ablation"] and row["repeats"] == e["repeats"]
        if mode == "model":
            assert row["parity_computed"] is False and row["parity_pass"] is False
    assert any("MODELLED" in n for n in doc["notes"])


def test_summarize_csv_parses_back_to_the_report(app_report):
    r = run_cli("summarize", str(app_report), "--format", "csv")
    assert r.rc == 0, r.err
    assert "NOT GPU figures" in r.err  # the caveat goes to stderr, stdout stays a clean table
    rows = list(csv.DictReader(io.StringIO(r.out)))
    exp = expected(app_report)
    assert len(rows) == len(exp)
    for row in rows:
        e = exp[(row["case"], row["run"])]
        for s, stage in enumerate(STAGES):
            assert close(float(row[f"{stage}_median_ms"]), e["median"][s])
            assert close(float(row[f"{stage}_modeled_ms"]), e["modeled"][s])
        assert close(float(row["speedup"]), e["speedup"]) and close(float(row["layer_p90_ms"]), e["p90"])
        assert row["parity_pass"] == str(int(e["parity_pass"])) and row["modeled_machine"] == e["machine"]
        assert row["stage_times"] == "cpu_simulated" and row["link_bound_fraction"] == ""


def test_summarize_markdown_is_one_table_row_per_run(app_report):
    r = run_cli("summarize", str(app_report), "--format", "markdown")
    assert r.rc == 0, r.err
    table = [line for line in r.out.splitlines() if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert set(table[1].replace("|", "").replace("-", "").replace(":", "")) <= {" ", ""}
    exp = expected(app_report)
    assert len(table) == 2 + len(exp)
    for line in table[2:]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        e = exp[(cells["case"], cells["run"])]
        assert math.isclose(float(cells["layer_median_ms"]), e["median"][6], rel_tol=1e-3)
        assert math.isclose(float(cells["layer_modeled_ms"]), e["modeled"][6], rel_tol=1e-3)
        assert cells["parity"] == ("PASS" if e["parity_pass"] else "FAIL")
    assert "CPU wall-clock" in r.out and "MODELLED" in r.out


def test_compare_formats_round_trip(app_report, app_report_np1):
    a, b = expected(app_report), expected(app_report_np1)
    j = run_cli("compare", str(app_report), str(app_report_np1), "--format", "json")
    assert j.rc == 0, j.err
    doc = json.loads(j.out)
    jsonschema.validate(doc, schema("compare"))
    shared = sorted(set(a) & set(b))
    assert sorted((r["case"], r["run"]) for r in doc["rows"]) == shared
    for row in doc["rows"]:
        ea, eb = a[(row["case"], row["run"])], b[(row["case"], row["run"])]
        assert close(row["a_median_ms"], ea["median"][6]) and close(row["b_median_ms"], eb["median"][6])
        assert close(row["ratio_b_over_a"], eb["median"][6] / ea["median"][6])
        assert row["a_repeats"] == ea["repeats"]
    assert any("ulysses degree" in d for d in doc["layer_differences"])  # 2 ranks against 1
    c = run_cli("compare", str(app_report), str(app_report_np1), "--format", "csv")
    assert c.rc == 0, c.err
    rows = list(csv.DictReader(io.StringIO(c.out)))
    assert [(r["case"], r["run"]) for r in rows] == [(r["case"], r["run"]) for r in doc["rows"]]
    for r, jr in zip(rows, doc["rows"]):
        assert close(float(r["b_median_ms"]), jr["b_median_ms"]) and r["verdict"] == jr["verdict"]
    m = run_cli("compare", str(app_report), str(app_report_np1), "--format", "markdown")
    assert m.rc == 0 and len([x for x in m.out.splitlines() if x.startswith("| ")]) == 1 + len(shared)


def test_json_nan_is_null_and_schema_refuses_a_wrong_document(synthetic):
    r = run_cli("summarize", str(synthetic), "--format", "json")
    assert r.rc == 0, r.err
    assert "NaN" not in r.out  # JSON has no NaN: undefined numbers are null
    doc = json.loads(r.out)
    jsonschema.validate(doc, schema("summary"))
    bad = json.loads(r.out)
    bad["runs"][0]["speedup"] = "fast"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("summary"))
    del bad["runs"][0]["speedup"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("summary"))
