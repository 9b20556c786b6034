"""Fixtures for the teardown tests: the suite's stand-in nvidia-smi (tests/support) on PATH, and a
local-provider rig that does what `up` does (intent row, create, arm, bootstrap, job) one stage at
a time."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

from gpuops.emulators import nvidia_smi as fake_nvidia_smi
from tests.teardown.rig import LOADED_SLACK_S, STAGE_TIMEOUT_S, Rig, gate, wait_for  # noqa: F401  (re-exported for the tests)


class FakeSmi:
    """The suite's stand-in ``nvidia-smi`` (gpuops/emulators/nvidia_smi.py) in ``bindir``, with
    what it reports set by the test: ``util(*percent)`` one GPU per value, ``set(out, rc)`` a raw
    reading (output the real tool printed, verbatim)."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        fake_nvidia_smi.install(bindir)

    def set(self, out: str, rc: int = 0) -> None:
        fake_nvidia_smi.set_state(self.bindir, {"mode": "raw", "stdout": out, "exit_code": rc})

    def util(self, *percent: float) -> None:
        fake_nvidia_smi.utilization(self.bindir, *percent)


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    bindir = tmp_path / "fakebin"
    smi = FakeSmi(bindir)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    # Count only this test's (fake) SSH sessions, not whoever else is logged in to this machine.
    monkeypatch.setenv("GPUOPS_AGENT_SSH_USERS", "gpuops-test-" + secrets.token_hex(3))
    smi.util(0)
    return smi


@pytest.fixture
def rig(gpuops_home, fake_smi):
    made: list[Rig] = []

    def make(teardown: dict, **kw) -> Rig:
        r = Rig(teardown, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.cleanup()


PY = sys.executable
