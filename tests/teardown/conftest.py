"""Fixtures for the teardown tests: a stand-in nvidia-smi on PATH, and a local-provider rig that
does what `up` does (intent row, create, arm, bootstrap, job) one stage at a time."""

from __future__ import annotations

import os
import secrets
import stat
import sys
from pathlib import Path

import pytest

from tests.teardown.rig import Rig, wait_for  # noqa: F401  (re-exported for the tests)

SMI_SCRIPT = """#!/bin/sh
d="$(dirname "$0")"
cat "$d/smi.out" 2>/dev/null
exit "$(cat "$d/smi.rc" 2>/dev/null || echo 0)"
"""


class FakeSmi:
    """A stand-in ``nvidia-smi`` whose output and exit status the test sets."""

    def __init__(self, bindir: Path):
        self.bindir = bindir

    def set(self, out: str, rc: int = 0) -> None:
        tmp = self.bindir / "smi.out.tmp"
        tmp.write_text(out)
        (self.bindir / "smi.rc").write_text(str(rc))
        os.replace(tmp, self.bindir / "smi.out")

    def util(self, *percent: float) -> None:
        self.set("".join(f"{i}, {p:g}, 40000, 81920\n" for i, p in enumerate(percent)))


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    p = bindir / "nvidia-smi"
    p.write_text(SMI_SCRIPT)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    # Count only this test's (fake) SSH sessions, not whoever else is logged in to this machine.
    monkeypatch.setenv("GPUOPS_AGENT_SSH_USERS", "gpuops-test-" + secrets.token_hex(3))
    smi = FakeSmi(bindir)
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
