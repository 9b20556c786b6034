"""Read-only access for reports: plain rows (attribute access) through SQLAlchemy Core, without the
ORM, so `gpuops ledger month` over 100,000 sessions starts and finishes fast."""

from __future__ import annotations

from typing import Any, Iterable

import sqlalchemy as sa

from ledger.engine import open_engine

# Every ``sessions`` column (models.Session); booleans typed so SQLite's 0/1 come back as bool.
_BOOL = {"spot", "simulated"}
SESSION_COLUMNS = (
    "id", "experiment", "job", "provider", "card", "gpu_count", "spot", "label", "instance_id", "offer_id",
    "usd_per_hour", "bid_usd_per_hour", "simulated", "status", "created_at", "instance_created_at", "ready_at",
    "ended_at", "end_reason", "exit_code", "billed_seconds", "cost_usd", "tokens", "job_seconds", "conclusion",
    "note", "log_path", "results_path", "billing_increment_seconds", "last_heartbeat_at", "end_source", "source",
)
SESSIONS = sa.table("sessions", *[sa.column(c, sa.Boolean) if c in _BOOL else sa.column(c) for c in SESSION_COLUMNS])


def rows_between(engine: sa.engine.Engine, start: float | None = None, end: float | None = None,
                 columns: Iterable[str] | None = None) -> list[Any]:
    """Sessions whose intent time (``created_at``, epoch s) is in [start, end), oldest first, as
    rows with attribute access; None leaves that side open. ``columns``: which to load (all)."""
    t = SESSIONS
    q = sa.select(*([t.c[c] for c in columns] if columns else [t.c[c] for c in SESSION_COLUMNS]))
    q = q.order_by(t.c.created_at, t.c.id)
    if start is not None:
        q = q.where(t.c.created_at >= start)
    if end is not None:
        q = q.where(t.c.created_at < end)
    with engine.connect().execution_options(ledger_read=True) as conn:
        return list(conn.execute(q))


class LedgerReader:
    """The read side of a ledger at ``url`` (migrated on open, like ``Ledger``)."""

    def __init__(self, url: str):
        self.url = url
        self.engine = open_engine(url)

    def rows_between(self, start: float | None = None, end: float | None = None, columns: Iterable[str] | None = None) -> list[Any]:
        return rows_between(self.engine, start, end, columns)
