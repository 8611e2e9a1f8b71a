"""End-to-end: the hierarchical transport (hier) in the real program, in simulation mode,
with the world declared as several nodes (--ranks-per-node): parity, bit-identical
outputs against the flat nccl path (scatter and, with --gather ipc, the gather), what
the report says about the nodes, the fallbacks (ipc across nodes, hier on one node), and
the run failing cleanly when a peer stops or dies on either side of the inter-node link."""
import os
import re
import signal
import time

import h5py
import numpy as np
import pytest

from conftest import run_attrs as runs_of, orphan_segments
from test_app import _long_deck, make_deck
from test_faults import Run, rank_pids
from test_graphs import check_lean_against_staged, run_staged_and_lean


def hier_deck(app, path, ulysses, batch=2, seq_len=96):
    make_deck(app, path, batch=batch, seq_len=seq_len, heads=2 * ulysses, head_dim=16, dtype="bf16",
              ulysses=ulysses, transports="nccl,ipc,hier", schedules="baseline,v-first", warmup=1,
              iterations=2)


@pytest.mark.parametrize("np_,per_node", [(2, 1), (4, 2), (4, 1), (8, 4)])
@pytest.mark.parametrize("gather", ["auto", "ipc"])
def test_hier_is_bit_identical_to_nccl_across_declared_nodes(app, run, tmp_path, np_, per_node, gather):
    before = orphan_segments()
    deck = tmp_path / "h.h5"
    hier_deck(app, deck, np_)
    report = tmp_path / "r.h5"
    p = run(np_, str(deck), "-o", str(report), "--ranks-per-node", str(per_node), "--gather", gather,
            "--hier-chunks", "3")
    assert p.returncode == 0, p.stderr + p.stdout
    nodes = np_ // per_node
    assert f"nodes: {nodes} nodes x {per_node} rank" in p.stdout, p.stdout
    with h5py.File(report, "r") as f:
        assert list(f.attrs["node_of_rank"]) == [r // per_node for r in range(np_)]
        assert "declared: --ranks-per-node" in f.attrs["node_layout"]
    digests = {}
    for case, name, a in runs_of(report):
        assert a["parity_pass"] == 1, (name, a)
        assert a["ulysses_nodes"] == nodes
        digests.setdefault(a["schedule"], {})[a["transport"]] = a["output_digest"]
        if a["transport"] == "hier":
            assert a["transport_used"] == "hier" and a["fallback_reason"] == ""
            assert a["handshakes_per_layer"] == (2 if gather == "ipc" else 1)
            assert a["gather_transport"] == ("hier" if gather == "ipc" else "nccl")
            assert a["hier_chunks"] == 3
            assert a["cache_misses"] == (4 if gather == "ipc" else 3)  # Q, K, V (and O), then reused
        if a["transport"] == "ipc":  # the group spans nodes: IPC cannot serve it
            assert a["transport_used"] == "nccl"
            assert f"spans {nodes} nodes (declared: --ranks-per-node {per_node})" in a["fallback_reason"]
    for sched, d in digests.items():
        assert d["hier"] == d["nccl"] == d["ipc"], (sched, d)  # bit-identical outputs
    assert orphan_segments() <= before, "shared memory left behind"


def test_tp_inside_a_node_with_ulysses_across_nodes(app, run, tmp_path):
    """TP2 x Ulysses2 with rank_order tp_inner on 2 nodes x 2: the TP pairs {0,1} and {2,3}
    stay inside a node, each Ulysses group {0,2}, {1,3} spans both: hier carries it."""
    deck = tmp_path / "t.h5"
    make_deck(app, deck, batch=1, seq_len=64, heads=8, head_dim=16, dtype="bf16", ulysses=2, tp=2,
              rank_order="tp_inner", transports="nccl,hier", schedules="v-first", warmup=1, iterations=2)
    report = tmp_path / "r.h5"
    p = run(4, str(deck), "-o", str(report), "--ranks-per-node", "2", "--gather", "ipc")
    assert p.returncode == 0, p.stderr + p.stdout
    digests = {}
    for _, _, a in runs_of(report):
        assert a["parity_pass"] == 1, a
        assert a["ulysses_nodes"] == 2
        digests[a["transport"]] = a["output_digest"]
        if a["transport"] == "hier":
            assert a["transport_used"] == "hier" and a["gather_transport"] == "hier", a
    assert digests["hier"] == digests["nccl"]


@pytest.mark.parametrize("gather", ["auto", "ipc"])
def test_hier_with_stage_timing_off_times_the_layer_alone(app, run, tmp_path, gather):
    """--stage-timing off reaches hier as it reaches ipc: no event records around V's copies,
    and, staged, none around Q's, K's or the gather's (V's interval is the only one the
    report reads): the lean layer is the staged one less exactly V's two records beside the
    compute stream (check_lean_against_staged)."""
    deck = tmp_path / "h.h5"
    make_deck(app, deck, batch=2, seq_len=64, heads=8, head_dim=16, dtype="bf16", ulysses=4,
              transports="hier", schedules="baseline,v-first", warmup=1, iterations=2)
    reports, on, off = run_staged_and_lean(run, 4, deck, tmp_path, "--ranks-per-node", "2", "--gather", gather,
                                           "--hier-chunks", "2")
    assert len(off) == 2, off.keys()
    with h5py.File(reports["on"], "r") as fon, h5py.File(reports["off"], "r") as foff:
        for name, a in off.items():
            assert a["transport_used"] == "hier" and on[name]["transport_used"] == "hier", (name, a)
            assert a["gather_transport"] == ("hier" if gather == "ipc" else "nccl"), a
            check_lean_against_staged(foff["cases/t"][name], fon["cases/t"][name], a, on[name], name)


def vmajor_deck(app, path, **over):
    fields = dict(batch=1, seq_len=256, heads=8, head_dim=32, dtype="bf16", ulysses=0,
                  transports="nccl,hier,hier-vmajor", schedules="v-first", warmup=0, iterations=1, steps=6,
                  full_steps=2, step_similarity=0.99, vmajor_threshold=0.1)
    fields.update(over)
    make_deck(app, path, **fields)


def step_data(report, run):
    with h5py.File(report, "r") as f:
        g = f["cases/t"][run]
        return {k: g[k][...] for k in ("step_vs_exact_rel_l2", "step_vs_exact_max_abs", "step_rel_l2",
                                        "step_inter_bytes_sent", "step_inter_bytes_full")}


@pytest.mark.parametrize("np_,per_node", [(4, 2), (8, 4)])
def test_vmajor_saves_inter_node_bytes_within_its_own_tolerance(app, run, tmp_path, np_, per_node):
    """Multi-step deck: the first 2 steps with full communication are exact; later steps
    skip V blocks that barely changed, sending fewer inter-node bytes, with an error
    against the exact run of the same step that is not zero but within the case's
    tolerance; reported as approximate, never as an exact parity pass."""
    deck = tmp_path / "v.h5"
    vmajor_deck(app, deck)
    report = tmp_path / "r.h5"
    p = run(np_, str(deck), "-o", str(report), "--ranks-per-node", str(per_node), "--hier-chunks", "8")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "approx PASS" in p.stdout
    runs = {name: a for _, name, a in runs_of(report)}
    exact, vm = runs["hier.v-first"], runs["hier-vmajor.v-first"]
    assert exact["parity_kind"] == "exact" and exact["parity_pass"] == 1
    assert vm["parity_kind"] == "approximate" and vm["parity_pass"] == 0 and vm["approx_pass"] == 1
    assert vm["transport_used"] == "hier-vmajor" and vm["steps"] == 6
    assert exact["output_digest"] == runs["nccl.v-first"]["output_digest"]
    e, v = step_data(report, "hier.v-first"), step_data(report, "hier-vmajor.v-first")
    assert np.all(e["step_vs_exact_max_abs"] == 0), e  # exact transports: bit-identical at every step
    assert np.all(e["step_inter_bytes_sent"] == e["step_inter_bytes_full"]) and np.all(e["step_inter_bytes_full"] > 0)
    assert np.all(v["step_vs_exact_max_abs"][:2] == 0), v  # full communication: exact
    assert np.all(v["step_inter_bytes_sent"][:2] >= v["step_inter_bytes_full"][:2])  # + the masks
    assert v["step_inter_bytes_sent"][2:].sum() < v["step_inter_bytes_full"][2:].sum(), v
    assert v["step_vs_exact_rel_l2"][2:].max() > 0, "nothing skipped: the test would not see V-major"
    assert np.all(v["step_vs_exact_rel_l2"] <= 0.05)


def test_vmajor_beyond_its_tolerance_fails_the_run(app, run, tmp_path):
    deck = tmp_path / "v.h5"
    vmajor_deck(app, deck, vmajor_tol_rel_l2=1e-9)
    report = tmp_path / "r.h5"
    p = run(4, str(deck), "-o", str(report), "--ranks-per-node", "2", "--hier-chunks", "8")
    assert p.returncode == 5, p.stderr + p.stdout  # the parity-failure code (README.md, "Exit codes")
    assert "approx FAIL" in p.stdout
    runs = {name: a for _, name, a in runs_of(report)}
    assert runs["hier-vmajor.v-first"]["approx_pass"] == 0
    assert runs["hier.v-first"]["parity_pass"] == 1


def test_hier_on_one_node_is_the_ipc_transport(app, run, tmp_path):
    deck = tmp_path / "h.h5"
    hier_deck(app, deck, 2)
    report = tmp_path / "r.h5"
    p = run(2, str(deck), "-o", str(report))
    assert p.returncode == 0, p.stderr + p.stdout
    for _, _, a in runs_of(report):
        if a["transport"] == "hier":
            assert a["transport_used"] == "ipc"
            assert "on one node" in a["fallback_reason"]
            assert a["hier_chunks"] == 0


def test_declared_nodes_must_divide_the_world(app, run, tmp_path):
    deck = tmp_path / "h.h5"
    hier_deck(app, deck, 4)
    p = run(4, str(deck), "-o", str(tmp_path / "r.h5"), "--ranks-per-node", "3")
    assert p.returncode == 2, p.stderr + p.stdout
    assert "--ranks-per-node 3: the run has 4 rank(s), not a multiple of it" in p.stderr
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.parametrize("fault", ["SIGSTOP", "SIGKILL"])
def test_a_peer_lost_mid_run_on_either_side_of_the_link(app, tmp_path, fault):
    """2 nodes x 2: rank 2 (node 1) is the rail peer of rank 0 and the node-mate of rank 3.
    Stopped: every other rank gives up within the watchdog, the error names it, exit 4.
    Killed (mpirun told to keep the job, so that only our watchdog stands between the
    survivors and a hang): the survivors name it and abort with code 4. No report."""
    before = orphan_segments()
    deck = _long_deck(app, tmp_path, "hier")
    report = tmp_path / "r.h5"
    env = {"OMPI_MCA_orte_enable_recovery": "1"} if fault == "SIGKILL" else None
    proc = Run(app, deck, report, 4, env, extra_args=("--ranks-per-node", "2"))
    try:
        pids = rank_pids(proc, 4)
        time.sleep(4.0)  # well into the timed layers
        assert proc.poll() is None, "the run ended before the fault:\n" + "".join(proc.err)
        os.kill(pids[2], getattr(signal, fault))
        err, took = proc.finish(60)
    finally:
        proc.kill()
        if fault == "SIGSTOP":
            try:
                os.kill(pids[2], signal.SIGKILL)
            except (OSError, NameError):
                pass
    assert took < 30, f"took {took:.1f} s to give up"
    named = [l for l in err.splitlines() if l.startswith("ulysses-ipc: error")
             and ("peer 2 did not arrive" in l or "rank(s) 2 did not arrive" in l)]
    assert named, f"no survivor named rank 2:\n{err}"
    if fault == "SIGSTOP":
        assert proc.proc.returncode == 4, err
    else:
        assert re.search(r"ulysses-ipc: rank \d+ ends the job with exit code 4 \(a peer timed out\)", err), err
    assert not report.exists() and not list(tmp_path.glob("r.h5.tmp-*")), "a report was written"
    assert orphan_segments() <= before, "shared memory left behind"
