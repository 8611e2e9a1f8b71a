"""End-to-end: the vmm transport (the IPC protocol on library-owned memory shared as file
descriptors) in the real program, in simulation mode, beside nccl and ipc on one deck:
parity, what carried the scatter, one grouped handshake per layer, the cached targets,
the fallback when vmm is not eligible, and the output gather riding on vmm."""
import subprocess

import pytest

from conftest import run_attrs as runs_of, orphan_segments


@pytest.fixture
def vmm_deck(app, tmp_path):
    """A small deck comparing nccl, ipc and vmm, sized for any rank count (ulysses 0)."""
    deck = tmp_path / "vmm.h5"
    p = subprocess.run([app, "deck", "new", "--name", "vmm-e2e", "--seq-len", "128", "--heads", "8",
                        "--head-dim", "32", "--dtype", "bf16", "--transports", "nccl,ipc,vmm", "--ulysses", "0",
                        "--warmup", "1", "--iterations", "3", "-o", str(deck)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr + p.stdout
    return str(deck)


@pytest.mark.parametrize("np_", [2, 4])
def test_vmm_passes_parity_with_one_grouped_handshake(run, tmp_path, vmm_deck, np_):
    before = orphan_segments()
    report = tmp_path / "r.h5"
    p = run(np_, vmm_deck, "-o", str(report))
    assert p.returncode == 0, p.stderr + p.stdout
    assert "parity PASS" in p.stdout
    seen = set()
    for case, name, a in runs_of(report):
        assert a["parity_pass"] == 1, (case, name, a)
        seen.add(a["transport"])
        if a["transport"] == "vmm":
            assert a["transport_used"] == "vmm", a
            assert a["fallback_reason"] == "", a
            assert a["handshakes_per_layer"] == 1  # one grouped handshake for Q, K and V
            assert a["cache_misses"] == 3  # Q, K, V targets, then reused across layers
            # every layer hits but the first: timed, warmup (1) and the traced one
            assert a["cache_hits"] == 3 * (a["iterations"] * a["repeats"] + 1 + 1) - 3
    assert seen == {"nccl", "ipc", "vmm"}
    assert orphan_segments() <= before, "shared memory left behind"


def test_vmm_falls_back_to_nccl_and_says_why(run, tmp_path, vmm_deck):
    report = tmp_path / "f.h5"
    p = run(2, vmm_deck, "-o", str(report), env={"ULYSSES_VMM_FORCE_INELIGIBLE": "e2e says no"})
    assert p.returncode == 0, p.stderr + p.stdout
    for _, name, a in runs_of(report):
        assert a["parity_pass"] == 1, (name, a)
        if a["transport"] == "vmm":
            assert a["transport_used"] == "nccl", a
            assert "vmm not eligible" in a["fallback_reason"] and "e2e says no" in a["fallback_reason"], a
        else:
            assert a["transport_used"] == a["transport"], a  # ipc is not affected by the vmm check


def test_vmm_carries_the_output_gather_when_asked_for_ipc(run, tmp_path, vmm_deck):
    report = tmp_path / "g.h5"
    p = run(4, vmm_deck, "-o", str(report), "--gather", "ipc")
    assert p.returncode == 0, p.stderr + p.stdout
    n = 0
    for _, name, a in runs_of(report):
        assert a["parity_pass"] == 1, (name, a)
        if a["transport_used"] == "vmm":
            n += 1
            assert a["gather_transport"] == "vmm", a  # the scatter's transport, named as it is
            assert a["handshakes_per_layer"] == 2  # scatter group + gather group
    assert n == 3  # vmm under the three schedules
