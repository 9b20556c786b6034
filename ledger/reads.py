"""The read side of the ledger: every read the commands make, written once (``Reads``).

Each read is SQL text (``sqlalchemy.text``) with named ``:params`` on a connection of the ledger's
one SQLAlchemy engine (``ledger/engine.py``): a connection of its own that takes no write lock
(``ledger_read``: WAL lets it run beside a writer), or the connection a write transaction holds
(``Reads.on``), so a write reads what it wrote. Rows are SQLAlchemy's ``Row`` (attribute access,
``._mapping``); SQLite's booleans (stored 0/1) come back as bool by their column's declared type,
read from the database (``PRAGMA table_info``): the schema itself is stated once, in
``ledger/models.py``. SQLAlchemy Core only (no ORM import here): the report path stays light.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import chain, count
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.attribution import OPEN_SESSIONS_WHERE

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine, Row


# Rows ``Reads.iter_query`` takes from the driver's cursor at a time (``fetchmany``).
ITER_BATCH_ROWS = 4096
_CURSOR_IDS = count()  # PostgreSQL's server-side cursors, named apart (two may stream on one connection)

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


def pass_summary(p: Any) -> str:
    """What a ``watchdog_passes`` row did, in words: ``checked 3 sessions, ended 1, 0 errors``."""
    return (
        f"checked {p.checked} session{'' if p.checked == 1 else 's'}, ended {p.ended}, "
        f"{p.errors} error{'' if p.errors == 1 else 's'}"
    )


class Reads:
    """Every read of the books on the ledger's engine (or on one held connection: ``on``).

    Values are bound parameters, never text in the SQL; table and column names are ours."""

    def __init__(self, engine: Engine, conn: Connection | None = None) -> None:
        self.engine = engine
        self._conn = conn
        self._tables: dict[str, list[tuple[str, bool]]] = {}

    @property
    def reads(self) -> Reads:
        return self

    def on(self, conn: Connection) -> Reads:
        """These reads on ``conn`` (a write's transaction: it reads what it wrote)."""
        out = Reads(self.engine, conn)
        out._tables = self._tables
        return out

    @property
    def dialect(self) -> str:
        """The SQLAlchemy dialect name: ``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @contextmanager
    def _connected(self, stream: bool = False) -> Iterator[Connection]:
        if self._conn is not None:
            yield self._conn
            return
        opts: dict[str, Any] = {"ledger_read": True}
        if stream:
            opts.update(stream_results=True, yield_per=2000)
        with self.engine.connect().execution_options(**opts) as conn:
            yield conn

    def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Plain tuples of a read-only ``sql`` with named ``:params`` (the reports' GROUP BYs)."""
        with self._connected() as conn:
            return [tuple(r) for r in conn.execute(sa.text(sql), params)]

    def iter_query(self, sql: str, params: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
        """``query`` streamed on a connection of its own (flat memory; exports of any size).

        The driver's own tuples, ``ITER_BATCH_ROWS`` at a time from its cursor (``fetchmany``;
        PostgreSQL: a server-side cursor), chained in C: no SQLAlchemy ``Row`` and no Python frame
        per row (``ledger export`` reads a million rows this way)."""
        return chain.from_iterable(self._batches(sql, params))

    def _batches(self, sql: str, params: dict[str, Any]) -> Iterator[list[tuple[Any, ...]]]:
        with self._connected() as conn:
            if not conn.in_transaction():
                conn.begin()  # the ledger's BEGIN (ledger/engine.py): a read takes no write lock
            compiled = sa.text(sql).compile(dialect=conn.dialect)
            args: Any = compiled.construct_params(params)
            if compiled.positiontup is not None:  # SQLite's qmark style
                args = tuple(args[k] for k in compiled.positiontup)
            raw = conn.connection.driver_connection
            assert raw is not None
            # psycopg: a named cursor is a server-side one (rows come as fetched: flat memory)
            pg = self.dialect == "postgresql"
            cur = raw.cursor(name=f"ledger_iter_query_{next(_CURSOR_IDS)}") if pg else raw.cursor()
            try:
                cur.execute(str(compiled), args)
                while batch := cur.fetchmany(ITER_BATCH_ROWS):
                    yield batch
            finally:
                cur.close()

    def columns(self, table: str) -> tuple[str, ...]:
        """The columns of ``table`` in the database, in their order there."""
        return tuple(c for c, _ in self._describe(table))

    def _describe(self, table: str) -> list[tuple[str, bool]]:
        if table not in self._tables:
            if self.dialect == "sqlite":
                got = [(r[1], r[2].upper() == "BOOLEAN") for r in self.query(f"PRAGMA table_info({table})", {})]
            else:  # the driver answers booleans as bool
                with self._connected() as conn:
                    got = [(c, False) for c in conn.execute(sa.text(f"SELECT * FROM {table} WHERE 1 = 0")).keys()]
            self._tables[table] = got
        return self._tables[table]

    def rows(
        self,
        table: str,
        columns: Iterable[str] | None = None,
        where: Iterable[str] = (),
        params: dict[str, Any] | None = None,
        order: str = "",
        limit: int | None = None,
        stream: bool = False,
    ) -> Any:
        """Rows of ``table`` matching every ``where`` clause (SQLAlchemy ``Row``: attribute access).

        ``columns``: default all; a list, or an iterator with ``stream``. Raises ValueError for an
        unknown column."""
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
        statement = sa.text(sql).columns(*(sa.column(c, sa.Boolean) if known[c] else sa.column(c) for c in cols))
        if not stream:
            with self._connected() as conn:
                return list(conn.execute(statement, params))

        def streamed() -> Iterator[Row[Any]]:
            with self._connected(stream=True) as conn:
                yield from conn.execute(statement, params)

        return streamed()

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

    def watchdog_passes(self) -> list[Any]:
        """The newest pass of each watchdog (host, owner), newest first.

        A few hundred rows at worst (``ledger.passes.KEEP_PER_HOST`` per host)."""
        return self.rows(
            "watchdog_passes",
            where=["id IN (SELECT MAX(id) FROM watchdog_passes GROUP BY host, owner)"],
            order="at DESC, id DESC",
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


_COST_LINE_COLUMNS = (  # a cost line's columns as the reports read them
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


class LedgerReader(Reads):
    """The read side of a ledger at ``url`` for the reports: ``Reads`` on its engine.

    The engine (``ledger.engine.open_engine``) migrates an older ledger first, like ``Ledger``, and
    raises ``LedgerTooNew`` for a newer gpuops's."""

    def __init__(self, url: str) -> None:
        from ledger.engine import open_engine

        self.url = url
        super().__init__(open_engine(url))
