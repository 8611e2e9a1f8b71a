"""The computations on a report written with h5py (synth.py), where every value is known.

These run without the app, so they pin the statistics and the consistency checks to
docs/report.md even while the app changes.
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
from synth import stage_times, write_report
from ulysses_post import ReportError, load_report
from ulysses_post.cli import main
from ulysses_post.compare import compare
from ulysses_post.summarize import summarize


def test_statistics_follow_the_schema(synthetic: Path) -> None:
    report = load_report(str(synthetic))
    with h5py.File(synthetic, "r") as f:
        for case in report.cases:
            for run in case.runs:
                t = f["cases"][case.name][run.name]["stage_ms"][()]
                crit = t.max(axis=2).reshape(-1, 7)
                np.testing.assert_allclose(run.median_ms, np.percentile(crit, 50, axis=0), rtol=1e-12)
                np.testing.assert_allclose(run.p10_ms, np.percentile(crit, 10, axis=0), rtol=1e-12)
                per_repeat = np.median(t[..., 6].max(axis=2), axis=1)
                np.testing.assert_allclose(run.repeat_medians(), per_repeat, rtol=1e-12)


def test_speedup_against_nccl_baseline_else_first_run(synthetic: Path) -> None:
    report = load_report(str(synthetic))
    a, b = report.case("a"), report.case("b")
    assert a.baseline().name == "nccl.baseline"
    assert b.baseline().name == "ipc.v-first"  # case b has no nccl.baseline
    fast = a.run("ipc.v-first")
    assert a.speedup(fast) == pytest.approx(a.run("nccl.baseline").layer_median / fast.layer_median)
    assert b.speedup(b.runs[0]) == 1.0


def _scatter_median(f: h5py.File, case: str, run: str) -> float:
    """The schema's definition, straight from stage_ms: max over ranks, then the median."""
    return float(np.median(f["cases"][case][run]["stage_ms"][()][..., 2].max(axis=2)))


def test_scatter_against_nccl_of_the_same_schedule_and_the_link_bound(
        synthetic: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(synthetic), "--csv", "--link-gbs", "50"]) == 0
    rows = {(r["case"], r["run"]): r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    with h5py.File(synthetic, "r") as f:
        nccl = _scatter_median(f, "a", "nccl.baseline")
        for case, run in rows:
            row, scatter = rows[case, run], _scatter_median(f, case, run)
            sent = f["cases"][case][run].attrs["scatter_bytes_per_rank"]
            assert int(row["scatter_bytes_per_rank"]) == sent
            assert float(row["link_bound_fraction"]) == pytest.approx(sent / 50e9 * 1e3 / scatter, rel=1e-12)
            if (case, run) in (("a", "nccl.baseline"), ("a", "ipc.baseline")):
                assert float(row["scatter_speedup_vs_nccl"]) == pytest.approx(nccl / scatter, rel=1e-12)
            else:  # no nccl run of that schedule in the case
                assert row["scatter_speedup_vs_nccl"] == ""
    # Without --link-gbs there is no bound, in the CSV or the table.
    assert main(["summarize", str(synthetic), "--csv"]) == 0
    assert {r["link_bound_fraction"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))} == {""}
    out = io.StringIO()
    summarize(load_report(str(synthetic)), ["a"], "table", out)
    assert "scatter x" in out.getvalue() and "link bound" not in out.getvalue()
    out = io.StringIO()
    summarize(load_report(str(synthetic)), ["a"], "table", out, link_gbs=50.0)
    with h5py.File(synthetic, "r") as f:
        pct = 100 * 3 * 1024 * 1024 / 50e9 * 1e3 / _scatter_median(f, "a", "ipc.v-first")
    assert "link bound" in out.getvalue() and f"{pct:.0f}%" in out.getvalue()


@pytest.mark.parametrize("bad", ["0", "-3", "nan", "inf", "fast"])
def test_link_rate_must_be_a_positive_number(synthetic: Path, bad: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["summarize", str(synthetic), "--link-gbs", bad])
    assert e.value.code == 2 and "--link-gbs" in capsys.readouterr().err


def test_summarize_text(synthetic: Path) -> None:
    out = io.StringIO()
    summarize(load_report(str(synthetic)), None, "table", out)
    text = out.getvalue()
    assert "mode           sim, world size 2" in text and "NOT GPU figures" in text
    assert "ipc -> nccl*" in text and "ipc.baseline: the scatter ran on nccl, not ipc" in text
    assert "speedup against the first run ipc.v-first" in text
    assert "FAIL" in text  # case b's ipc.baseline
    overlap = np.median(h5py.File(synthetic, "r")["cases/a/ipc.v-first/v_overlap_ms"][()])
    assert f"{overlap:.3f}" in text


def test_summarize_gpu_report_has_no_simulation_note(tmp_path: Path) -> None:
    path = write_report(tmp_path / "gpu.h5", mode="gpu")
    out = io.StringIO()
    summarize(load_report(str(path)), ["a"], "table", out)
    assert "simulation" not in out.getvalue() and "case b" not in out.getvalue()


def test_summarize_csv_has_one_row_per_run(synthetic: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(synthetic), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["case"], r["run"]) for r in rows] == [("a", "nccl.baseline"), ("a", "ipc.baseline"),
                                                     ("a", "ipc.v-first"), ("b", "ipc.v-first"), ("b", "ipc.baseline")]
    assert rows[1]["transport_used"] == "nccl" and rows[4]["parity_pass"] == "0"
    assert rows[0]["v_overlap_median_ms"] == "" and rows[2]["v_overlap_median_ms"] != ""


def test_compare_verdicts_see_the_spread(tmp_path: Path) -> None:
    a = write_report(tmp_path / "a.h5", seed=1)
    b = tmp_path / "b.h5"
    shutil.copy(a, b)
    # B: case a's ipc.v-first three times faster, with its statistics rewritten consistently.
    with h5py.File(b, "r+") as f:
        g = f["cases/a/ipc.v-first"]
        t = g["stage_ms"][()] / 3
        g["stage_ms"][...] = t
        crit = t.max(axis=2).reshape(-1, 7)
        for name, q in (("median_ms", 50), ("p10_ms", 10), ("p90_ms", 90)):
            g.attrs[name] = np.percentile(crit, q, axis=0)
        g.attrs["scatter_bandwidth_gbs"] = g.attrs["scatter_bytes_per_rank"] / (g.attrs["median_ms"][2] * 1e-3) / 1e9
    out = io.StringIO()
    compare(load_report(str(a)), load_report(str(b)), None, out)
    rows = {tuple(line.split()[:2]): line for line in out.getvalue().splitlines() if line.startswith(("a ", "b "))}
    assert "0.33x" in rows[("a", "ipc.v-first")] and rows[("a", "ipc.v-first")].endswith("B faster")
    assert "1.00x" in rows[("a", "nccl.baseline")] and rows[("a", "nccl.baseline")].endswith("within spread")


def test_compare_single_repeat_has_no_spread(tmp_path: Path) -> None:
    path = write_report(tmp_path / "one.h5", repeats=1)
    out = io.StringIO()
    compare(load_report(str(path)), load_report(str(path)), None, out)
    assert "no spread (<2 repeats)" in out.getvalue()


def test_compare_lists_cases_and_runs_of_one_side(tmp_path: Path) -> None:
    a = write_report(tmp_path / "a.h5")
    b = tmp_path / "b.h5"
    shutil.copy(a, b)
    with h5py.File(b, "r+") as f:
        del f["cases/b"]
        f.attrs["cases"] = ["a"]
        del f["cases/a/ipc.baseline"]
        f["cases/a"].attrs["runs"] = ["nccl.baseline", "ipc.v-first"]
        f["cases/a"].attrs["seq_len"] = 512
    out = io.StringIO()
    compare(load_report(str(a)), load_report(str(b)), None, out)
    text = out.getvalue()
    assert "case a run ipc.baseline: only in A" in text and "case b: only in A" in text
    assert "case a: the layers differ: seq_len 256 vs 512" in text


def _tamper(src: Path, dst: Path, edit) -> Path:
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        edit(f)
    return dst


@pytest.mark.parametrize("edit, message", [
    (lambda f: f["cases/a/ipc.v-first"].attrs.__setitem__("p90_ms", np.zeros(7)),
     "case 'a' run 'ipc.v-first': attribute 'p90_ms'"),
    (lambda f: f["cases/a/nccl.baseline"].attrs.__setitem__("scatter_bandwidth_gbs", 1e6),
     "case 'a' run 'nccl.baseline': attribute 'scatter_bandwidth_gbs'"),
    (lambda f: f["cases/b/ipc.baseline"].attrs.__setitem__("parity_pass", 1),
     "case 'b' run 'ipc.baseline': parity_pass = 1 contradicts"),
    (lambda f: f["cases/a/ipc.v-first"].attrs.__setitem__("iterations", 5),
     "case 'a' run 'ipc.v-first': stage_ms has shape (4, 3, 2, 7), expected"),
    (lambda f: f["cases/a"].attrs.__setitem__("runs", ["nccl.baseline", "nccl.v-first"]),
     "case 'a': run 'nccl.v-first' is listed in 'runs' but has no group"),
    (lambda f: f.attrs.__delitem__("world_size"), "missing attribute 'world_size'"),
    (lambda f: f.attrs.__setitem__("schema_version", 7), "unknown report schema_version 7"),
    (lambda f: f.attrs.__setitem__("software", "something-else"), "not a ulysses-ipc report"),
])
def test_inconsistent_reports_are_refused(synthetic: Path, tmp_path: Path, edit, message: str) -> None:
    bad = _tamper(synthetic, tmp_path / "bad.h5", edit)
    with pytest.raises(ReportError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_report(str(bad))


def test_errors_are_one_line_and_exit_2(synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(tmp_path / "missing.h5")]) == 2
    assert main(["summarize", str(synthetic), "--case", "zzz"]) == 2
    assert main(["plot", str(synthetic), "-o", str(synthetic)]) == 2  # a file, not a directory
    err = capsys.readouterr().err.splitlines()
    assert err == [f"ulysses-post summarize: error: {tmp_path / 'missing.h5'}: no such file",
                   f"ulysses-post summarize: error: {synthetic}: no case 'zzz' (cases: a, b)",
                   f"ulysses-post plot: error: {synthetic}: exists and is not a directory"]


def test_plot_figures_and_speedup_vs_degree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two = write_report(tmp_path / "np2.h5", world_size=2)
    four = write_report(tmp_path / "np4.h5", world_size=4, seed=3)
    out = tmp_path / "figs"
    assert main(["plot", str(two), "-o", str(out), "--case", "a"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["a.stages.png", "a.timeline.png"]
    assert "speedup-vs-degree not drawn" in capsys.readouterr().err
    assert main(["plot", str(two), "-o", str(out), "--reports", str(four)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["a.stages.png", "a.timeline.png", "b.stages.png", "b.timeline.png", "speedup-vs-degree.png"]
    for name in names:
        assert png_is_drawn(out / name) is None


def test_timeline_uses_the_layer_nearest_the_median(tmp_path: Path) -> None:
    from ulysses_post.plot import representative_layer

    path = write_report(tmp_path / "r.h5", repeats=3, iterations=5)
    run = load_report(str(path)).case("a").runs[0]
    rep, it = representative_layer(run)
    crit = run.stage_ms[..., 6].max(axis=2)
    assert abs(crit[rep, it] - run.layer_median) == np.min(np.abs(crit - run.layer_median))


def test_module_and_version_entry() -> None:
    res = run_cli("--version")
    assert res.rc == 0 and res.out.startswith("ulysses-post ")


def test_stage_times_helper_is_consistent() -> None:
    t = stage_times(np.random.default_rng(0), 2, 2, 2, 1.0)
    np.testing.assert_allclose(t[..., 6], t[..., :6].sum(axis=-1))
