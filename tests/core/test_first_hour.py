"""The small traps a new user met in the first hour: each answered with the fix, in one line."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.conftest import gpuops_cmd


def test_help_command_lists_never_cut_a_sentence(cli):
    """Seen: `Rent a box, bootstrap it, run JOB, tear it down, book the...` at 80 columns."""
    for args in ((), ("ledger",), ("volumes",)):
        out = cli(*args, "--help", env={"COLUMNS": "80"})
        assert out.returncode == 0, out
        listing = out.stdout.split("Commands:\n", 1)[1]
        assert "..." not in listing, listing
        for line in listing.splitlines():
            assert len(line) <= 80, line
    top = " ".join(cli("--help", env={"COLUMNS": "80"}).stdout.split())
    assert "up Rent a box, bootstrap it, run JOB, tear it down, book the session." in top, top


def _command_paths() -> list[tuple[str, ...]]:
    """Every command of the app, as the words a user types (``("ledger", "export")``)."""
    import typer.main

    from gpuops.cli.app import app

    paths: list[tuple[str, ...]] = []

    def walk(cmd, path: tuple[str, ...]) -> None:
        paths.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            if not sub.hidden:
                walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return paths


def test_no_help_shows_a_python_literal(cli):
    """Seen: `ledger export --help` said `[default: True]` (Python's True, for a flag that is always on)."""
    paths = _command_paths()
    assert ("ledger", "export") in paths and ("up",) in paths
    for path in paths:
        out = cli(*path, "--help", env={"COLUMNS": "80"})
        assert out.returncode == 0, (path, out)
        found = re.findall(r"\b(True|False|None)\b", out.stdout)
        assert not found, (path, found, out.stdout)


def test_plan_help_names_its_two_questions_and_their_usage(cli):
    plan = " ".join(cli("plan", "--help").stdout.split())
    assert "`gpuops plan storage --model M`" in plan and "`gpuops plan spot --card C`" in plan, plan
    storage = cli("plan", "storage", "--help")
    assert storage.returncode == 0 and re.match(r"Usage: .*gpuops plan storage \[OPTIONS\]", storage.stdout), storage
    spot = cli("plan", "spot", "--help")
    assert spot.returncode == 0 and re.match(r"Usage: .*gpuops plan spot \[OPTIONS\]", spot.stdout), spot
    bad = cli("plan", "storage", "--nope")
    assert bad.returncode == 2 and "gpuops plan storage --help`)" in bad.stderr, bad


@pytest.mark.parametrize(
    ("args", "ours"),
    [(("up", "--ttl", "1"), "--max-hours"), (("up", "--ttl=1"), "--max-hours"), (("up", "--gpus", "a100:2"), "--card")],
)
def test_an_option_other_tools_spell_otherwise_names_ours(cli, args, ours):
    """Seen: `up --ttl 1` answered `No such option: --ttl` with no hint of --max-hours."""
    out = cli(*args)
    assert out.returncode == 2 and out.stdout == "", out
    assert len(out.stderr.splitlines()) == 1 and f"; did you mean {ours}?" in out.stderr, out.stderr


def test_a_synonym_the_command_lacks_is_not_suggested(cli):
    out = cli("offers", "--ttl", "1")
    assert out.returncode == 2 and "did you mean" not in out.stderr, out.stderr


def test_up_refuses_a_name_that_looks_like_a_run_id(cli, tmp_path):
    """Seen: `up --name run-a1` was accepted, then `ledger show run-a1` looked for a run and found nothing."""
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    out = cli("up", "--name", "run-a1", "--card", "a100", "--job", str(job))
    assert out.returncode == 2, out
    assert re.search(r"error: --name 'run-a1' looks like a run id .*--name a1", out.stderr), out.stderr


def test_volumes_create_says_there_is_no_key_before_asking_for_a_region(cli):
    """Seen: `volumes create --provider runpod` asked for --region, and only then said there is no key."""
    out = cli(
        "volumes", "create", "--provider", "runpod", "--name", "v1", "--size-gb", "10", env={"RUNPOD_API_KEY": None}
    )
    assert out.returncode == 2, out
    assert out.stderr.startswith("error: no RunPod API key found (set RUNPOD_API_KEY"), out.stderr
    keyed = cli(
        "volumes", "create", "--provider", "runpod", "--name", "v1", "--size-gb", "10", env={"RUNPOD_API_KEY": "k"}
    )
    assert keyed.returncode == 2 and "--region" in keyed.stderr, keyed


@pytest.mark.e2e  # rents a local box: a real process
def test_summary_show_and_dry_run_read_as_words_and_keep_paths_whole(cli, cli_env, tmp_path):
    """Seen: the `up` summary said `a100-40gb-pcie` for `--card a100:2`; `ledger show` split the
    log path mid-word at 80 columns and said `False`/`True`; `--dry-run` said `max_session_usd=None`."""
    data = tmp_path / "a-data-dir-with-a-long-name-as-under-home-dot-local-share" / "gpuops"
    env = {"GPUOPS_DATA_DIR": str(data), "GPUOPS_LEDGER_URL": f"sqlite:///{data / 'ledger.db'}", "COLUMNS": "80"}
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    dry = cli("up", "--card", "a100:2", "--job", str(job), "--dry-run", env=env)
    assert dry.returncode == 0, dry
    teardown = next(line for line in dry.stdout.splitlines() if line.startswith("teardown: "))
    assert "max_session_usd=unset" in teardown and not re.search(r"\b(None|True|False)\b", dry.stdout), dry.stdout
    up = subprocess.run(
        gpuops_cmd("up", "--card", "a100:2", "--job", str(job)),
        env={**cli_env, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert up.returncode == 0, up
    assert re.search(r"│ card +│ a100-40gb-pcie x2 +│", up.stdout), up.stdout
    m = re.search(r"^session (\S+)", up.stdout, re.M)
    assert m is not None, up.stdout
    show = cli("ledger", "show", m.group(1), env=env)
    assert show.returncode == 0, show
    lines = show.stdout.splitlines()
    log = str(data / "logs" / f"{m.group(1)}.log")
    assert len(f"log: {log}") > 80 and f"log: {log}" in lines and "results: -" in lines, show.stdout
    assert not any("log_path" in line for line in lines)  # once, whole, under the tables
    assert re.search(r"│ spot +│ no +│", show.stdout) and re.search(r"│ simulated +│ yes +│", show.stdout), show.stdout
    assert not re.search(r"\b(None|True|False)\b", show.stdout), show.stdout


SHEET = (
    "date,experiment,provider,card,gpu_count,usd_per_hour,hours,cost_usd,simulated,session\n"
    "2026-11-02T10:00:00+00:00,llama-sweep,local,a100-40gb-pcie,2,1.2,0.5,0.6,true,s-0001\n"
    "2026-11-03T10:00:00+00:00,llama-sweep,runpod,rtx-4090,1,0.34,10,3.4,false,s-0002\n"
    "2026-11-04T10:00:00+00:00,bench,runpod,rtx-4090,1,0.34,100,34.0,false,s-0003\n"
)


def _imported(cli, tmp_path) -> dict:
    p = tmp_path / "sheet.csv"
    p.write_text(SHEET)
    out = cli("ledger", "import", str(p), "--tz", "UTC")
    assert out.returncode == 0, out
    return {"COLUMNS": "80"}


def _headers(text: str) -> str:
    return " ".join(line for line in text.splitlines() if line.startswith("┃"))


def test_tables_at_80_columns_keep_the_column_the_command_is_for(cli, tmp_path):
    """Seen at 80 columns: `cards` left out aliases; `ledger sessions` card, start and end reason;
    `ledger month` by card `sim USD` (a local user saw only 0.0000)."""
    env = _imported(cli, tmp_path)
    cards = cli("cards", env=env).stdout
    assert "aliases" in _headers(cards) and "ref" in _headers(cards) and "tesla-t4" in cards, cards
    assert all(len(line) <= 80 for line in cards.splitlines())
    sessions = cli("ledger", "sessions", "--tz", "UTC", env=env).stdout
    heads = _headers(sessions)
    for h in ("session", "experiment", "card", "cost", "started", "end"):
        assert h in heads, (h, sessions)
    assert "left out for width" not in sessions and all(len(line) <= 80 for line in sessions.splitlines())
    for sid in ("s-0001", "s-0002", "s-0003"):
        assert sessions.count(sid) >= 2, sessions  # the id keys the table and its continuation, whole
    month = cli("ledger", "month", "2026-11", "--tz", "UTC", env=env).stdout
    by_card = month[month.index("by card") :]
    assert "sim" in _headers(by_card) and "cost" in _headers(by_card), month


def test_money_reads_at_a_glance(cli, tmp_path):
    """Totals in cents; a single rental under $1 and every rate to 4 places; JSON full precision."""
    env = _imported(cli, tmp_path)
    month = cli("ledger", "month", "2026-11", "--tz", "UTC", env=env).stdout
    assert "spent $37.40 + $0.60 simulated" in " ".join(month.split()), month  # 3.4 + 34.0; 0.6 simulated
    by_card = month[month.index("by card") :]
    assert re.search(r"│ rtx-4090 +│ +37\.40 │", by_card) and "37.4000" not in month, month
    sessions = cli("ledger", "sessions", "--tz", "UTC", env=env).stdout
    assert "0.6000 sim" in sessions and "34.00" in sessions and "34.0000" not in sessions, sessions
    assert re.search(r"│ +3\.40 │", sessions), sessions
    doc = json.loads(cli("ledger", "month", "2026-11", "--tz", "UTC", "--json").stdout)
    assert doc["total_usd"] == pytest.approx(37.4, abs=1e-9)


def test_ps_at_80_columns_names_the_gpu_count(capsys, monkeypatch):
    """Seen: `--card a100:2` showed `a100-40gb-pcie` in `ps` at 80 columns."""
    import time

    from gpuops.render import ui

    monkeypatch.setenv("COLUMNS", "80")
    row = {
        "session": "20261201-095550-80f2",
        "owner": "alice@laptop",
        "experiment": "default",
        "provider": "local",
        "card": "a100-40gb-pcie",
        "gpu_count": 2,
        "status": "running",
        "instance_id": "gpuops-20261201-095550-80f2",
        "usd_per_hour": 1.2,
        "accrued_usd": 0.0123456,
        "simulated": True,
        "ttl_left_seconds": 3600.0,
        "idle_seconds": 0,
        "tokens": 0,
        "created_at": time.time() - 60,
    }
    ui.render_sessions([row], "open sessions")
    out = capsys.readouterr().out
    assert "a100-40gb-pcie x2" in out and "$1.2000*" in out and "$0.0123*" in out, out
    assert all(len(line) <= 80 for line in out.splitlines()), out
