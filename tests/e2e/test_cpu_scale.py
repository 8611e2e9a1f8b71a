"""Simulation mode at sizes where a CPU takes long: kernels that outlive the watchdog,
the CPU-time estimate, and full-size shipped cases (issue #24)."""
import pytest

from conftest import mpi_env  # noqa: F401  (the run fixture sets the MPI environment)


def test_a_kernel_longer_than_the_watchdog_is_not_a_crash(app, run, tmp_path):
    # Issue #24: the dense reference's host GEMM ran past the watchdog (60 s at FLUX 1024);
    # synchronize() took the busy stream for a stuck one and threw, and the unwinding freed
    # the buffers the GEMM still wrote into: SIGSEGV (exit 139). A 1 s watchdog crosses the
    # same boundary at a layer that a CPU computes in a few seconds.
    import subprocess
    deck = tmp_path / "long.h5"
    subprocess.run([app, "deck", "new", "--name", "long-kernel", "--seq-len", "2048", "--heads", "8",
                    "--head-dim", "128", "--transports", "ipc", "--schedules", "baseline", "--ablations",
                    "none", "--warmup", "0", "--iterations", "1", "--repeats", "1", "-o", str(deck)],
                   check=True, capture_output=True)
    r = run(2, str(deck), "--mode", "sim", "--watchdog", "1", "-o", str(tmp_path / "r.h5"), timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "parity PASS" in r.stdout, r.stdout
