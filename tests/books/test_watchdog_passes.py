"""Watchdog passes in the ledger (m009), on SQLite and PostgreSQL: booked per pass, bounded per
host in the same write, the newest of each (host, owner) read back the same by SQLAlchemy, sqlite3
and psycopg, and said by the views: fresh, stale, none."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuops.teardown.watchdog_passes import ago, guarded_recently, health_lines, last_passes
from ledger.passes import host_pass_count, record_pass
from ledger.reads import LedgerReader, pass_summary
from tests.conftest import cli_in_process

T0 = 1_796_000_000.0


def test_passes_are_bounded_per_host_and_the_newest_per_watchdog_is_read(ledger, ledger_url):
    for i in range(7):
        record_pass(ledger, "laptop", "alice", at=T0 + i, interval_seconds=30, checked=i, ended=i % 2, keep=5)
    record_pass(
        ledger, "team-host", "ops", at=T0 + 3, interval_seconds=60, checked=9, ended=2, errors=1, actions=4, keep=5
    )
    record_pass(ledger, "laptop", "bob", at=T0 + 10, interval_seconds=30, keep=5)  # same host, second owner
    assert host_pass_count(ledger, "laptop") == 5 and host_pass_count(ledger, "team-host") == 1  # pruned in the write
    newest = [(p.host, p.owner, p.at, p.checked) for p in ledger.watchdog_passes()]
    assert newest == [("laptop", "bob", T0 + 10, 0), ("laptop", "alice", T0 + 6, 6), ("team-host", "ops", T0 + 3, 9)]
    assert LedgerReader(ledger_url).watchdog_passes() == ledger.watchdog_passes()
    ops = ledger.watchdog_passes()[2]
    assert pass_summary(ops) == "checked 9 sessions, ended 2, 1 error"


def test_views_say_fresh_stale_and_none(ledger):
    assert last_passes(ledger, T0) == []
    ((line, warn),) = health_lines([])
    assert warn and line.startswith(
        "no watchdog pass in this ledger: the balance floor and the monthly cap are not enforced"
    )
    assert not guarded_recently(ledger, T0)

    record_pass(ledger, "laptop", "alice", at=T0, interval_seconds=30, checked=2)
    record_pass(ledger, "team-host", "ops", at=T0 - 3 * 3600, interval_seconds=60)
    fresh = last_passes(ledger, T0 + 12)
    assert [(p["host"], p["age_seconds"], p["stale"], p["stale_at"]) for p in fresh] == [
        ("laptop", 12.0, False, T0 + 90),
        ("team-host", 3 * 3600 + 12.0, True, T0 - 3 * 3600 + 180),
    ]
    assert health_lines(fresh) == [
        ("watchdog: last pass 12 s ago on laptop by alice (checked 2 sessions, ended 0, 0 errors)", False),
        ("watchdog: last pass 3 h ago on team-host by ops (stopped?)", True),
    ]
    assert guarded_recently(ledger, T0 + 12)

    late = last_passes(ledger, T0 + 91)  # past three of the laptop's intervals: nobody guards
    assert not guarded_recently(ledger, T0 + 91)
    assert health_lines(late)[-1] == (
        "no watchdog pass for 1 min: the balance floor and the monthly cap are not enforced "
        "while your laptop is away; `gpuops watchdog --install` keeps one running",
        True,
    )


def test_ago_words():
    assert [ago(s) for s in (0, 12.9, 60, 3599, 3 * 3600 + 5, 2 * 86400)] == [
        "0 s",
        "12 s",
        "1 min",
        "59 min",
        "3 h",
        "2 d",
    ]


def test_a_watchdog_pass_is_booked_and_shown_by_ps_and_ledger_month(ledger_url, cli_env, tmp_path):
    env = dict(cli_env, GPUOPS_LEDGER_URL=ledger_url, GPUOPS_USER_NAME="alice", COLUMNS="200")

    def gpuops(*args):
        r = cli_in_process(*args, env=env, whole_env=True)  # one pass and reads: no process of their own
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert "no watchdog pass in this ledger" in gpuops("ps")
    gpuops("watchdog", "--once", "--interval", "300")
    import socket

    host = socket.gethostname()
    out = gpuops("ps")
    assert f"on {host} by alice (checked 0 sessions, ended 0, 0 errors)" in out and "watchdog: last pass" in out
    assert f"on {host} by alice" in gpuops("ledger", "month")
    rep = json.loads(gpuops("ledger", "month", "--json"))
    (w,) = rep["watchdogs"]
    assert (w["host"], w["owner"], w["interval_seconds"], w["checked"], w["stale"]) == (host, "alice", 300.0, 0, False)
    assert w["last_pass_at"].endswith("Z") and w["stale_at"].endswith("Z")  # ISO-8601 UTC, as every JSON time


def test_ps_reads_the_passes_without_the_orm(cli_env, tmp_path):
    # ps's start-up: the passes are read with SQLAlchemy Core alone (no ORM import, no rich)
    env = dict(cli_env, GPUOPS_USER_NAME="alice")
    subprocess.run(
        [sys.executable, "-m", "gpuops", "watchdog", "--once"], env=env, capture_output=True, timeout=120, check=True
    )
    code = (
        "import sys; from gpuops.cli.app import main\n"
        "sys.argv = ['gpuops', 'ps']\n"
        "try:\n    main(fast_exit=False)\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(repr(sorted({m for m in sys.modules if m in ('rich', 'sqlalchemy.orm')})))"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "watchdog: last pass" in r.stdout, r
    assert r.stderr.strip().endswith("[]"), r.stderr


@pytest.mark.parametrize("kind", ["destroyed", "closed", "error"])
def test_record_pass_counts_what_the_tick_did(ledger, kind):
    from gpuops.teardown.reconcile import Action
    from gpuops.teardown.watchdog import record_pass as book

    class Ctx:
        me, checked = "alice", 3
        clock = staticmethod(lambda: T0)

    Ctx.ledger = ledger
    acts = [Action("s1", kind, "x"), Action("s2", "stale_heartbeat", "y")]
    assert book(Ctx, acts, 0.25, 30.0) == []
    (p,) = ledger.watchdog_passes()
    assert (p.checked, p.ended, p.errors, p.actions, p.seconds) == (
        3,
        int(kind != "error"),
        int(kind == "error"),
        2,
        0.25,
    )


def test_up_says_once_that_only_the_agent_guards_when_no_watchdog_passed(ledger):
    from gpuops.rental.launcher import _watchdog_note

    said: list[str] = []

    class Reporter:
        warn = staticmethod(said.append)

    _watchdog_note(ledger, Reporter)
    (line,) = said
    assert (
        "only the box's own agent (job end, idle, TTL) guards this rental" in line
        and "`gpuops watchdog --install`" in line
    )
    record_pass(ledger, "laptop", "alice", interval_seconds=30)  # a pass just now
    _watchdog_note(ledger, Reporter)
    assert said == [line]


def test_the_dashboard_says_who_watches(ledger, ledger_url, gpuops_home, monkeypatch):
    from gpuops.accounting.dashboard import build
    from gpuops.config import load_settings
    from gpuops.render.dashboard import page

    monkeypatch.setenv("GPUOPS_LEDGER_URL", ledger_url)
    settings = load_settings(None)
    assert build(settings, "2026-11", "UTC", now=T0)["watchdog"][0]["warn"] is True
    record_pass(ledger, "team-host", "ops <b>", at=T0 - 5, interval_seconds=30)
    data = build(settings, "2026-11", "UTC", now=T0)
    assert data["watchdog"] == [
        {
            "text": "watchdog: last pass 5 s ago on team-host by ops <b> (checked 0 sessions, ended 0, 0 errors)",
            "warn": False,
        }
    ]
    html = page.render(data, inline=True)
    assert '<p class="watchdog">watchdog: last pass 5 s ago on team-host by ops &lt;b&gt; (checked 0' in html
    assert data["report"]["watchdogs"][0]["owner"] == "ops <b>"


def test_an_sqlite_ledger_keeps_the_newest_passes_per_host(tmp_path):
    from ledger import Ledger

    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    for i in range(4):
        record_pass(led, "laptop", "alice", at=T0 + i, interval_seconds=30, checked=i, keep=3)
    assert [(p.at, p.checked) for p in led.watchdog_passes()] == [(T0 + 3, 3)]
    assert host_pass_count(led, "laptop") == 3
