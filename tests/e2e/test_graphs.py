"""End-to-end: layers replayed as graphs (--graphs, the ablation no-graphs) in the real
program, in simulation mode, where the host device captures a layer's op list and the
recording decorator replays it (lib/run/layer_graph.hpp). Replayed layers give outputs
bit-identical to the same layers op by op (same digest), with the counts of captures and
replays the run's shape implies; the runs that cannot be captured say why; --graphs off
turns them off; a peer stopped while the layers are replayed is named within the
watchdog and nothing is left behind."""
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import REPO, run_attrs as runs_of, orphan_segments
from test_app import _long_deck, check_a_stopped_peer_is_named, make_deck


@pytest.fixture
def graph_deck(app, tmp_path):
    deck = tmp_path / "graphs.h5"
    make_deck(app, deck, seq_len=128, heads=8, head_dim=32, ulysses=0, transports="nccl,ipc,vmm",
              schedules="baseline,v-first,v-project-first,v-first-split", ablations="no-graphs,no-target-cache",
              warmup=2, iterations=5, repeats=2, steps=2)
    return deck


@pytest.mark.parametrize("np_", [2, 4])
def test_replayed_layers_are_the_op_by_op_layers(run, tmp_path, graph_deck, np_):
    before = orphan_segments()
    report = tmp_path / "r.h5"
    p = run(np_, str(graph_deck), "--gather", "ipc", "-o", str(report), timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    runs = {name: a for _, name, a in runs_of(report)}
    layers = (2 + 5) * 2 * 2  # (warmup + iterations) x repeats x steps, through the graphed layer
    checked = 0
    for name, a in runs.items():
        assert a["parity_pass"] == 1, (name, a)
        transport, rest = name.split(".", 1)
        if rest.endswith("+no-graphs"):
            assert a["graphs"] == "off: ablation no-graphs", a["graphs"]
            assert a["graph_replays"] == 0 and a["graph_captures"] == 0
        elif transport == "nccl":  # simulated NCCL is MPI through the host: never captured
            assert a["graphs"].startswith("off: the scatter: MPI collectives"), (name, a["graphs"])
            assert a["graph_replays"] == 0
        elif rest.endswith("+no-target-cache"):  # every layer allocates: never steady, never captured
            assert a["graphs"] == "on" and a["graph_captures"] == 0, (name, a)
            assert a["graph_last_divergence"].startswith("never captured: every layer made"), a["graph_last_divergence"]
        else:
            # Layer 1 misses the target cache, layer 2 is watched and steady, layer 3 captured.
            assert a["graphs"] == "on", (name, a["graphs"])
            assert a["graph_captures"] == 1 and a["graph_divergences"] == 0, (name, a["graph_last_divergence"])
            assert a["graph_replays"] == layers - 3, (name, a["graph_replays"])
            twin = runs[name + "+no-graphs"]
            assert a["output_digest"] == twin["output_digest"], f"{name}: graphs changed the output"
            checked += 1
    assert checked == 2 * 4  # ipc, vmm x 4 schedules
    with h5py.File(report, "r") as f:
        c = f["cases"][f.attrs["cases"][0]]
        g = c["ipc.v-first"]
        he = g["host_enqueue_ms"][()]
        assert he.shape == (g.attrs["repeats"], g.attrs["iterations"]) and np.all(he > 0), he
        # Which timed layers were replays: all but the first (the run's third layer, captured).
        flags = g["graph_replayed"][()]
        want = np.ones(he.shape, dtype=flags.dtype)
        want[0, 0] = 0
        assert np.array_equal(flags, want), flags
        assert not c["ipc.v-first+no-graphs"]["graph_replayed"][()].any()
        # The traced layer is modelled as its run's layers ran (docs/model.md).
        assert g["traced_layer"].attrs["modeled_as"] == "graph replay"
        assert c["ipc.v-first+no-graphs"]["traced_layer"].attrs["modeled_as"] == "op by op"
    # The post-processing table pairs each run with its twin.
    post = subprocess.run([sys.executable, "-m", "ulysses_post", "graphs", str(report), "--format", "csv"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "postprocess")},
                          timeout=120)
    assert post.returncode == 0, post.stderr
    lines = post.stdout.strip().splitlines()
    assert lines[0].startswith("case,run,graphs,replays"), lines[0]
    rows = [l.split(",") for l in lines[1:]]
    assert {r[1] for r in rows} == {f"{t}.{s}" for t in ("nccl", "ipc", "vmm")
                                   for s in ("baseline", "v-first", "v-project-first", "v-first-split")}
    assert all(int(r[3]) == layers - 3 for r in rows if not r[1].startswith("nccl")), rows
    assert orphan_segments() <= before, "shared memory left behind"


def test_graphs_off_runs_every_layer_op_by_op(run, tmp_path, graph_deck):
    report = tmp_path / "off.h5"
    p = run(2, str(graph_deck), "--gather", "ipc", "--graphs", "off", "--ablations", "none", "-o", str(report),
            timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    for _, name, a in runs_of(report):
        assert a["graphs"] == "off: --graphs off" and a["graph_replays"] == 0, (name, a["graphs"])
        assert a["parity_pass"] == 1


def _traced(g):
    """Rank 0's traced layer of a run: per op (kind, stream), and its stage terms (stage, op, coef)."""
    t = g["traced_layer"]
    mine = t["op_rank"][()] == 0
    ops = list(zip(t["op_kind"][()][mine].tolist(), t["op_stream"][()][mine].tolist()))
    terms = t["stage_terms"][()]
    return ops, terms[terms[:, 0] == 0][:, 1:]


EVENT_RECORD = 5  # model/trace/trace.hpp OpKind::kEventRecord


def run_staged_and_lean(run, np_, deck, tmp_path, *args):
    """The deck run with --stage-timing on and off (the same other arguments): the two
    reports, and each one's runs by name."""
    reports = {t: tmp_path / f"{t}.h5" for t in ("on", "off")}
    for timing, report in reports.items():
        p = run(np_, str(deck), *args, "--stage-timing", timing, "-o", str(report), timeout=600)
        assert p.returncode == 0, p.stderr + p.stdout
    on = {name: a for _, name, a in runs_of(reports["on"])}
    off = {name: a for _, name, a in runs_of(reports["off"])}
    assert on.keys() == off.keys(), (on.keys(), off.keys())
    return reports, on, off


def check_lean_against_staged(g, gon, a, aon, name):
    """A run timed as a whole (report group g, attributes a) against the same run staged
    (gon, aon): the report says so (stages NaN, the layer kept, V's copy not measured), the
    outputs are the same, and its traced layer issues the same work in the same order on
    the same streams, less event records only: at least four on the compute stream (a
    step's and the three after the scatter), exactly V's two on the streams beside it; its
    stage terms are the layer's end less its start."""
    assert a["stage_timing"] == "off" and aon["stage_timing"] == "on", name
    assert a["parity_pass"] == 1 and a["output_digest"] == aon["output_digest"], name
    st = g["stage_ms"][()]
    assert np.isnan(st[..., :6]).all(), (name, st)
    assert np.isfinite(st[..., 6]).all() and (st[..., 6] > 0).all(), (name, st)
    assert np.isfinite(gon["stage_ms"][()]).all(), name
    assert np.isnan(a["median_ms"][:6]).all() and a["median_ms"][6] > 0, (name, a["median_ms"])
    assert "v_copy_ms" not in g and "v_copy_ms" in gon and (gon["v_copy_ms"][()] >= 0).all(), name
    ops, terms = _traced(g)
    ops_on, _ = _traced(gon)
    assert [o for o in ops if o[0] != EVENT_RECORD] == [o for o in ops_on if o[0] != EVENT_RECORD], name
    compute = ops_on[0][1]  # the layer's start, on the compute stream
    def records(o, on_compute):
        return sum(1 for k, s in o if k == EVENT_RECORD and (s == compute) == on_compute)
    assert records(ops_on, True) - records(ops, True) >= 4, (name, ops, ops_on)
    assert records(ops_on, False) - records(ops, False) == 2, (name, ops, ops_on)
    assert sorted(float(c) for s, _, c in terms) == [-1.0, 1.0] and set(terms[:, 0]) == {6}, (name, terms)
    assert [ops[int(op)][0] for _, op, _ in terms] == [EVENT_RECORD] * 2, (name, terms)


def test_stage_timing_off_times_the_layer_alone(app, run, tmp_path):
    """--stage-timing off: each layer records only its start and end events (none between
    stages, none around V's copy), the graphs still replay every layer after the capture,
    and the layer is the staged one less its event records (check_lean_against_staged)."""
    deck = tmp_path / "lean.h5"
    make_deck(app, deck, seq_len=128, heads=8, head_dim=32, ulysses=0, transports="ipc,vmm",
              schedules="baseline,v-first", ablations="no-graphs", warmup=2, iterations=4)
    reports, on, off = run_staged_and_lean(run, 2, deck, tmp_path, "--gather", "ipc")
    assert len(off) == 8, off.keys()
    with h5py.File(reports["on"], "r") as fon, h5py.File(reports["off"], "r") as foff:
        for name, a in off.items():
            if not name.endswith("+no-graphs"):  # layer 3 captured, the rest replayed
                assert a["graphs"] == "on" and a["graph_replays"] == 2 + 4 - 3, (name, a["graph_last_divergence"])
            check_lean_against_staged(foff["cases/t"][name], fon["cases/t"][name], a, on[name], name)


def test_a_bad_stage_timing_value_is_an_input_error(run, tmp_path, graph_deck):
    p = run(1, str(graph_deck), "--stage-timing", "some", "-o", str(tmp_path / "x.h5"))
    assert p.returncode == 2, p.stderr + p.stdout
    assert "--stage-timing" in p.stderr and "some" in p.stderr, p.stderr
    assert not (tmp_path / "x.h5").exists()


def test_a_bad_graphs_value_is_an_input_error(run, tmp_path, graph_deck):
    p = run(1, str(graph_deck), "--graphs", "maybe", "-o", str(tmp_path / "x.h5"))
    assert p.returncode == 2, p.stderr + p.stdout
    assert "--graphs" in p.stderr and "maybe" in p.stderr, p.stderr
    assert not (tmp_path / "x.h5").exists()


def test_a_stopped_peer_during_replays_is_named_within_the_watchdog(app, tmp_path):
    """SIGSTOP one rank while the others replay captured layers (--gather ipc: every stage
    on the IPC protocol, so the layers are replayed from the third on): their graph's waits
    are bounded by the watchdog too; every survivor gives up naming it (exit 4)."""
    check_a_stopped_peer_is_named(app, _long_deck(app, tmp_path, "ipc"), tmp_path, "--gather", "ipc")
