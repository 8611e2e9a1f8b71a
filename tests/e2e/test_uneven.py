"""End-to-end: uneven shards and head slices (sequence lengths and head counts that the
Ulysses degree does not divide), on every transport and schedule, at 2 and 4 ranks:
parity against the dense reference, outputs bit-identical across transports, and the
report's layout balance (tokens and heads per rank, the imbalance)."""
import h5py
import numpy as np
import pytest

from conftest import run_attrs as runs_of
from test_app import make_deck


def balanced(n, p):
    return [n // p + (1 if i < n % p else 0) for i in range(p)]


@pytest.mark.parametrize("np_,heads,seq_len,per_node,fused", [(2, 5, 67, 1, 1), (4, 6, 130, 2, 1), (4, 7, 61, 2, 0)])
def test_uneven_shards_and_heads_pass_parity_on_every_transport(app, run, tmp_path, np_, heads, seq_len, per_node,
                                                                fused):
    deck = tmp_path / "u.h5"
    schedules = "baseline,v-first,v-project-first" if fused else "baseline,v-first-split"
    make_deck(app, deck, batch=2, seq_len=seq_len, heads=heads, head_dim=16, dtype="bf16", ulysses=np_,
              fused_qkv=fused, transports="nccl,nccl-ce,ipc,vmm,hier", schedules=schedules, warmup=1, iterations=2)
    report = tmp_path / "r.h5"
    p = run(np_, str(deck), "-o", str(report), "--ranks-per-node", str(per_node), "--gather", "ipc")
    assert p.returncode == 0, p.stderr + p.stdout
    digests = set()
    used = set()
    for _, name, a in runs_of(report):
        assert a["parity_pass"] == 1, (name, a)
        digests.add(a["output_digest"])
        used.add(a["transport_used"])
        assert list(a["tokens_per_rank"]) == balanced(seq_len, np_)
        assert list(a["heads_per_rank"]) == balanced(heads, np_)
        assert a["token_imbalance"] == pytest.approx(max(balanced(seq_len, np_)) * np_ / seq_len)
        assert a["head_imbalance"] == pytest.approx(max(balanced(heads, np_)) * np_ / heads)
        assert a["head_imbalance"] > 1
    assert len(digests) == 1, "uneven layouts must be bit-identical across transports and schedules"
    assert {"nccl", "nccl-ce", "hier"} <= used, used  # ipc and vmm fall back across declared nodes


@pytest.mark.parametrize("np_", [2, 4])
def test_uneven_on_one_node_ipc_and_vmm(app, run, tmp_path, np_):
    deck = tmp_path / "u.h5"
    make_deck(app, deck, batch=1, seq_len=4 * np_ + 3, heads=2 * np_ + 1, head_dim=32, dtype="fp16", ulysses=np_,
              transports="nccl,ipc,vmm", schedules="v-first", warmup=0, iterations=2)
    report = tmp_path / "r.h5"
    p = run(np_, str(deck), "-o", str(report), "--gather", "ipc")
    assert p.returncode == 0, p.stderr + p.stdout
    digests = set()
    for _, name, a in runs_of(report):
        assert a["parity_pass"] == 1, (name, a)
        assert a["transport_used"] == a["transport"]
        digests.add(a["output_digest"])
    assert len(digests) == 1


def test_vmajor_with_uneven_nodes(app, run, tmp_path):
    """Uneven shards make the two nodes' blocks differ in length: V-major's blocks and
    messages follow; full steps exact, later steps within tolerance."""
    deck = tmp_path / "v.h5"
    make_deck(app, deck, batch=1, seq_len=203, heads=6, head_dim=32, dtype="bf16", ulysses=4,
              transports="hier,hier-vmajor", schedules="v-first", warmup=0, iterations=1, steps=4, full_steps=1,
              step_similarity=0.99, vmajor_threshold=0.1)
    report = tmp_path / "r.h5"
    p = run(4, str(deck), "-o", str(report), "--ranks-per-node", "2", "--hier-chunks", "8")
    assert p.returncode == 0, p.stderr + p.stdout
    with h5py.File(report, "r") as f:
        v = f["cases/t/hier-vmajor.v-first"]
        assert v.attrs["approx_pass"] == 1
        assert v["step_vs_exact_max_abs"][0] == 0
        assert np.all(v["step_vs_exact_rel_l2"][...] <= 0.05)
        assert v["step_inter_bytes_sent"][1:].sum() < v["step_inter_bytes_full"][1:].sum()
