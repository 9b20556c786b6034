"""Inputs a new user typed that gpuops accepted or answered badly (found by hand, 2026-11-29): refused
in process through the CLI entry point (``cli``), except where a real `up` must run."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import gpuops_cmd


@pytest.fixture
def job(tmp_path):
    p = tmp_path / "ok.sh"
    p.write_text("true\n")
    return str(p)


def _run(env, *args):
    return subprocess.run(gpuops_cmd(*args), env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.e2e  # local offers start the containment probe (a onbox/contain.py process)
def test_a_ttl_past_30_days_is_refused_from_flag_env_and_file(job, gpuops_home, cli, tmp_path):
    # Seen: `up --max-hours 1e308` was accepted: a TTL that never fires, and a 300-digit projected cost.
    out = cli("up", "--job", job, "--max-hours", "1e308")
    assert out.returncode == 2 and out.stderr.startswith(
        "error: --max-hours must be at most 720 (30 days), got 1e+308"
    ), out.stderr
    out = cli("up", "--job", job, "--max-hours", "720.0000001")  # was "at most 720 (30 days), got 720"
    assert out.returncode == 2 and out.stderr.startswith(
        "error: --max-hours must be at most 720 (30 days), got 720.0000001 "
    ), out.stderr
    out = cli("up", "--job", job, env={"GPUOPS_TEARDOWN_MAX_HOURS": "721"})
    assert out.returncode == 2 and "GPUOPS_TEARDOWN_MAX_HOURS" in out.stderr and "720" in out.stderr, out.stderr
    cfg = tmp_path / "conf" / "long.toml"  # not ./infra.toml (the cwd), which every later run would read
    cfg.parent.mkdir()
    cfg.write_text("[teardown]\nmax_hours = 5000\n")
    out = cli("up", "--job", job, "--config", str(cfg))
    assert out.returncode == 2 and "teardown.max_hours" in out.stderr and "720" in out.stderr, out.stderr
    ok = cli("up", "--job", job, "--max-hours", "720", "--dry-run")
    assert ok.returncode == 0, ok.stderr
    assert not (gpuops_home / "boxes").exists()


def test_config_that_is_a_directory_says_so(gpuops_home, cli, tmp_path):
    # Seen: `--config DIR` said "config file DIR not found" although DIR exists.
    out = cli("ps", "--config", str(tmp_path))
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        == f"error: config file {tmp_path} is a directory (pass the file itself, e.g. --config {tmp_path / 'infra.toml'})"
    )


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--max-hours", "inf"),
        ("--max-hours", "nan"),
        ("--max-hours", "1e400"),
        ("--max-price", "inf"),
        ("--max-price", "nan"),
    ],
)
def test_non_finite_limits_are_refused(flag, value, job, gpuops_home, cli):
    # Seen: `up --max-hours inf` rented a box with no TTL ("projected cost of max_hours=inf: $inf").
    out = cli("up", "--job", job, flag, value)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag} must be a finite number"), out.stderr
    assert "e.g. " + flag in lines[0]
    assert not (gpuops_home / "ledger.db").exists() and not (gpuops_home / "boxes").exists()


@pytest.mark.parametrize("var", ["GPUOPS_TEARDOWN_MAX_HOURS", "GPUOPS_TEARDOWN_MAX_SESSION_USD", "GPUOPS_UP_MAX_PRICE"])
def test_non_finite_settings_from_environment_are_refused(var, job, gpuops_home, cli):
    out = cli("up", "--job", job, "--dry-run", env={var: "inf"})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "finite number" in out.stderr
    assert "$inf" not in out.stdout


def test_unknown_card_with_no_close_name_points_at_the_catalog(job, gpuops_home, cli):
    # Seen: "see `gpuops plan --help` for the catalog", but plan --help does not list cards.
    out = cli("up", "--job", job, "--card", "nvidia")
    assert out.returncode == 2
    assert "`gpuops cards` lists the cards" in out.stderr  # the list of cards, not of models
    listing = cli("cards")
    assert "a100-80gb-sxm" in listing.stdout and "h100-sxm" in listing.stdout


@pytest.mark.parametrize("exp", ["", "two\nlines", "tab\there", " "])
def test_experiment_name_must_be_one_visible_line(exp, job, gpuops_home, cli):
    # Seen: --experiment "" and a name with a newline were booked, and the month table split the
    # name over two rows (CSV too).
    out = cli("up", "--job", job, "--experiment", exp)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--experiment" in lines[0], out.stderr
    assert not (gpuops_home / "ledger.db").exists()


def test_unicode_and_shell_metacharacters_in_experiment_are_fine(job, gpuops_home, cli_env, tmp_path):
    exp = 'ünï-实验 "$(touch pwned)"'
    out = _run(cli_env, "up", "--job", job, "--experiment", exp, "--json")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "pwned").exists()


def test_ps_shows_whole_session_ids_in_an_80_column_terminal(gpuops_home, cli):
    # Seen: `gpuops ps` in 80 columns printed "202611…", the one thing `gpuops down` needs.
    import time

    from ledger import Ledger

    sid = "20261129-171139-d34b"
    Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").add_session(
        dict(
            id=sid,
            experiment="a-long-experiment-name",
            job="/tmp/job.sh",
            provider="local",
            card="a100-80gb-sxm",
            gpu_count=1,
            spot=False,
            label=f"gpuops-{sid}",
            simulated=True,
            status="running",
            created_at=time.time(),
            instance_id=f"gpuops-{sid}",
            usd_per_hour=1.49,
        )
    )
    out = cli("ps", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    assert sid in out.stdout, out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80


def test_ttl_summary_does_not_print_python_none(gpuops_home, cli_env, tmp_path):
    # Seen: "end reason │ ttl (exit code None)" after --max-hours ended a sleeping job.
    job = tmp_path / "sleep.sh"
    job.write_text("sleep 30\n")
    env = dict(cli_env, GPUOPS_TEARDOWN_KILL_GRACE_SECONDS="0.5", COLUMNS="100")
    out = _run(env, "up", "--job", str(job), "--max-hours", "0.0003")
    assert out.returncode == 1, out.stderr
    assert "None" not in out.stdout, out.stdout
    # The laptop's TTL leaves no exit code; the on-box agent's TTL destroy may win the race and
    # TERM the job first (143). Either way the reason is ttl and no Python None leaks out.
    assert re.search(r"end reason\s*│ ttl ", out.stdout), out.stdout
    assert re.search(r"job exit code\s*│ (- \(the job did not finish\)|143) ", out.stdout), out.stdout


def test_summary_without_exit_code_says_so(capsys):
    from gpuops.render.ui import render_summary

    render_summary(
        {
            "session": "s",
            "provider": "local",
            "card": "t4",
            "usd_per_hour": 0.2,
            "seconds": 3.0,
            "cost_usd": 0.0002,
            "simulated": True,
            "tokens": 0,
            "usd_per_mtoken": None,
            "end_reason": "bootstrap_failed",
            "exit_code": None,
            "log": "/tmp/x.log",
        }
    )
    out = capsys.readouterr().out
    assert (
        re.search(r"end reason\s*│ bootstrap_failed ", out)
        and "- (the job did not finish)" in out
        and "None" not in out
    )


@pytest.mark.parametrize(
    "args", [["logs", "nosuch"], ["down", "nosuch"], ["ledger", "show", "nosuch"], ["ledger", "note", "nosuch", "x"]]
)
def test_unknown_session_names_a_command_that_lists_session_ids(args, gpuops_home, cli):
    # Seen: `logs` said "see `gpuops ledger show` for session ids" (show needs an id) and `down`
    # pointed at `gpuops ledger month`, which prints no session ids.
    out = cli(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "`gpuops ledger sessions`" in lines[0], out.stderr


@pytest.mark.parametrize("special", ["fifo", "/dev/null"])
def test_job_must_be_a_regular_file(special, gpuops_home, cli, tmp_path):
    # Seen: --job on a named pipe booked a row, created a box and died in a shutil traceback;
    # --job /dev/null rented a box for an empty job (and /dev/zero would fill the box's disk).
    import os

    path = special
    if special == "fifo":
        path = str(tmp_path / "job.sh")
        os.mkfifo(path)
    out = cli("up", "--job", path)
    assert out.returncode == 2, out.stderr[-800:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a regular file" in lines[0], out.stderr[-800:]
    assert not (gpuops_home / "ledger.db").exists() and not (gpuops_home / "boxes").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "-3", "0"])
def test_offers_vram_must_be_a_positive_finite_number(value, gpuops_home, cli):
    # Seen: `gpuops offers --vram-gb inf` died in "OverflowError: cannot convert float infinity".
    out = cli("offers", "--vram-gb", value)
    assert out.returncode == 2, out.stderr[-800:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--vram-gb" in lines[0] and "must be a positive number" in lines[0], out.stderr


def test_up_exit_code_job_passes_the_jobs_own_status(gpuops_home, cli_env, tmp_path):
    # The documented exit codes stay the default (a failed job: 1); --exit-code job gives the job's own.
    job = tmp_path / "three.sh"
    job.write_text("exit 3\n")
    env = dict(cli_env, COLUMNS="80")
    plain = _run(env, "up", "--job", str(job))
    assert plain.returncode == 1, plain.stderr
    assert re.search(r"job exit code\s*│ 3 ", plain.stdout), plain.stdout
    scripted = _run(env, "up", "--job", str(job), "--exit-code", "job", "--json")
    assert scripted.returncode == 3, scripted.stderr
    import json

    assert json.loads(scripted.stdout)["exit_code"] == 3
    bad = _run(env, "up", "--job", str(job), "--exit-code", "jobs")
    assert bad.returncode == 2 and "--exit-code 'jobs' is not gpuops or job" in bad.stderr


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_watchdog_interval_must_be_a_finite_number(value, gpuops_home, cli):
    # Seen: `watchdog --once --interval nan` passed the > 0 check and died booking its pass
    # ("IntegrityError: NOT NULL constraint failed: watchdog_passes.interval_seconds", exit 1);
    # `--interval inf` booked a pass that the views never call late.
    out = cli("watchdog", "--once", "--interval", value)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == f"error: --interval must be a finite number of seconds > 0, got {value} (e.g. --interval 30)\n"
    assert not (gpuops_home / "ledger.db").exists()


@pytest.mark.parametrize("command", [["up", "--job", "{job}"], ["offers"], ["plan", "--model", "llama-3-8b"]])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_card_is_refused_not_read_as_no_card(command, value, job, gpuops_home, cli):
    # Seen: `up --card "$CARD"` with CARD unset rented the cheapest card (a t4) as if --card were left out.
    out = cli(*[job if a == "{job}" else a for a in command], "--card", value)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        "error: --card is empty (pass a card, e.g. --card a100 (`gpuops cards` lists them), "
        "or leave --card out for the cheapest card that fits)\n"
    )
    assert not (gpuops_home / "ledger.db").exists() and not (gpuops_home / "boxes").exists()


@pytest.mark.parametrize("command", [["ps"], ["ledger", "month"], ["up", "--job", "{job}"]])
def test_a_data_dir_that_cannot_hold_the_ledger_is_one_line(command, job, tmp_path, cli):
    # Seen: GPUOPS_DATA_DIR naming a file (or a folder under /proc) ended every command in a
    # traceback (NotADirectoryError from the ledger's os.open, FileNotFoundError from its mkdir).
    afile = tmp_path / "not-a-dir"
    afile.write_text("")
    out = cli(
        *[job if a == "{job}" else a for a in command], env={"GPUOPS_DATA_DIR": str(afile), "GPUOPS_LEDGER_URL": None}
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        f"error: the SQLite ledger cannot be created ({afile / 'ledger.db'}: Not a directory) "
        "(point GPUOPS_DATA_DIR (or [ledger] url) at a folder you can write)\n"
    )
    assert afile.read_text() == ""


def test_ledger_sync_without_keys_names_the_settings_section(gpuops_home, cli):
    # Seen: "or  api_key in infra.toml": rich read "[providers.runpod]" in the reason as a style tag and dropped it.
    out = cli("ledger", "sync", env={"RUNPOD_API_KEY": None, "VAST_API_KEY": None, "COLUMNS": "300"})
    assert out.returncode == 4, out.stderr
    assert "or [providers.runpod] api_key in infra.toml (chmod 600)" in out.stdout, out.stdout
    assert "or [providers.vast] api_key in infra.toml (chmod 600)" in out.stdout, out.stdout
    # Seen: "the providers bill $0.0000; the books hold $15.7748", exit 0: read as success in cron.
    assert "the providers bill" not in out.stdout and "total:" not in out.stdout, out.stdout
    assert "nothing compared: no provider's billing was read" in out.stdout, out.stdout
    assert "4 nothing compared" in " ".join(cli("ledger", "sync", "--help").stdout.split())


def test_up_spot_on_local_is_refused_with_the_fix(gpuops_home, cli, tmp_path):
    """Seen: `up --spot` on the local provider rented an on-demand box without a word (RunPod refuses
    `--spot` with the fix). Refused before any row or box, naming the provider with spot and --on-demand."""
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    out = cli("up", "--provider", "local", "--spot", "--card", "a100", "--job", str(job))
    assert out.returncode == 2, out
    assert "error: the local provider has no interruptible (spot) boxes" in out.stderr, out.stderr
    assert "--provider vast" in out.stderr and "--on-demand" in out.stderr, out.stderr
    boxes = gpuops_home / "boxes"
    assert not boxes.exists() or list(boxes.iterdir()) == []
