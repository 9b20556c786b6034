"""A light ledger (``Ledger(url, light=True)``, `gpuops up`'s) books a rental with the standard
library's sqlite3 on a current SQLite file, and what it books is what the engine (SQLAlchemy) path books."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ledger import Ledger
from ledger.writes import SESSION_DEFAULTS, session_dict

T0 = 1_764_583_200.0  # 2025-12-01 10:00 UTC: a spooled time may not lie in the future
ROOT = Path(__file__).resolve().parents[2]


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


def _books(url: str, sid: str) -> tuple[dict, list, list]:
    con = sqlite3.connect(url[len("sqlite:///") :])
    con.row_factory = sqlite3.Row
    try:
        row = dict(con.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone())
        events = [
            (r["kind"], r["detail"])
            for r in con.execute("SELECT kind, detail FROM events WHERE session_id = ? ORDER BY id", (sid,))
        ]
        steps = [
            tuple(r)
            for r in con.execute(
                "SELECT name, status, seconds, detail FROM bootstrap_steps WHERE session_id = ? ORDER BY id", (sid,)
            )
        ]
    finally:
        con.close()
    return row, events, steps


def test_the_defaults_are_the_models():
    from ledger.models import Session

    model = Session(id="x", created_at=T0).model_dump()
    assert session_dict({"id": "x", "created_at": T0}, model) == model
    assert set(SESSION_DEFAULTS) <= set(model)
    with pytest.raises(ValueError, match="unknown sessions column"):
        session_dict({"id": "x", "created_at": T0, "nope": 1}, model)


def test_a_light_rental_books_what_the_engine_books(tmp_path):
    urls = [f"sqlite:///{tmp_path / name}.db" for name in ("engine", "light")]
    for url in urls:
        Ledger(url)  # migrated: a current file, as a user's is after the first command
    eng, light = Ledger(urls[0]), Ledger(urls[1], light=True)
    _rental(eng, "s1")
    _rental(light, "s1")
    assert light.fast_sqlite is not None  # the engine was never opened
    a, b = _books(urls[0], "s1"), _books(urls[1], "s1")
    assert a[0] == b[0] and a[2] == b[2]
    assert [k for k, _ in a[1]] == [k for k, _ in b[1]] == ["intent", "create", "created", "end_requested", "closed"]
    assert [d for k, d in a[1] if k != "end_requested"] == [d for k, d in b[1] if k != "end_requested"]
    row = light.get("s1")
    assert (row.status, row.billed_seconds, row.cost_usd, row.spot) == (
        "closed",
        a[0]["billed_seconds"],
        a[0]["cost_usd"],
        True,
    )
    assert [e.kind for e in light.events("s1")] == [k for k, _ in b[1]]
    assert light.held("s1").status == "closed" and light.get("nope") is None


def test_a_light_ledger_refuses_unknown_sessions_and_columns(tmp_path):
    url = f"sqlite:///{tmp_path / 'l.db'}"
    Ledger(url)
    led = Ledger(url, light=True)
    with pytest.raises(KeyError):
        led.update("nope", tokens=1)
    with pytest.raises(KeyError):
        led.close("nope", T0, "job_end")
    with pytest.raises(KeyError):
        led.request_end("nope", "job_end")
    _rental(led, "s2")
    with pytest.raises(ValueError, match="unknown sessions column"):
        led.update("s2", **{"tokens = 0; --": 1})


def test_a_locked_light_ledger_spools_within_the_deadline_and_replays(tmp_path):
    url = f"sqlite:///{tmp_path / 'l.db'}"
    Ledger(url)
    led = Ledger(url, light=True, spool_path=tmp_path / "spool.jsonl")
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
    assert led.fast_sqlite is not None  # refused and replayed without opening the engine


def test_a_light_rental_never_imports_sqlalchemy(tmp_path):
    url = f"sqlite:///{tmp_path / 'l.db'}"
    Ledger(url)
    code = textwrap.dedent(f"""
        import sys
        from ledger import Ledger
        led = Ledger({url!r}, light=True)
        led.add_session(dict(id="s4", created_at=1.0, status="running", instance_created_at=1.0, usd_per_hour=1.0))
        led.event("s4", "job_started")
        with led.bounded():
            led.update("s4", tokens=5)
            led.request_end("s4", "job_end")
            led.close("s4", 61.0, "job_end", exit_code=0)
            led.get("s4"), led.events("s4")
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "sqlmodel", "pydantic")))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert Ledger(url).get("s4").cost_usd == pytest.approx(0.016667, abs=1e-9)  # 60 s at 1 USD/h, to the micro-dollar


def test_the_engine_books_what_sqlite3_books_on_both_databases(ledger_url, tmp_path):
    """The same statements through SQLAlchemy (PostgreSQL: real booleans) and through sqlite3."""
    light_url = f"sqlite:///{tmp_path / 'light.db'}"
    Ledger(light_url)
    led, light = Ledger(ledger_url), Ledger(light_url, light=True)
    _rental(led, "s5")
    _rental(light, "s5")
    a, b = led.get("s5").model_dump(), light.get("s5").model_dump()
    assert a == b and a["spot"] is True and a["simulated"] is True and a["cost_usd"] == pytest.approx(0.099, abs=1e-9)
    assert [(e.kind, e.detail) for e in led.events("s5")][:3] == [(e.kind, e.detail) for e in light.events("s5")][:3]
    assert [e.kind for e in led.events("s5")] == ["intent", "create", "created", "end_requested", "closed"]
    assert [(s.name, s.status, s.seconds, s.detail) for s in led.steps("s5")] == [
        ("system", "done", 0.25, '{"k": 1}'),
        ("verify", "done", 0.5, ""),
    ]
    assert led.set_tokens("s5", 7).tokens == 7 and led.note("s5", " a  b ").conclusion == "a b"
    with pytest.raises(KeyError):
        led.update("nope", spot=False)
