"""Read-only access for reports: plain rows (attribute access), without the ORM, so
`gpuops ledger month` over 100,000 sessions starts and finishes fast.

An SQLite ledger already at the newest schema is read with the standard library's ``sqlite3``
(importing SQLAlchemy alone costs 0.3 s or more on a small machine, more than the whole report);
a current PostgreSQL ledger (``postgresql+psycopg://``) answers the reports' SQL through ``psycopg``
(``LedgerReader.query_runner``, ``cost_lines``); any other URL, or a ledger that still needs a
migration, goes through SQLAlchemy Core (``ledger/engine.py``), which migrates it first. The paths
return the same rows (tested).
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ledger.schema_version import MIGRATION_NAMES

# Every ``sessions`` column (models.Session). Booleans are converted so SQLite's 0/1 read as bool.
_BOOL = {"spot", "simulated"}
SESSION_COLUMNS = (
    "id", "experiment", "job", "provider", "card", "gpu_count", "spot", "label", "instance_id", "offer_id",
    "usd_per_hour", "bid_usd_per_hour", "simulated", "status", "created_at", "instance_created_at", "ready_at",
    "ended_at", "end_reason", "exit_code", "billed_seconds", "cost_usd", "tokens", "job_seconds", "conclusion",
    "note", "log_path", "results_path", "billing_increment_seconds", "last_heartbeat_at", "end_source", "source",
    "max_hours", "ready_timeout_seconds", "idle_minutes",  # m004_session_limits
    "estimated_usd", "charged_usd", "cost_source",
    "owner", "account",
    "run_id", "attempt", "max_session_usd",  # m010_runs
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


# Open sessions: an inline literal (not a bound parameter) so both databases prove the query
# implies the partial index ``ix_sessions_open`` (migration m005).
OPEN_SESSIONS_SQL = f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE status <> 'closed' ORDER BY created_at, id"


class SessionRow(namedtuple("SessionRow", SESSION_COLUMNS)):
    """A ``sessions`` row, read-only, without the ORM: attribute access like ``models.Session``
    and ``model_dump()`` giving the same dict (column order, bools as bool)."""

    __slots__ = ()

    def model_dump(self) -> dict:
        return dict(zip(self._fields, self))


def _session_row(r) -> SessionRow:
    r = list(r)
    for i, c in enumerate(SESSION_COLUMNS):
        if c in _BOOL and r[i] is not None:
            r[i] = bool(r[i])
    return SessionRow(*r)


def open_rows(engine) -> list[SessionRow]:
    """Every session not closed, oldest intent first, through SQLAlchemy ``engine``."""
    import sqlalchemy as sa

    with engine.connect().execution_options(ledger_read=True) as conn:
        return [_session_row(r) for r in conn.execute(sa.text(OPEN_SESSIONS_SQL))]


def sqlite_open_rows(path: Path) -> list[SessionRow]:
    """``open_rows`` on an SQLite file with the standard library (read-only connection)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        return [_session_row(r) for r in con.execute(OPEN_SESSIONS_SQL)]
    finally:
        con.close()


# The newest event of one kind for one session (``Ledger.last_event``): the events index on session_id.
LAST_EVENT_SQL = "SELECT at, detail FROM events WHERE session_id = :sid AND kind = :kind ORDER BY id DESC LIMIT 1"


def last_event_row(engine, session_id: str, kind: str) -> tuple | None:
    """(at, detail text) of the newest ``kind`` event of ``session_id``, or None, through SQLAlchemy."""
    import sqlalchemy as sa

    with engine.connect().execution_options(ledger_read=True) as conn:
        r = conn.execute(sa.text(LAST_EVENT_SQL), {"sid": session_id, "kind": kind}).first()
    return tuple(r) if r is not None else None


def sqlite_last_event_row(path: Path, session_id: str, kind: str) -> tuple | None:
    """``last_event_row`` on an SQLite file with the standard library (read-only connection)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        r = con.execute(LAST_EVENT_SQL, {"sid": session_id, "kind": kind}).fetchone()
    finally:
        con.close()
    return tuple(r) if r is not None else None


# Active refusals (m003): a handful of rows, answered from ix_refusals_active (m005).
REFUSAL_COLUMNS = ("id", "scope", "reason", "detail", "set_at", "lifted_at", "account")  # account: m007_ownership
ACTIVE_REFUSALS_SQL = f"SELECT {', '.join(REFUSAL_COLUMNS)} FROM refusals WHERE lifted_at IS NULL ORDER BY id"
RefusalRow = namedtuple("RefusalRow", REFUSAL_COLUMNS)


def active_refusal_rows(engine) -> list[RefusalRow]:
    """Refusals not lifted, oldest first, through SQLAlchemy ``engine``."""
    import sqlalchemy as sa

    with engine.connect().execution_options(ledger_read=True) as conn:
        return [RefusalRow(*r) for r in conn.execute(sa.text(ACTIVE_REFUSALS_SQL))]


def sqlite_active_refusal_rows(path: Path) -> list[RefusalRow]:
    """``active_refusal_rows`` on an SQLite file with the standard library."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        return [RefusalRow(*r) for r in con.execute(ACTIVE_REFUSALS_SQL)]
    finally:
        con.close()


# Watchdog passes (m009): the newest pass of each (host, owner), newest first. The table keeps at
# most ``ledger.passes.KEEP_PER_HOST`` rows per host, so this reads a few hundred rows at worst.
WATCHDOG_PASS_COLUMNS = ("id", "host", "owner", "at", "seconds", "interval_seconds", "checked", "ended", "errors", "actions")
LATEST_PASSES_SQL = (f"SELECT {', '.join(WATCHDOG_PASS_COLUMNS)} FROM watchdog_passes "
                     "WHERE id IN (SELECT MAX(id) FROM watchdog_passes GROUP BY host, owner) ORDER BY at DESC, id DESC")


class PassRow(namedtuple("PassRow", WATCHDOG_PASS_COLUMNS)):
    """One ``watchdog_passes`` row, read-only (``at`` epoch s UTC; ``seconds`` the pass took;
    ``interval_seconds`` its watchdog's interval)."""

    __slots__ = ()

    @property
    def summary(self) -> str:
        """What the pass did, in words: ``checked 3 sessions, ended 1, 0 errors``."""
        return (f"checked {self.checked} session{'' if self.checked == 1 else 's'}, ended {self.ended}, "
                f"{self.errors} error{'' if self.errors == 1 else 's'}")


def watchdog_pass_rows(engine) -> list[PassRow]:
    """The newest pass of each watchdog (host, owner), newest first, through SQLAlchemy ``engine``."""
    import sqlalchemy as sa

    with engine.connect().execution_options(ledger_read=True) as conn:
        return [PassRow(*r) for r in conn.execute(sa.text(LATEST_PASSES_SQL))]


def sqlite_watchdog_pass_rows(path: Path) -> list[PassRow]:
    """``watchdog_pass_rows`` on an SQLite file with the standard library (read-only)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        return [PassRow(*r) for r in con.execute(LATEST_PASSES_SQL)]
    finally:
        con.close()


def sqlite_current_file(url: str) -> Path | None:
    """The file of an SQLite ``url`` whose ledger has every migration applied, else None (a
    server, an in-memory or new database, or a file still to migrate)."""
    path = _sqlite_file(url)
    return path if path is not None and _sqlite_current(path) else None


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


def iter_rows_between(engine, start: float | None = None, end: float | None = None, columns: Iterable[str] | None = None,
                      batch: int = 2000) -> Iterator[Any]:
    """``rows_between`` as a generator over a server-side cursor (``stream_results``): memory holds
    ``batch`` rows, whatever the range holds. The connection stays open until it is exhausted or closed."""
    import sqlalchemy as sa

    t = _sessions_table()
    q = sa.select(*[t.c[c] for c in _columns(columns)]).order_by(t.c.created_at, t.c.id)
    if start is not None:
        q = q.where(t.c.created_at >= start)
    if end is not None:
        q = q.where(t.c.created_at < end)
    with engine.connect().execution_options(ledger_read=True, stream_results=True, yield_per=batch) as conn:
        yield from conn.execute(q)


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
    return done == set(MIGRATION_NAMES)  # a newer gpuops's ledger takes the engine path, which refuses it


def sqlite_rows_between(path: Path, start: float | None = None, end: float | None = None,
                        columns: Iterable[str] | None = None) -> list[Any]:
    """``rows_between`` on an SQLite file with the standard library (read-only connection; WAL
    lets it read beside a writer)."""
    return list(sqlite_iter_rows_between(path, start, end, columns))


def sqlite_iter_rows_between(path: Path, start: float | None = None, end: float | None = None,
                             columns: Iterable[str] | None = None) -> Iterator[Any]:
    """``sqlite_rows_between`` as a generator: rows come off the cursor one at a time."""
    cols = _columns(columns)
    where, args = [], []
    if start is not None:
        where.append("created_at >= ?")
        args.append(start)
    if end is not None:
        where.append("created_at < ?")
        args.append(end)
    sql = f"SELECT {', '.join(cols)} FROM sessions" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY created_at, id"
    yield from _sqlite_rows(path, sql, args, cols, "SessionRow")


def _sqlite_rows(path: Path, sql: str, args: list, cols: tuple[str, ...] | list[str], typename: str) -> Iterator[Any]:
    """Named tuples of a read-only ``sql`` on the SQLite file at ``path``, one at a time; the
    columns named in ``_BOOL`` come back as bool (SQLite stores 0/1), NULL stays None."""
    row_t = namedtuple(typename, cols)
    bools = [i for i, c in enumerate(cols) if c in _BOOL]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        if not bools:
            yield from map(row_t._make, con.execute(sql, args))
            return
        for r in con.execute(sql, args):
            r = list(r)
            for i in bools:
                r[i] = None if r[i] is None else bool(r[i])
            yield row_t._make(r)
    finally:
        con.close()


def iter_query(engine, sql: str, params: dict, batch: int = 2000) -> Iterator[tuple]:
    """Plain tuples of a read-only ``sql`` (named ``:params``) streamed from a server-side cursor."""
    import sqlalchemy as sa

    with engine.connect().execution_options(ledger_read=True, stream_results=True, yield_per=batch) as conn:
        for r in conn.execute(sa.text(sql), params):
            yield tuple(r)


def sqlite_iter_query(path: Path, sql: str, params: dict) -> Iterator[tuple]:
    """``iter_query`` on an SQLite file with the standard library (read-only connection)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        yield from con.execute(sql, params)
    finally:
        con.close()


# The columns attribution needs, with what a report groups by (narrow tuples, never ORM objects).
SPEND_COLUMNS = (
    "id", "experiment", "provider", "card", "gpu_count", "usd_per_hour", "simulated", "status", "created_at",
    "instance_id", "instance_created_at", "ended_at", "billed_seconds", "cost_usd", "tokens", "job_seconds",
    "conclusion", "cost_source",
)
COST_LINE_COLUMNS = ("session_id", "provider", "instance_id", "kind", "start_at", "end_at", "usd", "simulated", "description")


def _overlap_sql(start: float | None, end: float | None) -> tuple[str, list]:
    """The index-friendly predicate for sessions that may have spent money in [start, end): intent
    before ``end`` and not ended before ``start``. ``ended_at`` is indexed (m004) and its two arms
    (``>= start``, ``IS NULL``) are two index searches (SQLite: MULTI-INDEX OR); ``+created_at``
    keeps SQLite from walking ``created_at``'s index over the whole history before ``end``
    instead: for this month, rows ended since its start are few, rows created before its end are all."""
    where, args = [], []
    if end is not None:
        where.append("+created_at < ?")  # unary plus: the planner takes ended_at's index (below)
        args.append(end)
    if start is not None:
        where.append("(ended_at >= ? OR ended_at IS NULL)")
        args.append(start)
    return (" WHERE " + " AND ".join(where)) if where else "", args


def overlapping(engine, start: float | None, end: float | None, columns: Iterable[str] | None = None) -> Iterator[Any]:
    """Stream sessions that may have spent money in [start, end) epoch s (see ``_overlap_sql``), as
    narrow rows with attribute access, through SQLAlchemy ``engine``. None leaves a side open."""
    import sqlalchemy as sa

    t = _sessions_table()
    q = sa.select(*[t.c[c] for c in _columns(columns)])
    if end is not None:
        q = q.where(sa.literal_column("+created_at") < end)  # see _overlap_sql
    if start is not None:
        q = q.where(sa.or_(t.c.ended_at >= start, t.c.ended_at.is_(None)))
    with engine.connect().execution_options(ledger_read=True, stream_results=True, yield_per=5000) as conn:
        yield from conn.execute(q)


def sqlite_overlapping(path: Path, start: float | None, end: float | None, columns: Iterable[str] | None = None) -> Iterator[Any]:
    """``overlapping`` on an SQLite file with the standard library (read-only, streamed)."""
    cols = _columns(columns)
    where, args = _overlap_sql(start, end)
    row_t = namedtuple("SessionRow", cols)
    bools = [i for i, c in enumerate(cols) if c in _BOOL]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        for r in con.execute(f"SELECT {', '.join(cols)} FROM sessions{where}", args):
            if bools:
                r = list(r)
                for i in bools:
                    r[i] = None if r[i] is None else bool(r[i])
            yield row_t(*r)
    finally:
        con.close()


def cost_lines(engine, start: float | None, end: float | None) -> list[Any]:
    """Cost lines (``cost_lines``: storage and the like) whose period overlaps [start, end)."""
    import sqlalchemy as sa

    t = sa.table("cost_lines", *[sa.column(c, sa.Boolean) if c == "simulated" else sa.column(c) for c in COST_LINE_COLUMNS])
    q = sa.select(*t.c)
    if end is not None:
        q = q.where(t.c.start_at < end)
    if start is not None:
        q = q.where(t.c.end_at > start)
    with engine.connect().execution_options(ledger_read=True) as conn:
        return list(conn.execute(q))


def session_cost_lines(engine, session_id: str) -> list[Any]:
    """The cost lines (storage) booked on one session, oldest first (indexed ``session_id``)."""
    import sqlalchemy as sa

    t = sa.table("cost_lines", *[sa.column(c, sa.Boolean) if c == "simulated" else sa.column(c) for c in COST_LINE_COLUMNS])
    with engine.connect().execution_options(ledger_read=True) as conn:
        return list(conn.execute(sa.select(*t.c).where(t.c.session_id == session_id).order_by(t.c.start_at)))


def sqlite_cost_lines(path: Path, start: float | None, end: float | None) -> list[Any]:
    """Cost lines (storage) overlapping [start, end) (epoch seconds; None: unbounded), read with
    the standard library from the SQLite file at ``path``."""
    where, args = [], []
    if end is not None:
        where.append("start_at < ?")
        args.append(end)
    if start is not None:
        where.append("end_at > ?")
        args.append(start)
    sql = f"SELECT {', '.join(COST_LINE_COLUMNS)} FROM cost_lines" + (f" WHERE {' AND '.join(where)}" if where else "")
    return list(_sqlite_rows(path, sql, args, COST_LINE_COLUMNS, "CostLineRow"))


class LedgerReader:
    """The read side of a ledger at ``url``. Opening it migrates an older ledger (via SQLAlchemy),
    like ``Ledger``; a current SQLite ledger is read with ``sqlite3``."""

    def __init__(self, url: str):
        self.url = url
        self._engine = None
        path = _sqlite_file(url)
        self._sqlite = path if path is not None and _sqlite_current(path) else None
        self._pg = None
        if self._sqlite is None:
            self._pg = pg_current_connection(url)  # a current PostgreSQL ledger: psycopg, no SQLAlchemy
            if self._pg is None:
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

    def overlapping(self, start: float | None, end: float | None, columns: Iterable[str] | None = None) -> Iterator[Any]:
        """Sessions that may have spent money in [start, end), streamed (see ``overlapping``)."""
        if self._sqlite is not None:
            return sqlite_overlapping(self._sqlite, start, end, columns)
        return overlapping(self.engine, start, end, columns)

    def cost_lines(self, start: float | None, end: float | None) -> list[Any]:
        """Cost lines overlapping [start, end) (storage booked apart from GPU time)."""
        if self._sqlite is not None:
            return sqlite_cost_lines(self._sqlite, start, end)
        if self._pg is not None:
            where = [w for w, v in (("start_at < :end", end), ("end_at > :start", start)) if v is not None]
            sql = f"SELECT {', '.join(COST_LINE_COLUMNS)} FROM cost_lines" + (f" WHERE {' AND '.join(where)}" if where else "")
            row_t = namedtuple("CostLineRow", COST_LINE_COLUMNS)
            return [row_t._make(r) for r in pg_query(self._pg)(sql, {"start": start, "end": end})]
        return cost_lines(self.engine, start, end)

    def watchdog_passes(self) -> list[PassRow]:
        """The newest pass of each watchdog (host, owner), newest first (``LATEST_PASSES_SQL``)."""
        if self._sqlite is not None:
            return sqlite_watchdog_pass_rows(self._sqlite)
        if self._pg is not None:
            return [PassRow(*r) for r in pg_query(self._pg)(LATEST_PASSES_SQL, {})]
        return watchdog_pass_rows(self.engine)

    def query_runner(self):
        """``query(sql, params) -> list[tuple]`` for SQL text with named ``:params`` (the reports'
        GROUP BYs, ``ledger.aggregate``): sqlite3, psycopg, or SQLAlchemy, whichever this reader uses."""
        if self._sqlite is not None:
            return sqlite_query(self._sqlite)
        if self._pg is not None:
            return pg_query(self._pg)
        return engine_query(self.engine)

    def iter_rows_between(self, start: float | None = None, end: float | None = None,
                          columns: Iterable[str] | None = None) -> Iterator[Any]:
        """``rows_between`` streamed (flat memory: exports of any size)."""
        if self._sqlite is not None:
            return sqlite_iter_rows_between(self._sqlite, start, end, columns)
        return iter_rows_between(self.engine, start, end, columns)

    @property
    def dialect(self) -> str:
        """``sqlite`` or the SQLAlchemy dialect name (``postgresql``)."""
        return "sqlite" if self._sqlite is not None else self.engine.dialect.name

    def iter_query(self, sql: str, params: dict) -> Iterator[tuple]:
        """Tuples of a read-only ``sql`` with named ``:params``, streamed (flat memory)."""
        if self._sqlite is not None:
            return sqlite_iter_query(self._sqlite, sql, params)
        return iter_query(self.engine, sql, params)


PG_PROBE_TIMEOUT_S = 10  # a server that does not answer: SQLAlchemy then tries, and reports the error as always


def pg_current_connection(url: str):
    """An autocommit psycopg connection to a PostgreSQL ledger at ``url``
    (``postgresql+psycopg://...``) that has every migration applied, else None (another URL, a
    database still to migrate, or any error: then SQLAlchemy opens it, migrates it or reports
    the error exactly as before). Reading it so skips importing SQLAlchemy (0.1-0.15 s: issue 16)."""
    if not url.startswith("postgresql+psycopg://"):
        return None
    try:
        import psycopg
    except ImportError:
        return None
    try:
        con = psycopg.connect("postgresql://" + url[len("postgresql+psycopg://"):], autocommit=True, connect_timeout=PG_PROBE_TIMEOUT_S)
    except psycopg.Error:
        return None
    try:
        done = {r[0] for r in con.execute("SELECT name FROM schema_migrations")}
    except psycopg.Error:
        con.close()
        return None
    if done != set(MIGRATION_NAMES):  # to migrate, or a newer gpuops's (SQLAlchemy's path refuses it)
        con.close()
        return None
    return con


def sqlite_query(path) -> Callable[[str, dict], Any]:
    """``query`` on an SQLite file through the standard library (read-only). One connection for
    every statement of the caller (opened on the first, closed with the function): a read-only
    open of a WAL ledger whose ``-shm`` file is gone costs ~3 ms (SQLite's unreliable-shm path)."""
    held: list = []

    def run(sql: str, args: dict) -> list[tuple]:
        if not held:
            held.append(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S))
        return held[0].execute(sql, args).fetchall()

    return run


def engine_query(engine) -> Callable[[str, dict], Any]:
    """``query`` through an SQLAlchemy engine (PostgreSQL, or an SQLite ledger being migrated)."""
    import sqlalchemy as sa

    def run(sql: str, args: dict) -> list[tuple]:
        with engine.connect().execution_options(ledger_read=True) as conn:
            return [tuple(r) for r in conn.execute(sa.text(sql), args)]

    return run

def pg_query(con):
    """``query(sql, params) -> list[tuple]`` on psycopg connection ``con`` for SQL text with named
    ``:params`` (SQLAlchemy's and sqlite3's style; rewritten to psycopg's ``%(name)s``)."""
    import re

    def run(sql: str, params: dict) -> list[tuple]:
        text = re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", lambda m: f"%({m.group(1)})s" if m.group(1) in params else m.group(0),
                      sql.replace("%", "%%"))
        return con.execute(text, params).fetchall()

    return run
