"""The sweep queue in the ledger (ledger/sweeps.py), on SQLite and a real PostgreSQL: a job is claimed once, an
expired claim is taken up again only when its run's rows say so."""

from __future__ import annotations

import threading

import pytest

from ledger import Ledger, sweeps as queue

T0 = 1_800_000_000.0


def _sweep(led: Ledger, n: int, sweep_id: str = "sweep-a", k: int = 100) -> None:
    queue.enqueue(
        led.engine,
        {"id": sweep_id, "name": "s", "status": "open", "created_at": T0, "max_parallel": k},
        [{"seq": i, "name": f"j{i}", "worst_usd": 1.0, "worst_hours": 0.5} for i in range(n)],
        [],
    )


def _run(led: Ledger, run_id: str, status: str, reason: str | None, open_rental: bool = False) -> None:
    led.add_run(dict(id=run_id, status="open", created_at=T0, sweep_id="sweep-a"))
    if status == "closed":
        led.close_run(run_id, T0 + 10, reason or "", "")
    led.add_session(
        {
            "id": f"{run_id}-r1",
            "created_at": T0,
            "run_id": run_id,
            "attempt": 1,
            "cost_usd": 0.25,
            "billed_seconds": 600,
        }
    )
    if not open_rental:
        led.update(f"{run_id}-r1", status="closed", end_reason="job_end", ended_at=T0 + 600)


def test_claims_take_jobs_in_order_each_once_at_most_max_parallel(ledger_url):
    led = Ledger(ledger_url)
    _sweep(led, 3, k=3)
    got = [queue.claim(led.engine, "a", 60, "sweep-a", now=T0) for _ in range(4)]
    assert [g["seq"] for g in got[:3]] == [0, 1, 2] and got[3] is None
    assert all(g["state"] == "claimed" and g["claims"] == 1 for g in got[:3])
    assert queue.start(led.engine, got[0]["id"], "a", "run-x") is True
    assert queue.start(led.engine, got[1]["id"], "b", "run-y") is False  # not b's claim
    assert queue.finish(led.engine, got[0]["id"], "a", "done", "job_end") is True
    states = [j["state"] for j in queue.jobs_of(led.engine, "sweep-a")]
    assert states == ["done", "claimed", "claimed"]
    _sweep(led, 3, "sweep-b", k=2)  # two at once: a third waits until one ends
    b = [queue.claim(led.engine, "a", 60, "sweep-b", now=T0) for _ in range(3)]
    assert [x["seq"] for x in b[:2]] == [0, 1] and b[2] is None
    queue.finish(led.engine, b[0]["id"], "a", "done", "job_end")
    assert queue.claim(led.engine, "a", 60, "sweep-b", now=T0)["seq"] == 2


def test_a_cancelled_sweep_gives_nothing_to_claim(ledger_url):
    led = Ledger(ledger_url)
    _sweep(led, 2)
    assert queue.end_sweep(led.engine, "sweep-a", "cancelled", "cancelled", "by hand") is True
    assert queue.cancel_queued(led.engine, "sweep-a", "cancelled", "by hand") == 2
    assert queue.claim(led.engine, "a", 60, "sweep-a", now=T0) is None


@pytest.mark.parametrize(
    ("status", "reason", "open_rental", "state_after", "claimed"),
    [
        ("closed", "job_end", False, "done", False),  # its run finished: not run again
        ("closed", "job_failed", False, "failed", False),  # its run says failed: marked so, not rerun
        ("closed", "interrupted", False, "claimed", True),  # its executor died and its up ended it: run again
        ("open", None, True, "running", False),  # a rental still open (a box may bill): left alone
        ("open", None, False, "claimed", True),  # died between rentals, none open: run again
    ],
)
def test_an_expired_claim_is_judged_by_its_run(ledger_url, status, reason, open_rental, state_after, claimed):
    led = Ledger(ledger_url)
    _sweep(led, 1)
    job = queue.claim(led.engine, "dead", 30, "sweep-a", now=T0)
    assert queue.start(led.engine, job["id"], "dead", "run-1")
    _run(led, "run-1", status, reason, open_rental)
    assert queue.claim(led.engine, "b", 30, "sweep-a", now=T0 + 29) is None  # not yet expired
    got = queue.claim(led.engine, "b", 30, "sweep-a", now=T0 + 31)
    assert (got is not None) == claimed
    row = queue.jobs_of(led.engine, "sweep-a")[0]
    assert row["state"] == state_after
    if claimed:
        assert (got["claim_owner"], got["claims"], got["run_id"]) == ("b", 2, None)
    elif state_after in ("done", "failed"):
        assert row["end_reason"] == reason and row["claim_owner"] is None


def test_spend_counts_booked_money_and_the_worst_case_held(ledger_url):
    led = Ledger(ledger_url)
    _sweep(led, 3)
    a = queue.claim(led.engine, "a", 60, "sweep-a", now=T0)
    queue.start(led.engine, a["id"], "a", "run-1")
    _run(led, "run-1", "open", None, open_rental=False)  # 0.25 USD and 600 s booked so far
    queue.claim(led.engine, "a", 60, "sweep-a", now=T0)  # claimed, no run yet: its whole worst case is held
    got = queue.spend(led.engine, "sweep-a")
    assert got["usd"] == pytest.approx(0.25, abs=1e-9) and got["seconds"] == pytest.approx(600, abs=1e-9)
    # held: (1.0 - 0.25) + 1.0 USD; (0.5 - 600 / 3600) + 0.5 h
    assert got["held_usd"] == pytest.approx(1.75, abs=1e-9)
    assert got["held_hours"] == pytest.approx(1.0 - 600 / 3600, abs=1e-9)


def test_claimers_at_once_never_take_one_job_twice(ledger_url):
    """Eight threads claim from one queue of 40 jobs at once (on PostgreSQL: row locks, SKIP LOCKED; on
    SQLite: one writer at a time): every job is taken exactly once."""
    led = Ledger(ledger_url)
    _sweep(led, 40)
    taken: list[tuple[str, int]] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        mine = Ledger(ledger_url)  # an engine of its own, as another executor has
        try:
            while (job := queue.claim(mine.engine, name, 60, "sweep-a", now=T0)) is not None:
                with lock:
                    taken.append((name, job["seq"]))
        finally:
            mine.engine.dispose()

    threads = [threading.Thread(target=work, args=(f"x{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert sorted(seq for _, seq in taken) == list(range(40))
