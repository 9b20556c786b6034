"""Several writers at once (several `up`, a watchdog, a report) in separate processes: no
"database is locked", no lost row. Runs on SQLite (WAL + busy timeout + BEGIN IMMEDIATE) and on
PostgreSQL."""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback

import sqlalchemy as sa

UPS = 4  # processes playing `gpuops up`
SESSIONS_PER_UP = 12
EVENTS_PER_SESSION = 3


def _up(url: str, who: int, start, errors) -> None:
    try:
        from ledger import Ledger

        led = Ledger(url)
        start.wait(30)
        for n in range(SESSIONS_PER_UP):
            sid = f"p{who}-{n:03d}"
            t = 1793865600.0 + who * 1000 + n
            led.add_session(
                dict(
                    id=sid,
                    experiment=f"e{who % 2}",
                    job="j",
                    provider="vast",
                    card="rtx-4090",
                    gpu_count=1,
                    spot=False,
                    label="gpuops-" + sid,
                    simulated=False,
                    status="provisioning",
                    created_at=t,
                )
            )
            led.update(sid, instance_id=f"i{who}{n}", instance_created_at=t + 1, usd_per_hour=0.36, status="running")
            for k in range(EVENTS_PER_SESSION):
                led.event(sid, "stage", {"k": k}, at=t + 2 + k)
            led.add_steps(sid, [{"step": "pip", "status": "done", "seconds": 1.5}])
            led.close(sid, t + 1 + 3600, "job_end", exit_code=0)
        led.engine.dispose()
    except BaseException:
        errors.put(f"up {who}: {traceback.format_exc()}")


def _watchdog(url: str, start, stop, errors) -> None:
    try:
        from ledger import Ledger

        led = Ledger(url)
        start.wait(30)
        while not stop.is_set():
            for s in led.open_sessions():
                led.heartbeat(s.id, time.time())
                led.event(s.id, "watchdog", "alive")
            time.sleep(0.02)  # a real watchdog samples every few seconds; this one is busy on purpose
        led.engine.dispose()
    except BaseException:
        errors.put(f"watchdog: {traceback.format_exc()}")


def _report(url: str, start, stop, errors, reports) -> None:
    try:
        from gpuops.accounting.ledger_service import month
        from ledger import Ledger

        led = Ledger(url)
        start.wait(30)
        n = 0
        while True:  # at least one report, even when a loaded machine ran every writer before this process
            month(led, "2026-11", "UTC")
            n += 1
            if stop.is_set():
                break
            time.sleep(0.02)
        reports.put(n)
        led.engine.dispose()
    except BaseException:
        errors.put(f"report: {traceback.format_exc()}")


def test_parallel_writers_lose_nothing(ledger_url):
    ctx = mp.get_context("fork")
    errors, reports = ctx.Queue(), ctx.Queue()
    start, stop = ctx.Event(), ctx.Event()
    ups = [ctx.Process(target=_up, args=(ledger_url, i, start, errors)) for i in range(UPS)]
    others = [
        ctx.Process(target=_watchdog, args=(ledger_url, start, stop, errors)),
        ctx.Process(target=_report, args=(ledger_url, start, stop, errors, reports)),
    ]
    for p in ups + others:
        p.start()  # every process opens the (maybe not yet migrated) ledger at the same time
    start.set()
    for p in ups:
        p.join(240)
    stop.set()
    for p in others:
        p.join(60)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert not problems, "\n".join(problems)
    assert all(p.exitcode == 0 for p in ups + others)
    assert reports.get(timeout=5) > 0

    from gpuops.accounting.ledger_service import month
    from ledger import Ledger

    led = Ledger(ledger_url)
    try:
        with led.engine.connect() as c:
            n_sessions = c.execute(sa.text("SELECT count(*) FROM sessions WHERE status = 'closed'")).scalar_one()
            n_events = c.execute(sa.text("SELECT count(*) FROM events WHERE kind <> 'watchdog'")).scalar_one()
            n_steps = c.execute(sa.text("SELECT count(*) FROM bootstrap_steps")).scalar_one()
        total = UPS * SESSIONS_PER_UP
        assert n_sessions == total
        assert n_events == total * (1 + EVENTS_PER_SESSION + 1)  # intent, stages, closed
        assert n_steps == total
        rep = month(led, "2026-11", "UTC")
        assert rep["sessions"] == total and rep["total_usd"] == round(total * 0.36, 6)
    finally:
        led.engine.dispose()
