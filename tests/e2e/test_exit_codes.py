"""What a script sees through mpirun (Open MPI 4.1) for each fault of README.md's exit-code
table, exactly: the app's own code where mpirun passes it on (bad input 2, runtime failure
3, peer timeout 4 by MPI_Abort, parity failure 5, 128 + the signal of a rank that was
signalled or killed), and mpirun's own 1 where mpirun decides (mpirun itself signalled:
Ctrl-C, kill). The app never exits 1, so 1 through mpirun always means the launcher gave
up. (The peer timeout, 4, is test_app.py's test_stopped_peer_is_named_and_everyone_exits_4.)"""
import os
import signal
import subprocess

import pytest

from conftest import REPO, mpi_env
from test_app import _long_deck
from test_faults import Run, assert_nothing_left, rank_pids

DEFAULT = str(REPO / "inputs" / "default.h5")


def test_runtime_failure_is_3_through_mpirun(run, tmp_path):
    """Rank 0 cannot create the report (a runtime failure of one rank): MPI_Abort(3)."""
    p = run(2, DEFAULT, "-o", str(tmp_path / "no" / "such" / "dir" / "r.h5"), "--case", "small-bf16", timeout=120)
    assert p.returncode == 3, p.stderr
    assert "ulysses-ipc: error on rank 0:" in p.stderr and "cannot create" in p.stderr, p.stderr


def test_parity_failure_is_5_not_mpiruns_1(run, tmp_path):
    p = run(2, DEFAULT, "-o", str(tmp_path / "r.h5"), "--case", "small-bf16", env={"ULYSSES_TEST_CORRUPT_RANK": "0"})
    assert p.returncode == 5, p.stderr + p.stdout
    assert (tmp_path / "r.h5").exists()  # the report is written, and says which run failed


def test_bad_input_is_2_through_mpirun(run, tmp_path):
    p = run(2, str(tmp_path / "missing.h5"), "-o", str(tmp_path / "r.h5"), timeout=60)
    assert p.returncode == 2, p.stderr


@pytest.mark.parametrize("target,sig,code", [
    ("mpirun", signal.SIGINT, 1),     # Ctrl-C: mpirun decides, always 1 (Open MPI 4.1)
    ("mpirun", signal.SIGTERM, 1),    # kill of the launcher: the same
    ("rank", signal.SIGINT, 130),     # one rank interrupted: 128 + 2, passed on
    ("rank", signal.SIGTERM, 143),    # one rank terminated: 128 + 15, passed on
    ("rank", signal.SIGKILL, 137),    # a dead peer: 128 + 9, mpirun's report of the killed rank
    ("every-rank", signal.SIGTERM, 143),  # what scancel or a time limit does
])
def test_signal_exit_codes_through_mpirun(app, tmp_path, target, sig, code):
    deck = _long_deck(app, tmp_path, "ipc")
    proc = Run(app, deck, tmp_path / "r.h5", 4)
    try:
        pids = rank_pids(proc, 4)
        proc.wait_for_stdout("rank(s), mode sim")
        if target == "mpirun":
            proc.proc.send_signal(sig)
        elif target == "every-rank":
            for pid in pids.values():
                os.kill(pid, sig)
        else:
            os.kill(pids[1], sig)
        err, _ = proc.finish(60)
    finally:
        proc.kill()
    assert proc.proc.returncode == code, err
    # The ranks still running when the job ended say so and where they were: the
    # signalled one with its signal, the others with the SIGTERM that mpirun sends them
    # (before its SIGKILL, which may take a loaded machine's slowest).
    survivors = [0, 2, 3] if sig == signal.SIGKILL else [0, 1, 2, 3]
    assert any(f"rank {r} interrupted (while " in err for r in survivors), err
    if target != "mpirun" and sig != signal.SIGKILL:
        assert f"rank 1 interrupted (while " in err and f"({signal.Signals(sig).name})" in err, err
    assert_nothing_left(tmp_path, pids.values())


def test_slurm_world_check_refuses_only_a_world_of_one(app, run, tmp_path):
    """Inside a Slurm step of 4 tasks, a world of 1 (srun whose MPI plugin the MPI library
    cannot use) is refused; 2 ranks of mpirun inside a job, whose step is mpirun's daemons
    (1 task), run."""
    alone = subprocess.run([app, DEFAULT, "-o", str(tmp_path / "a.h5"), "--case", "small-bf16"],
                           capture_output=True, text=True, timeout=120,
                           env=mpi_env({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"}))
    assert alone.returncode == 2, alone.stderr
    assert "4 tasks but MPI sees a world of 1 rank" in alone.stderr, alone.stderr
    assert not (tmp_path / "a.h5").exists()
    p = run(2, DEFAULT, "-o", str(tmp_path / "b.h5"), "--case", "small-bf16", timeout=120,
            env={"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"})
    assert p.returncode == 0, p.stderr


def test_a_copy_past_its_buffer_is_3_and_names_the_op(run, tmp_path):
    """Rank 1 issues a copy reaching past its output buffer (a test hook): the device
    layer's reach check refuses it before any byte moves, the run ends with 3 and no report,
    the message naming the op, the operand and the sizes (issue #24: never a segfault)."""
    p = run(2, DEFAULT, "-o", str(tmp_path / "r.h5"), "--case", "small-bf16",
            env={"ULYSSES_TEST_OVERREACH_RANK": "1"}, timeout=120)
    assert p.returncode == 3, p.stderr + p.stdout
    assert "ulysses-ipc: error on rank 1:" in p.stderr, p.stderr
    assert "copy_2d: the destination reaches" in p.stderr and "bytes past its end" in p.stderr, p.stderr
    assert not (tmp_path / "r.h5").exists()
