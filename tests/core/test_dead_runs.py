"""Servers of the suite never outlive a SIGKILLed test process, and a run that died anyway is
cleaned up by the next one (gpuops/emulators/lifetime.py ``die_with_parent``, tests/support/procs.py ``end_dead_runs``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO
from tests.support import procs
from tests.support.procs import Proc

GONE_DEADLINE_S = 30.0  # a SIGQUIT/SIGTERM'd server is gone well within this


def _alive(pid: int) -> bool:
    return procs._start_ticks(pid) is not None


def _gone_within(pid: int, deadline_s: float) -> bool:
    deadline = time.monotonic() + deadline_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _sigkill_holder_of(script: str) -> tuple[int, str]:
    """Run ``script`` in a child python (it prints "<server pid> <folder>" and sleeps), SIGKILL
    that child once it printed, and return what it printed."""
    child = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = child.stdout.readline()  # the child exits (error) or prints within its own deadlines
        assert line, child.stderr.read()
        pid_text, folder = line.split()
        child.kill()
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    return int(pid_text), folder


def test_postgres_ends_with_the_test_process_that_started_it():
    pid, folder = _sigkill_holder_of(
        "import time\n"
        "from tests.support.postgres import PostgresServer\n"
        "s = PostgresServer().start()\n"
        "print(s.proc.pid, s.root, flush=True)\n"
        "time.sleep(600)\n"
    )
    try:
        gone = _gone_within(pid, GONE_DEADLINE_S)
        if not gone:
            assert "postgres" in _cmdline(pid) and folder in _cmdline(pid)
            os.killpg(pid, signal.SIGKILL)
        assert gone, "the PostgreSQL server outlived the SIGKILLed process that started it"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_sshd_ends_with_the_test_process_that_started_it(tmp_path):
    pid, _ = _sigkill_holder_of(
        "import time\n"
        "from gpuops.emulators.sshd import SshServer\n"
        f"s = SshServer({str(tmp_path / 'sshd')!r})\n"
        "s.start()\n"
        "print(s.proc.pid, s.base, flush=True)\n"
        "time.sleep(600)\n"
    )
    gone = _gone_within(pid, GONE_DEADLINE_S)
    if not gone:
        os.kill(pid, signal.SIGKILL)
    assert gone, "sshd outlived the SIGKILLed process that started it"


def _dead_owner_record(root: Path) -> None:
    """An owner record of a process that has ended (its pid may be reused: the start time differs)."""
    p = subprocess.Popen(["sleep", "60"])
    ticks = procs._start_ticks(p.pid)
    p.kill()
    p.wait(10)
    (root / procs.OWNER_FILE).write_text(f"{p.pid} {ticks}\n")


def test_a_dead_runs_postgres_is_ended_and_its_root_removed(monkeypatch):
    import tempfile

    from tests.support.postgres import PostgresServer

    # Outside tmp_path (0700): as root, the server's own user must reach its folder.
    outer = Path(tempfile.mkdtemp(prefix="outer-", dir=os.environ[procs.ROOT_VAR]))
    root = outer / "gpuops-suite-dead0001"
    root.mkdir()
    for d in (outer, root):
        os.chmod(d, 0o711)
    _dead_owner_record(root)
    monkeypatch.setattr(tempfile, "tempdir", str(root))  # the server's folder lies in the dead root
    server = PostgresServer()
    try:
        server.start()
        pid = server.proc.pid
        ended = procs.end_dead_runs(str(outer), grace_s=GONE_DEADLINE_S)
        assert pid in [p.pid for p in ended]
        assert _gone_within(pid, 1.0) and not root.exists()
    finally:
        server.stop()
        shutil.rmtree(outer, ignore_errors=True)


def test_live_runs_and_runs_in_doubt_are_left_alone(tmp_path):
    roots = {name: tmp_path / f"gpuops-suite-{name}" for name in ("dead", "live", "norecord")}
    for r in roots.values():
        r.mkdir()
    _dead_owner_record(roots["dead"])
    procs.write_owner(str(roots["live"]))  # this process: alive
    sleepers = {name: subprocess.Popen(["sleep", "600"], cwd=r) for name, r in roots.items()}
    try:
        ended = procs.end_dead_runs(str(tmp_path), grace_s=GONE_DEADLINE_S)
        assert [p.pid for p in ended] == [sleepers["dead"].pid]
        assert sleepers["dead"].wait(GONE_DEADLINE_S) == -signal.SIGTERM
        assert sleepers["live"].poll() is None and sleepers["norecord"].poll() is None
        assert not roots["dead"].exists() and roots["live"].exists() and roots["norecord"].exists()
    finally:
        for p in sleepers.values():
            p.kill()
            p.wait(10)


def test_an_owner_record_judges_only_a_certainly_gone_owner(tmp_path):
    assert not procs.owner_gone(str(tmp_path))  # no record: doubt
    (tmp_path / procs.OWNER_FILE).write_text("garbage\n")
    assert not procs.owner_gone(str(tmp_path))
    me, ticks = os.getpid(), procs._start_ticks(os.getpid())
    (tmp_path / procs.OWNER_FILE).write_text(f"{me} {ticks}\n")
    assert not procs.owner_gone(str(tmp_path))
    (tmp_path / procs.OWNER_FILE).write_text(f"{me} {ticks + 1}\n")  # the pid reused by another process
    assert procs.owner_gone(str(tmp_path))


def _p(pid: int, cmdline: str = "x", cwd: str = "/", env: dict | None = None) -> Proc:
    return Proc(pid=pid, ppid=1, pgid=pid, cmdline=cmdline, cwd=cwd, env=env or {})


def test_a_roots_processes_are_found_by_its_path_only():
    root = "/tmp/gpuops-suite-abcd1234"
    found = procs.of_root(
        root,
        [
            _p(1, f"/usr/lib/postgresql/16/bin/postgres -D {root}/gpuops-pg-x/data -p 5"),
            _p(2, f"chromium --user-data-dir={root}/gpuops-chromium-y"),
            _p(3, env={procs.ROOT_VAR: root}),
            _p(4, cwd=f"{root}/t0/box"),
            _p(5, f"postgres -D {root}9/gpuops-pg-x/data"),  # another root sharing the prefix
            _p(6, "postgres -D /var/lib/postgresql/16/main"),  # the machine's own server
            _p(7, env={procs.ROOT_VAR: "/tmp/gpuops-suite-other"}),
        ],
    )
    assert [p.pid for p in found] == [1, 2, 3, 4]
