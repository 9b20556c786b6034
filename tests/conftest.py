"""Fixtures every test area may use. Area-specific fixtures live in tests/<area>/conftest.py;
fixtures that several areas share (sshd, emulators) live in tests/support/ and are imported."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYCACHE = str(Path(tempfile.gettempdir()) / "gpuops-tests-pycache")


@pytest.fixture
def gpuops_home(tmp_path, monkeypatch):
    """An isolated gpuops: its own data dir and SQLite ledger, no user config, no GPUOPS_* leaks.

    Returns the data dir. Subprocess CLI runs inherit the same environment (see ``cli_env``).
    """
    for k in list(os.environ):
        if k.startswith("GPUOPS_"):
            monkeypatch.delenv(k, raising=False)
    data = tmp_path / "gpuops-data"
    monkeypatch.setenv("GPUOPS_DATA_DIR", str(data))
    monkeypatch.setenv("GPUOPS_LEDGER_URL", f"sqlite:///{data / 'ledger.db'}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.chdir(tmp_path)
    return data


@pytest.fixture
def cli_env(gpuops_home):
    """Environment for running ``python -m gpuops`` as a subprocess against ``gpuops_home``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    # Keep compiled bytecode between CLI subprocesses (outside the source tree): with
    # PYTHONDONTWRITEBYTECODE set, every run would recompile SQLAlchemy (~2 s each).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE
    return env


def gpuops_cmd(*args: str) -> list[str]:
    """argv for running the CLI of this checkout in a subprocess."""
    return [sys.executable, "-m", "gpuops", *args]
