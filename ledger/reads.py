"""Read-only access for reports: plain rows (attribute access), without the ORM, so
`gpuops ledger month` over 100,000 sessions starts and finishes fast.

An SQLite ledger already at the newest schema is read with the standard library's ``sqlite3``
(importing SQLAlchemy alone costs 0.3 s or more on a small machine, more than the whole report);
any other URL, or an SQLite file that still needs a migration, goes through SQLAlchemy Core
(``ledger/engine.py``), which migrates it first. Both paths return the same rows (tested).
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from pathlib import Path
from typing import Any, Iterable

from ledger.schema_version import MIGRATION_NAMES

# Every ``sessions`` column (models.Session). Booleans are converted so SQLite's 0/1 read as bool.
_BOOL = {"spot", "simulated"}
SESSION_COLUMNS = (
    "id", "experiment", "job", "provider", "card", "gpu_count", "spot", "label", "instance_id", "offer_id",
    "usd_per_hour", "bid_usd_per_hour", "simulated", "status", "created_at", "instance_created_at", "ready_at",
    "ended_at", "end_reason", "exit_code", "billed_seconds", "cost_usd", "tokens", "job_seconds", "conclusion",
    "note", "log_path", "results_path", "billing_increment_seconds", "last_heartbeat_at", "end_source", "source",
    "max_hours", "ready_timeout_seconds", "idle_minutes",  # m004_session_limits
)
SQLITE_BUSY_TIMEOUT_S = 30.0


def _columns(columns: Iterable[str] | None) -> tuple[str, ...]:
    cols = tuple(columns) if columns else SESSION_COLUMNS
    bad = [c for c in cols if c not in SESSION_COLUMNS]
    if bad:
        raise ValueError(f"unknown sessions column(s): {', '.join(bad)}")
    return cols


def _sessions_table():
    import sqlalchemy as sa

    return sa.table("sessions", *[sa.column(c, sa.Boolean) if c in _BOOL else sa.column(c) for c in SESSION_COLUMNS])


def rows_between(engine, start: float | None = None, end: float | None = None, columns: Iterable[str] | None = None) -> list[Any]:
    """Sessions whose intent time (``created_at``, epoch s) is in [start, end), oldest first, as
    rows with attribute access, through SQLAlchemy ``engine``; None leaves that side open.
    ``columns``: which ``sessions`` columns to load (default all). Raises ValueError for an
    unknown column."""
    import sqlalchemy as sa

    t = _sessions_table()
    q = sa.select(*[t.c[c] for c in _columns(columns)]).order_by(t.c.created_at, t.c.id)
    if start is not None:
        q = q.where(t.c.created_at >= start)
    if end is not None:
        q = q.where(t.c.created_at < end)
    with engine.connect().execution_options(ledger_read=True) as conn:
        return list(conn.execute(q))


def _sqlite_file(url: str) -> Path | None:
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:") and "?" not in url:
        return Path(url[len("sqlite:///"):]).expanduser()
    return None


def _sqlite_current(path: Path) -> bool:
    """True when ``path`` is an SQLite ledger with every migration applied."""
    if not path.is_file():
        return False
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
        try:
            done = {r[0] for r in con.execute("SELECT name FROM schema_migrations")}
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return done >= set(MIGRATION_NAMES)


def sqlite_rows_between(path: Path, start: float | None = None, end: float | None = None,
                        columns: Iterable[str] | None = None) -> list[Any]:
    """``rows_between`` on an SQLite file with the standard library (read-only connection; WAL
    lets it read beside a writer)."""
    cols = _columns(columns)
    where, args = [], []
    if start is not None:
        where.append("created_at >= ?")
        args.append(start)
    if end is not None:
        where.append("created_at < ?")
        args.append(end)
    sql = f"SELECT {', '.join(cols)} FROM sessions" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY created_at, id"
    row_t = namedtuple("SessionRow", cols)
    bools = [i for i, c in enumerate(cols) if c in _BOOL]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        out = []
        for r in con.execute(sql, args):
            if bools:
                r = list(r)
                for i in bools:
                    r[i] = None if r[i] is None else bool(r[i])
            out.append(row_t(*r))
        return out
    finally:
        con.close()


class LedgerReader:
    """The read side of a ledger at ``url``. Opening it migrates an older ledger (via SQLAlchemy),
    like ``Ledger``; a current SQLite ledger is read with ``sqlite3``."""

    def __init__(self, url: str):
        self.url = url
        self._engine = None
        path = _sqlite_file(url)
        self._sqlite = path if path is not None and _sqlite_current(path) else None
        if self._sqlite is None:
            self._engine = self.engine

    @property
    def engine(self):
        if self._engine is None:
            from ledger.engine import open_engine

            self._engine = open_engine(self.url)
        return self._engine

    def rows_between(self, start: float | None = None, end: float | None = None, columns: Iterable[str] | None = None) -> list[Any]:
        if self._sqlite is not None:
            return sqlite_rows_between(self._sqlite, start, end, columns)
        return rows_between(self.engine, start, end, columns)
