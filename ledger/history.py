"""Past sessions, newest first: the read behind ``gpuops ledger sessions`` and the dashboard's session table.

Pure functions over plain rows plus one bounded query (newest first, LIMIT in the database, so
100,000 sessions cost no more than the page asked for).

A session row here is ``session_row``'s dict: times as ISO 8601 in the report's zone, money in
USD (``cost_usd`` None while the session is open), ``hours`` the billed hours (billed seconds /
3600), ``simulated`` True when the price was a catalog reference, not a charge.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledger.reads import SPEND_COLUMNS

# What attribution reads (a history row's cost, hours and tokens are the report's), and what the
# session table shows besides.
HISTORY_COLUMNS = (*SPEND_COLUMNS, "end_reason", "source", "note", "run_id")


def recent_rows(
    reader,
    start: float | None = None,
    end: float | None = None,
    experiment: str | None = None,
    limit: int | None = None,
) -> list[Any]:
    """Sessions created in [start, end), of ``experiment`` when given, newest first, at most ``limit``.

    Sessions whose intent time (``created_at``, epoch s) is in [start, end) (None: open), at most
    ``limit`` (None: all). ``reader``: a ``Ledger`` or a ``ledger.reads.LedgerReader`` (``reads``).
    Values are bound parameters, never text in the SQL."""
    where = [
        w
        for w, v in (
            ("created_at >= :start", start),
            ("created_at < :end", end),
            ("experiment = :experiment", experiment),
        )
        if v is not None
    ]
    return reader.reads.rows(
        "sessions",
        HISTORY_COLUMNS,
        where,
        {"start": start, "end": end, "experiment": experiment},
        "created_at DESC, id DESC",
        limit,
    )


SESSION_ROW_COLUMNS = (
    "session",
    "run",
    "started",
    "date",
    "experiment",
    "provider",
    "card",
    "gpu_count",
    "status",
    "end_reason",
    "hours",
    "usd_per_hour",
    "cost_usd",
    "simulated",
    "tokens",
    "usd_per_mtoken",
    "conclusion",
)


def session_row(s: Any, tz: str | None = None) -> dict:
    """One past session as a JSON-ready dict, keys in this order.

    ``session, run (its run's id, None outside a run), started (ISO 8601 UTC, ``utc_iso``), date (YYYY-MM-DD in
    tz: the day it counts in), experiment, provider, card, gpu_count, status, end_reason, hours (billed, 6 decimals),
    usd_per_hour, cost_usd (None while open), simulated, tokens, usd_per_mtoken (None without tokens
    or cost), conclusion, note`` (``up --note``; a report shows it where no conclusion is set)."""
    from ledger.periods import utc_iso
    from ledger.reports import card_name, day_of, per_mtoken

    closed = s.status == "closed"
    cost = (s.cost_usd or 0.0) if closed else None
    tokens = s.tokens or 0
    return {
        "session": s.id,
        "run": getattr(s, "run_id", None),
        "started": utc_iso(s.created_at),
        "date": day_of(s.created_at, tz),
        "experiment": s.experiment,
        "provider": s.provider,
        "card": card_name(s),
        "gpu_count": s.gpu_count,
        "status": s.status,
        "end_reason": s.end_reason,
        "hours": round((s.billed_seconds or 0.0) / 3600.0, 6) if closed else None,
        "usd_per_hour": s.usd_per_hour,
        "cost_usd": None if cost is None else round(cost, 6),
        "simulated": bool(s.simulated),
        "tokens": tokens,
        "usd_per_mtoken": per_mtoken(cost, tokens) if cost is not None else None,
        "conclusion": s.conclusion or "",
        "note": getattr(s, "note", None) or "",
    }


def session_rows(rows: Iterable[Any], tz: str | None = None) -> list[dict]:
    """``session_row`` for each row, order kept."""
    return [session_row(s, tz) for s in rows]


RUN_ROW_COLUMNS = (
    "run",
    "started",
    "experiment",
    "provider",
    "status",
    "end_reason",
    "rentals",
    "recover",
    "hours",
    "cost_usd",
    "simulated",
    "tokens",
    "detail",
)


def run_row(r: Any, tz: str | None = None) -> dict:
    """One run as a JSON-ready dict, keys in ``RUN_ROW_COLUMNS`` order.

    One run (``Ledger.runs``' row: the run and its rentals' sums) as a JSON-ready dict, keys in
    ``RUN_ROW_COLUMNS`` order: ``hours`` the rentals' billed hours, ``cost_usd`` their cost (the run
    books no money of its own; None while a rental is open and none has a cost)."""
    from ledger.periods import utc_iso

    return {
        "run": r.id,
        "started": utc_iso(r.created_at),
        "experiment": r.experiment,
        "provider": r.provider,
        "status": r.status,
        "end_reason": r.end_reason,
        "rentals": int(r.rentals or 0),
        "recover": r.recover,
        "hours": round((r.billed_seconds or 0.0) / 3600.0, 6),
        "cost_usd": None if r.cost_usd is None else round(r.cost_usd, 6),
        "simulated": bool(r.simulated),
        "tokens": int(r.tokens or 0),
        "detail": r.detail or "",
    }
