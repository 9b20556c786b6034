"""Words people read: plurals, the time zone said out loud, $/Mtok defined in --help, no
"slowest step" among 0.00 s steps, durations rounded, and --dry-run naming experiment and note."""

from __future__ import annotations

import json

from gpuops.render import ui
from gpuops.render.session_history import plural
from tests.dashboard.conftest import run_cli


def test_plural():
    assert plural(1, "session") == "1 session"
    assert plural(0, "session") == "0 sessions"
    assert plural(1234, "box", "boxes") == "1,234 boxes"


def test_month_header_names_the_zone_and_counts_right(dash_env):
    r = run_cli(dash_env, "ledger", "month", "2026-10", "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert "2026-10 (days in UTC)" in first and "| 2 sessions |" in first  # s7 (Oct 31) and s8 (Sep 30, 1 h in October)
    r = run_cli(dash_env, "ledger", "month", "2026-11")  # no --tz: the machine's zone, by name
    assert "(days in this machine's time zone, UTC)" in r.stdout.splitlines()[0]


def test_mtok_terms_are_defined_in_help(cli_env):
    for cmd in (["ledger", "month", "--help"], ["ledger", "experiments", "--help"]):
        out = " ".join(run_cli(cli_env, *cmd).stdout.split())
        assert "$/Mtok all-in: every dollar paid per million tokens" in out
        assert "$/Mtok job: only the job's own seconds x the price" in out


def test_slowest_step_only_when_it_took_time(capsys):
    summ = {
        "session": "s",
        "provider": "local",
        "card": "a100",
        "usd_per_hour": 1.0,
        "seconds": 2.0,
        "cost_usd": 0.1,
        "simulated": True,
        "tokens": 0,
        "usd_per_mtoken": None,
        "end_reason": "job_end",
        "exit_code": 0,
        "log": "x",
    }
    ui.render_summary(summ | {"slowest_step": "verify", "slowest_step_seconds": 0.0})
    out = capsys.readouterr().out
    assert "verify" not in out
    ui.render_summary(summ | {"slowest_step": "pip", "slowest_step_seconds": 12.345})
    assert "pip (12.35 s)" in capsys.readouterr().out


def test_show_rounds_measured_seconds(dash_env):
    from ledger import Ledger

    led = Ledger(dash_env["GPUOPS_LEDGER_URL"])
    led.update("s1", job_seconds=6.057000160217285)
    led.engine.dispose()
    r = run_cli(dict(dash_env, COLUMNS="200"), "ledger", "show", "s1")
    assert "6.057" in r.stdout and "6.0570001" not in r.stdout


def test_dry_run_names_experiment_and_note(cli_env, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    note = "try [bold]batch 8[/bold] & <fp8>"
    r = run_cli(
        cli_env, "up", "--job", str(job), "--card", "a100", "--experiment", "kv-sweep", "--note", note, "--dry-run"
    )
    assert r.returncode == 0, r.stderr
    assert f"experiment: kv-sweep; note: {note}" in r.stdout
    r = run_cli(
        cli_env,
        "up",
        "--job",
        str(job),
        "--card",
        "a100",
        "--experiment",
        "kv-sweep",
        "--note",
        note,
        "--dry-run",
        "--json",
    )
    doc = json.loads(r.stdout)
    assert (doc["experiment"], doc["note"]) == ("kv-sweep", note)
