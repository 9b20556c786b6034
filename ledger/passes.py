"""Watchdog passes on the ledger (table ``watchdog_passes``, m009).

Each pass of a `gpuops watchdog` is one row (who, where, when, what it did), so every view can say
when a watchdog last looked and a user whose watchdog died sees it. Bounded: the write that adds a
pass prunes that host's older passes in the same transaction, keeping the newest ``KEEP_PER_HOST``.

Reads are ``Ledger.watchdog_passes`` / ``LedgerReader.watchdog_passes`` (``ledger/reads.py``); a
pass is written through the ledger's engine.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.books import Books

KEEP_PER_HOST = 100  # passes kept per host: at the default 30 s interval, the last 50 minutes of one watchdog

# Deletes what is past the newest KEEP_PER_HOST passes of one host (ids grow with each insert). A
# LIMIT inside IN runs on SQLite and PostgreSQL alike; ix_watchdog_passes_host answers both scans.
_PRUNE_SQL = (
    "DELETE FROM watchdog_passes WHERE host = :host AND id NOT IN "
    "(SELECT id FROM watchdog_passes WHERE host = :host ORDER BY id DESC LIMIT :keep)"
)


def record_pass(
    ledger: Books,
    host: str,
    owner: str,
    *,
    at: float | None = None,
    seconds: float = 0.0,
    interval_seconds: float,
    checked: int = 0,
    ended: int = 0,
    errors: int = 0,
    actions: int = 0,
    keep: int = KEEP_PER_HOST,
) -> None:
    """Book one watchdog pass of ``owner`` on ``host``, pruning the host's older passes.

    Book one watchdog pass of ``owner`` on ``host`` at ``at`` (epoch s, default now) that took
    ``seconds`` and runs every ``interval_seconds``: ``checked`` open sessions looked at, ``ended``
    destroyed or closed, ``errors`` and ``actions`` in all. In the same transaction, prune the
    host's passes to the newest ``keep``. Raises what the database raises (the watchdog reports it
    and goes on: a lost pass record never stops a pass)."""
    row = {
        "host": host,
        "owner": owner,
        "at": time.time() if at is None else float(at),
        "seconds": float(seconds),
        "interval_seconds": float(interval_seconds),
        "checked": int(checked),
        "ended": int(ended),
        "errors": int(errors),
        "actions": int(actions),
    }
    import sqlalchemy as sa

    with ledger.engine.begin() as conn:
        conn.execute(sa.text(_insert_sql(row)), row)
        conn.execute(sa.text(_PRUNE_SQL), {"host": host, "keep": int(keep)})


def _insert_sql(row: dict[str, Any]) -> str:
    return f"INSERT INTO watchdog_passes ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"


def host_pass_count(ledger: Books, host: str) -> int:
    """How many passes the ledger keeps for ``host`` (at most ``KEEP_PER_HOST``)."""
    return int(ledger.reads.query("SELECT COUNT(*) FROM watchdog_passes WHERE host = :host", {"host": host})[0][0])


def latest_passes(books: Any) -> list[Any]:
    """The newest pass of each watchdog (host, owner), newest first (host, owner, at epoch s, ...).

    From a ``Ledger`` or a ``LedgerReader``; ``ledger.reads.pass_summary`` says one in words."""
    return books.watchdog_passes()
