"""`gpuops ledger sessions`: past sessions newest first, filters, limit, never-cut table, on
SQLite and PostgreSQL."""

from __future__ import annotations

import json

from tests.dashboard.conftest import run_cli


def _ids(env, *args) -> list[str]:
    r = run_cli(env, "ledger", "sessions", "--json", "--tz", "UTC", *args)
    assert r.returncode == 0, r.stderr
    return [s["session"] for s in json.loads(r.stdout)["sessions"]]


def test_newest_first_with_filters(dash_env):
    assert _ids(dash_env) == [
        "s6",
        "s4",
        "s3",
        "s5",
        "s2",
        "s1",
        "s7",
        "s8",
        "s9",
    ]  # s8, s9: the trend's earlier months
    assert _ids(dash_env, "--experiment", "finetune") == ["s6", "s5"]
    assert _ids(dash_env, "--since", "2026-11-05") == ["s6", "s4", "s3"]
    r = run_cli(dash_env, "ledger", "sessions", "--json", "--limit", "2")
    doc = json.loads(r.stdout)
    assert [s["session"] for s in doc["sessions"]] == ["s6", "s4"] and doc["more"] is True
    s4 = doc["sessions"][1]
    assert (s4["cost_usd"], s4["simulated"], s4["tokens"], s4["usd_per_mtoken"], s4["hours"]) == (
        0.45,
        True,
        1_000_000,
        0.45,
        0.5,
    )
    assert doc["sessions"][0]["cost_usd"] is None  # open: no cost yet


def test_table_at_80_columns_cuts_no_number(dash_env):
    env = dict(dash_env, COLUMNS="80")
    r = run_cli(env, "ledger", "sessions", "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    # a rental's cost in cents from $1, to 4 places under $1
    for sid, cost in (("s1", "2.40"), ("s5", "6.40"), ("s3", "0.5251"), ("s4", "0.4500 sim")):
        assert f" {sid} " in r.stdout and cost in r.stdout
    assert "2.4000" not in r.stdout
    # nothing left out: what does not fit moves to a continuation table keyed by the session
    assert "left out for width:" not in r.stdout and "(continued)" in r.stdout and "…" not in r.stdout
    wide = run_cli(dict(dash_env, COLUMNS="200"), "ledger", "sessions", "--tz", "UTC")
    assert "left out" not in wide.stdout and "agent_destroyed" in wide.stdout


def test_bad_input_and_the_pointer_from_unknown_sessions(dash_env):
    r = run_cli(dash_env, "ledger", "sessions", "--since", "2026-11-31")
    assert r.returncode == 2 and "bad date" in r.stderr
    r = run_cli(dash_env, "ledger", "sessions", "--limit", "0")
    assert r.returncode == 2 and "--limit must be >= 1" in r.stderr
    r = run_cli(dash_env, "ledger", "show", "nope")
    assert r.returncode == 2 and "gpuops ledger sessions" in r.stderr
    r = run_cli(dash_env, "ledger", "sessions", "--experiment", "none-such")
    assert r.returncode == 0 and "no sessions of experiment 'none-such'" in r.stdout
