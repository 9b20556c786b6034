"""Opening a ledger database: engine settings per backend and the pending migrations.

SQLite: WAL (readers never block the writer), a busy timeout (a writer waits for another instead
of failing with "database is locked": ``SQLITE_BUSY_TIMEOUT_MS``, or ``?timeout=SECONDS`` in the
ledger URL), and BEGIN IMMEDIATE for writes (the write lock is taken at
BEGIN, so two writers queue instead of deadlocking on a lock upgrade). PostgreSQL: migrations under
an advisory lock so several processes opening a new ledger at once apply each migration once.
The one way to the books: every read and write of ``ledger`` goes through the engine made here.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event as sa_event

from ledger.checkpoint import WRITTEN
from ledger.migrations import migrate

# SQLite waits this long for a competing writer before "database is locked" (milliseconds): room
# for the longest write another gpuops makes (a million-row `ledger import` on a loaded 2-core
# machine). A ``?timeout=SECONDS`` in the ledger URL (pysqlite's own parameter) wins
# (``sqlite_busy_timeout_ms``); inside ``Ledger.bounded()`` its deadline does.
SQLITE_BUSY_TIMEOUT_MS = 30_000
# pg_advisory_xact_lock key held while migrating (any constant unique to gpuops).
PG_MIGRATION_LOCK = 7401


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite ledger ``url``, its query (``?timeout=``) left out; None for a server or an in-memory database."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        return Path(url[len("sqlite:///") :].split("?", 1)[0]).expanduser()
    return None


def sqlite_busy_timeout_ms(url: str) -> int:
    """The busy timeout of the SQLite ledger at ``url``, in milliseconds.

    The URL's ``?timeout=SECONDS`` (a number >= 0, as pysqlite reads it: 0 never waits), else
    ``SQLITE_BUSY_TIMEOUT_MS``. Raises ``sqlalchemy.exc.ArgumentError`` for any other value (a
    bad URL: `gpuops` exits 2 naming it)."""
    import math

    raw = sa.engine.make_url(url).query.get("timeout")
    if raw is None:
        return SQLITE_BUSY_TIMEOUT_MS
    try:
        seconds = float(raw) if isinstance(raw, str) else math.nan
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise sa.exc.ArgumentError(f"the SQLite ledger URL's timeout={raw!r} is not a number of seconds >= 0")
    return int(seconds * 1000)


def _sqlite_pragmas(dbapi_conn, _record, busy_timeout_ms: int | None = None) -> None:
    # Let SQLAlchemy's "begin" hook issue BEGIN itself (see _sqlite_begin).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(
        f"PRAGMA busy_timeout={int(busy_timeout_ms if busy_timeout_ms is not None else SQLITE_BUSY_TIMEOUT_MS)}"
    )
    _ensure_wal(cur, busy_timeout_ms)
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _ensure_wal(cur, busy_timeout_ms: int | None = None) -> None:
    """Switch the file to WAL (persistent: only the first opener of a new ledger does it).

    The switch needs the file to itself and SQLite answers "locked" at once instead of waiting on
    the busy timeout when several processes open a new ledger together, so retry for a bounded time."""
    import sqlite3
    import time

    deadline = time.monotonic() + (busy_timeout_ms if busy_timeout_ms is not None else SQLITE_BUSY_TIMEOUT_MS) / 1000
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_begin(conn) -> None:
    # Report reads (execution option ``ledger_read``) take no write lock: WAL lets them run beside
    # a writer. Everything else takes the write lock at BEGIN.
    if conn.get_execution_options().get("ledger_read"):
        conn.exec_driver_sql("BEGIN")
        return
    conn.exec_driver_sql("BEGIN IMMEDIATE")
    if conn.engine.url.database not in (None, "", ":memory:"):
        WRITTEN[conn.engine.url.database] = conn.engine


def _private_file(path: Path) -> None:
    """Create the SQLite file's folder (0700) and the file (0600) when missing.

    So the books are the user's alone from the first byte. SQLite creates ``-wal`` and ``-shm`` with
    the database file's mode (sqlite3.c ``findCreateFileMode``), so they are 0600 too. An existing
    file keeps its mode."""
    import os

    if not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)  # mkdir's mode is masked by the umask
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass


# libpq waits for a server that does not answer as long as the OS lets a TCP connect hang (~2 min on
# Linux) unless told otherwise (libpq "connect_timeout", seconds): every wait has a deadline. A
# ``?connect_timeout=N`` in the ledger URL wins.
PG_CONNECT_TIMEOUT_S = 10


def _dispose_in_child(ref: weakref.ReferenceType[sa.engine.Engine]) -> None:
    engine = ref()
    if engine is not None:
        engine.dispose(close=False)


def open_engine(url: str, deadline_s: float | None = None) -> sa.engine.Engine:
    """An engine for the ledger at SQLAlchemy ``url`` with its migrations applied.

    Creates the SQLite file's folder. Raises sqlalchemy errors for an unreachable database
    (PostgreSQL: within ``PG_CONNECT_TIMEOUT_S`` of a server that does not answer), and
    ``ledger.migrations.LedgerTooNew`` for a ledger a newer gpuops wrote.

    SQLite waits for another writer's lock at most ``sqlite_busy_timeout_ms(url)``. ``deadline_s``:
    a short engine for the writes around a destroy (``Ledger.bounded``): SQLite waits at most that
    long for a lock instead; PostgreSQL connects within it (whole seconds, at least 1:
    libpq's unit), runs each statement and waits on each lock at most that long, and pings a pooled
    connection before use (a restarted server's old connections are not an error)."""
    busy_ms = None if deadline_s is None else max(1, int(deadline_s * 1000))
    sqlite_ms = (busy_ms or sqlite_busy_timeout_ms(url)) if url.startswith("sqlite") else 0  # a bad one: no file
    if (path := sqlite_file(url)) is not None:
        _private_file(path)
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": sqlite_ms / 1000, "check_same_thread": False}
    elif url.startswith("postgresql"):
        args: dict[str, Any] = {}
        if "connect_timeout" not in url or deadline_s is not None:
            args["connect_timeout"] = PG_CONNECT_TIMEOUT_S if deadline_s is None else max(1, int(-(-deadline_s // 1)))
        if busy_ms is not None:
            args["options"] = f"-c statement_timeout={busy_ms} -c lock_timeout={busy_ms}"
            kwargs["pool_pre_ping"] = True
        kwargs["connect_args"] = args
    engine = sa.create_engine(url, **kwargs)
    # A forked child (``ledger.csvio.write_export_forked``) opens its own connections, never the
    # parent's pooled ones (SQLAlchemy's "using connection pools with multiprocessing").
    ref = weakref.ref(engine)
    os.register_at_fork(after_in_child=lambda: _dispose_in_child(ref))
    if url.startswith("sqlite"):
        sa_event.listen(engine, "connect", lambda c, r: _sqlite_pragmas(c, r, sqlite_ms))
        sa_event.listen(engine, "begin", _sqlite_begin)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK})")
        migrate(conn)
    return engine
