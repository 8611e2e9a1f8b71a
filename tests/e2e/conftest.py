"""Fixtures for the end-to-end tests: the built binary and a way to run it under mpirun."""
import os
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def app() -> str:
    """The ulysses-ipc binary under test ($ULYSSES_IPC, else build/app/ulysses-ipc)."""
    path = os.environ.get("ULYSSES_IPC", str(REPO / "build" / "app" / "ulysses-ipc"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"ulysses-ipc binary not found at {path}: build first (scripts/setup.sh)")
    return path


def mpi_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.update(extra or {})
    return env


@pytest.fixture
def run(app):
    """run(np, args..., env=..., timeout=...) -> CompletedProcess of mpirun ulysses-ipc."""
    def _run(np_: int, *args: str, env: dict | None = None, timeout: float = 240):
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", app, *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(env), timeout=timeout)
    return _run


def run_attrs(report):
    """(case, run name, {attribute: value}) for every run of a report, in run order."""
    import h5py
    with h5py.File(report, "r") as f:
        for case in f.attrs["cases"]:
            g = f["cases"][case]
            for run in g.attrs["runs"]:
                yield case, run, {k: g[run].attrs[k] for k in g[run].attrs}


def shm_entries() -> set[str]:
    """This program's shared-memory segments currently in /dev/shm."""
    return {p.name for p in pathlib.Path("/dev/shm").glob("uipc*")}


def orphan_segments() -> set[str]:
    """Segments whose creating process is gone: what a run leaked. Named
    uipc-<pid>-r<rank>-<n> (comm/device/host_device.cpp), so the segments of runs still
    going beside this test (ctest -j2) are not counted against it."""
    def alive(name: str) -> bool:
        m = re.match(r"uipc-(\d+)-", name)
        return bool(m) and pathlib.Path(f"/proc/{m.group(1)}").exists()
    return {e for e in shm_entries() if not alive(e)}
