"""Ledger fixtures: every ledger test runs on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.support.postgres import postgres_server  # noqa: F401  (fixture)


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request, tmp_path):
    """A fresh, empty ledger URL: an SQLite file, or a new database on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return request.getfixturevalue("postgres_server").new_database()


@pytest.fixture
def fresh_url(request, tmp_path, ledger_url):
    """A second empty ledger on the same backend as ``ledger_url``."""
    if ledger_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'second.db'}"
    return request.getfixturevalue("postgres_server").new_database()


@pytest.fixture
def ledger(ledger_url):
    from ledger import Ledger

    led = Ledger(ledger_url)
    yield led
    led.engine.dispose()


def utc(*args: int) -> float:
    """Epoch seconds of a UTC wall time: utc(2026, 11, 3, 10, 0)."""
    return datetime(*args, tzinfo=timezone.utc).timestamp()


def _session(sid: str, created_at: float, **kw):

    base = dict(
        id=sid,
        experiment="default",
        job="job.sh",
        provider="runpod",
        card="h100-sxm",
        gpu_count=1,
        spot=False,
        label=f"gpuops-{sid}",
        simulated=False,
        status="provisioning",
        created_at=created_at,
    )
    base.update(kw)
    return base


def _rented(led, sid, created, *, price, started=None, **kw):
    led.add_session(_session(sid, created, **kw))
    led.update(
        sid,
        instance_id=f"i-{sid}",
        instance_created_at=started if started is not None else created + 60.0,
        usd_per_hour=price,
        status="running",
    )


def build_books(led) -> dict:
    """The hand-computed set of sessions (figures worked out in test_reports.py):

    s1  2026-11-03 10:00 UTC  llama-serve  runpod h100-sxm x1  2.40 $/h  3600 s   2.40 $   12e6 tokens, job 2700 s
    s2  2026-11-03 12:00 UTC  llama-serve  vast   a100        failed launch: no instance, costs 0, not counted
    s3  2026-11-05 08:00 UTC  llama-serve  vast   rtx-4090    0.35 $/h  end never seen: agent heartbeat at
                              +5400.5 s -> 5401 s billed, 0.525097 $, no tokens
    s4  2026-11-10 12:00 UTC  cpu-sim      local  a100-40gb   0.90 $/h  1800 s  0.45 $ SIMULATED, 1e6 tokens, job 1200 s
    s5  2026-11-03 22:30 UTC  finetune     runpod a100-80gb x2 3.20 $/h 7200 s  6.40 $ (4 GPU-h), no tokens
    s6  2026-11-20 09:00 UTC  finetune     vast   h100-sxm    open (still running): counted, no cost yet
    s7  2026-10-31 23:30 UTC  old          runpod rtx-4090    0.40 $/h  3600 s  0.40 $ (November in Asia/Tokyo)
    """
    t1 = utc(2026, 11, 3, 10, 0)
    _rented(led, "s1", t1, price=2.40, experiment="llama-serve")
    led.update("s1", tokens=12_000_000, job_seconds=2700.0)
    led.close("s1", t1 + 60.0 + 3600.0, "job_end", exit_code=0)
    led.note("s1", "vLLM 7B fp16:   1,100 tok/s at batch 1")

    led.add_session(_session("s2", utc(2026, 11, 3, 12, 0), experiment="llama-serve", provider="vast", card="a100"))
    led.event("s2", "provider_error", {"kind": "no_capacity"})
    led.close("s2", utc(2026, 11, 3, 12, 1), "provision_failed")

    t3 = utc(2026, 11, 5, 8, 0)
    _rented(led, "s3", t3, price=0.35, started=t3 + 30.0, experiment="llama-serve", provider="vast", card="rtx-4090")
    led.heartbeat("s3", t3 + 30.0 + 600.0)
    led.heartbeat("s3", t3 + 30.0 + 5400.5)
    led.heartbeat("s3", t3 + 30.0 + 100.0)  # late, out-of-order heartbeat: ignored
    led.close("s3", t3 + 30.0 + 5400.5, "agent_destroyed", end_source="heartbeat")  # its last heartbeat
    led.note("s3", "box died overnight; closed from the agent heartbeat")

    t4 = utc(2026, 11, 10, 12, 0)
    _rented(led, "s4", t4, price=0.90, experiment="cpu-sim", provider="local", card="a100-40gb", simulated=True)
    led.update("s4", tokens=1_000_000, job_seconds=1200.0)
    led.add_steps(
        "s4",
        [
            {"step": "system", "status": "done", "seconds": 12.5, "detail": ""},
            {"step": "pip", "status": "skipped", "seconds": 0.25, "detail": {"cached": True}},
        ],
    )
    led.close("s4", t4 + 60.0 + 1800.0, "job_end", exit_code=0)

    t5 = utc(2026, 11, 3, 22, 30)
    _rented(led, "s5", t5, price=3.20, experiment="finetune", card="a100-80gb", gpu_count=2)
    led.close("s5", t5 + 60.0 + 7200.0, "job_end", exit_code=0)
    led.note("s5", "loss 1.92 after 1 epoch")

    _rented(led, "s6", utc(2026, 11, 20, 9, 0), price=2.10, experiment="finetune", provider="vast")

    t7 = utc(2026, 10, 31, 23, 30)
    _rented(led, "s7", t7, price=0.40, experiment="old", card="rtx-4090")
    led.close("s7", t7 + 60.0 + 3600.0, "job_end", exit_code=0)
    return {"t1": t1, "t3": t3}


@pytest.fixture
def books(ledger):
    build_books(ledger)
    return ledger
