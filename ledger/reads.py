"""The read side of the ledger: every read the commands make, written once (``Reads``).

Each read is SQL text with named ``:params``, run on whichever connection reaches the books cheapest:

- a current SQLite file: the standard library's ``sqlite3``, read-only (WAL: beside a writer);
- a current PostgreSQL ledger (``postgresql+psycopg://``): ``psycopg`` itself;
- anything else (another URL, a ledger still to migrate, a ``Ledger`` whose engine a write has
  opened): SQLAlchemy's engine (``ledger/engine.py``), which migrates first.

Why not SQLAlchemy Core for all of them: its import alone is 0.16 s of CPU (0.2-0.3 s of wall time on
a loaded 2-core machine), twice what `gpuops ps` costs in all, and `ps` and `watchdog --once` must
start within a quarter of `vastai --help`. The three connections differ only in how a statement is
sent (``_Sqlite``, ``_Psycopg``, ``_Engine``: ``query``, ``stream``, ``describe``); the SQL and the
rows are the same (tested on both databases).

The schema lives in ``ledger/migrations.py`` and ``ledger/models.py`` only: a row read whole has the
columns the database holds, in the migrations' order (``describe``), and SQLite's booleans (stored
0/1) come back as bool by their column's declared type. "Current" is every name of
``ledger.migrations.MIGRATION_NAMES`` applied, checked on open.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import namedtuple
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.migrations import MIGRATION_NAMES

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

SQLITE_BUSY_TIMEOUT_S = 30.0
PG_PROBE_TIMEOUT_S = 10  # a server that does not answer: SQLAlchemy then tries, and reports the error as always

# Open sessions (``Reads.open_sessions``): an inline literal, not a bound parameter, so both
# databases prove the query implies the partial index ``ix_sessions_open`` (m005).
OPEN_SESSIONS_WHERE = "status <> 'closed'"

# The columns attribution needs, with what a report groups by (narrow rows, never ORM objects).
SPEND_COLUMNS = (
    "id",
    "experiment",
    "provider",
    "card",
    "gpu_count",
    "usd_per_hour",
    "simulated",
    "status",
    "created_at",
    "instance_id",
    "instance_created_at",
    "ended_at",
    "billed_seconds",
    "cost_usd",
    "tokens",
    "job_seconds",
    "conclusion",
    "cost_source",
)


class Row:
    """A read-only row: a named tuple of the columns read.

    Attribute access like the ORM's ``models`` rows, and ``model_dump()`` giving the same dict (column order, bools as bool)."""

    __slots__ = ()

    if TYPE_CHECKING:  # what ``row_type`` mixes in: a named tuple of columns known only when read
        _fields: tuple[str, ...]

        @classmethod
        def _make(cls, iterable: Iterable[Any]) -> Row: ...
        def __iter__(self) -> Iterator[Any]: ...
        def __getattr__(self, name: str) -> Any: ...

    def model_dump(self) -> dict:
        return dict(zip(self._fields, self))


class PassRow(Row):
    """One ``watchdog_passes`` row.

    ``at`` epoch s UTC; ``seconds`` the pass took; ``interval_seconds`` its watchdog's interval."""

    __slots__ = ()

    @property
    def summary(self) -> str:
        """What the pass did, in words: ``checked 3 sessions, ended 1, 0 errors``."""
        return (
            f"checked {self.checked} session{'' if self.checked == 1 else 's'}, ended {self.ended}, "
            f"{self.errors} error{'' if self.errors == 1 else 's'}"
        )


@cache
def row_type(name: str, fields: tuple[str, ...], base: type[Row] = Row) -> type[Row]:
    """The row class of ``fields`` (a named tuple with ``base``'s methods), made once per shape."""
    return type(name, (base, namedtuple(name, fields)), {"__slots__": ()})


# -- the three connections ------------------------------------------------------------------------
class _Sqlite:
    """An SQLite file through ``sqlite3``, read-only.

    ``query`` reuses one connection per thread (an
    open costs up to 3 ms when the ``-shm`` file is gone); ``stream`` opens its own, so a forked
    child (``ledger.csvio.write_export_forked``) and nested reads never share a cursor."""

    driver, dialect = "sqlite3", "sqlite"

    def __init__(self, path: Path):
        self.path = path
        self._local = threading.local()

    def _open(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)

    def query(self, sql: str, params: dict) -> list[tuple]:
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = self._open()
        return con.execute(sql, params).fetchall()

    def stream(self, sql: str, params: dict) -> Iterator[tuple]:
        con = self._open()
        try:
            yield from con.execute(sql, params)
        finally:
            con.close()

    def describe(self, table: str) -> list[tuple[str, bool]]:
        return [(r[1], r[2].upper() == "BOOLEAN") for r in self.query(f"PRAGMA table_info({table})", {})]


def _pg_text(sql: str, params: dict) -> str:
    """SQL text with named ``:params`` (SQLAlchemy's and sqlite3's style) in psycopg's ``%(name)s``."""
    import re

    return re.sub(
        r"(?<![:\w]):([A-Za-z_]\w*)",
        lambda m: f"%({m.group(1)})s" if m.group(1) in params else m.group(0),
        sql.replace("%", "%%"),
    )


class _Psycopg:
    """A PostgreSQL ledger through psycopg.

    ``con`` (autocommit) for ``query``; ``stream`` opens
    its own connection (rows one at a time, flat memory) so reads inside a stream may run."""

    driver, dialect = "psycopg", "postgresql"

    def __init__(self, con, dsn: str):
        self.con, self.dsn = con, dsn

    def query(self, sql: str, params: dict) -> list[tuple]:
        return self.con.execute(_pg_text(sql, params), params).fetchall()

    def stream(self, sql: str, params: dict) -> Iterator[tuple]:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=PG_PROBE_TIMEOUT_S) as con:
            yield from con.cursor().stream(_pg_text(sql, params), params)

    def describe(self, table: str) -> list[tuple[str, bool]]:
        cur = self.con.execute(f"SELECT * FROM {table} WHERE false")
        return [(d.name, False) for d in cur.description]  # psycopg returns booleans as bool


class _Engine:
    """Any ledger through an SQLAlchemy engine (read transactions take no write lock: ``ledger_read``)."""

    driver = "sqlalchemy"

    def __init__(self, engine):
        self.engine = engine
        self.dialect = engine.dialect.name

    def query(self, sql: str, params: dict) -> list[tuple]:
        import sqlalchemy as sa

        with self.engine.connect().execution_options(ledger_read=True) as conn:
            return [tuple(r) for r in conn.execute(sa.text(sql), params)]

    def stream(self, sql: str, params: dict, batch: int = 2000) -> Iterator[tuple]:
        import sqlalchemy as sa

        with self.engine.connect().execution_options(ledger_read=True, stream_results=True, yield_per=batch) as conn:
            for r in conn.execute(sa.text(sql), params):
                yield tuple(r)

    def describe(self, table: str) -> list[tuple[str, bool]]:
        if self.dialect == "sqlite":
            return [(r[1], r[2].upper() == "BOOLEAN") for r in self.query(f"PRAGMA table_info({table})", {})]
        import sqlalchemy as sa

        with self.engine.connect().execution_options(ledger_read=True) as conn:
            return [(c, False) for c in conn.execute(sa.text(f"SELECT * FROM {table} WHERE 1 = 0")).keys()]


# -- the reads, once ------------------------------------------------------------------------------
class Reads:
    """Every read of the books on one connection (``_Sqlite``, ``_Psycopg`` or ``_Engine``).

    Values
    are bound parameters, never text in the SQL; table and column names are ours."""

    def __init__(self, db):
        self._db = db
        self._tables: dict[str, list[tuple[str, bool]]] = {}

    @property
    def reads(self) -> Reads:
        return self

    @property
    def driver(self) -> str:
        """What answers: ``sqlite3``, ``psycopg`` or ``sqlalchemy``."""
        return self._db.driver

    @property
    def dialect(self) -> str:
        """``sqlite`` or the SQLAlchemy dialect name (``postgresql``)."""
        return self._db.dialect

    def query(self, sql: str, params: dict) -> list[tuple]:
        """Plain tuples of a read-only ``sql`` with named ``:params`` (the reports' GROUP BYs)."""
        return self._db.query(sql, params)

    def iter_query(self, sql: str, params: dict) -> Iterator[tuple]:
        """``query`` streamed on a connection of its own (flat memory; exports of any size)."""
        return self._db.stream(sql, params)

    def columns(self, table: str) -> tuple[str, ...]:
        """The columns of ``table`` in the database, in the migrations' order."""
        return tuple(c for c, _ in self._describe(table))

    def bool_columns(self, table: str) -> frozenset[str]:
        """The BOOLEAN columns of ``table`` that the connection reports (always SQLite's, stored 0/1)."""
        return frozenset(c for c, b in self._describe(table) if b)

    def _describe(self, table: str) -> list[tuple[str, bool]]:
        if table not in self._tables:
            self._tables[table] = self._db.describe(table)
        return self._tables[table]

    def rows(
        self,
        table: str,
        columns: Iterable[str] | None = None,
        where: Iterable[str] = (),
        params: dict | None = None,
        order: str = "",
        limit: int | None = None,
        stream: bool = False,
        base: type = Row,
    ) -> Any:
        """Rows of ``table`` matching every ``where`` clause, as ``base`` rows.

        ``columns``: default all; a list, or an iterator with ``stream``. Raises ValueError for an unknown column."""
        known = dict(self._describe(table))
        cols = tuple(columns) if columns else tuple(known)
        bad = [c for c in cols if c not in known]
        if bad:
            raise ValueError(f"unknown {table} column(s): {', '.join(bad)}")
        where = list(where)
        sql = (
            f"SELECT {', '.join(cols)} FROM {table}"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + (f" ORDER BY {order}" if order else "")
            + (" LIMIT :limit" if limit is not None else "")
        )
        params = dict(params or {}) | ({"limit": int(limit)} if limit is not None else {})
        make = row_type(table.title().replace("_", "") + "Row", cols, base)._make
        bools = [i for i, c in enumerate(cols) if known[c]]
        got = self._db.stream(sql, params) if stream else self._db.query(sql, params)
        if bools:
            got = (_bools(r, bools) for r in got)
        out = map(make, got)
        return out if stream else list(out)

    # -- what the commands read ---------------------------------------------------------------
    def open_sessions(self) -> list[Any]:
        """Every session not closed, oldest intent first (the partial index ``ix_sessions_open``)."""
        return self.rows("sessions", where=[OPEN_SESSIONS_WHERE], order="created_at, id")

    def last_event(self, session_id: str, kind: str) -> tuple | None:
        """(at, detail text) of the newest ``kind`` event of ``session_id``, or None.

        Answered from the events index on session_id."""
        got = self.query(
            "SELECT at, detail FROM events WHERE session_id = :sid AND kind = :kind ORDER BY id DESC LIMIT 1",
            {"sid": session_id, "kind": kind},
        )
        return tuple(got[0]) if got else None

    def active_refusals(self) -> list[Any]:
        """Refusals not lifted, oldest first (``ix_refusals_active``, m005: a handful of rows)."""
        return self.rows("refusals", where=["lifted_at IS NULL"], order="id")

    def watchdog_passes(self) -> list[PassRow]:
        """The newest pass of each watchdog (host, owner), newest first.

        A few hundred rows at worst (``ledger.passes.KEEP_PER_HOST`` per host)."""
        return self.rows(
            "watchdog_passes",
            where=["id IN (SELECT MAX(id) FROM watchdog_passes GROUP BY host, owner)"],
            order="at DESC, id DESC",
            base=PassRow,
        )

    def rows_between(
        self,
        start: float | None = None,
        end: float | None = None,
        columns: Iterable[str] | None = None,
        stream: bool = False,
    ) -> Any:
        """Sessions whose intent time (``created_at``, epoch s) is in [start, end), oldest first.

        None leaves that side open. ``columns``: which to load (default all). ValueError for an
        unknown column."""
        where = [w for w, v in (("created_at >= :start", start), ("created_at < :end", end)) if v is not None]
        return self.rows("sessions", columns, where, {"start": start, "end": end}, "created_at, id", stream=stream)

    def iter_rows_between(
        self, start: float | None = None, end: float | None = None, columns: Iterable[str] | None = None
    ) -> Iterator[Any]:
        """``rows_between`` streamed (flat memory, whatever the range holds)."""
        return self.rows_between(start, end, columns, stream=True)

    def overlapping(
        self, start: float | None, end: float | None, columns: Iterable[str] | None = None
    ) -> Iterator[Any]:
        """Stream the sessions that may have spent money in [start, end) epoch s.

        Intent before
        ``end`` and not ended before ``start`` (None leaves a side open). ``ended_at`` is indexed
        (m004) and its two arms are two index searches (SQLite: MULTI-INDEX OR); ``+created_at``
        keeps SQLite from walking ``created_at``'s index over the whole history before ``end``."""
        return self.rows("sessions", columns, overlap_where(start, end), {"start": start, "end": end}, stream=True)

    def cost_lines(self, start: float | None, end: float | None) -> list[Any]:
        """Cost lines (storage, booked apart from GPU time) whose period overlaps [start, end)."""
        where = [w for w, v in (("start_at < :end", end), ("end_at > :start", start)) if v is not None]
        return self.rows("cost_lines", _COST_LINE_COLUMNS, where, {"start": start, "end": end})

    def session_cost_lines(self, session_id: str) -> list[Any]:
        """The cost lines (storage) booked on one session, oldest first (indexed ``session_id``)."""
        return self.rows("cost_lines", _COST_LINE_COLUMNS, ["session_id = :sid"], {"sid": session_id}, "start_at")


def overlap_where(start: float | None, end: float | None) -> list[str]:
    """The clauses of ``Reads.overlapping`` (named ``:start``, ``:end``; None leaves a side open)."""
    return ([] if end is None else ["+created_at < :end"]) + (
        [] if start is None else ["(ended_at >= :start OR ended_at IS NULL)"]
    )


_COST_LINE_COLUMNS = (
    "session_id",
    "provider",
    "instance_id",
    "kind",
    "start_at",
    "end_at",
    "usd",
    "simulated",
    "description",
)


def _bools(r: tuple, at: list[int]) -> list:
    out = list(r)
    for i in at:
        if out[i] is not None:
            out[i] = bool(out[i])
    return out


# -- opening ----------------------------------------------------------------------------------------
def sqlite_file(url: str) -> Path | None:
    """The file of a plain SQLite ``url`` (None for a server, an in-memory database or a URL with options)."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:") and "?" not in url:
        return Path(url[len("sqlite:///") :]).expanduser()
    return None


def sqlite_current_file(url: str) -> Path | None:
    """The file of an SQLite ``url`` whose ledger has every migration applied, else None.

    None for a server, an in-memory or new database, a file still to migrate, or a newer gpuops's: the
    engine path refuses that one)."""
    path = sqlite_file(url)
    if path is None or not path.is_file():
        return None
    try:
        done = {r[0] for r in _Sqlite(path).stream("SELECT name FROM schema_migrations", {})}
    except sqlite3.Error:
        return None
    return path if done == set(MIGRATION_NAMES) else None


def pg_current(url: str) -> _Psycopg | None:
    """psycopg on a PostgreSQL ledger at ``url`` (``postgresql+psycopg://...``) that has every migration applied.

    Else None (another URL, a database still to migrate, or any error: then
    SQLAlchemy opens it, migrates it or reports the error exactly as before)."""
    if not url.startswith("postgresql+psycopg://"):
        return None
    try:
        import psycopg
    except ImportError:
        return None
    dsn = "postgresql://" + url[len("postgresql+psycopg://") :]
    try:
        con = psycopg.connect(dsn, autocommit=True, connect_timeout=PG_PROBE_TIMEOUT_S)
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
    return _Psycopg(con, dsn)


def engine_reads(engine) -> Reads:
    """``Reads`` through an SQLAlchemy engine."""
    return Reads(_Engine(engine))


def file_reads(path: Path) -> Reads:
    """``Reads`` of the SQLite file at ``path`` through ``sqlite3`` (read-only)."""
    return Reads(_Sqlite(path))


class LedgerReader(Reads):
    """The read side of a ledger at ``url`` for the reports.

    A current SQLite file or PostgreSQL
    ledger is read with its own driver; anything else opens the engine, which migrates an older
    ledger first (like ``Ledger``) and raises ``LedgerTooNew`` for a newer gpuops's."""

    def __init__(self, url: str):
        self.url = url
        self._engine: Engine | None = None
        path = sqlite_current_file(url)
        db = _Sqlite(path) if path is not None else pg_current(url)
        super().__init__(db if db is not None else _Engine(self.engine))

    @property
    def engine(self):
        """The SQLAlchemy engine (opened, and migrations applied, on first use)."""
        if self._engine is None:
            from ledger.engine import open_engine

            self._engine = open_engine(self.url)
        return self._engine
