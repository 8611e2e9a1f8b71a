"""End-to-end: the real program on shipped and generated decks, in simulation mode,
read back with plain h5py. Every run starts from fresh random seeds where it matters."""
import os
import random
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from conftest import REPO, mpi_env, orphan_segments

DEFAULT = str(REPO / "inputs" / "default.h5")
PROTOCOL = str(REPO / "inputs" / "protocol.h5")


def runs_of(report):
    with h5py.File(report, "r") as f:
        for case in f.attrs["cases"]:
            g = f["cases"][case]
            for run in g.attrs["runs"]:
                yield case, run, {k: g[run].attrs[k] for k in g[run].attrs}, g[run]["stage_ms"][...]


@pytest.mark.parametrize("np_", [1, 2, 4])
def test_default_deck_passes_parity_and_reads_with_h5py(run, tmp_path, np_):
    before = orphan_segments()
    report = tmp_path / "r.h5"
    p = run(np_, DEFAULT, "-o", str(report))
    assert p.returncode == 0, p.stderr + p.stdout
    assert "parity PASS" in p.stdout
    with h5py.File(report, "r") as f:
        assert f.attrs["software"] == "ulysses-ipc"
        assert f.attrs["mode"] == "sim"
        assert int(f.attrs["world_size"]) == np_
        assert len(f.attrs["hosts"]) == np_
        assert "mpi" in f["versions"].attrs and "kokkos" in f["versions"].attrs
    n = 0
    for case, name, a, stage_ms in runs_of(report):
        n += 1
        assert a["parity_pass"] == 1 and a["parity_finite"] == 1, (case, name, a)
        assert stage_ms.shape == (a["repeats"], a["iterations"], np_, 7)
        assert np.all(np.isfinite(stage_ms)) and np.all(stage_ms >= 0)
        # The layer is at least as long as any stage that lies on its compute stream.
        layer = stage_ms[..., 6]
        for s in (0, 1, 3, 5):
            assert np.all(stage_ms[..., s] <= layer + 1e-9)
        assert a["transport_used"] == a["transport"]
    assert n == 10  # 3 + 3 runs of small-bf16, 2 + 2 of small-fp16-layernorm
    assert not list(tmp_path.glob("*.tmp-*")), "no temporary report may remain"
    assert orphan_segments() <= before, "shared memory left behind"


@pytest.mark.parametrize("np_", [2, 4])
def test_protocol_deck_all_layouts_transports_schedules(run, tmp_path, np_):
    report = tmp_path / "p.h5"
    p = run(np_, PROTOCOL, "-o", str(report))
    assert p.returncode == 0, p.stderr + p.stdout
    seen = set()
    for case, name, a, _ in runs_of(report):
        assert a["parity_pass"] == 1, (case, name, a)
        seen.add((a["transport"], a["schedule"]))
        if a["transport_used"] in ("ipc", "vmm"):
            assert a["handshakes_per_layer"] == 1  # one grouped handshake for Q, K and V
            assert a["cache_misses"] == 3  # Q, K, V targets, then reused across layers
            # every layer hits but the first: timed, warmup (1) and the traced one
            assert a["cache_hits"] == 3 * (a["iterations"] * a["repeats"] + 1 + 1) - 3
    assert seen == {(t, s) for t in ("nccl", "ipc", "vmm")
                    for s in ("baseline", "v-first", "v-project-first", "v-first-split")}


# nccl-ce (NCCL's copy-engine all-to-all on registered windows) runs its own data path in
# simulation mode, on MPI collectives: one all-to-all per tensor received straight into
# the result, exact on every layout; the report says that no copy engine served.
@pytest.mark.parametrize("np_", [2, 4])
def test_nccl_ce_is_exact_and_says_what_served_it(app, run, tmp_path, np_):
    deck = tmp_path / "ce.h5"
    subprocess.run([app, "deck", "new", "--preset", "protocol", "--transports", "nccl,nccl-ce", "-o", str(deck)],
                   check=True, capture_output=True, text=True)
    report = tmp_path / "ce-r.h5"
    p = run(np_, str(deck), "-o", str(report))
    assert p.returncode == 0, p.stderr + p.stdout
    runs = {(case, a["transport"], a["schedule"]): a for case, _, a, _ in runs_of(report)}
    ce = [(k, a) for k, a in runs.items() if k[1] == "nccl-ce"]
    assert ce
    for (case, _, sched), a in ce:
        assert a["transport_used"] == "nccl-ce" and a["fallback_reason"] == "", (case, sched, a)
        # The scatter moves bits: the output is nccl's, to the bit (the TP all-reduce's
        # summation order is the only distance from the dense reference).
        assert a["parity_pass"] == 1, (case, sched, a)
        assert a["parity_max_abs"] == runs[(case, "nccl", sched)]["parity_max_abs"], (case, sched)
        assert a["parity_rel_l2"] == runs[(case, "nccl", sched)]["parity_rel_l2"], (case, sched)
        assert "copy engines: not used (MPI collectives" in a["transport_note"], a["transport_note"]
        assert a["collectives"] == "mpi"


# Every ablation is a run of its own beside the full design, on the transports and
# schedules it applies to, and keeps exact parity (the protocol parts it switches off are
# what it measures, not what makes the result right).
def test_ablations_are_runs_of_their_own_with_exact_parity(app, run, tmp_path):
    deck = tmp_path / "abl.h5"
    ablations = ["own-slice-copy", "no-pitched-copies", "no-grouped-handshake", "normal-priority", "no-target-cache"]
    subprocess.run([app, "deck", "new", "--preset", "protocol", "--name", "u2-bf16", "--transports", "nccl,ipc",
                    "--schedules", "baseline,v-first,v-project-first,v-first-split", "--ablations", ",".join(ablations),
                    "-o", str(deck)], check=True, capture_output=True, text=True)
    report = tmp_path / "abl-r.h5"
    p = run(2, str(deck), "-o", str(report))
    assert p.returncode == 0, p.stderr + p.stdout
    got = {}
    for _, name, a, _ in runs_of(report):
        assert a["parity_pass"] == 1 and a["parity_max_abs"] == 0, (name, a)
        got[(a["transport"], a["schedule"], a["ablation"])] = a
        assert name == f"{a['transport']}.{a['schedule']}" + (f"+{a['ablation']}" if a["ablation"] else "")
    for t in ("nccl", "ipc"):
        for s in ("baseline", "v-first", "v-project-first", "v-first-split"):
            want = {""} | {x for x in ablations
                           if not (x in ("no-target-cache", "normal-priority") and t == "nccl")
                           and not (x == "no-pitched-copies" and s == "v-first-split")}
            assert {k[2] for k in got if k[:2] == (t, s)} == want, (t, s)
    # What each ablation switches off shows in the counters.
    ipc = got[("ipc", "v-first", "")]
    assert ipc["handshakes_per_layer"] == 1 and ipc["cache_misses"] == 3
    assert got[("ipc", "v-first", "no-grouped-handshake")]["handshakes_per_layer"] == 3
    layers = ipc["iterations"] * ipc["repeats"] + 1 + 1  # timed, warmup (1) and the traced layer
    assert got[("ipc", "v-first", "no-target-cache")]["cache_misses"] == 3 * layers
    assert got[("ipc", "v-first", "no-target-cache")]["cache_evictions"] == 3 * (layers - 1)


def test_ipc_output_gather(run, tmp_path):
    report = tmp_path / "g.h5"
    p = run(4, PROTOCOL, "-o", str(report), "--gather", "ipc", "--case", "tp2-u2-bf16")
    assert p.returncode == 0, p.stderr + p.stdout
    for _, name, a, _ in runs_of(report):
        assert a["parity_pass"] == 1
        if a["transport_used"] in ("ipc", "vmm"):
            assert a["gather_transport"] == a["transport_used"]
            assert a["handshakes_per_layer"] == 2  # scatter group + gather group


def test_fallback_to_nccl_is_reported(run, tmp_path):
    report = tmp_path / "f.h5"
    p = run(2, DEFAULT, "-o", str(report), env={"ULYSSES_IPC_FORCE_INELIGIBLE": "no peer access (test)"})
    assert p.returncode == 0, p.stderr
    fell_back = [a for _, _, a, _ in runs_of(report) if a["transport"] == "ipc"]
    assert fell_back and all(a["transport_used"] == "nccl" for a in fell_back)
    assert all("no peer access (test)" in a["fallback_reason"] for a in fell_back)
    assert all(a["parity_pass"] == 1 for a in fell_back)


def test_parity_failure_exits_5_and_report_names_it(run, tmp_path):
    report = tmp_path / "bad.h5"
    p = run(2, DEFAULT, "-o", str(report), "--case", "small-bf16",
            env={"ULYSSES_TEST_CORRUPT_RANK": "1"})
    assert p.returncode == 5, p.stderr + p.stdout
    assert "FAIL" in p.stdout
    runs = list(runs_of(report))
    assert runs and all(a["parity_pass"] == 0 for _, _, a, _ in runs)
    assert all(abs(a["parity_max_abs"] - 1.0) < 0.05 for _, _, a, _ in runs)


def make_deck(app, path, **fields):
    args = [app, "deck", "new", "--name", "t", "-o", str(path)]
    for k, v in fields.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    subprocess.run(args, check=True, capture_output=True, text=True)


def test_dump_reproduces_the_layer_in_numpy(app, run, tmp_path):
    """The dumped inputs and weights, run through docs/math.md in float64 numpy, give the
    reference output: an independent implementation of the whole layer."""
    deck = tmp_path / "d.h5"
    seed = random.randrange(1, 2**62)
    make_deck(app, deck, seq_len=64, heads=4, head_dim=32, dtype="fp32", qk_norm="rms", rope="1d",
              ulysses=2, seed=seed, transports="ipc", schedules="v-first")
    report = tmp_path / "r.h5"
    p = run(2, str(deck), "-o", str(report), "--dump")
    assert p.returncode == 0, p.stderr
    with h5py.File(report, "r") as f:
        d = f["cases/t/dump"]
        x = d["x"][...].astype(np.float64)[0]          # (S, C)
        wqkv = d["w_qkv"][...].astype(np.float64)     # (C, 3, H, D)
        wo = d["w_o"][...].astype(np.float64)         # (C, C)
        gq, gk = d["gamma_q"][...], d["gamma_k"][...]
        ref = d["reference_output"][...][0]
        eps = float(f["cases/t"].attrs["norm_eps"])
        theta = float(f["cases/t"].attrs["rope_theta"])
    S, C = x.shape
    _, _, H, D = wqkv.shape
    qkv = np.einsum("sc,cjhd->sjhd", x, wqkv)
    def norm_rope(t, g):
        t = t / np.sqrt((t * t).mean(-1, keepdims=True) + eps) * g
        i = np.arange(D // 2)
        ang = np.arange(S)[:, None] * theta ** (-2.0 * i / D)[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = t[..., 0::2], t[..., 1::2]
        out = np.empty_like(t)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
        return out
    q, k, v = norm_rope(qkv[:, 0], gq), norm_rope(qkv[:, 1], gk), qkv[:, 2]
    sc = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(D)
    pr = np.exp(sc - sc.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    o = np.einsum("hij,jhd->ihd", pr, v).reshape(S, H * D)
    y = o @ wo
    assert np.abs(y - ref).max() < 1e-4 * max(1.0, np.abs(y).max()), np.abs(y - ref).max()


@pytest.mark.parametrize("args,needle", [
    (["/nonexistent/deck.h5", "-o", "X"], "cannot open"),
    (["NOTHDF5", "-o", "X"], "HDF5"),
    ([DEFAULT], "-o"),
    ([DEFAULT, "-o", "X", "--mode", "warp"], "--mode"),
    ([DEFAULT, "-o", "X", "--bogus"], "--bogus"),
    ([PROTOCOL, "-o", "X", "--case", "u4-fp16"], "needs tp*ulysses = 4 ranks"),
    ([PROTOCOL, "-o", "X", "--case", "nope"], "no case named"),
    ([DEFAULT, "-o", "X", "--watchdog", "-1"], "--watchdog"),
    ([DEFAULT, "-o", "X", "--watchdog", "nan"], "--watchdog"),
    ([DEFAULT, "-o", "X", "--cache-entries", "0"], "--cache-entries"),
    ([DEFAULT, "-o", "X", "--gather", "rdma"], "--gather: unknown value 'rdma'"),
    ([DEFAULT, DEFAULT, "-o", "X"], "not expected"),
    (["-o", "X"], "DECK.h5 is required"),
])
def test_bad_input_is_one_clear_error_exit_2_and_no_report(run, tmp_path, args, needle):
    (tmp_path / "NOTHDF5").write_text("this is not an HDF5 file\n")
    args = [str(tmp_path / a) if a in ("X", "NOTHDF5") else a for a in args]
    p = run(2, *args, timeout=60)
    assert p.returncode == 2, p.stderr + p.stdout
    errors = [l for l in p.stderr.splitlines() if l.startswith("ulysses-ipc: error")]
    assert len(errors) == 1 and needle in errors[0], p.stderr
    assert not (tmp_path / "X").exists() and not list(tmp_path.glob("X.tmp-*"))


def test_help_of_every_command_comes_from_cli11_on_rank_0_only(app, run):
    """--help of the run (under mpirun: printed once, by rank 0) and of the deck tool and
    each of its subcommands: exit 0, CLI11's layout, every option the parser declares."""
    p = run(2, "--help", timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("Usage: ulysses-ipc") == 1, p.stdout
    for opt in ("-o,--output", "--mode", "--case", "--gather", "--watchdog", "--cache-entries",
                "--allow-shared-gpu", "--dump", "--quiet", "--version"):
        assert opt in p.stdout, (opt, p.stdout)
    v = run(2, "--version", timeout=60)
    assert v.returncode == 0 and v.stdout.count("ulysses-ipc ") == 1, v.stdout
    for sub, needle in ([], "Subcommands:"), (["new"], "--seq-len"), (["show"], "FILE"), \
            (["presets"], "--names"), (["help"], "--help"):
        h = subprocess.run([app, "deck", *sub, "--help"], capture_output=True, text=True)
        assert h.returncode == 0 and h.stdout.startswith(("Writes", "Write", "Print", "List", "Every")), h
        assert f"Usage: ulysses-ipc deck{''.join(' ' + s for s in sub)}" in h.stdout and needle in h.stdout, h.stdout


def test_bad_decks_exit_2(app, run, tmp_path):
    cases = {
        "fewer_heads_than_ranks": dict(heads=3, ulysses=4),
        "fewer_tokens_than_ranks": dict(seq_len=3, ulysses=4),
        "unknown_transport": dict(transports="carrier-pigeon"),
        "unknown_schedule": dict(schedules="z-first"),
    }
    for name, fields in cases.items():
        deck = tmp_path / f"{name}.h5"
        p = subprocess.run([app, "deck", "new", "--name", "t", "-o", str(deck)] +
                           sum(([f"--{k.replace('_', '-')}", str(v)] for k, v in fields.items()), []),
                           capture_output=True, text=True)
        if p.returncode == 0:  # the deck writer let it through: the run must refuse it
            r = run(4, str(deck), "-o", str(tmp_path / "r.h5"), timeout=60)
            assert r.returncode == 2, (name, r.stderr)
        else:
            assert p.returncode == 2 and "error" in p.stderr, (name, p.stderr)
    # A deck with an unknown schema version, written with plain h5py.
    deck = tmp_path / "v99.h5"
    make_deck(app, deck)
    with h5py.File(deck, "r+") as f:
        f.attrs["schema_version"] = 99
    r = run(2, str(deck), "-o", str(tmp_path / "r.h5"), timeout=60)
    assert r.returncode == 2 and "schema_version" in r.stderr, r.stderr


def _long_deck(app, tmp_path, transport):
    deck = tmp_path / "long.h5"
    make_deck(app, deck, seq_len=256, heads=8, head_dim=64, ulysses=4, transports=transport,
              schedules="v-first", warmup=0, iterations=100000 // 4, repeats=1)
    return deck


def check_a_stopped_peer_is_named(app, deck, tmp_path, *extra_args):
    """4 ranks with --watchdog 3, rank 2 stopped (SIGSTOP) 4 s in: the others give up within
    the watchdog (exit 4), naming it, with no report and no shared memory left behind."""
    before = orphan_segments()
    report = tmp_path / "r.h5"
    cmd = ["mpirun", "-np", "4", "--oversubscribe", app, str(deck), "-o", str(report), "--watchdog", "3",
           *extra_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    try:
        ranks = []
        deadline = time.time() + 60
        while len(ranks) < 4 and time.time() < deadline:
            out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
            ranks = [int(x) for x in out.split()]
            time.sleep(0.2)
        assert len(ranks) == 4, "ranks did not start"
        time.sleep(4.0)  # well into the timed layers
        victim = sorted(ranks)[2]
        os.kill(victim, signal.SIGSTOP)
        t0 = time.time()
        out, err = proc.communicate(timeout=60)
        took = time.time() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 4, err
    assert took < 30, f"took {took:.1f} s to give up"
    assert "did not arrive" in err, err
    assert not report.exists()
    assert orphan_segments() <= before, "shared memory left behind"


@pytest.mark.parametrize("transport", ["ipc", "nccl"])
def test_stopped_peer_is_named_and_everyone_exits_4(app, tmp_path, transport):
    """SIGSTOP one rank mid-run: the others give up within the watchdog, naming it."""
    check_a_stopped_peer_is_named(app, _long_deck(app, tmp_path, transport), tmp_path)


def test_sigint_leaves_no_report_and_no_shared_memory(app, tmp_path):
    before = orphan_segments()
    deck = _long_deck(app, tmp_path, "ipc")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", app, str(deck), "-o", str(tmp_path / "r.h5")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    time.sleep(5.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not (tmp_path / "r.h5").exists() and not list(tmp_path.glob("r.h5.tmp-*"))
    assert orphan_segments() <= before, "shared memory left behind"


SIM_TWINS = sorted(p.name for p in (REPO / "inputs").glob("*-sim.h5"))


def test_every_model_family_has_a_simulation_twin():
    gpu_decks = [p.name for p in (REPO / "inputs").glob("*.h5")
                 if not p.name.endswith("-sim.h5") and p.name not in ("default.h5", "protocol.h5")]
    families = {name.rsplit("-", 1)[0] for name in gpu_decks}
    assert families and {f"{f}-sim.h5" for f in families} == set(SIM_TWINS)


@pytest.mark.parametrize("deck", SIM_TWINS)
@pytest.mark.parametrize("np_", [2, 4])
def test_model_twin_decks_pass_parity_in_simulation(run, tmp_path, deck, np_):
    report = tmp_path / "twin.h5"
    p = run(np_, str(REPO / "inputs" / deck), "-o", str(report), "--quiet")
    assert p.returncode == 0, p.stderr
    runs = list(runs_of(report))
    assert runs
    for case, name, a, _ in runs:
        assert a["parity_pass"] == 1, (case, name, a)
        assert a["transport_used"] == a["transport"]
