"""A rental's writes and single-session reads with the standard library's ``sqlite3``.

For a ``Ledger(url, light=True)`` on an SQLite file already at the newest schema: `gpuops up`
books a whole rental through these (intent row, events, field updates, bootstrap steps, end
request, close). Importing SQLAlchemy and SQLModel costs 0.3 s on a quiet 2-core machine with
compiled bytecode and seconds without it, and before the intent row that time is outside the
booked window. Each function is the statement the ORM path of ``ledger.store`` issues, with the
same result; tests/books/test_light_ledger.py runs both on one history and compares the rows.
Each write is one transaction whose write lock is taken at BEGIN (``BEGIN IMMEDIATE``) with the
caller's busy timeout, foreign keys on and ``synchronous=NORMAL``, as ``ledger/engine.py`` opens
every connection, on the one connection the store keeps (``LightFile``); the file is named in
``ledger.checkpoint.WRITTEN``. The database's refusal is ``sqlite3.OperationalError`` (the store
spools it, as it spools SQLAlchemy's).
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
from typing import Any

from bootstrap.vocabulary import EventKind, RowStatus
from ledger.billing import billed_cost
from ledger.checkpoint import WRITTEN
from ledger.reads import Reads, Row

# The defaults of ``ledger.models.Session`` for a row given as a dict (the columns not listed
# default to NULL); tests/books/test_light_ledger.py checks them against the model.
SESSION_DEFAULTS: dict[str, Any] = {
    "experiment": "default", "job": "", "provider": "", "card": "", "gpu_count": 1, "spot": False, "label": "",
    "simulated": False, "status": str(RowStatus.PROVISIONING), "tokens": 0, "conclusion": "", "note": "", "log_path": "",
    "results_path": "", "source": "gpuops",
}
EVENT_COLUMNS = ("id", "session_id", "at", "kind", "detail")


class EventRow(namedtuple("EventRow", EVENT_COLUMNS)):
    """An ``events`` row, read-only (attribute access like ``ledger.models.Event``)."""

    __slots__ = ()


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
    """``ledger.reads``' connection interface on the connection a ``LightFile`` holds.

    So a light rental reads its row back through ``Reads``, inside its own write transaction."""

    driver, dialect = "sqlite3", "sqlite"

    def __init__(self) -> None:
        self.con: sqlite3.Connection | None = None

    def query(self, sql: str, params: dict) -> list[tuple]:
        assert self.con is not None, "read outside LightFile.write/read"
        return self.con.execute(sql, params).fetchall()

    stream = query

    def describe(self, table: str) -> list[tuple[str, bool]]:
        return [(r[1], r[2].upper() == "BOOLEAN") for r in self.query(f"PRAGMA table_info({table})", {})]


class LightFile:
    """One ``sqlite3`` connection to the ledger file at ``path``, kept for this process.

    Opened on first use and kept for the writes and reads (a connection per write pays the schema parse and the pragmas
    each time: ~5 ms on a loaded 2-core machine), used by one thread at a time (the store's bounded
    writes run in worker threads)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._con: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._held_con = _Held()
        self.reads = Reads(self._held_con)  # the one read path, on the held connection

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
            self._held_con.con = self._con
            yield self._con
        finally:
            self._held_con.con = None
            self._lock.release()

    @contextmanager
    def write(self, timeout_s: float) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed on leaving and rolled back on an error.

        The lock is taken at BEGIN, waiting at most ``timeout_s`` for another writer."""
        with self._held(timeout_s) as con:
            con.execute("BEGIN IMMEDIATE")
            WRITTEN.add(str(self.path))
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:
                    try:
                        con.execute("ROLLBACK")
                    except sqlite3.Error:
                        self.close()  # a connection that cannot roll back is not used again
                raise

    @contextmanager
    def read(self, timeout_s: float) -> Iterator[sqlite3.Connection]:
        """The connection for reads (each statement its own snapshot, read to its end)."""
        with self._held(timeout_s) as con:
            yield con

    def close(self) -> None:
        """Close the connection (the file was replaced: the next use opens the new one)."""
        con, self._con = self._con, None
        if con is not None:
            try:
                con.close()
            except sqlite3.Error:
                pass


def _one(f: LightFile, session_id: str) -> Row | None:
    got = f.reads.rows("sessions", where=["id = :id"], params={"id": session_id})
    return got[0] if got else None


def _event(con: sqlite3.Connection, session_id: str, kind: str, detail: str, at: float) -> None:
    con.execute("INSERT INTO events (session_id, at, kind, detail) VALUES (?, ?, ?, ?)", (session_id, at, kind, detail))


def add_session(f: LightFile, fields: dict, timeout_s: float) -> Row:
    """Insert the intent row and its ``intent`` event in one transaction; returns the row as stored.

    ``fields``: the row's columns (``session_dict`` fills in the rest); the event is dated the
    row's ``created_at``. ValueError for an unknown column or a row without id or created_at."""
    with f.write(timeout_s) as con:
        row = session_dict(fields, f.reads.columns("sessions"))
        cols = list(row)
        con.execute(f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})", [row[c] for c in cols])
        _event(con, row["id"], str(EventKind.INTENT), "", row["created_at"])
        return _one(f, row["id"])  # type: ignore[return-value]


def event(f: LightFile, session_id: str, kind: str, detail: str, at: float | None, timeout_s: float) -> None:
    """Append one event (``at``: epoch s, None: now)."""
    with f.write(timeout_s) as con:
        _event(con, session_id, kind, detail, at if at is not None else time.time())


def set_fields(f: LightFile, session_id: str, kind: str | None, detail: str, fields: dict, timeout_s: float) -> Row:
    """Set ``fields`` of the row, and append the event ``kind`` when given, in one transaction.

    Returns the row. KeyError for an unknown session, ValueError for an unknown column."""
    with f.write(timeout_s) as con:
        bad = sorted(set(fields) - set(f.reads.columns("sessions")) - {"id"}) + (["id"] if "id" in fields else [])
        if bad:
            raise ValueError(f"unknown sessions column(s): {', '.join(bad)}")
        if fields:
            cur = con.execute(f"UPDATE sessions SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?", [*fields.values(), session_id])
            if cur.rowcount == 0:
                raise KeyError(session_id)
        row = _one(f, session_id)
        if row is None:
            raise KeyError(session_id)
        if kind is not None:
            _event(con, session_id, kind, detail, time.time())
        return row


def add_steps(f: LightFile, session_id: str, steps: Iterable[dict], timeout_s: float) -> None:
    """Insert bootstrap step lines ``{"step", "status", "seconds", "detail"}``."""
    rows = []
    for s in steps:
        detail = s.get("detail", "")
        rows.append((session_id, str(s["step"]), str(s.get("status", "")), float(s.get("seconds", 0.0)),
                     detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True)))
    with f.write(timeout_s) as con:
        con.executemany("INSERT INTO bootstrap_steps (session_id, name, status, seconds, detail) VALUES (?, ?, ?, ?, ?)", rows)


def request_end(f: LightFile, session_id: str, reason: str, by: str, detail: str, timeout_s: float) -> str:
    """``Ledger.request_end``: the reason on an open row without one, with its ``end_requested`` event.

    Returns the reason the row will close with. KeyError for an unknown session."""
    with f.write(timeout_s) as con:
        got = con.execute("SELECT status, end_reason FROM sessions WHERE id = ?", (session_id,)).fetchall()
        if not got:
            raise KeyError(session_id)
        status, end_reason = got[0]
        if status != RowStatus.CLOSED and not end_reason:
            con.execute("UPDATE sessions SET end_reason = ? WHERE id = ?", (reason, session_id))
            doc = json.dumps({"reason": reason, "by": by, "detail": detail}, sort_keys=True)
            _event(con, session_id, str(EventKind.END_REQUESTED), doc, time.time())
            return reason
        return end_reason or reason


def close(f: LightFile, session_id: str, ended_at: float, reason: str, exit_code: int | None, fields: dict, timeout_s: float) -> Row:
    """``Ledger.close``: end time, reason, billed seconds and cost, ``fields``; its ``closed`` event.

    An earlier request's reason wins; billed seconds and cost come from the charged price. A closed
    row is returned unchanged. KeyError for an unknown session."""
    fields = dict(fields)
    with f.write(timeout_s) as con:
        row = _one(f, session_id)
        if row is None:
            raise KeyError(session_id)
        if row.status == RowStatus.CLOSED:
            return row
        increment = fields.pop("billing_increment_seconds", row.billing_increment_seconds)
        seconds, cost = billed_cost(row.usd_per_hour, row.instance_created_at, ended_at, increment)
        sets = {"billing_increment_seconds": increment, "status": str(RowStatus.CLOSED), "ended_at": ended_at,
                "end_reason": row.end_reason or reason, "end_source": fields.pop("end_source", None) or row.end_source or "destroy",
                "billed_seconds": seconds, "cost_usd": cost}
        if exit_code is not None:
            sets["exit_code"] = exit_code
        bad = sorted(set(fields) - set(f.reads.columns("sessions")) - {"id"})
        if bad:
            raise ValueError(f"unknown sessions column(s): {', '.join(bad)}")
        sets.update(fields)
        con.execute(f"UPDATE sessions SET {', '.join(f'{k} = ?' for k in sets)} WHERE id = ?", [*sets.values(), session_id])
        _event(con, session_id, str(EventKind.CLOSED), sets["end_reason"], time.time())
        return _one(f, session_id)  # type: ignore[return-value]


def get(f: LightFile, session_id: str, timeout_s: float) -> Row | None:
    """The row, read-only (``ledger.reads.Row``), or None."""
    with f.read(timeout_s):
        return _one(f, session_id)


def events(f: LightFile, session_id: str, timeout_s: float) -> list[EventRow]:
    """The session's events in the order they were written."""
    with f.read(timeout_s) as con:
        sql = f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE session_id = ? ORDER BY id"
        return [EventRow(*r) for r in con.execute(sql, (session_id,)).fetchall()]
