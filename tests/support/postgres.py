"""A real PostgreSQL server on 127.0.0.1 for the tests, started from the system's binaries.

``initdb`` into a temporary folder, ``pg_ctl start`` on a free port (TCP on 127.0.0.1 only, the
Unix socket in the same folder), trust authentication, durability off (a test server). PostgreSQL
refuses to run as root, so as root the server runs as the ``postgres`` system user (created by the
Debian package) and the folder is handed to it.

No skipping: a missing PostgreSQL is an error that says how to install it.

Ending: ``stop()`` asks the server to shut down (``pg_ctl stop -m fast``: clients are disconnected,
a clean shutdown is logged), kills the postmaster if it is still there after that, then removes
the folder; it is idempotent and tolerates a folder that is already gone. Under pytest-xdist
each worker has its own server (a session fixture is per worker) and each test its own database.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def pg_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/<v>/bin`` (Debian/Ubuntu layout), or the folder of an
    ``initdb`` on PATH. Raises RuntimeError with the fix when PostgreSQL is not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise RuntimeError("PostgreSQL server binaries not found: apt-get install postgresql (scripts/test.sh does)")


def _free_port() -> int:
    from tests.support.ports import reserved_port

    return reserved_port()


class PostgresServer:
    """A throwaway server. ``new_database()`` gives a fresh, empty database URL per test."""

    def __init__(self) -> None:
        self.bindir = pg_bindir()
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError(
                    "running as root needs the 'postgres' system user (the postgresql package creates it)"
                ) from None
            self.user = "postgres"
        self.root = Path(tempfile.mkdtemp(prefix="gpuops-pg-"))
        self.data = self.root / "data"
        self.port = 0
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        os.chmod(self.root, 0o700)

    def _run(self, *args: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
        # cwd "/": the folder may already be gone when stop() runs. PYTEST_GPUOPS_TEST=session: the
        # server outlives the test that first asked for it (tests/support/procs.py).
        return subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            user=self.user,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",
            env={**os.environ, "LC_ALL": "C.UTF-8", "PGTZ": "UTC", "PYTEST_GPUOPS_TEST": "session"},
        )

    def start(self) -> PostgresServer:
        r = self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        if r.returncode:
            raise RuntimeError(f"initdb failed: {r.stderr.strip()}")
        last = ""
        for _ in range(3):  # the free port may be taken between probe and bind: try another
            self.port = _free_port()
            opts = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
            )
            r = self._run(
                "pg_ctl",
                "start",
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "-D",
                str(self.data),
                "-l",
                str(self.root / "server.log"),
                "-o",
                opts,
                timeout=START_TIMEOUT_S + 10,
            )
            if r.returncode == 0:
                self._opts = opts
                return self
            last = r.stderr.strip() + " " + (self.root / "server.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"pg_ctl start failed: {last}")

    def halt(self) -> None:
        """Stop the server, keeping its data and port (a team ledger whose server went down):
        ``pg_ctl stop -m fast`` (clients are disconnected). ``resume()`` starts it again."""
        r = self._run(
            "pg_ctl",
            "stop",
            "-D",
            str(self.data),
            "-m",
            "fast",
            "-w",
            "-t",
            str(STOP_TIMEOUT_S),
            timeout=STOP_TIMEOUT_S + 10,
        )
        if r.returncode:
            raise RuntimeError(f"pg_ctl stop failed: {r.stderr.strip()}")

    def resume(self) -> None:
        """Start a ``halt()``ed server again on the same port with the same data; returns once
        TCP answers (deadline ``START_TIMEOUT_S``)."""
        r = self._run(
            "pg_ctl",
            "start",
            "-w",
            "-t",
            str(START_TIMEOUT_S),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            self._opts,
            timeout=START_TIMEOUT_S + 10,
        )
        if r.returncode:
            raise RuntimeError(f"pg_ctl start failed: {r.stderr.strip()}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """CREATE DATABASE with a fresh name; returns its SQLAlchemy URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        """Shut the server down (fast mode: a logged, clean shutdown), SIGKILL the postmaster if it
        is still alive after ``STOP_TIMEOUT_S``, remove the folder. Idempotent; never raises."""
        pid = self._postmaster_pid()
        if self.port and self.data.is_dir():
            try:
                self._run(
                    "pg_ctl",
                    "stop",
                    "-D",
                    str(self.data),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    str(STOP_TIMEOUT_S),
                    timeout=STOP_TIMEOUT_S + 10,
                )
            except (OSError, subprocess.SubprocessError):
                pass
        if pid is not None and _alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)  # the postmaster leads its children's group
            except OSError:
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.port = 0
        shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@pytest.fixture
def own_postgres():
    """A PostgreSQL server of this test alone (it may ``halt()`` and ``resume()`` it); stopped and
    removed at the end whatever happened."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server for the whole test session, per xdist worker (started on first use);
    shut down at the end of the session whatever happened."""
    server = PostgresServer()
    try:
        server.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # pg_ctl -w returned; make sure TCP answers before handing it out
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield server
    finally:
        server.stop()
