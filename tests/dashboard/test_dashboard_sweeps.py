"""The dashboard's sweeps: every live one (open, or a job claimed or running) always, the newest finished ones up
to FINISHED_SWEEPS_SHOWN, and one line saying how many older ones are left out and the command that lists them."""

from __future__ import annotations

import pytest

from gpuops.accounting import dashboard

T0 = 1_790_000_000.0  # the oldest sweep's created_at, epoch s; sweep i was created i hours later


def _seed(url: str) -> None:
    """Sixteen sweeps, created an hour apart (sweep-00 the oldest):

    sweep-00  open, one job claimed          live, the oldest of all
    sweep-01  cancelled, one job running      live: its box is still being ended
    sweep-02  open, one job queued            live: nothing claimed yet
    sweep-03 .. sweep-15  closed, one job done   finished: the newest ten shown (15 .. 06), three left out
    """
    from ledger import Ledger, sweeps as queue

    led = Ledger(url)
    try:
        for i in range(16):
            status, state = {0: ("open", "claimed"), 1: ("cancelled", "running"), 2: ("open", "queued")}.get(
                i, ("closed", "done")
            )
            sweep = {"id": f"sweep-{i:02d}", "name": f"s{i}", "experiment": "e", "status": status,
                     "created_at": T0 + 3600 * i, "max_parallel": 1, "max_usd": None, "max_hours": None,
                     "detached": True, "owner": "test"}  # fmt: skip
            job = {"seq": 0, "name": "j", "state": state, "args_json": "{}", "script_sha256": "0" * 64}
            queue.enqueue(led.engine, sweep, [job], [{"sha256": "0" * 64, "data": b"#!/bin/sh\n", "name": "job.sh"}])
    finally:
        led.engine.dispose()


@pytest.fixture
def seeded(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _seed(url)
    return url


def test_every_live_sweep_is_shown_then_the_newest_finished_and_a_count_of_the_rest(seeded):
    from ledger.reads import LedgerReader

    got = dashboard.sweeps(LedgerReader(seeded))
    assert dashboard.FINISHED_SWEEPS_SHOWN == 10
    assert [w["sweep"] for w in got["sweeps"]] == [
        "sweep-02", "sweep-01", "sweep-00",  # live, newest first: sweep-00 is the oldest of all and still shown
        "sweep-15", "sweep-14", "sweep-13", "sweep-12", "sweep-11",
        "sweep-10", "sweep-09", "sweep-08", "sweep-07", "sweep-06",
    ]  # fmt: skip
    assert [(w["status"], w["running"], w["queued"]) for w in got["sweeps"][:3]] == [
        ("open", 0, 1), ("cancelled", 1, 0), ("open", 1, 0)
    ]  # fmt: skip
    assert got["sweeps_not_shown"] == {"count": 3, "command": "gpuops ledger sweeps --limit 16"}


def test_no_line_when_every_sweep_is_shown(tmp_path):
    from ledger import Ledger, sweeps as queue
    from ledger.reads import LedgerReader

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    led = Ledger(url)
    sweep = {"id": "sweep-a", "name": "a", "experiment": "e", "status": "closed", "created_at": T0,
             "max_parallel": 1, "max_usd": 2.0, "max_hours": None, "detached": False, "owner": "test"}  # fmt: skip
    queue.enqueue(led.engine, sweep, [], [])
    led.engine.dispose()
    got = dashboard.sweeps(LedgerReader(url))
    assert [w["sweep"] for w in got["sweeps"]] == ["sweep-a"] and got["sweeps_not_shown"] is None


def test_the_page_says_how_many_are_not_shown_and_the_command(seeded, cli_env, tmp_path):
    from tests.dashboard.conftest import run_cli

    out = tmp_path / "page.html"
    r = run_cli({**cli_env, "GPUOPS_LEDGER_URL": seeded}, "dashboard", "--tz", "UTC", "--html", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert (
        '<p class="muted" id="sweeps-not-shown"><span class="fig" data-key="sweeps_not_shown.count" '
        "data-value='3'>3</span> older finished sweeps not shown: <code>gpuops ledger sweeps --limit 16</code> "
        "lists every sweep.</p>"
    ) in text
    assert text.count('data-label="sweep">') == 13 and "sweep-00" in text and "sweep-05" not in text
