"""The job wrapper's containment (onbox/contain.py through onbox/jobwrap.py), run as the
local box runs it: what the job sees of a hidden folder, that the wrapper's instruction never
reaches it, that a bad instruction starts nothing, and that SIGTERM still reaches the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuops.providers.local.compute import LocalProvider
from onbox.jobwrap import CONTAIN_ENV
from tests.teardown.conftest import wait_for

pytestmark = pytest.mark.e2e
JOBWRAP = Path(__file__).resolve().parents[2] / "onbox" / "jobwrap.py"


@pytest.fixture
def books(tmp_path):
    """A data dir holding a ledger and a box: ``(data, box)``."""
    if not LocalProvider(tmp_path / "probe").contained():
        pytest.skip("this platform allows no user + mount + PID namespace")
    data = tmp_path / "data"
    box = data / "boxes" / "b1"
    box.mkdir(parents=True)
    (data / "ledger.db").write_text("the books")
    return data, box


def _wrap(box: Path, body: str, spec: str) -> subprocess.Popen:
    env = dict(os.environ, **{CONTAIN_ENV: spec})
    return subprocess.Popen(
        [sys.executable, str(JOBWRAP), "--dir", str(box / "run"), "--grace", "0.5", "--", "bash", "-c", body],
        cwd=box,
        env=env,
    )


def _log(box: Path) -> str:
    try:
        return (box / "run" / "job.log").read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _exit(box: Path) -> int:
    wait_for(lambda: (box / "run" / "exit_marker").exists(), 30)
    return int((box / "run" / "exit_code").read_text().split()[0])


def test_the_job_sees_an_empty_data_dir_but_its_box_and_not_the_instruction(books):
    data, box = books
    spec = json.dumps({"keep": str(box), "hide": [str(data)]})
    body = (
        f"ls -A {data}; ls -A {data}/boxes; cat {data}/ledger.db 2>/dev/null; env | grep -c {CONTAIN_ENV}; "
        f"echo made > {box}/out"
    )
    p = _wrap(box, body, spec)
    try:
        assert p.wait(timeout=30) == 0
        log = _log(box).split()
        assert log == ["boxes", "b1", "0"]  # the way to its box, nothing else; no ledger; no variable
        assert _exit(box) == 0
        assert (box / "out").read_text() == "made\n" and (data / "ledger.db").read_text() == "the books"
    finally:
        p.kill()
        p.wait()


def test_a_bad_instruction_starts_nothing(books):
    data, box = books
    p = _wrap(box, f"echo ran > {box}/ran", json.dumps({"keep": str(box), "hide": str(data)}))
    try:
        assert p.wait(timeout=30) == 0
        assert _exit(box) == 127
        assert "gpuops: cannot start job" in _log(box)
        assert not (box / "ran").exists()
    finally:
        p.kill()
        p.wait()


def test_sigterm_to_the_wrapper_reaches_the_contained_job(books):
    data, box = books
    body = "trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 0.05; done"
    p = _wrap(box, body, json.dumps({"keep": str(box), "hide": [str(data)]}))
    try:
        wait_for(lambda: "ready" in _log(box), 30)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        assert _exit(box) == 7  # the job's own handler ran, inside the namespace
        assert time.monotonic() - t0 < 10
        assert "bye" in _log(box)
    finally:
        p.kill()
        p.wait()
