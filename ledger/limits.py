"""Teardown bookkeeping on the ledger: per-session leases, refusals, month-to-date spend.

Leases (table ``session_leases``) let several watchdogs share one ledger (a team on PostgreSQL)
without fighting: taking one is a conditional UPDATE or a primary-key INSERT, each atomic on SQLite
and PostgreSQL alike, so exactly one owner holds a session until it releases or the lease expires
(a crashed watchdog's lease lapses).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # SQLAlchemy and the ORM load inside the functions that write (watchdog start-up)
    from ledger.books import Books


def acquire_lease(ledger: Books, session_id: str, owner: str, seconds: float, now: float | None = None) -> bool:
    """Take (or renew) the lease on ``session_id`` for ``seconds``; True when ``owner`` holds it.

    Succeeds when nobody holds it, ``owner`` already does, or the holder's lease expired. Two
    statements, each atomic: take over an expired/own lease (conditional UPDATE), else create one
    (INSERT; the primary key makes a concurrent second INSERT fail).
    """
    import sqlalchemy as sa
    from sqlalchemy.exc import IntegrityError

    from ledger.models import session_leases as t

    now = time.time() if now is None else now
    take = (
        sa.update(t)
        .where(t.c.session_id == session_id)
        .where(sa.or_(t.c.owner == owner, t.c.expires_at < now))
        .values(owner=owner, expires_at=now + seconds)
    )
    with ledger.engine.begin() as conn:
        if conn.execute(take).rowcount == 1:
            return True
    try:
        with ledger.engine.begin() as conn:
            conn.execute(sa.insert(t).values(session_id=session_id, owner=owner, expires_at=now + seconds))
        return True
    except IntegrityError:
        return False


def release_lease(ledger: Books, session_id: str, owner: str) -> None:
    """Give the lease back (only if ``owner`` still holds it)."""
    import sqlalchemy as sa

    from ledger.models import session_leases as t

    with ledger.engine.begin() as conn:
        conn.execute(sa.delete(t).where(t.c.session_id == session_id, t.c.owner == owner))


def prune_lapsed_leases(ledger: Books, prefix: str, now: float | None = None) -> int:
    """Delete the lapsed leases whose key starts with ``prefix`` (``expires_at`` before ``now``); how many.

    For keys that are records rather than locks (the notifier's ``notify:<key>`` claims, kept for
    their retention and dead after it): a lapsed one holds nothing and would only pile up."""
    import sqlalchemy as sa

    from ledger.models import session_leases as t

    now = time.time() if now is None else now
    with ledger.engine.begin() as conn:
        gone = conn.execute(
            sa.delete(t).where(t.c.session_id.startswith(prefix, autoescape=True), t.c.expires_at < now)
        )
    return int(gone.rowcount or 0)


def lease_holder(ledger: Books, session_id: str, now: float | None = None) -> str | None:
    """The owner of an unexpired lease on ``session_id``, else None."""
    import sqlalchemy as sa

    from ledger.models import session_leases as t

    now = time.time() if now is None else now
    with ledger.engine.begin() as conn:
        row = conn.execute(sa.select(t.c.owner, t.c.expires_at).where(t.c.session_id == session_id)).first()
    return row.owner if row is not None and row.expires_at >= now else None


def active_refusals(ledger: Books) -> list[Any]:
    """Refusals not lifted, oldest first.

    Read-only rows with the ``Refusal`` fields (``Books.active_refusals``: SQL text, no ORM load)."""
    return ledger.active_refusals()


def _refusals() -> Any:
    from ledger.models import refusals

    return refusals


def _active(t: Any, scope: str, reason: str, account: str | None) -> Any:
    """The active refusals of ``scope`` and ``reason`` for ``account`` (None: the everyone-refusal)."""
    import sqlalchemy as sa

    same = t.c.account.is_(None) if account is None else t.c.account == account
    return sa.and_(t.c.scope == scope, t.c.reason == reason, same, t.c.lifted_at.is_(None))


def set_refusal(
    ledger: Books, scope: str, reason: str, detail: str, now: float | None = None, account: str | None = None
) -> bool:
    """Refuse new boxes in ``scope`` for ``account`` (a provider account or an owner; None: everyone).

    False (and no change) when the same refusal is active."""
    import sqlalchemy as sa

    t = _refusals()
    now = time.time() if now is None else now
    with ledger.engine.begin() as conn:
        if conn.execute(sa.select(t.c.id).where(_active(t, scope, reason, account))).first() is not None:
            return False
        conn.execute(sa.insert(t).values(scope=scope, reason=reason, detail=detail, set_at=now, account=account))
        return True


def lift_refusal(ledger: Books, scope: str, reason: str, now: float | None = None, account: str | None = None) -> bool:
    """Lift an active refusal of ``account`` (None: the everyone-refusal); True when one was lifted."""
    import sqlalchemy as sa

    t = _refusals()
    now = time.time() if now is None else now
    with ledger.engine.begin() as conn:
        return bool(conn.execute(sa.update(t).where(_active(t, scope, reason, account)).values(lifted_at=now)).rowcount)


def _spend_query(ledger: Books):
    """(query, sqlite) for the spend statements.

    ``ledger.reads.Reads.query`` (SQL text on the ledger's engine, no ORM objects); ``sqlite``: the
    dialect is SQLite."""
    reads = ledger.reads
    return reads.query, reads.dialect == "sqlite"


def _open_accrued(query, args: dict, mine: str, start: float, end: float, now: float) -> float:
    """USD the open sessions of [start, end) accrued to ``now``, from the partial open-sessions index.

    USD the open sessions of [start, end) accrued to ``now`` (``attribution.accrued``), read from
    the partial index ``ix_sessions_open`` (a handful of rows)."""
    from ledger.attribution import SQL_TOUCHES, accrued

    opened = (
        f"SELECT status, instance_id, instance_created_at, created_at, ended_at, usd_per_hour FROM sessions"
        f" WHERE status <> 'closed' AND created_at < :hi AND (ended_at >= :lo OR ended_at IS NULL) AND simulated = :no"
        f" AND {SQL_TOUCHES}{mine}"
    )
    cols = ("status", "instance_id", "instance_created_at", "created_at", "ended_at", "usd_per_hour")
    return sum(accrued(_Row(zip(cols, r)), start, end, now) for r in query(opened, args))


def month_spend(ledger: Books, start: float, end: float, now: float | None = None, owner: str | None = None) -> float:
    """Real (not simulated) USD spent in [start, end) epoch s, attributed by time.

    Real (not simulated) USD spent in [start, end) epoch s, attributed by time
    (``ledger.attribution``: a rental across the month boundary counts only its hours inside):
    closed sessions' booked cost (the provider's charge once synced), storage lines, and open
    sessions' cost accrued to ``now`` at their charged price (an estimate for enforcing caps; the
    books never extend an open session to "now").

    Closed sessions are summed inside the database with the same rule as the reports
    (``ledger.aggregate``: rows wholly inside the period plainly, the edge rows attributed), one
    ``ended_at`` index search per statement; open sessions come back as rows from the partial
    index ``ix_sessions_open``. SQL text on the ledger's engine (no ORM objects, flat memory).

    ``owner``: only that user's sessions and their storage lines (rows from before owners were
    booked count for everyone); None: everyone's (m006_ownership; the cap per user or per team).
    """
    from ledger.attribution import SQL_INSIDE, fraction, share_sql

    now = time.time() if now is None else now
    query, sqlite = _spend_query(ledger)
    mine = ""
    if owner is not None:  # SQLite: unary plus keeps its planner off the owner index (every row of the owner's history)
        mine = " AND (+owner IS NULL OR +owner = :owner)" if sqlite else " AND (owner IS NULL OR owner = :owner)"
    args = {"lo": float(start), "hi": float(end), "no": False} | ({"owner": owner} if owner is not None else {})
    total = 0.0
    # A closed row outside the period adds a share of 0 (``share_sql``), so the sum needs no
    # "touches" filter, only "ever had an instance" (``attribution.interval``: else no cost). That
    # test sits in the CASE after ``SQL_INSIDE`` (which implies it: instance_created_at >= :lo),
    # so the rows wholly inside, nearly all, skip it (a row without an instance adds NULL, which
    # SUM skips): ~10% of the statement at 100k rows; the same rows, in the same order, as the
    # ``ledger.aggregate._attributed`` form.
    cost = "COALESCE(cost_usd, 0.0)"
    for arm in ("ended_at >= :lo", "ended_at IS NULL"):
        sql = (
            f"SELECT SUM(CASE WHEN {SQL_INSIDE} THEN {cost} WHEN (instance_created_at IS NOT NULL OR instance_id IS NOT NULL)"
            f" THEN {cost} * {share_sql('1.0')} END) FROM sessions WHERE +created_at < :hi AND {arm}"
            f" AND simulated = :no AND status = 'closed'{mine}"
        )
        total += float(query(sql, args)[0][0] or 0.0)
    total += _open_accrued(query, args, mine, start, end, now)
    lines = ledger.cost_lines(start, end)
    if owner is not None:  # a storage line counts for the owner of its session
        ids = sorted({ln.session_id for ln in lines if ln.session_id})
        theirs: set[str] = set()
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ", ".join(f":i{j}" for j in range(len(chunk)))
            theirs |= {
                r[0]
                for r in query(
                    f"SELECT id FROM sessions WHERE owner IS NOT NULL AND owner <> :owner AND id IN ({marks})",
                    {"owner": owner} | {f"i{j}": x for j, x in enumerate(chunk)},
                )
            }
        lines = [ln for ln in lines if ln.session_id and ln.session_id not in theirs]
    for ln in lines:
        if not ln.simulated:
            total += ln.usd * fraction(ln.start_at, ln.end_at, start, end)
    return round(total, 6)


def month_spend_at_most(ledger: Books, start: float, end: float, now: float | None = None) -> float:
    """An upper bound (USD) of ``month_spend`` for every owner, at about half its cost.

    What a watchdog tick far under the monthly cap needs to know.

    Every closed row that ``month_spend`` sums adds ``cost x share`` with a share in [0, 1]
    (``attribution.fraction``), so at most ``max(cost, 0)``; here every row the period's
    ``ended_at`` search finds adds that, whoever's, simulated or not, unattributed (no per-row
    filter or share: one column summed off ``ix_sessions_books``); closed rows without an end add
    theirs too. Open sessions add exactly what ``month_spend`` adds for everyone (a handful of rows),
    and storage lines their whole positive ``usd``. So ``month_spend(...) <= month_spend_at_most(...)``
    up to float rounding (callers compare with a margin; tests/teardown/test_budget.py)."""
    now = time.time() if now is None else now
    query, _ = _spend_query(ledger)
    args = {"lo": float(start), "hi": float(end), "no": False}
    positive = "SUM(CASE WHEN cost_usd > 0 THEN cost_usd ELSE 0.0 END)"  # SQLite and PostgreSQL alike
    total = float(query(f"SELECT {positive} FROM sessions WHERE ended_at >= :lo", args)[0][0] or 0.0)
    total += float(
        query(f"SELECT {positive} FROM sessions WHERE ended_at IS NULL AND status = 'closed'", args)[0][0] or 0.0
    )
    total += _open_accrued(query, args, "", start, end, now)
    total += sum(max(ln.usd, 0.0) for ln in ledger.cost_lines(start, end) if not ln.simulated and ln.usd is not None)
    return total


class _Row(dict):
    """A result row with attribute access (``attribution.accrued`` reads attributes)."""

    __getattr__ = dict.__getitem__
