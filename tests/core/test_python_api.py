"""The Python API (gpuops.plan, gpuops.up, gpuops.books): the command's own service functions, its
errors, and the same ledger row as `gpuops up`; `import gpuops` loads none of it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import gpuops
from gpuops.errors import BadInput
from ledger import Ledger
from tests.conftest import REPO, gpuops_cmd

JOB = 'echo \'{"tokens": 1234}\' >> "$GPUOPS_METRICS"; [ "$TOKENS" = 50 ] && echo tokens-50\n'
# Fields a rental's row holds that differ between two rentals (ids, times, paths, the measured seconds).
PER_RENTAL = {
    "id", "label", "instance_id", "offer_id", "created_at", "instance_created_at", "ready_at", "ended_at",
    "billed_seconds", "cost_usd", "job_seconds", "log_path", "results_path", "last_heartbeat_at",
    "estimated_usd", "job",
}  # fmt: skip


def test_import_gpuops_loads_no_api_until_asked():
    code = "import sys, gpuops; print(sorted(m for m in sys.modules if m.startswith(('gpuops', 'typer', 'msgspec'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    assert out.stdout.strip() == "['gpuops', 'gpuops.version']"  # no API, no typer, no msgspec


def test_the_api_raises_the_commands_errors_before_anything_is_rented(gpuops_home, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    with pytest.raises(BadInput) as e:
        gpuops.up(job, max_hours=0)
    assert (e.value.message, e.value.fix) == (
        "--max-hours must be > 0, got 0",
        "pass the box's time limit in hours, e.g. --max-hours 2",
    )
    with pytest.raises(BadInput, match=r"^--env HF_TOKEN_NOT_SET_X: HF_TOKEN_NOT_SET_X is not set in this shell "):
        gpuops.up(job, env=["HF_TOKEN_NOT_SET_X"])
    with pytest.raises(BadInput, match="^no job: pass --job PATH, a task file with run, or --interactive "):
        gpuops.up()
    assert not (gpuops_home / "ledger.db").exists()


def test_plan_is_the_commands_plan(cli):
    p = gpuops.plan("llama-3-8b", card="a100-80gb-sxm", dtype="bf16", seq=4096, batch=1)
    r = cli("plan", "--model", "llama-3-8b", "--card", "a100-80gb-sxm", "--dtype", "bf16", "--json")
    assert r.returncode == 0, r
    assert p.as_json() == json.loads(r.stdout)
    assert p.model == "llama-3-8b" and [c.card.name for c in p.cards] == ["a100-80gb-sxm"]


@pytest.mark.parametrize(
    ("kwargs", "flags", "line"),
    [
        ({"dtype": ""}, ["--dtype", ""], "--dtype is empty"),
        ({"vendor": " "}, ["--vendor", " "], "--vendor is empty"),
        ({"card": "a100:2", "gpu_count": 4}, ["--card", "a100:2", "--gpu-count", "4"], "--card a100:2 asks for 2 GPUs"),
    ],
)
def test_plan_refuses_what_the_command_refuses(cli, kwargs, flags, line):
    """One check for both doors (rental.request.plan_args): a blank dtype was `auto` to the API."""
    with pytest.raises(BadInput, match="^" + line):
        gpuops.plan("llama-3-8b", **kwargs)
    r = cli("plan", "--model", "llama-3-8b", *flags)
    assert r.returncode == 2 and line in r.stderr, r


def test_api_up_books_the_same_row_as_the_cli(gpuops_home, cli_env, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text(JOB)
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--card", "t4", "--experiment", "api-vs-cli", "--note", "same row",
                   "--env", "TOKENS=50", "--max-hours", "1", "--json"),
        env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    by_cli = json.loads(out.stdout)
    s = gpuops.up(job, card="t4", experiment="api-vs-cli", note="same row", env={"TOKENS": "50"}, max_hours=1)
    assert isinstance(s, gpuops.Session)
    assert (s.end_reason, s.exit_code, s.tokens, s.simulated, s.provider) == ("job_end", 0, 1234, True, "local")
    assert s.cost_usd == pytest.approx(s.seconds / 3600 * s.usd_per_hour, abs=1e-6)
    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    rows = [led.get(by_cli["session"]), led.get(s.session)]
    cli_row, api_row = ({k: v for k, v in dict(r._mapping).items() if k not in PER_RENTAL} for r in rows)
    assert api_row == cli_row
    # judged against what was asked, not against each other alone
    assert {k: cli_row[k] for k in ("experiment", "note", "provider", "card", "gpu_count", "spot", "simulated",
                                     "status", "end_reason", "exit_code", "tokens", "max_hours")} == {
        "experiment": "api-vs-cli", "note": "same row", "provider": "local", "card": "t4", "gpu_count": 1,
        "spot": False, "simulated": True, "status": "closed", "end_reason": "job_end", "exit_code": 0,
        "tokens": 1234, "max_hours": 1.0,
    }  # fmt: skip
    assert rows[1].cost_usd == pytest.approx(s.cost_usd, abs=1e-6)
    assert "tokens-50" in open(s.log).read()


def test_books_month_is_the_commands_month(gpuops_home, cli):
    r = cli("ledger", "month", "2026-11", "--json")
    assert r.returncode == 0, r
    got = gpuops.books.month("2026-11")
    assert got == json.loads(r.stdout)
    assert (got["month"], got["sessions"], got["total_usd"]) == ("2026-11", 0, 0)
    with pytest.raises(BadInput, match="pass the month as YYYY-MM"):
        gpuops.books.month("2026-13")
