"""The team commands as a user types them: `ps` (mine by default, --all with owners), `reconcile`
and `down --all` of the other user through the CLI, and `up` booking owner and account."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpuops.config import load_settings
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger import Ledger
from tests.conftest import gpuops_cmd
from tests.team.conftest import KEYS, snapshot


def as_user(cli, env, *args, user):
    """The CLI run in this process (``cli``: the real entry point) as ``user``, with their keys."""
    e = dict(env, GPUOPS_USER_NAME=user, RUNPOD_API_KEY=KEYS[user]["runpod"], VAST_API_KEY=KEYS[user]["vast"])
    return cli(*args, env=e)


@pytest.mark.parametrize("team_ledger_url", ["sqlite"], indirect=True)
def test_ps_reconcile_down_as_the_other_user(team, markets, cli, tmp_path):
    users = team()
    alice, bob = users["alice"], users["bob"]
    a = alice.rent("runpod", "a-rp")
    bob.rent("runpod", "b-rp")
    env = dict(
        GPUOPS_LEDGER_URL=alice.settings.ledger.url,
        RUNPOD_API_BASE_URL=markets["runpod"].url,
        VAST_URL=markets["vast"].url,
        COLUMNS="200",
    )
    bob_env = dict(env, GPUOPS_DATA_DIR=str(tmp_path / "data-bob"))
    before = snapshot(alice.ledger, a.id)

    r = as_user(cli, bob_env, "ps", "--json", user="bob")
    assert r.returncode == 0, r.stderr
    assert [(x["session"], x["owner"]) for x in json.loads(r.stdout)] == [("b-rp", "bob")]
    r = as_user(cli, bob_env, "ps", "--all", user="bob")
    assert r.returncode == 0 and "alice" in r.stdout and "a-rp" in r.stdout and "owner" in r.stdout
    r = as_user(cli, bob_env, "ps", user="bob")
    assert "a-rp" not in r.stdout and "1 open session(s) of other users not shown" in r.stdout

    r = as_user(cli, bob_env, "reconcile", user="bob")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "left_to_owner" in r.stdout and "closed" not in r.stdout
    r = as_user(cli, bob_env, "down", "--all", user="bob")
    assert r.returncode == 0 and r.stdout.strip() == f"b-rp: destroyed {bob.ledger.get('b-rp').instance_id} (manual)"
    r = as_user(cli, bob_env, "down", "a-rp", user="bob")
    assert r.returncode == 2 and "rented by alice" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert snapshot(alice.ledger, a.id) == before
    assert {i.id for i in markets["runpod"].live("acct-1")} == {a.instance_id}
    alice.provider("runpod").destroy(a.instance_id)


def test_up_books_owner_and_account(gpuops_home, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_USER_NAME", "carol")
    job = tmp_path / "job.sh"
    job.write_text("echo ok\n")
    settings = load_settings(
        None, {"teardown": {"kill_grace_seconds": 1}, "providers": {"local": {"price_per_hour": 1.0}}}
    )
    summ = run_up(UpRequest(job=job, card="a100", provider="local"), settings, Reporter())
    row = Ledger(settings.ledger_url()).get(summ["session"])
    assert row.owner == "carol" and row.account.startswith("local:") and row.end_reason == "job_end"


@pytest.mark.parametrize("name", ["al ice", "-x", "a" * 65, "bob\x1b[2J", "eve\u202e"])
def test_bad_user_name_is_refused(gpuops_home, cli_env, tmp_path, name):
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    r = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--dry-run"),
        env=dict(cli_env, GPUOPS_USER_NAME=name),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        r.returncode == 2 and "GPUOPS_USER_NAME" in r.stderr and "\x1b" not in r.stderr and "\u202e" not in r.stderr
    ), r.stderr
