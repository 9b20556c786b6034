"""A rental's writes (``ledger/writes.py`` through the ledger's engine) book what the rental did, on
SQLite and PostgreSQL: the model's defaults, booleans as bool, the first end request's reason, the
cost of the billed seconds at the charged price (arithmetic written here)."""

from __future__ import annotations

import sqlite3

import pytest

from ledger import Ledger

T0 = 1_764_583_200.0  # 2025-12-01 10:00 UTC: a spooled time may not lie in the future


def _rental(led: Ledger, sid: str) -> None:
    """One rental's writes in the order `up` makes them."""
    led.add_session(
        dict(
            id=sid,
            experiment="e1",
            job="job.sh",
            provider="local",
            card="a100-80gb",
            gpu_count=2,
            spot=True,
            label=f"gpuops-{sid}",
            simulated=True,
            status="provisioning",
            created_at=T0,
            note="n",
            log_path="/l",
            max_hours=1.5,
            ready_timeout_seconds=600.0,
            idle_minutes=0.0,
            owner="me@host",
            account="local:x",
        )
    )
    led.event(sid, "create", {"offer": "o1"}, at=T0 + 1)
    led.update(sid, instance_id="i-1", offer_id="o1", status="running", instance_created_at=T0 + 2, usd_per_hour=3.6)
    led.event(sid, "created", {"instance": "i-1"}, at=T0 + 2)
    led.add_steps(
        sid,
        [
            {"step": "system", "status": "done", "seconds": 0.25, "detail": {"k": 1}},
            {"step": "verify", "status": "done", "seconds": 0.5},
        ],
    )
    led.update(sid, tokens=1234, job_seconds=90.5)
    assert led.request_end(sid, "job_end", by="up:h:1") == "job_end"
    assert led.request_end(sid, "manual", by="down") == "job_end"  # the first request wins
    closed = led.close(sid, T0 + 100.25, "error", exit_code=0, end_source="destroy", tokens=1300)
    assert (closed.status, closed.end_reason, closed.exit_code, closed.tokens) == ("closed", "job_end", 0, 1300)
    assert led.close(sid, T0 + 999, "ttl").ended_at == T0 + 100.25  # a closed row is not changed


def test_a_new_row_takes_the_models_defaults(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    led.add_session({"id": "x", "created_at": T0})
    row = dict(led.get("x")._mapping)
    # the defaults a new row gets, as ledger/models.py states them; every other column is NULL
    defaults = dict(
        experiment="default",
        job="",
        provider="",
        card="",
        gpu_count=1,
        spot=False,
        label="",
        simulated=False,
        status="provisioning",
        tokens=0,
        conclusion="",
        note="",
        log_path="",
        results_path="",
        source="gpuops",
    )
    assert {k: v for k, v in row.items() if v is not None} == dict(id="x", created_at=T0, **defaults)
    assert len(row) == 43  # every column of sessions
    with pytest.raises(ValueError, match="unknown sessions column"):
        led.add_session({"id": "y", "created_at": T0, "nope": 1})


def test_a_ledger_refuses_unknown_sessions_and_columns(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    with pytest.raises(KeyError):
        led.update("nope", tokens=1)
    with pytest.raises(KeyError):
        led.close("nope", T0, "job_end")
    with pytest.raises(KeyError):
        led.request_end("nope", "job_end")
    _rental(led, "s2")
    with pytest.raises(ValueError, match="unknown sessions column"):
        led.update("s2", **{"tokens = 0; --": 1})


def test_a_locked_ledger_spools_within_the_deadline_and_replays(tmp_path):
    url = f"sqlite:///{tmp_path / 'l.db'}"
    led = Ledger(url, spool_path=tmp_path / "spool.jsonl")
    led.add_session(dict(id="s3", created_at=T0, status="running", instance_created_at=T0, usd_per_hour=3.6))
    con = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None, timeout=10)
    con.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with led.bounded(0.2):
            led.event("s3", "job_exited", {"exit_code": 0})
            assert led.close("s3", T0 + 60, "job_end", exit_code=0) is None  # spooled, not waited on
    finally:
        con.execute("ROLLBACK")
        con.close()
    assert [e["op"] for e in led.spooled()] == ["event", "close"] and led.held("s3").status == "closed"
    assert led.replay_spool() == 2
    row = led.get("s3")
    assert (row.status, row.end_reason, row.exit_code, row.billed_seconds) == ("closed", "job_end", 0, 60.0)


def test_a_rental_books_on_both_databases(ledger_url):
    """One rental's writes on SQLite and PostgreSQL (real booleans): 98.25 s up, billed as 99 s (whole seconds) at 3.6 USD/h."""
    led = Ledger(ledger_url)
    _rental(led, "s5")
    a = dict(led.get("s5")._mapping)
    assert a["spot"] is True and a["simulated"] is True and a["billed_seconds"] == 99.0
    assert a["cost_usd"] == pytest.approx(99 * 3.6 / 3600, abs=1e-9)
    assert [(e.kind, e.detail) for e in led.events("s5")][:3] == [
        ("intent", ""),
        ("create", '{"offer": "o1"}'),
        ("created", '{"instance": "i-1"}'),
    ]
    assert [e.kind for e in led.events("s5")] == ["intent", "create", "created", "end_requested", "closed"]
    assert [(s.name, s.status, s.seconds, s.detail) for s in led.steps("s5")] == [
        ("system", "done", 0.25, '{"k": 1}'),
        ("verify", "done", 0.5, ""),
    ]
    assert led.set_tokens("s5", 7).tokens == 7 and led.note("s5", " a  b ").conclusion == "a b"
    with pytest.raises(KeyError):
        led.update("nope", spot=False)
