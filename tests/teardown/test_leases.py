"""Leases and refusals on both ledger backends (SQLite and a real PostgreSQL server): one owner per
session at a time, even when many race for it; an expired lease is taken over; refusals set once."""

from __future__ import annotations

import threading
import time

import pytest

from ledger import Ledger
from ledger.limits import acquire_lease, active_refusals, lease_holder, lift_refusal, release_lease, set_refusal
from tests.support.postgres import postgres_server  # noqa: F401  (fixture)


@pytest.fixture(params=["sqlite", "postgres"])
def led(request, tmp_path):
    url = (
        f"sqlite:///{tmp_path / 'l.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_server").new_database()
    )
    led = Ledger(url)
    led.add_session(
        dict(
            id="s1",
            experiment="e",
            job="j",
            provider="local",
            card="c",
            gpu_count=1,
            spot=False,
            label="gpuops-s1",
            simulated=False,
            status="running",
            created_at=time.time(),
        )
    )
    yield led
    led.engine.dispose()


def test_one_owner_among_racers(led):
    won = []
    start = threading.Barrier(8)

    def race(i: int) -> None:
        start.wait()
        if acquire_lease(led, "s1", f"wd{i}", 60):
            won.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert lease_holder(led, "s1") == f"wd{won[0]}"
    assert acquire_lease(led, "s1", f"wd{won[0]}", 60)  # the holder renews
    release_lease(led, "s1", "someone-else")  # not theirs: nothing happens
    assert lease_holder(led, "s1") == f"wd{won[0]}"
    release_lease(led, "s1", f"wd{won[0]}")
    assert lease_holder(led, "s1") is None and acquire_lease(led, "s1", "wd-next", 60)


def test_expired_lease_is_taken_over(led):
    now = time.time()
    assert acquire_lease(led, "s1", "crashed", 30, now=now)
    assert not acquire_lease(led, "s1", "other", 30, now=now + 29)
    assert acquire_lease(led, "s1", "other", 30, now=now + 31)
    assert lease_holder(led, "s1", now=now + 31) == "other"


def test_refusal_set_once_and_lifted(led):
    assert set_refusal(led, "vast", "balance_floor", "vast balance $4.20 is below the floor $5.00")
    assert not set_refusal(led, "vast", "balance_floor", "again")
    assert [(r.scope, r.reason) for r in active_refusals(led)] == [("vast", "balance_floor")]
    assert lift_refusal(led, "vast", "balance_floor") and not lift_refusal(led, "vast", "balance_floor")
    assert active_refusals(led) == []
