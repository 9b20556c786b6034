"""The notifier's claim rows (``notify:<key>`` in ``session_leases``) on SQLite and on PostgreSQL: they
live in the ledger itself, so two machines on one shared ledger send a message once; and a claim
past its retention (``CLAIM_KEEP_S``) or whose sender died is pruned by the next claim's write."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from gpuops.notify.notifier import CLAIM_KEEP_S, CLAIM_PREFIX, Notifier
from ledger.limits import acquire_lease, lease_holder
from ledger.models import session_leases


def _machine(url: str, tmp_path, name: str) -> Notifier:
    """One machine's notifier: its own deliveries file, the shared ledger."""
    return Notifier(["json://127.0.0.1:9/x"], ["job_end"], 5.0, url, tmp_path / f"{name}-deliveries.json")


def _keys(ledger) -> set[str]:
    t = session_leases
    with ledger.engine.begin() as conn:
        return {r.session_id for r in conn.execute(sa.select(t.c.session_id))}


def test_two_machines_on_one_ledger_claim_an_event_once_and_the_record_is_the_ledgers(ledger, ledger_url, tmp_path):
    laptop, server = _machine(ledger_url, tmp_path, "laptop"), _machine(ledger_url, tmp_path, "server")
    assert laptop.claim("s1:ended", "laptop-1", 60.0) is True
    assert server.claim("s1:ended", "server-1", 60.0) is False  # the other machine holds it
    laptop.settle("s1:ended", "laptop-1", sent=True)
    assert server.claim("s1:ended", "server-2", 60.0) is False  # delivered: kept as the ledger's record
    assert lease_holder(ledger, CLAIM_PREFIX + "s1:ended") == "laptop-1"  # in the shared ledger's own table
    t = session_leases
    with ledger.engine.begin() as conn:
        until = conn.execute(sa.select(t.c.expires_at).where(t.c.session_id == CLAIM_PREFIX + "s1:ended")).scalar()
    assert until - time.time() == pytest.approx(CLAIM_KEEP_S, abs=60.0)  # kept 400 days
    server.claim("s2:ended", "server-3", 60.0)
    server.settle("s2:ended", "server-3", sent=False)  # no target took it: given back, tried again later
    assert laptop.claim("s2:ended", "laptop-2", 60.0) is True


def test_a_lapsed_claim_is_pruned_by_the_next_claim_and_nothing_else_is(ledger, ledger_url, tmp_path):
    now = time.time()
    past = now - CLAIM_KEEP_S - 3600  # claimed (and kept) over 400 days ago: lapsed an hour ago
    assert acquire_lease(ledger, CLAIM_PREFIX + "old:ended", "gone", CLAIM_KEEP_S, now=past)
    assert acquire_lease(ledger, CLAIM_PREFIX + "died:ended", "gone", 35.0, now=now - 120)  # a sender that died
    assert acquire_lease(ledger, CLAIM_PREFIX + "recent:ended", "here", CLAIM_KEEP_S, now=now - 86400)
    assert acquire_lease(ledger, "20261101-000000-abcd", "watchdog", 60.0, now=now - 3600)  # a session's lease
    _machine(ledger_url, tmp_path, "laptop").claim("new:ended", "laptop", 60.0)
    assert _keys(ledger) == {
        CLAIM_PREFIX + "recent:ended",
        CLAIM_PREFIX + "new:ended",
        "20261101-000000-abcd",  # a lapsed session lease is the watchdogs' to take over, never pruned here
    }
