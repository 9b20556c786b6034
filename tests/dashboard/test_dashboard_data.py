"""The dashboard's data without a browser: open boxes (burn rate, TTL left, idle state), the
lazy imports, the one-file page, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from gpuops.accounting.dashboard import box_row, idle_state
from gpuops.config import TeardownSettings
from gpuops.render.dashboard.page import duration, fmt
from tests.dashboard.conftest import run_cli

NOW = 1_800_000_000.0


def _row(**kw):
    base = dict(
        id="s9",
        experiment="exp",
        provider="local",
        card="a100-80gb",
        gpu_count=1,
        status="running",
        simulated=True,
        usd_per_hour=1.8,
        created_at=NOW - 3700.0,
        instance_created_at=NOW - 3600.0,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_open_box_from_the_agents_status():
    status = {
        "heartbeat": NOW - 5.0,
        "sample_seconds": 10.0,
        "teardown": {"max_hours": 2.0, "idle_minutes": 15.0},
        "decision": {"action": "keep", "idle_since": NOW - 180.0},
    }
    b = box_row(_row(), status, NOW, TeardownSettings())
    assert b["usd_per_hour"] == 1.8 and b["simulated"] is True
    assert b["up_seconds"] == 3600.0
    assert b["accrued_usd"] == 1.8  # one hour at 1.80 USD/h
    assert b["ttl_left_seconds"] == 3600.0  # 2 h TTL from create, 1 h used
    assert b["ttl_source"] == "box agent"
    assert b["idle"] == "idle 3.0 of 15 min"
    assert b["heartbeat_age_seconds"] == 5.0


def test_open_box_without_status_says_unknown_and_uses_the_default_ttl():
    b = box_row(_row(gpu_count=2), None, NOW, TeardownSettings(max_hours=4.0))
    assert b["card"] == "a100-80gb x2"
    assert b["ttl_left_seconds"] == 3 * 3600.0 and b["ttl_source"] == "default setting"
    assert b["idle"] == "unknown (no agent status)"
    # between intent and create: nothing bills, no TTL clock yet
    b = box_row(_row(instance_created_at=None), None, NOW, TeardownSettings())
    assert b["up_seconds"] == 0.0 and b["accrued_usd"] == 0.0 and b["ttl_left_seconds"] is None


def test_idle_states():
    fresh = {"heartbeat": NOW, "decision": {"idle_since": None}}
    assert idle_state(fresh, NOW, 15.0, stale=False) == "busy"
    assert idle_state(fresh, NOW, "off", stale=False) == "idle rule off"
    assert idle_state(fresh, NOW, 15.0, stale=True) == "unknown (agent heartbeat stale)"


def test_page_formats():
    # money at a glance (issue 44): totals in cents, one rental to 4 places under $1, rates to 4
    assert (
        fmt(1234.56789) == "$1,234.57"
        and fmt(25.8393) == "$25.84"
        and fmt(0.004) == "<$0.01"  # spent, under half a cent: never "$0.00"
        and fmt(-1e-6) == "$0.00"
        and fmt(-2.5) == "-$2.50"
        and fmt(0.0067, "rental") == "$0.0067"
        and fmt(3.14159, "rental") == "$3.14"
        and fmt(0.34, "rate") == "$0.3400"
        and fmt(None) == "-"
        and fmt(12_000_000, "int") == "12,000,000"
    )
    assert fmt(7.0, "hours") == "7.000"
    assert duration(40) == "40 s" and duration(754) == "12 min" and duration(7500) == "2 h 05 min"
    assert duration(-180) == "overdue 3 min"


def test_dashboard_is_imported_only_by_its_command():
    code = (
        "import sys, gpuops.cli.app; bad = [m for m in ('starlette', 'uvicorn', 'jinja2', 'gpuops.dashboard', 'gpuops.render.dashboard', 'gpuops.accounting.dashboard') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_bad_input_is_one_line_exit_2(cli_env, tmp_path):
    for args, words in (
        (["--month", "2026-13", "--html", str(tmp_path / "x.html")], "month must look like 2026-11"),
        (["--tz", "Mars/Olympus", "--html", str(tmp_path / "x.html")], "unknown time zone"),
        (["--port", "70000"], "--port must be 0..65535"),
        (["--html", str(tmp_path)], "is a directory"),
    ):
        r = run_cli(cli_env, "dashboard", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.html").exists()


def test_empty_ledger_page(cli_env, tmp_path):
    out = tmp_path / "empty.html"
    r = run_cli(cli_env, "dashboard", "--month", "2026-02", "--tz", "UTC", "--html", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "no sessions this month" in text and "no open boxes: nothing is billing" in text
    assert text.count('data-key="report.days.') == 28 * 6  # every day of February, no gaps


def test_open_local_box_is_read_through_its_provider(gpuops_home):
    """A running local box: the dashboard reads its agent's status the way the watchdog does."""
    import time

    from gpuops.accounting.dashboard import build
    from gpuops.config import load_settings
    from ledger import Ledger

    now = time.time()
    box = gpuops_home / "boxes" / "gpuops-20261130-0900-abcd"
    (box / ".gpuops").mkdir(parents=True)
    (box / "instance.json").write_text(
        json.dumps({"id": box.name, "label": box.name, "usd_per_hour": 3.6, "created_at": now - 1800})
    )
    (box / ".gpuops" / "agent-status.json").write_text(
        json.dumps(
            {
                "heartbeat": now - 2,
                "sample_seconds": 10,
                "teardown": {"max_hours": 1.0, "idle_minutes": 20},
                "decision": {"action": "keep", "reason": None, "explanation": "busy", "idle_since": None},
            }
        )
    )
    settings = load_settings(None)
    led = Ledger(settings.ledger_url())
    led.add_session(
        dict(
            id="20261130-0900-abcd",
            experiment="sweep",
            provider="local",
            card="h100-sxm",
            label=box.name,
            status="running",
            created_at=now - 1860,
            instance_id=box.name,
            instance_created_at=now - 1800,
            usd_per_hour=3.6,
            simulated=True,
        )
    )
    led.engine.dispose()
    from ledger.reports import this_month

    d = build(settings, this_month("UTC", now - 1860), "UTC", now=now)  # the row's month, even on the 1st at 00:10
    [b] = d["open_boxes"]
    assert (b["usd_per_hour"], b["ttl_source"], b["idle"]) == (3.6, "box agent", "busy")
    assert b["ttl_left_seconds"] == 1800.0 and b["accrued_usd"] == 1.8
    assert d["report"]["open_sessions"] == 1 and d["sessions"][0]["cost_usd"] is None


def test_this_month_against_the_cap_and_live_figures_equal_ps(gpuops_home, cli):
    """The cap's progress is the watchdog's own sum; the polled open-box figures are `ps`'s."""
    import time

    from gpuops.accounting.dashboard import build, live
    from gpuops.config import load_settings
    from gpuops.render.dashboard import page
    from ledger import Ledger

    now = time.time()
    settings = load_settings(None, {"teardown": {"monthly_cap_usd": 10.0}})
    led = Ledger(settings.ledger_url())
    led.add_session(
        dict(
            id="20261201-0900-real",
            experiment="sweep",
            provider="runpod",
            card="rtx-4090",
            status="running",
            created_at=now - 3610,
            instance_id="pod-1",
            instance_created_at=now - 3600,
            usd_per_hour=2.0,
        )
    )
    led.engine.dispose()
    d = build(settings, None, "UTC", now=now, read_status=lambda row: None)
    bu = d["budget"]
    import datetime as dt

    local_now = dt.datetime.fromtimestamp(now).astimezone()  # the cap's month: the local calendar month
    month_start = local_now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    in_month = now - max(
        now - 3600, month_start
    )  # the hour, or its part in this month (a run just after midnight on the 1st)
    assert bu["monthly_cap_usd"] == 10.0 and bu["spent_usd"] == pytest.approx(
        2.0 * in_month / 3600, abs=0.01
    )  # $2/h, accrued to now
    assert bu["cap_fraction"] == pytest.approx(bu["spent_usd"] / 10.0, abs=1e-9)
    assert d["billing_now"]["real"] == {"usd_per_hour": 2.0, "accrued_usd": pytest.approx(2.0, abs=1e-6), "boxes": 1}
    html = page.render(d, inline=True)
    assert (
        f'<progress max="1" value="{bu["cap_fraction"]}"' in html
        and "of the monthly cap <span" in html
        and "$10.00" in html  # a cap is a total: in cents
    )
    got = live(settings, now=now)
    ps = json.loads(cli("ps", "--all", "--json").stdout)
    assert [b["session"] for b in got["open_boxes"]] == [r["session"] for r in ps] == ["20261201-0900-real"]
    # an hour at $2/h when polled at ``now``; `ps` counts to its own clock, within 30 s of it
    assert got["open_boxes"][0]["accrued_usd"] == pytest.approx(2.0, abs=1e-6)
    assert ps[0]["accrued_usd"] == pytest.approx(2.0, abs=2.0 * 30 / 3600)
    assert got["open_boxes"][0]["ttl_left_seconds"] == pytest.approx(ps[0]["ttl_left_seconds"], abs=30)
    # the page's script shows the server's words: the burn a rate (4 places), the accrual one
    # rental's cost (cents from $1), the open boxes' sum a total
    worded = page.with_live_text(got)
    box = worded["open_boxes"][0]
    assert box["text"]["usd_per_hour"] == "$2.0000"
    assert box["text"]["accrued_usd"] == f"${box['accrued_usd']:,.2f}" and box["accrued_usd"] >= 1
    assert worded["billing_now"]["text"]["real.usd_per_hour"] == "$2.0000"
    assert "text" not in got["open_boxes"][0]  # the service's dict is left as it was


from tests.support.emulators import emulator_env, runpod_emulator, vast_emulator  # noqa: E402,F401  (fixtures)


def test_the_balance_of_each_keyed_provider(gpuops_home, emulator_env, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no provider config files from the real user
    from gpuops.accounting.dashboard import build
    from gpuops.config import load_settings
    from gpuops.render.dashboard import page

    settings = load_settings(None, {"teardown": {"balance_floor_usd": 20.0}})
    d = build(settings, None, "UTC", read_status=lambda row: None)
    got = {b["provider"]: b["usd"] for b in d["budget"]["balances"]}
    assert got == {"runpod": 100.0, "vast": 100.0}  # the emulated accounts' credit
    html = page.render(d, inline=True)
    assert "runpod balance <span" in html and "$100.00<" in html and "the floor is $20.00" in html
    assert html.count('aria-label="runpod credit above the floor"') == 1


def test_the_trend_equals_ledger_month_for_each_month(dash_env, ledger_url, monkeypatch):
    """The month against the 5 before it: each month's real and simulated USD is what
    `gpuops ledger month YYYY-MM --json` says, the two never added; one month crosses into the next."""
    from gpuops.accounting.dashboard import build, earlier_months
    from gpuops.config import load_settings
    from gpuops.render.dashboard import page

    assert earlier_months("2026-02", 3) == ["2025-12", "2026-01", "2026-02"]
    months = earlier_months("2026-11")
    assert months == ["2026-06", "2026-07", "2026-08", "2026-09", "2026-10", "2026-11"]
    monkeypatch.setenv("GPUOPS_LEDGER_URL", ledger_url)
    d = build(load_settings(None), "2026-11", "UTC", read_status=lambda row: None)
    assert [t["month"] for t in d["trend"]] == months
    for t in d["trend"]:
        r = run_cli(dash_env, "ledger", "month", t["month"], "--tz", "UTC", "--json")
        assert r.returncode == 0, r.stderr
        cli = json.loads(r.stdout)
        assert (t["total_usd"], t["simulated_usd"], t["sessions"]) == (
            cli["total_usd"],
            cli["simulated_usd"],
            cli["sessions"],
        ), t["month"]
    by = {t["month"]: t for t in d["trend"]}
    # hand-computed: s8 runs 1 h either side of Sep/Oct at $1/h; s7 is 29 min of October at $0.40/h
    assert by["2026-09"]["total_usd"] == pytest.approx(1.0, abs=1e-6) and by["2026-09"]["simulated_usd"] == 0
    assert by["2026-10"]["total_usd"] == pytest.approx(1.0 + 0.40 * 1740 / 3600, abs=1e-6)  # s7 bills from 23:31
    assert by["2026-08"] == {
        "month": "2026-08",
        "total_usd": 0,
        "simulated_usd": pytest.approx(0.45, abs=1e-6),
        "sessions": 1,
        "open_sessions": 0,
    }
    assert by["2026-07"]["sessions"] == 0 and by["2026-07"]["total_usd"] == 0
    assert (
        by["2026-11"]["total_usd"] == d["report"]["total_usd"]
        and by["2026-11"]["simulated_usd"] == d["report"]["simulated_usd"] > 0
    )
    html = page.render(d, inline=True)
    line = html.split('<p id="trend-line">')[1].split("</p>")[0]
    assert f"{page.fmt(by['2026-11']['total_usd'])}</span> this month (2026-11) vs" in line
    assert f"{page.fmt(by['2026-10']['total_usd'])}</span> last month (2026-10), real USD" in line
