"""The ledger store: engine setup (SQLite WAL + busy timeout, or any SQLAlchemy URL), migrations,
and the few writes the lifecycle needs. Every write is its own short transaction so a crash leaves
every committed transition in place.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlmodel import Session as DbSession
from sqlmodel import select

from ledger.migrations import migrate
from ledger.models import BootstrapStep, Event, Session

# SQLite waits this long for a competing writer before "database is locked" (milliseconds).
SQLITE_BUSY_TIMEOUT_MS = 30_000


def billed_cost(usd_per_hour: float | None, started_at: float | None, ended_at: float | None) -> tuple[float, float]:
    """(billed seconds, cost USD) for per-second billing from create to confirmed destroy.

    A session that never got an instance (``started_at`` None) bills 0 s and costs 0 USD.
    """
    if started_at is None or ended_at is None:
        return 0.0, 0.0
    seconds = max(0.0, ended_at - started_at)
    return seconds, round(seconds / 3600.0 * (usd_per_hour or 0.0), 6)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # Let SQLAlchemy's "begin" hook issue BEGIN itself (see Ledger.__init__).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


class Ledger:
    """A ledger at ``url`` (SQLAlchemy URL). Creates the SQLite file's folder and applies pending
    migrations on open."""

    def __init__(self, url: str):
        self.url = url
        if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
            Path(url[len("sqlite:///"):]).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}
        self.engine = sa.create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            sa_event.listen(self.engine, "connect", _sqlite_pragmas)
            # pysqlite's own transaction handling defers BEGIN; take the write lock at BEGIN so two
            # writers queue on busy_timeout instead of failing on lock upgrade.
            sa_event.listen(self.engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        self._migrate()

    def _migrate(self) -> None:
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "postgresql":
                # One migrator at a time across processes.
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7401)")
            migrate(conn)

    # -- writes -------------------------------------------------------------------------------
    def add_session(self, row: Session) -> None:
        """Insert the intent row (status provisioning) and its first event in one transaction."""
        with DbSession(self.engine) as db:
            db.add(row)
            db.flush()  # the row must exist before its event (no ORM relationship orders them)
            db.add(Event(session_id=row.id, at=row.created_at, kind="intent", detail=""))
            db.commit()

    def update(self, session_id: str, **fields: Any) -> None:
        with DbSession(self.engine) as db:
            row = db.get(Session, session_id)
            if row is None:
                raise KeyError(session_id)
            for k, v in fields.items():
                setattr(row, k, v)
            db.add(row)
            db.commit()

    def event(self, session_id: str, kind: str, detail: Any = "", at: float | None = None) -> None:
        text = detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True)
        with DbSession(self.engine) as db:
            db.add(Event(session_id=session_id, at=at if at is not None else time.time(), kind=kind, detail=text))
            db.commit()

    def add_steps(self, session_id: str, steps: Iterable[dict]) -> None:
        """Store bootstrap step lines ``{"step", "status", "seconds", "detail"}``."""
        with DbSession(self.engine) as db:
            for s in steps:
                detail = s.get("detail", "")
                db.add(
                    BootstrapStep(
                        session_id=session_id,
                        name=str(s["step"]),
                        status=str(s.get("status", "")),
                        seconds=float(s.get("seconds", 0.0)),
                        detail=detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True),
                    )
                )
            db.commit()

    def request_end(self, session_id: str, reason: str) -> None:
        """Record why a session is being ended by someone other than its `up` (down, watchdog,
        agent) before they destroy it; whoever closes the row then books this reason."""
        with DbSession(self.engine) as db:
            row = db.get(Session, session_id)
            if row is None:
                raise KeyError(session_id)
            if row.status != "closed" and not row.end_reason:
                row.end_reason = reason
                db.add(row)
                db.add(Event(session_id=session_id, at=time.time(), kind="end_requested", detail=reason))
                db.commit()

    def close(self, session_id: str, ended_at: float, reason: str, exit_code: int | None = None, **fields: Any) -> Session:
        """Close a session: end time (confirmed destroy, or the provider's/agent's time), reason,
        billed seconds and cost from the charged price. A reason recorded earlier with
        ``request_end`` wins over ``reason``. Closing a closed row changes nothing."""
        with DbSession(self.engine) as db:
            row = db.get(Session, session_id)
            if row is None:
                raise KeyError(session_id)
            if row.status == "closed":
                return row
            seconds, cost = billed_cost(row.usd_per_hour, row.instance_created_at, ended_at)
            row.status = "closed"
            row.ended_at = ended_at
            row.end_reason = row.end_reason or reason
            if exit_code is not None:
                row.exit_code = exit_code
            row.billed_seconds = seconds
            row.cost_usd = cost
            for k, v in fields.items():
                setattr(row, k, v)
            db.add(row)
            db.add(Event(session_id=session_id, at=time.time(), kind="closed", detail=row.end_reason))
            db.commit()
            db.refresh(row)
            return row

    # -- reads --------------------------------------------------------------------------------
    def get(self, session_id: str) -> Session | None:
        with DbSession(self.engine) as db:
            return db.get(Session, session_id)

    def find(self, prefix: str) -> list[Session]:
        """Sessions whose id starts with ``prefix`` (users type short ids)."""
        with DbSession(self.engine) as db:
            return list(db.exec(select(Session).where(Session.id.startswith(prefix, autoescape=True))))

    def open_sessions(self) -> list[Session]:
        with DbSession(self.engine) as db:
            return list(db.exec(select(Session).where(Session.status != "closed").order_by(Session.created_at)))

    def sessions_between(self, start: float, end: float) -> list[Session]:
        """Sessions whose intent time is in [start, end) epoch seconds."""
        with DbSession(self.engine) as db:
            q = select(Session).where(Session.created_at >= start, Session.created_at < end).order_by(Session.created_at)
            return list(db.exec(q))

    def steps(self, session_id: str) -> list[BootstrapStep]:
        with DbSession(self.engine) as db:
            return list(db.exec(select(BootstrapStep).where(BootstrapStep.session_id == session_id).order_by(BootstrapStep.id)))

    def events(self, session_id: str) -> list[Event]:
        with DbSession(self.engine) as db:
            return list(db.exec(select(Event).where(Event.session_id == session_id).order_by(Event.id)))
