"""Attribution by time: the ONE rule that says which hour, day or month a session's money belongs to.

A rental spends its cost evenly over the time it billed: from ``instance_created_at`` (create
returned, billing starts) to ``ended_at`` (confirmed destroy, or the provider's/agent's end time).
The part of the cost inside a period [lo, hi) is ``cost x overlap / duration``. With per-second
billing at a constant price (RunPod pods and Vast instances: see ``ledger.billing``) that is exactly
what the provider charged for the seconds inside the period, so a rental from 31 Oct 22:00 to
1 Nov 10:00 UTC at 10 USD/h puts 20 USD in October and 100 USD in November. A cost line (storage)
spends over its own [start_at, end_at).

Every report (``ledger month``, ``--by day``, ``ledger experiments``, ``ledger tokens``), the monthly
cap (``ledger.limits.month_spend``) and the watchdog's cap check go through this module; period
edges come from ``ledger.reports`` (calendar months and days in the report's time zone, DST-safe).

An open session has no cost in the books (never extended to "now"); only the cap estimates what an
open session has spent so far (``accrued``), since a cap must act before the bill arrives.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import Any

# Open sessions: the predicate they are read by and their partial index ``ix_sessions_open``
# (``ledger/models.py``) is built on, inline (never a bound parameter) so both databases prove the
# query implies the index.
OPEN_SESSIONS_WHERE = "status <> 'closed'"

Row = Any


def interval(s: Row) -> tuple[float, float | None] | None:
    """(start, end) epoch s over which session row ``s`` billed.

    ``instance_created_at`` (else the intent time) to ``ended_at`` (None while open). None for a
    session that never got an instance (it cost nothing). Needs the row attributes ``instance_id,
    instance_created_at, created_at, ended_at, status``."""
    if s.instance_id is None and s.instance_created_at is None:
        return None
    start = s.instance_created_at if s.instance_created_at is not None else s.created_at
    if s.status != "closed":
        return start, None
    end = s.ended_at if s.ended_at is not None else start
    return start, max(start, end)


def fraction(start: float, end: float | None, lo: float, hi: float) -> float:
    """The share (0..1) of [start, end) inside [lo, hi).

    A zero-length interval belongs wholly to the period holding ``start``; an open one (``end``
    None) has no share (no cost yet)."""
    if end is None:
        return 0.0
    if end <= start:
        return 1.0 if lo <= start < hi else 0.0
    overlap = min(end, hi) - max(start, lo)
    return overlap / (end - start) if overlap > 0 else 0.0


def overlaps(start: float, end: float | None, lo: float, hi: float) -> bool:
    """True when [start, end) (end None: still open) touches [lo, hi)."""
    if end is None:
        return start < hi
    if end <= start:
        return lo <= start < hi
    return start < hi and end > lo


def split(start: float, end: float | None, edges: Sequence[float]) -> Iterator[tuple[int, float]]:
    """(bucket index, share) for every bucket [edges[i], edges[i+1]) that [start, end) spends in.

    Shares sum to the part of the interval inside [edges[0], edges[-1]). ``edges``: ascending epoch
    s (hour, day or month starts, then the last end). Open intervals yield nothing. Bisect, no
    per-bucket scan: a 12-hour rental over a 31-day month touches 1-2 day buckets."""
    if end is None or len(edges) < 2:
        return
    if end <= start:
        i = bisect_right(edges, start) - 1
        if 0 <= i < len(edges) - 1:
            yield i, 1.0
        return
    first = max(0, bisect_right(edges, start) - 1)
    dur = end - start
    for i in range(first, len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        if lo >= end:
            break
        overlap = min(end, hi) - max(start, lo)
        if overlap > 0:
            yield i, overlap / dur


def accrued(s: Row, lo: float, hi: float, now: float) -> float:
    """USD an OPEN session has spent inside [lo, hi) up to ``now`` at its charged price (``usd_per_hour``, USD/h).

    Only for enforcing caps, never booked."""
    if s.status == "closed" or not s.usd_per_hour:
        return 0.0
    iv = interval(s)
    if iv is None:
        return 0.0
    start = iv[0]
    overlap = min(now, hi) - max(start, lo)
    return overlap / 3600.0 * s.usd_per_hour if overlap > 0 else 0.0


# The same rule in SQL (SQLite and PostgreSQL alike: CASE and COALESCE only), so sums over 100k
# sessions run inside the database. The period is [lo, hi) epoch s: named parameters :lo and :hi,
# or (``touches_sql``/``share_sql``'s ``lo``, ``hi``) the columns of a table of periods (the days of
# ``ledger month --by day``, ``ledger.aggregate.day_statement``).
# tests/books/test_attribution.py checks its sums against the money worked out by hand, on both backends.
_BEGAN = "COALESCE(instance_created_at, created_at)"
_ENDED = f"(CASE WHEN ended_at IS NULL OR ended_at < {_BEGAN} THEN {_BEGAN} ELSE ended_at END)"


def _overlap_sql(lo: str, hi: str) -> str:
    return f"((CASE WHEN {_ENDED} < {hi} THEN {_ENDED} ELSE {hi} END) - (CASE WHEN {_BEGAN} > {lo} THEN {_BEGAN} ELSE {lo} END))"


def touches_sql(lo: str = ":lo", hi: str = ":hi") -> str:
    """SQL: the row may have cost money (``interval`` is not None) and touches [lo, hi) (``overlaps``).

    ``lo``, ``hi``: SQL expressions of the period's edges (epoch s)."""
    return (
        f"(instance_id IS NOT NULL OR instance_created_at IS NOT NULL) AND ("
        f"(status <> 'closed' AND {_BEGAN} < {hi}) OR (status = 'closed' AND ("
        f"({_ENDED} <= {_BEGAN} AND {_BEGAN} >= {lo} AND {_BEGAN} < {hi})"
        f" OR ({_ENDED} > {_BEGAN} AND {_BEGAN} < {hi} AND {_ENDED} > {lo}))))"
    )


# A row that may have cost money and really touches [:lo, :hi).
SQL_TOUCHES = touches_sql()

# A CLOSED row wholly inside [lo, hi) (its instance began at or after lo, ended before hi, not
# before it began): ``fraction`` is exactly 1, so its plain values count (NULLs: not proven inside;
# the general rule decides). Nearly every row of a month: the reports skip the share for them.
SQL_INSIDE = "(instance_created_at >= :lo AND ended_at < :hi AND ended_at >= instance_created_at)"


def share_sql(x: str, lo: str = ":lo", hi: str = ":hi") -> str:
    """SQL for ``x x fraction(interval)`` over [lo, hi) of a closed row: ``fraction``'s SQL twin.

    ``x``: an SQL expression of the row's columns, e.g. ``COALESCE(cost_usd, 0)``; ``lo``, ``hi``:
    SQL expressions of the period's edges (epoch s)."""
    overlap = _overlap_sql(lo, hi)
    return (
        f"(CASE WHEN {_ENDED} <= {_BEGAN} THEN (CASE WHEN {_BEGAN} >= {lo} AND {_BEGAN} < {hi} THEN {x} ELSE 0.0 END)"
        f" WHEN {overlap} > 0 THEN {x} * {overlap} / ({_ENDED} - {_BEGAN}) ELSE 0.0 END)"
    )
