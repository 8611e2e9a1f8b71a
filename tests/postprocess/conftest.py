"""Fixtures: reports made by the real app in simulation mode, and the CLI under test.

The app is never built here: CI builds it first and passes its path in $ULYSSES_IPC
(default build/app/ulysses-ipc). Without it the app-based tests FAIL, not skip, so that
a broken build cannot pass as green post-processing tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from synth import write_report

REPO = Path(__file__).resolve().parents[2]
# The package is tested from the source tree, whether or not it is pip-installed.
sys.path.insert(0, str(REPO / "postprocess"))

# A layer small enough that 2 simulated ranks on 2 shared cores run every transport x
# schedule in a few seconds, with 2 repeats so that the A/B spread is defined.
DECK_OPTIONS = ["--name", "tiny", "--batch", "1", "--seq-len", "64", "--heads", "4", "--head-dim", "16",
                "--warmup", "1", "--iterations", "3", "--repeats", "2"]
APP_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def app() -> Path:
    """The ulysses-ipc binary; a clear failure when it is not there."""
    path = Path(os.environ.get("ULYSSES_IPC") or REPO / "build" / "app" / "ulysses-ipc")
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"no ulysses-ipc binary at {path}: build it first (cmake --build build) or set "
                    "ULYSSES_IPC=path/to/ulysses-ipc; these tests need reports made by the real app",
                    pytrace=False)
    return path


def _run_app(cmd: list[str], what: str) -> None:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=APP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not finish in {APP_TIMEOUT_S} s: {' '.join(cmd)}", pytrace=False)
    # 5 = a case failed parity: the report is still complete, and parity is the app's own tests' business.
    if p.returncode not in (0, 5):
        pytest.fail(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}", pytrace=False)


@pytest.fixture(scope="session")
def deck(app: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("deck") / "tiny.h5"
    _run_app([str(app), "deck", "new", *DECK_OPTIONS, "-o", str(path)], "ulysses-ipc deck new")
    return path


def _report(app: Path, deck: Path, ranks: int, directory: Path) -> Path:
    path = directory / f"report-np{ranks}.h5"
    _run_app(["mpirun", "-np", str(ranks), "--oversubscribe", str(app), str(deck), "-o", str(path), "--mode", "sim",
              "--quiet"], f"ulysses-ipc on {ranks} rank(s)")
    if not path.is_file():
        pytest.fail(f"ulysses-ipc on {ranks} rank(s) exited without writing {path}", pytrace=False)
    return path


@pytest.fixture(scope="session")
def app_report(app: Path, deck: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulation-mode report of the tiny deck on 2 ranks (Ulysses degree 2)."""
    return _report(app, deck, 2, tmp_path_factory.mktemp("np2"))


@pytest.fixture(scope="session")
def app_report_np1(app: Path, deck: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same deck on 1 rank (Ulysses degree 1), for speedup against degree."""
    return _report(app, deck, 1, tmp_path_factory.mktemp("np1"))


@pytest.fixture()
def synthetic(tmp_path: Path) -> Path:
    """A report written with plain h5py following docs/report.md (see synth.py)."""
    return write_report(tmp_path / "synthetic.h5")


@pytest.fixture(scope="session")
def model_report(app: Path, deck: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --mode model report of the tiny deck on 2 ranks (modelled figures only, exit 6)."""
    path = tmp_path_factory.mktemp("model") / "model-np2.h5"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", str(app), str(deck), "-o", str(path), "--mode", "model", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=APP_TIMEOUT_S)
    if p.returncode != 6 or not path.is_file():
        pytest.fail(f"--mode model failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}", pytrace=False)
    return path
