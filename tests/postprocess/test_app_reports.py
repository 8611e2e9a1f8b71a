"""The CLI on reports made by the real app in simulation mode (see conftest.py).

Expected values are computed here straight from the HDF5 datasets with h5py and numpy,
following docs/report.md, not through the package under test.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers import png_is_drawn, run_cli


def layer_medians(path: Path) -> dict[tuple[str, str], float]:
    """(case, run) -> median over timed layers of the slowest rank's `layer` time."""
    out = {}
    with h5py.File(path, "r") as f:
        for case in f.attrs["cases"]:
            c = f["cases"][case]
            for run in c.attrs["runs"]:
                t = c[run]["stage_ms"][()]
                layer = list(c[run]["stage_ms"].attrs["stages"]).index("layer")
                out[(str(case), str(run))] = float(np.median(t[..., layer].max(axis=2)))
    return out


def expected_speedups(path: Path) -> dict[tuple[str, str], float]:
    med = layer_medians(path)
    out = {}
    with h5py.File(path, "r") as f:
        for case in f.attrs["cases"]:
            runs = [str(r) for r in f["cases"][case].attrs["runs"]]
            base = "nccl.baseline" if "nccl.baseline" in runs else runs[0]
            for run in runs:
                out[(str(case), run)] = med[(str(case), base)] / med[(str(case), run)]
    return out


def test_report_is_a_simulation_report_with_runs(app_report: Path) -> None:
    with h5py.File(app_report, "r") as f:
        assert f.attrs["mode"] == "sim"
        assert f.attrs["schema_version"] == 1
        assert len(f.attrs["cases"]) >= 1
        assert all(len(f["cases"][c].attrs["runs"]) >= 2 for c in f.attrs["cases"])


def test_summarize_lists_every_run_with_its_speedup(app_report: Path) -> None:
    res = run_cli("summarize", str(app_report))
    assert res.rc == 0, res.err
    assert "NOT GPU figures" in res.out  # simulation mode is said plainly
    with h5py.File(app_report, "r") as f:  # each rank's host processor, counted
        cpus = [c.decode() if isinstance(c, bytes) else c for c in f.attrs["host_cpus"]]
    assert f"host CPUs      {cpus[0]}" in res.out, res.out
    speedups = expected_speedups(app_report)
    lines = res.out.splitlines()
    with h5py.File(app_report, "r") as f:
        for (case, run), speedup in speedups.items():
            g = f["cases"][case][run]
            used = g.attrs["transport_used"]
            fell_back = g.attrs["fallback_reason"] != "" or used != g.attrs["transport"]
            prefix = [g.attrs["transport"], "->", used + ("*" if fell_back else ""), g.attrs["schedule"]]
            block = lines[lines.index(next(line for line in lines if line.startswith(f"case {case}:"))):]
            # The CPU-time table (simulation mode puts the modelled one before it).
            block = block[block.index(next(line for line in block if "CPU times of the simulated run" in line)):]
            row = next((line.split() for line in block if line.split()[:4] == prefix), None)
            assert row is not None, f"no row for {case} {run} in\n{res.out}"
            assert f"{speedup:.2f}x" in row


def test_summarize_csv_speedups_match_the_data(app_report: Path) -> None:
    res = run_cli("summarize", str(app_report), "--csv")
    assert res.rc == 0, res.err
    rows = list(csv.DictReader(io.StringIO(res.out)))
    expected = expected_speedups(app_report)
    assert {(r["case"], r["run"]) for r in rows} == set(expected)
    medians = layer_medians(app_report)
    for r in rows:
        key = (r["case"], r["run"])
        assert float(r["speedup"]) == pytest.approx(expected[key], rel=1e-12)
        assert float(r["layer_median_ms"]) == pytest.approx(medians[key], rel=1e-12)
    assert "simulation mode" in res.err  # the caveat goes to stderr, stdout stays CSV


def test_compare_with_itself_gives_ratio_one(app_report: Path) -> None:
    res = run_cli("compare", str(app_report), str(app_report))
    assert res.rc == 0, res.err
    runs = layer_medians(app_report)
    rows = [line.split() for line in res.out.splitlines() if len(line.split()) > 2 and (
        (line.split()[0], line.split()[1]) in runs)]
    assert {(r[0], r[1]) for r in rows} == set(runs)
    assert all("1.00x" in r for r in rows)
    assert "only in" not in res.out


def test_compare_lists_runs_in_one_report_only(app_report: Path, tmp_path: Path) -> None:
    other = tmp_path / "fewer.h5"
    shutil.copy(app_report, other)
    with h5py.File(other, "r+") as f:
        case = str(f.attrs["cases"][0])
        c = f["cases"][case]
        runs = [str(r) for r in c.attrs["runs"]]
        del c[runs[-1]]
        c.attrs["runs"] = runs[:-1]
    res = run_cli("compare", str(app_report), str(other))
    assert res.rc == 0, res.err
    assert f"case {case} run {runs[-1]}: only in A" in res.out


def test_plot_writes_drawn_pngs(app_report: Path, app_report_np1: Path, tmp_path: Path) -> None:
    out = tmp_path / "figs"
    res = run_cli("plot", str(app_report), "-o", str(out), "--reports", str(app_report_np1))
    assert res.rc == 0, res.err
    with h5py.File(app_report, "r") as f:
        cases = [str(c) for c in f.attrs["cases"]]
    expected = [out / f"{c}.{kind}.png" for c in cases for kind in ("stages", "timeline")]
    expected.append(out / "speedup-vs-degree.png")  # degrees 2 and 1
    for path in expected:
        assert path.is_file(), f"{path} not written; stdout:\n{res.out}\nstderr:\n{res.err}"
        assert png_is_drawn(path) is None, png_is_drawn(path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    res = run_cli("summarize", str(tmp_path / "nope.h5"))
    assert res.rc == 2
    assert "nope.h5: no such file" in res.err and "Traceback" not in res.err


def test_non_hdf5_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a report\n")
    res = run_cli("compare", str(bad), str(bad))
    assert res.rc == 2
    assert "not an HDF5 file" in res.err and "Traceback" not in res.err


def test_deck_is_not_a_report(deck: Path) -> None:
    res = run_cli("summarize", str(deck))
    assert res.rc == 2
    assert "not a ulysses-ipc report" in res.err and "Traceback" not in res.err


def test_unknown_schema_version_is_a_clear_error(app_report: Path, tmp_path: Path) -> None:
    future = tmp_path / "future.h5"
    shutil.copy(app_report, future)
    with h5py.File(future, "r+") as f:
        f.attrs["schema_version"] = 2
    res = run_cli("plot", str(future), "-o", str(tmp_path / "figs"))
    assert res.rc == 2
    assert "unknown report schema_version 2" in res.err and "Traceback" not in res.err


def test_tampered_median_is_reported(app_report: Path, tmp_path: Path) -> None:
    bad = tmp_path / "tampered.h5"
    shutil.copy(app_report, bad)
    with h5py.File(bad, "r+") as f:
        case = str(f.attrs["cases"][0])
        run = str(f["cases"][case].attrs["runs"][0])
        g = f["cases"][case][run]
        g.attrs["median_ms"] = g.attrs["median_ms"] * 1.5 + 1.0
    res = run_cli("summarize", str(bad))
    assert res.rc == 2
    assert f"case '{case}' run '{run}': attribute 'median_ms'" in res.err and "Traceback" not in res.err


def test_unknown_case_is_a_clear_error(app_report: Path) -> None:
    res = run_cli("summarize", str(app_report), "--case", "no-such-case")
    assert res.rc == 2
    assert "no case 'no-such-case'" in res.err
