"""A real PostgreSQL server on 127.0.0.1 for the tests, started from the system's binaries.

``initdb`` into a temporary folder, then ``postgres -D <folder>`` as a direct child of the test
process on a free port (TCP on 127.0.0.1 only, the Unix socket in the same folder), trust
authentication, durability off (a test server). PostgreSQL refuses to run as root, so as root the
server runs as the ``postgres`` system user (created by the Debian package) and the folder is
handed to it.

The server never outlives the test run: it is not daemonized (no ``pg_ctl start``), it gets
SIGQUIT (immediate shutdown) when the thread that started it ends (``gpuops.emulators.lifetime.die_with_parent``:
a SIGKILLed pytest runs no teardown), and a run that died anyway is ended by the next run's
start (``procs.end_dead_runs``, from tests/conftest.py).

No skipping: a missing PostgreSQL is an error that says how to install it.

Ending: ``stop()`` sends SIGINT (fast shutdown: clients are disconnected, a clean shutdown is
logged), waits ``STOP_TIMEOUT_S``, SIGKILLs the server's process group if it is still there, then
removes the folder; it is idempotent and tolerates a folder that is already gone. Under
pytest-xdist each worker has its own server (a session fixture is per worker) and each test its
own database; a test that stops the server (``own_postgres``) is lent a second one of its worker,
which no other test uses.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
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
        self.proc: subprocess.Popen | None = None
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        os.chmod(self.root, 0o700)

    def _env(self) -> dict[str, str]:
        # PYTEST_GPUOPS_TEST=session: the server outlives the test that first asked for it
        # (tests/support/procs.py).
        return {**os.environ, "LC_ALL": "C.UTF-8", "PGTZ": "UTC", "PYTEST_GPUOPS_TEST": "session"}

    def start(self) -> PostgresServer:
        """``initdb``, then the server on a free port; returns once it accepts connections
        (deadline ``START_TIMEOUT_S``). Raises RuntimeError with the server's log on failure."""
        r = subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            user=self.user,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            cwd="/",  # the folder may already be gone when a later call runs
            env=self._env(),
        )
        if r.returncode:
            raise RuntimeError(f"initdb failed: {r.stderr.strip()}")
        last = ""
        for _ in range(3):  # the free port may be taken between probe and bind: try another
            self.port = _free_port()
            try:
                self._launch()
                return self
            except RuntimeError as e:
                last = str(e)
        raise RuntimeError(f"postgres did not start: {last}")

    def _launch(self) -> None:
        """Run ``postgres -D`` as a child of this process (its own process group; SIGQUIT when the
        starting thread ends) and wait until it accepts a connection on ``port``. Raises
        RuntimeError (the log's tail) when it exits or does not answer by ``START_TIMEOUT_S``."""
        from gpuops.emulators.lifetime import die_with_parent

        log_path = self.root / "server.log"
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.bindir / "postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.root),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=300",
                ],
                user=self.user,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd="/",
                env=self._env(),
                process_group=0,  # a terminal's Ctrl-C goes to pytest, which stops the server itself
                preexec_fn=die_with_parent(signal.SIGQUIT),
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(log_path.read_text(errors="replace")[-2000:])
            if self._answers():
                return
            if time.monotonic() > deadline:
                self._end()
                raise RuntimeError(
                    f"no connection within {START_TIMEOUT_S} s: {log_path.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.1)

    def _answers(self) -> bool:
        """True when the server accepts a connection (it is past recovery and startup)."""
        import psycopg

        try:
            psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", connect_timeout=2).close()
            return True
        except psycopg.Error:
            return False

    def _end(self) -> None:
        """SIGINT the server (fast shutdown), wait ``STOP_TIMEOUT_S``, then SIGKILL its process
        group (the postmaster leads it; its backends are in it) and reap it. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait(STOP_TIMEOUT_S)

    def halt(self) -> None:
        """Stop the server, keeping its data and port (a team ledger whose server went down): a
        fast shutdown (clients are disconnected). ``resume()`` starts it again."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("postgres is not running")
        self._end()

    def resume(self) -> None:
        """Start a ``halt()``ed server again on the same port with the same data; returns once it
        accepts connections (deadline ``START_TIMEOUT_S``)."""
        self._launch()

    def running(self) -> bool:
        """True while the server process runs (started, not halted or stopped)."""
        return self.proc is not None and self.proc.poll() is None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """CREATE DATABASE with a fresh name; returns its SQLAlchemy URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Shut the server down (fast mode: a logged, clean shutdown), SIGKILL it if it is still
        alive after ``STOP_TIMEOUT_S``, remove the folder. Idempotent; never raises."""
        try:
            self._end()
        except (OSError, subprocess.SubprocessError):
            pass
        self.port = 0
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def halting_postgres_server():
    """The server ``own_postgres`` lends: one per xdist worker (started on first use), apart from
    ``postgres_server`` (which the other tests expect to answer); shut down at the end of the
    session whatever happened."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_postgres(halting_postgres_server):
    """A PostgreSQL server no other test uses while this one runs: the test may ``halt()`` and
    ``resume()`` it, and gets a database of its own with ``new_database()``. It is the worker's
    ``halting_postgres_server`` (a worker runs one test at a time, and an initdb per test would
    cost seconds), answering when the test starts. After the test it is halted (a fast shutdown,
    which ends the test's own connections too) and the next test's ``own_postgres`` starts it
    again: a server started during a test (by ``resume()``, here or in the test) is that test's
    process, which tests/conftest.py would otherwise end with a SIGTERM -- a smart shutdown, which
    waits for clients -- and its 3 s grace before a SIGKILL."""
    server = halting_postgres_server
    if not server.running():
        server.resume()
    yield server
    if server.running():
        server.halt()


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server for the whole test session, per xdist worker (started on first use);
    shut down at the end of the session whatever happened."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()
