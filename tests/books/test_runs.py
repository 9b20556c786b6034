"""The runs table (m010) on SQLite and PostgreSQL: a run and its rentals, the run's total as the
sum of its rentals' cost (never booked twice), the month still counting rentals, a close that
wins once, and a close the database refused replayed from the spool."""

from __future__ import annotations

import pytest

from ledger.store import Ledger

T0 = 1_764_583_200.0  # 2025-12-01 10:00 UTC


def _rental(
    led: Ledger, sid: str, run_id: str | None, attempt: int | None, start: float, seconds: float, reason: str
) -> None:
    led.add_session(
        dict(
            id=sid,
            experiment="spot",
            provider="vast",
            card="rtx-4090",
            status="provisioning",
            created_at=start,
            run_id=run_id,
            attempt=attempt,
            max_hours=4.0,
            max_session_usd=1.0 if run_id else None,
        )
    )
    led.update(sid, instance_id=f"i-{sid}", instance_created_at=start, usd_per_hour=0.36, status="running")
    led.close(sid, start + seconds, reason)


def test_a_run_and_its_rentals(ledger_url):
    led = Ledger(ledger_url)
    led.add_run(
        dict(
            id="run-a",
            experiment="spot",
            job="job.py",
            provider="vast",
            status="open",
            created_at=T0,
            recover=2,
            recover_on="preempted",
            attempts=0,
            max_hours=4.0,
            max_usd=1.0,
            owner="alice",
        )
    )
    _rental(led, "s1", "run-a", 1, T0, 100.0, "preempted")
    _rental(led, "s2", "run-a", 2, T0 + 200, 300.0, "preempted")
    _rental(led, "s3", "run-a", 3, T0 + 600, 50.0, "job_end")
    _rental(led, "solo", None, None, T0 + 700, 10.0, "job_end")
    led.update_run("run-a", attempts=3)
    led.close_run("run-a", T0 + 650, "job_end", "rental 3 (s3) ended job_end")
    led.close_run("run-a", T0 + 999, "interrupted", "later")  # a closed run is not changed
    run = led.get_run("run-a")
    assert (run.status, run.end_reason, run.ended_at, run.attempts, run.detail) == (
        "closed",
        "job_end",
        T0 + 650,
        3,
        "rental 3 (s3) ended job_end",
    )
    assert [(r.id, r.attempt, r.end_reason) for r in led.run_rentals("run-a")] == [
        ("s1", 1, "preempted"),
        ("s2", 2, "preempted"),
        ("s3", 3, "job_end"),
    ]
    (listed,) = led.runs()
    assert (listed.id, listed.rentals, listed.billed_seconds, listed.simulated) == ("run-a", 3, 450.0, False)
    assert listed.cost_usd == pytest.approx(0.36 * 450 / 3600, abs=1e-9)
    assert led.runs(since=T0 + 1) == [] and len(led.runs(limit=1)) == 1
    from ledger.limits import month_spend

    # the month counts rentals, as before: the run adds nothing of its own
    assert month_spend(led, T0 - 86400, T0 + 86400, now=T0 + 1000) == pytest.approx(0.36 * 460 / 3600, abs=1e-9)


def test_a_refused_run_close_is_spooled_and_replayed(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    led = Ledger(url, spool_path=tmp_path / "spool.jsonl")
    led.add_run(
        dict(
            id="run-b",
            experiment="x",
            job="j",
            provider="vast",
            status="open",
            created_at=T0,
            recover=1,
            recover_on="preempted",
            attempts=1,
        )
    )
    held = led._run_close
    import sqlalchemy as sa

    def refuse(**_kw):
        raise sa.exc.OperationalError("UPDATE runs", {}, Exception("database is locked"))

    led._run_close = refuse  # the database refuses this one write
    led.close_run("run-b", T0 + 5, "attempts_spent", "2 rentals")
    assert led.held_run("run-b").status == "closed" and led.spooled()[0]["op"] == "run_close"
    led._run_close = held
    assert led.replay_spool() == 1
    assert (led.get_run("run-b").status, led.get_run("run-b").end_reason) == ("closed", "attempts_spent")
