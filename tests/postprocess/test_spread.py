"""`ulysses-post spread`: the same run in several reports, on synthetic reports (synth.py) whose
layer medians are recomputed here from the stored stage times with numpy, not by the package."""

from __future__ import annotations

import io
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers import run_cli
from synth import write_report
from ulysses_post import load_report
from ulysses_post.spread import spread, write


def layer_median(path: Path, case: str, run: str) -> float:
    with h5py.File(path, "r") as f:
        t = f["cases"][case][run]["stage_ms"][()]
    return float(np.percentile(t[..., 6].max(axis=2).ravel(), 50))


def three_reports(tmp_path: Path) -> list[Path]:
    return [write_report(tmp_path / f"r{s}.h5", seed=s) for s in (11, 12, 13)]


def test_rows_are_the_medians_of_each_report(tmp_path: Path) -> None:
    paths = three_reports(tmp_path)
    rows, notes = spread([load_report(str(p)) for p in paths])
    assert notes == []
    by_run = {(r["case"], r["run"]): r for r in rows}
    assert sorted(by_run) == [("a", "ipc.baseline"), ("a", "ipc.v-first"), ("a", "nccl.baseline"),
                              ("b", "ipc.baseline"), ("b", "ipc.v-first")]
    for (case, run), r in by_run.items():
        ms = [layer_median(p, case, run) for p in paths]
        assert r["reports"] == 3 and r["issued"] == "op by op"
        assert r["min_ms"] == pytest.approx(min(ms), rel=1e-12)
        assert r["max_ms"] == pytest.approx(max(ms), rel=1e-12)
        assert r["median_ms"] == pytest.approx(float(np.median(ms)), rel=1e-12)
        assert r["max_over_min"] == pytest.approx(max(ms) / min(ms), rel=1e-12)
        assert r["min_in"] == paths[int(np.argmin(ms))].name and r["max_in"] == paths[int(np.argmax(ms))].name


def test_graph_replays_and_op_by_op_twins_are_kept_apart(tmp_path: Path) -> None:
    paths = three_reports(tmp_path)
    # r11: case a's ipc.v-first replayed as a graph in all its timed layers; r12: the same run
    # named as the op-by-op twin of a graph report ("+no-graphs"): the same run as r13's.
    with h5py.File(paths[0], "r+") as f:
        g = f["cases/a/ipc.v-first"]
        g.attrs["graphs"] = "on"
        g.attrs["graph_replays"] = int(g.attrs["repeats"]) * int(g.attrs["iterations"])
    with h5py.File(paths[1], "r+") as f:
        f.move("cases/a/ipc.v-first", "cases/a/ipc.v-first+no-graphs")
        f["cases/a"].attrs["runs"] = ["nccl.baseline", "ipc.baseline", "ipc.v-first+no-graphs"]
    rows, _ = spread([load_report(str(p)) for p in paths])
    v_first = [r for r in rows if (r["case"], r["run"]) == ("a", "ipc.v-first")]
    # the graph replay is in one report only: no row; the op-by-op run is in r12 and r13
    assert [(r["issued"], r["reports"]) for r in v_first] == [("op by op", 2)]
    ms = [layer_median(paths[1], "a", "ipc.v-first+no-graphs"), layer_median(paths[2], "a", "ipc.v-first")]
    assert v_first[0]["max_over_min"] == pytest.approx(max(ms) / min(ms), rel=1e-12)


def test_a_different_layer_is_listed_apart(tmp_path: Path) -> None:
    paths = three_reports(tmp_path)
    with h5py.File(paths[2], "r+") as f:
        f["cases/b"].attrs["seq_len"] = 512
    rows, notes = spread([load_report(str(p)) for p in paths])
    assert all(r["reports"] == 2 for r in rows if r["case"] == "b")
    assert all(r["reports"] == 3 for r in rows if r["case"] == "a")
    assert "case b run ipc.v-first in r13.h5: the layers differ from r11.h5: seq_len 256 vs 512" in notes


def test_formats_and_summary(tmp_path: Path) -> None:
    paths = three_reports(tmp_path)
    reports = [load_report(str(p)) for p in paths]
    out = io.StringIO()
    write(reports, None, "json", out)
    doc = json.loads(out.getvalue())
    assert doc["kind"] == "ulysses-post spread" and len(doc["rows"]) == 5
    # the worst max/min from the stored stage times, not from the package's rows
    worst = max(max(ms) / min(ms) for ms in ([layer_median(p, c, r) for p in paths] for c, r in (
        ("a", "nccl.baseline"), ("a", "ipc.baseline"), ("a", "ipc.v-first"), ("b", "ipc.v-first"),
        ("b", "ipc.baseline"))))
    assert doc["summary"][0].startswith("op by op: 5 runs in 2+ reports") and doc["summary"][0].endswith(
        f"worst {worst:.3f}")
    out = io.StringIO()
    write(reports, ["a"], "csv", out)
    assert out.getvalue().splitlines()[0] == "case,run,issued,reports,min_ms,median_ms,max_ms,max_over_min,min_in,max_in"
    assert len(out.getvalue().splitlines()) == 4


def test_cli(tmp_path: Path) -> None:
    paths = three_reports(tmp_path)
    r = run_cli("spread", *map(str, paths))
    assert r.rc == 0, r.err
    assert "op by op: 5 runs in 2+ reports" in r.out
    one = run_cli("spread", str(paths[0]))
    assert one.rc == 2 and "spread needs two or more reports" in one.err
    missing = run_cli("spread", str(paths[0]), str(tmp_path / "absent.h5"))
    assert missing.rc == 2 and "absent.h5" in missing.err
