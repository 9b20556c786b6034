"""`gpuops ps` says what each open box has cost so far, from the ledger alone (no connection to any
box): accrued USD, USD/h, TTL left, idle streak and tokens from the last ``live`` status, real and
simulated apart; in the table at 80 and 120 columns and in JSON."""

from __future__ import annotations

import json
import os
import time

import pytest

from ledger import Ledger
from onbox.vocabulary import EventKind


@pytest.fixture
def two_boxes(gpuops_home):
    led = Ledger(os.environ["GPUOPS_LEDGER_URL"])
    now = time.time()
    led.add_session(
        dict(
            id="20261201-090000-real",
            experiment="sweep",
            job="bench.sh",
            provider="runpod",
            card="rtx-4090",
            status="running",
            created_at=now - 1810,
            instance_created_at=now - 1800,
            instance_id="pod-1",
            usd_per_hour=0.34,
            max_hours=4.0,
            simulated=False,
            owner=None,
        )
    )
    led.add_session(
        dict(
            id="20261201-090500-simu",
            experiment="sweep",
            job="bench.sh",
            provider="local",
            card="a100-80gb-sxm",
            status="running",
            created_at=now - 610,
            instance_created_at=now - 600,
            instance_id="local-1",
            usd_per_hour=1.2,
            max_hours=1.0,
            simulated=True,
            owner=None,
        )
    )
    led.event("20261201-090000-real", EventKind.LIVE, {"tokens": 232200, "idle_seconds": 0.0, "by": "up"}, at=now - 5)
    led.event(
        "20261201-090500-simu", EventKind.LIVE, {"tokens": 5000, "idle_seconds": 100.0, "by": "watchdog"}, at=now - 20
    )
    led.engine.dispose()
    return now


def test_ps_json_has_the_live_cost_of_each_box(two_boxes, cli, monkeypatch):
    import socket

    def no_ssh(*a, **k):  # `ps` reads the ledger only
        raise AssertionError("ps opened a connection")

    monkeypatch.setattr(socket, "create_connection", no_ssh)
    out = cli("ps", "--all", "--json")
    assert out.returncode == 0, out.stderr
    real, sim = json.loads(out.stdout)
    took = time.time() - two_boxes
    assert real["session"] == "20261201-090000-real" and real["simulated"] is False
    assert real["cost_usd"] == real["accrued_usd"] and real["accrued_usd"] == pytest.approx(
        0.34 * 1800 / 3600, abs=0.34 * (took + 1) / 3600
    )
    assert real["usd_per_hour"] == 0.34 and real["tokens"] == 232200 and real["idle_seconds"] == 0.0
    assert real["ttl_left_seconds"] == pytest.approx(4 * 3600 - 1800, abs=took + 1)
    assert real["usd_per_mtoken"] == pytest.approx(real["accrued_usd"] / 232200 * 1e6, abs=1e-4)
    assert sim["simulated"] is True and sim["accrued_usd"] == pytest.approx(
        1.2 * 600 / 3600, abs=1.2 * (took + 1) / 3600
    )
    assert sim["idle_seconds"] == pytest.approx(120.0, abs=took + 1)  # the streak booked 20 s ago, still idle
    assert sim["ttl_left_seconds"] == pytest.approx(3600 - 600, abs=took + 1) and sim["tokens"] == 5000


@pytest.mark.parametrize("width", [80, 120])
def test_ps_table_shows_price_accrued_and_ttl_at_any_width(two_boxes, cli, width):
    out = cli("ps", "--all", env={"COLUMNS": str(width)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= width for line in lines), out.stdout
    header = " ".join(lines[1:4])
    for col in ("session", "card", "USD/h", "accrued", "TTL"):
        assert col in header, (col, out.stdout)
    row = next(line for line in lines if "20261201-090000-real" in line)
    assert "$0.3400" in row and "$0.170" in row and ("3h30m" in row or "3h29m" in row)
    sim_row = next(line for line in lines if "20261201-090500-simu" in line)
    assert "$1.2000*" in sim_row and "$0.200" in sim_row and ("50m00s" in sim_row or "49m5" in sim_row)
    # real and simulated never added: one line each under the table
    assert any(line.startswith("real: $0.3400/h now, $0.17") and line.endswith(", 1 box") for line in lines), out.stdout
    assert any(
        line.startswith("simulated* (catalog reference price, never charged): $1.2000/h now, $0.20") for line in lines
    )
    if width == 120:
        assert "tokens" in header and "232,200" in row and "idle" in header and "2m0" in sim_row and "busy" in row


def test_ps_json_and_ledger_show_name_the_session_alike(two_boxes, cli):
    ps = json.loads(cli("ps", "--all", "--json").stdout)[0]
    show = json.loads(cli("ledger", "show", ps["session"], "--json").stdout)
    assert show["session"] == ps["session"] == "20261201-090000-real"


def test_a_running_up_books_tokens_and_ps_shows_them_moving(gpuops_home, cli_env, cli, tmp_path):
    # Seen: `ps --json` said "tokens": 0 and "cost_usd": null while the job had been writing tokens
    # to $GPUOPS_METRICS for 20 s.
    import subprocess

    from tests.conftest import gpuops_cmd

    release = tmp_path / "release"
    job = tmp_path / "job.sh"
    job.write_text(
        '#!/usr/bin/env bash\necho \'{"tokens": 1234}\' >> "$GPUOPS_METRICS"\n'
        f"for i in $(seq 1200); do [ -e {release} ] && exit 0; sleep 0.1; done\nexit 3\n"
    )
    up = subprocess.Popen(
        gpuops_cmd("up", "--job", str(job), "--card", "a100", "--json"),
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        first = None
        while time.monotonic() < deadline:
            rows = json.loads(cli("ps", "--json").stdout or "[]")
            if rows and rows[0]["tokens"] == 1234 and rows[0]["accrued_usd"]:
                first = rows[0]
                break
            time.sleep(0.3)
        assert first is not None, "ps never showed the job's tokens"
        assert first["cost_usd"] == first["accrued_usd"] > 0 and first["simulated"] is True
        assert first["status_at"] is not None and first["idle_seconds"] is not None
        second = first
        while second["accrued_usd"] == first["accrued_usd"] and time.monotonic() < deadline:
            time.sleep(0.2)
            second = json.loads(cli("ps", "--json").stdout)[0]
        assert second["accrued_usd"] > first["accrued_usd"]  # live: the accrual moves between two reads
        assert second["ttl_left_seconds"] < first["ttl_left_seconds"]
        release.touch()
        out, err = up.communicate(timeout=90)
        assert up.returncode == 0, err
        assert json.loads(out)["tokens"] == 1234
    finally:
        release.touch()
        if up.poll() is None:
            up.kill()
            up.communicate(timeout=30)
