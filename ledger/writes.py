"""A rental's writes and single-session reads, written once: SQL text with named ``:params``.

``add_session``, ``event``, ``set_fields``, ``add_steps``, ``request_end``, ``close``, ``rebook``,
``get`` and ``events`` are each one transaction on one of two connections, which differ only in how a
statement is sent (``_Held``):

- ``LightFile``: the standard library's ``sqlite3`` on an SQLite file already at the newest schema,
  for a ``Ledger(url, light=True)`` (`gpuops up`). Importing SQLAlchemy and SQLModel costs 0.3 s on
  a quiet 2-core machine with compiled bytecode and seconds without it, and before the intent row
  that time is outside the booked window. Each write's lock is taken at BEGIN (``BEGIN IMMEDIATE``)
  with the caller's busy timeout, foreign keys on and ``synchronous=NORMAL``, as
  ``ledger/engine.py`` opens every connection, on the one connection the store keeps; the file is
  named in ``ledger.checkpoint.WRITTEN``. The refusal is ``sqlite3.OperationalError``.
- ``EngineFile``: an SQLAlchemy connection in ``engine.begin()`` (PostgreSQL, an SQLite file that
  had to migrate, a ``Ledger`` whose engine is open), ``conn.execute(sqlalchemy.text(sql), params)``;
  the engine's settings give the lock, timeouts and pragmas. The refusal is
  ``sqlalchemy.exc.OperationalError``. The store spools either.

Rows read back are ``ledger.reads.Row`` (``Reads`` on the held connection); booleans are bound as
bool on both databases (SQLite stores them 0/1). tests/books/test_light_ledger.py books one history
through both and compares the rows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import namedtuple
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bootstrap.vocabulary import EventKind, RowStatus
from ledger.billing import billed_cost
from ledger.checkpoint import WRITTEN
from ledger.reads import Reads, Row

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# The defaults of ``ledger.models.Session`` for a row given as a dict (the columns not listed
# default to NULL); tests/books/test_light_ledger.py checks them against the model.
SESSION_DEFAULTS: dict[str, Any] = {
    "experiment": "default",
    "job": "",
    "provider": "",
    "card": "",
    "gpu_count": 1,
    "spot": False,
    "label": "",
    "simulated": False,
    "status": str(RowStatus.PROVISIONING),
    "tokens": 0,
    "conclusion": "",
    "note": "",
    "log_path": "",
    "results_path": "",
    "source": "gpuops",
}


class EventRow(namedtuple("EventRow", ["id", "session_id", "at", "kind", "detail"])):
    """An ``events`` row, read-only (attribute access like ``ledger.models.Event``)."""

    __slots__ = ()


EVENT_COLUMNS = EventRow._fields


def session_dict(fields: dict, columns: Iterable[str]) -> dict:
    """Every ``sessions`` column of a new row: ``fields`` over ``SESSION_DEFAULTS``, None for the rest.

    ``columns``: the table's columns (``LightFile.columns``). Raises ValueError for a key that is
    not a column, or a row without id or created_at."""
    columns = tuple(columns)
    bad = sorted(set(fields) - set(columns))
    if bad:
        raise ValueError(f"unknown sessions column(s): {', '.join(bad)}")
    row = {c: SESSION_DEFAULTS.get(c) for c in columns}
    row.update(fields)
    if not row["id"] or row["created_at"] is None:
        raise ValueError("a session row needs its id and created_at")
    return row


class _Held:
    """``ledger.reads``' connection interface on the connection a write or read holds (per thread).

    ``send(sql, params)`` runs one statement with named ``:params`` and returns its cursor or
    result (``fetchall``, ``rowcount``): ``sqlite3``'s or SQLAlchemy's. A bounded write runs in a
    worker thread and may still run after its deadline, so each thread holds its own."""

    def __init__(self, driver: str, dialect: str) -> None:
        self.driver, self.dialect = driver, dialect
        self._local = threading.local()

    @contextmanager
    def holding(self, send) -> Iterator[_Held]:
        self._local.send = send
        try:
            yield self
        finally:
            self._local.send = None

    def run(self, sql: str, params: dict) -> Any:
        """Run one statement; returns the driver's cursor or result (``rowcount``)."""
        send = getattr(self._local, "send", None)
        assert send is not None, "a statement outside a write or read"
        return send(sql, params)

    def query(self, sql: str, params: dict) -> list[tuple]:
        return [tuple(r) for r in self.run(sql, params).fetchall()]

    stream = query

    def describe(self, table: str) -> list[tuple[str, bool]]:
        if self.dialect == "sqlite":
            return [(r[1], r[2].upper() == "BOOLEAN") for r in self.query(f"PRAGMA table_info({table})", {})]
        sql = (
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = :t ORDER BY ordinal_position"
        )
        return [(c, t == "boolean") for c, t in self.query(sql, {"t": table})]


class LightFile:
    """One ``sqlite3`` connection to the ledger file at ``path``, kept for this process.

    Opened on first use and kept for the writes and reads (a connection per write pays the schema parse and the pragmas
    each time: ~5 ms on a loaded 2-core machine), used by one thread at a time (the store's bounded
    writes run in worker threads)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._con: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.tx = _Held("sqlite3", "sqlite")
        self.reads = Reads(self.tx)  # the one read path, on the held connection

    @contextmanager
    def _held(self, timeout_s: float) -> Iterator[sqlite3.Connection]:
        # A write past its deadline may still hold the connection: wait at most as long as for the lock.
        if not self._lock.acquire(timeout=max(0.0, timeout_s)):
            raise sqlite3.OperationalError("the ledger connection is still busy with a late write")
        try:
            if self._con is None:
                con = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None, check_same_thread=False)
                con.execute("PRAGMA foreign_keys=ON")
                con.execute("PRAGMA synchronous=NORMAL")
                self._con = con
            self._con.execute(f"PRAGMA busy_timeout={max(1, int(timeout_s * 1000))}")
            with self.tx.holding(self._con.execute):
                yield self._con
        finally:
            self._lock.release()

    @contextmanager
    def write(self, timeout_s: float) -> Iterator[_Held]:
        """One write transaction, committed on leaving and rolled back on an error.

        The lock is taken at BEGIN, waiting at most ``timeout_s`` for another writer."""
        with self._held(timeout_s) as con:
            con.execute("BEGIN IMMEDIATE")
            WRITTEN.add(str(self.path))
            try:
                yield self.tx
                con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:
                    try:
                        con.execute("ROLLBACK")
                    except sqlite3.Error:
                        self.close()  # a connection that cannot roll back is not used again
                raise

    @contextmanager
    def read(self, timeout_s: float) -> Iterator[_Held]:
        """The connection for reads (each statement its own snapshot, read to its end)."""
        with self._held(timeout_s):
            yield self.tx

    def close(self) -> None:
        """Close the connection (the file was replaced: the next use opens the new one)."""
        con, self._con = self._con, None
        if con is not None:
            try:
                con.close()
            except sqlite3.Error:
                pass


class EngineFile:
    """The same writes and reads on connections of an SQLAlchemy ``engine`` (``ledger/engine.py``).

    A write is ``engine.begin()`` (SQLite: BEGIN IMMEDIATE; the engine's busy, connect and statement
    timeouts bound it, so ``timeout_s`` is the engine's); a read takes no write lock (``ledger_read``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tx = _Held("sqlalchemy", engine.dialect.name)
        self.reads = Reads(self.tx)

    @contextmanager
    def write(self, timeout_s: float) -> Iterator[_Held]:
        """One write transaction, committed on leaving and rolled back on an error."""
        import sqlalchemy as sa

        with self.engine.begin() as conn, self.tx.holding(lambda sql, params: conn.execute(sa.text(sql), params)):
            yield self.tx

    @contextmanager
    def read(self, timeout_s: float) -> Iterator[_Held]:
        """A read-only connection (no write lock)."""
        import sqlalchemy as sa

        with (
            self.engine.connect().execution_options(ledger_read=True) as conn,
            self.tx.holding(lambda sql, params: conn.execute(sa.text(sql), params)),
        ):
            yield self.tx


def _one(f: LightFile | EngineFile, session_id: str) -> Row | None:
    got = f.reads.rows("sessions", where=["id = :id"], params={"id": session_id})
    return got[0] if got else None


def _typed(f: LightFile | EngineFile, values: dict) -> dict:
    """``values`` of ``sessions`` columns with the boolean ones as bool (PostgreSQL's booleans take no 0/1)."""
    bools = f.reads.bool_columns("sessions")
    return {k: bool(v) if k in bools and v is not None else v for k, v in values.items()}


def _checked(f: LightFile | EngineFile, fields: dict) -> None:
    bad = sorted(set(fields) - set(f.reads.columns("sessions")) - {"id"}) + (["id"] if "id" in fields else [])
    if bad:
        raise ValueError(f"unknown sessions column(s): {', '.join(bad)}")


def _set(tx: _Held, session_id: str, sets: dict) -> int:
    """UPDATE the row's ``sets`` (column names checked by the caller); returns the rows matched."""
    sql = f"UPDATE sessions SET {', '.join(f'{k} = :{k}' for k in sets)} WHERE id = :id"
    return tx.run(sql, {**sets, "id": session_id}).rowcount


def _event(tx: _Held, session_id: str, kind: str, detail: str, at: float) -> None:
    tx.run(
        "INSERT INTO events (session_id, at, kind, detail) VALUES (:sid, :at, :kind, :detail)",
        {"sid": session_id, "at": at, "kind": kind, "detail": detail},
    )


def _insert(f: LightFile | EngineFile, tx: _Held, fields: dict) -> dict:
    row = _typed(f, session_dict(fields, f.reads.columns("sessions")))
    tx.run(f"INSERT INTO sessions ({', '.join(row)}) VALUES ({', '.join(f':{c}' for c in row)})", row)
    _event(tx, row["id"], str(EventKind.INTENT), "", row["created_at"])
    return row


def add_session(f: LightFile | EngineFile, fields: dict, timeout_s: float) -> Row:
    """Insert the intent row and its ``intent`` event in one transaction; returns the row as stored.

    ``fields``: the row's columns (``session_dict`` fills in the rest); the event is dated the
    row's ``created_at``. ValueError for an unknown column or a row without id or created_at."""
    with f.write(timeout_s) as tx:
        row = _insert(f, tx, fields)
        return _one(f, row["id"])  # type: ignore[return-value]  # the row this transaction just wrote: never None


def rebook(f: LightFile | EngineFile, fields: dict, detail: str, timeout_s: float) -> bool:
    """Insert a row this process holds but the ledger lacks, with its ``intent`` and a ``rebooked`` event.

    Returns False (nothing written) when the ledger has the row."""
    with f.write(timeout_s) as tx:
        if _one(f, fields["id"]) is not None:
            return False
        _insert(f, tx, {**fields, "created_at": fields.get("created_at") or time.time()})
        _event(tx, fields["id"], str(EventKind.REBOOKED), detail, time.time())
        return True


def event(
    f: LightFile | EngineFile, session_id: str, kind: str, detail: str, at: float | None, timeout_s: float
) -> None:
    """Append one event (``at``: epoch s, None: now)."""
    with f.write(timeout_s) as tx:
        _event(tx, session_id, kind, detail, at if at is not None else time.time())


def set_fields(
    f: LightFile | EngineFile, session_id: str, kind: str | None, detail: str, fields: dict, timeout_s: float
) -> Row:
    """Set ``fields`` of the row, and append the event ``kind`` when given, in one transaction.

    Returns the row. KeyError for an unknown session, ValueError for an unknown column."""
    with f.write(timeout_s) as tx:
        _checked(f, fields)
        if fields and _set(tx, session_id, _typed(f, fields)) == 0:
            raise KeyError(session_id)
        row = _one(f, session_id)
        if row is None:
            raise KeyError(session_id)
        if kind is not None:
            _event(tx, session_id, kind, detail, time.time())
        return row


def add_steps(f: LightFile | EngineFile, session_id: str, steps: Iterable[dict], timeout_s: float) -> None:
    """Insert bootstrap step lines ``{"step", "status", "seconds", "detail"}``."""
    rows = []
    for s in steps:
        detail = s.get("detail", "")
        rows.append(
            {
                "sid": session_id,
                "name": str(s["step"]),
                "status": str(s.get("status", "")),
                "seconds": float(s.get("seconds", 0.0)),
                "detail": detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True),
            }
        )
    with f.write(timeout_s) as tx:
        for r in rows:
            tx.run(
                "INSERT INTO bootstrap_steps (session_id, name, status, seconds, detail) VALUES (:sid, :name, :status, :seconds, :detail)",
                r,
            )


def request_end(f: LightFile | EngineFile, session_id: str, reason: str, by: str, detail: str, timeout_s: float) -> str:
    """``Ledger.request_end``: the reason on an open row without one, with its ``end_requested`` event.

    Returns the reason the row will close with. KeyError for an unknown session."""
    with f.write(timeout_s) as tx:
        got = tx.query("SELECT status, end_reason FROM sessions WHERE id = :id", {"id": session_id})
        if not got:
            raise KeyError(session_id)
        status, end_reason = got[0]
        if status != RowStatus.CLOSED and not end_reason:
            _set(tx, session_id, {"end_reason": reason})
            doc = json.dumps({"reason": reason, "by": by, "detail": detail}, sort_keys=True)
            _event(tx, session_id, str(EventKind.END_REQUESTED), doc, time.time())
            return reason
        return end_reason or reason


def close(
    f: LightFile | EngineFile,
    session_id: str,
    ended_at: float,
    reason: str,
    exit_code: int | None,
    fields: dict,
    timeout_s: float,
) -> Row:
    """``Ledger.close``: end time, reason, billed seconds and cost, ``fields``; its ``closed`` event.

    An earlier request's reason wins; billed seconds and cost come from the charged price. A closed
    row is returned unchanged. KeyError for an unknown session, ValueError for an unknown column."""
    fields = dict(fields)
    with f.write(timeout_s) as tx:
        row = _one(f, session_id)
        if row is None:
            raise KeyError(session_id)
        if row.status == RowStatus.CLOSED:
            return row
        increment = fields.pop("billing_increment_seconds", row.billing_increment_seconds)
        seconds, cost = billed_cost(row.usd_per_hour, row.instance_created_at, ended_at, increment)
        sets = {
            "billing_increment_seconds": increment,
            "status": str(RowStatus.CLOSED),
            "ended_at": ended_at,
            "end_reason": row.end_reason or reason,
            "end_source": fields.pop("end_source", None) or row.end_source or "destroy",
            "billed_seconds": seconds,
            "cost_usd": cost,
        }
        if exit_code is not None:
            sets["exit_code"] = exit_code
        _checked(f, fields)
        _set(tx, session_id, _typed(f, {**sets, **fields}))
        _event(tx, session_id, str(EventKind.CLOSED), sets["end_reason"], time.time())
        return _one(f, session_id)  # type: ignore[return-value]  # read above in this transaction: never None


def get(f: LightFile | EngineFile, session_id: str, timeout_s: float) -> Row | None:
    """The row, read-only (``ledger.reads.Row``), or None."""
    with f.read(timeout_s):
        return _one(f, session_id)


def events(f: LightFile | EngineFile, session_id: str, timeout_s: float) -> list[EventRow]:
    """The session's events in the order they were written."""
    with f.read(timeout_s) as tx:
        sql = f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE session_id = :sid ORDER BY id"
        return [EventRow(*r) for r in tx.query(sql, {"sid": session_id})]
