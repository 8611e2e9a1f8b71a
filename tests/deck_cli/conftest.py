"""The built program that tests/deck_cli runs, as a user would ($ULYSSES_IPC, else build/)."""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def app() -> str:
    path = os.environ.get("ULYSSES_IPC", str(REPO / "build" / "app" / "ulysses-ipc"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"ulysses-ipc binary not found at {path}: build first")
    return path
