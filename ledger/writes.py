"""A rental's writes and single-session reads, each one transaction on the ledger's engine.

``add_session``, ``event``, ``set_fields``, ``add_steps``, ``request_end``, ``close``, ``rebook``,
``heartbeat``, ``get`` and ``events`` take the connection of an ``engine.begin()`` (a write: SQLite
takes the write lock at BEGIN, ``ledger/engine.py``) or of a read, and send SQLAlchemy Core
statements on the ledger's tables (``ledger/models.py``: the columns, their types and defaults are
stated there once). Rows read back are SQLAlchemy ``Row`` (``ledger.reads.Reads`` on the same
connection, so a write reads what it wrote).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ledger.billing import billed_cost
from onbox.vocabulary import EventKind, RowStatus

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Row

    from ledger.reads import Reads


def _tables() -> tuple[sa.Table, sa.Table, sa.Table]:
    """The ``sessions``, ``events`` and ``bootstrap_steps`` tables (``ledger/models.py``: loaded on the first write)."""
    from ledger.models import bootstrap_steps, events, sessions

    return sessions, events, bootstrap_steps


def _one(reads: Reads, session_id: str) -> Row[Any] | None:
    got = reads.rows("sessions", where=["id = :id"], params={"id": session_id})
    return got[0] if got else None


def _checked(fields: dict[str, Any]) -> None:
    """Raise ValueError for a key of ``fields`` that is not a settable ``sessions`` column (the id is not)."""
    sessions = _tables()[0]
    bad = sorted(set(fields) - set(sessions.c.keys()) - {"id"}) + (["id"] if "id" in fields else [])
    if bad:
        raise ValueError(f"unknown sessions column(s): {', '.join(bad)}")


def _set(conn: Connection, session_id: str, sets: dict[str, Any]) -> int:
    """UPDATE the row's ``sets`` (column names checked by the caller); returns the rows matched."""
    sessions = _tables()[0]
    return conn.execute(sa.update(sessions).where(sessions.c.id == session_id).values(**sets)).rowcount


def _event(conn: Connection, session_id: str, kind: str, detail: str, at: float) -> None:
    conn.execute(sa.insert(_tables()[1]).values(session_id=session_id, at=at, kind=kind, detail=detail))


def _insert(conn: Connection, fields: dict[str, Any]) -> None:
    """Insert a ``sessions`` row (the table's defaults for the columns not given) and its ``intent`` event.

    ValueError for an unknown column or a row without id or created_at."""
    sessions = _tables()[0]
    bad = sorted(set(fields) - set(sessions.c.keys()))
    if bad:
        raise ValueError(f"unknown sessions column(s): {', '.join(bad)}")
    if not fields.get("id") or fields.get("created_at") is None:
        raise ValueError("a session row needs its id and created_at")
    conn.execute(sa.insert(sessions).values(**fields))
    _event(conn, fields["id"], str(EventKind.INTENT), "", fields["created_at"])


def add_session(conn: Connection, reads: Reads, fields: dict[str, Any]) -> Row[Any]:
    """Insert the intent row and its ``intent`` event; returns the row as stored.

    ``fields``: the row's columns (the table's defaults fill in the rest); the event is dated the
    row's ``created_at``. ValueError for an unknown column or a row without id or created_at."""
    _insert(conn, fields)
    row = _one(reads, fields["id"])
    assert row is not None  # the row this transaction just wrote
    return row


def rebook(conn: Connection, reads: Reads, fields: dict[str, Any], detail: str) -> bool:
    """Insert a row this process holds but the ledger lacks, with its ``intent`` and a ``rebooked`` event.

    Returns False (nothing written) when the ledger has the row."""
    if _one(reads, fields["id"]) is not None:
        return False
    _insert(conn, {**fields, "created_at": fields.get("created_at") or time.time()})
    _event(conn, fields["id"], str(EventKind.REBOOKED), detail, time.time())
    return True


def event(conn: Connection, session_id: str, kind: str, detail: str, at: float | None) -> None:
    """Append one event (``at``: epoch s, None: now)."""
    _event(conn, session_id, kind, detail, at if at is not None else time.time())


def set_fields(
    conn: Connection, reads: Reads, session_id: str, kind: str | None, detail: str, fields: dict[str, Any]
) -> Row[Any]:
    """Set ``fields`` of the row, and append the event ``kind`` when given.

    Returns the row. KeyError for an unknown session, ValueError for an unknown column."""
    _checked(fields)
    if fields and _set(conn, session_id, fields) == 0:
        raise KeyError(session_id)
    row = _one(reads, session_id)
    if row is None:
        raise KeyError(session_id)
    if kind is not None:
        _event(conn, session_id, kind, detail, time.time())
    return row


def add_steps(conn: Connection, session_id: str, steps: Iterable[dict[str, Any]]) -> None:
    """Insert bootstrap step lines ``{"step", "status", "seconds", "detail"}``."""
    rows = []
    for s in steps:
        detail = s.get("detail", "")
        rows.append(
            {
                "session_id": session_id,
                "name": str(s["step"]),
                "status": str(s.get("status", "")),
                "seconds": float(s.get("seconds", 0.0)),
                "detail": detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True),
            }
        )
    if rows:
        conn.execute(sa.insert(_tables()[2]), rows)


def request_end(conn: Connection, session_id: str, reason: str, by: str, detail: str) -> str:
    """``Ledger.request_end``: the reason on an open row without one, with its ``end_requested`` event.

    Returns the reason the row will close with. KeyError for an unknown session."""
    sessions = _tables()[0]
    got = conn.execute(sa.select(sessions.c.status, sessions.c.end_reason).where(sessions.c.id == session_id)).first()
    if got is None:
        raise KeyError(session_id)
    status, end_reason = got
    if status != RowStatus.CLOSED and not end_reason:
        _set(conn, session_id, {"end_reason": reason})
        doc = json.dumps({"reason": reason, "by": by, "detail": detail}, sort_keys=True)
        _event(conn, session_id, str(EventKind.END_REQUESTED), doc, time.time())
        return reason
    return str(end_reason or reason)


def close(
    conn: Connection,
    reads: Reads,
    session_id: str,
    ended_at: float,
    reason: str,
    exit_code: int | None,
    fields: dict[str, Any],
) -> Row[Any]:
    """``Ledger.close``: end time, reason, billed seconds and cost, ``fields``; its ``closed`` event.

    An earlier request's reason wins; billed seconds and cost come from the charged price. A closed
    row is returned unchanged. KeyError for an unknown session, ValueError for an unknown column."""
    fields = dict(fields)
    row = _one(reads, session_id)
    if row is None:
        raise KeyError(session_id)
    if row.status == RowStatus.CLOSED:
        return row
    increment = fields.pop("billing_increment_seconds", row.billing_increment_seconds)
    seconds, cost = billed_cost(row.usd_per_hour, row.instance_created_at, ended_at, increment)
    sets: dict[str, Any] = {
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
    _checked(fields)
    _set(conn, session_id, {**sets, **fields})
    _event(conn, session_id, str(EventKind.CLOSED), sets["end_reason"], time.time())
    got = _one(reads, session_id)
    assert got is not None  # read above in this transaction
    return got


def heartbeat(conn: Connection, session_id: str, at: float) -> None:
    """Move the row's ``last_heartbeat_at`` forward to ``at`` (epoch s); an older time changes nothing."""
    sessions = _tables()[0]
    beat = sessions.c.last_heartbeat_at
    conn.execute(
        sa.update(sessions)
        .where(sessions.c.id == session_id, sa.or_(beat.is_(None), beat < at))
        .values(last_heartbeat_at=at)
    )


def events(reads: Reads, session_id: str) -> list[Row[Any]]:
    """The session's events in the order they were written (``id, session_id, at, kind, detail``)."""
    return list(
        reads.rows(
            "events", ("id", "session_id", "at", "kind", "detail"), ["session_id = :sid"], {"sid": session_id}, "id"
        )
    )
