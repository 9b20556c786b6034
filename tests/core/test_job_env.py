"""The job's environment: `up --env KEY=VAL` / `--env KEY`, `[job] env` names and NAME=VALUE entries,
GPUOPS_JOB_ENV, one resolution (gpuops.config.resolve_job_env); a value never in a message."""

from __future__ import annotations

import json

import pytest

from gpuops.config import load_settings, resolve_job_env, setting_origins
from gpuops.errors import BadInput

SECRET = "s3cr3t-val-9"


def test_entries_resolve_in_order_flags_win_and_unset_config_names_are_left_out():
    environ = {"HF_TOKEN": "hf_x", "TOKENS": "7"}
    got = resolve_job_env(["TOKENS", "HF_TOKEN", "NOT_SET_HERE", "A=1"], ["TOKENS=50", "B="], environ)
    assert got == {"HF_TOKEN": "hf_x", "A": "1", "TOKENS": "50", "B": ""}
    assert list(got) == ["HF_TOKEN", "A", "TOKENS", "B"]  # a later entry takes its place at the end
    assert resolve_job_env([], ["X=a=b"], {}) == {"X": "a=b"}  # the first = splits


def test_a_bare_flag_name_not_set_in_this_shell_is_one_line_naming_the_fix():
    with pytest.raises(BadInput) as e:
        resolve_job_env([], ["HF_TOKEN"], {})
    assert e.value.message == "--env HF_TOKEN: HF_TOKEN is not set in this shell"
    assert e.value.fix == "set it (export HF_TOKEN=...) or pass --env HF_TOKEN=VALUE"


@pytest.mark.parametrize("entry", [f"9X={SECRET}", f"A-B={SECRET}", f"={SECRET}", f"GPUOPS_SESSION={SECRET}"])
def test_a_bad_entry_names_the_name_never_the_value(entry):
    with pytest.raises(BadInput) as e:
        resolve_job_env([], [entry], {})
    assert SECRET not in e.value.message + e.value.fix
    assert e.value.message.startswith("--env: job env ")


def test_settings_take_name_value_entries_from_the_file_and_the_variable(tmp_path):
    cfg = tmp_path / "infra.toml"
    cfg.write_text(f'[job]\nenv = ["TOKENS=50", "SECRETX={SECRET}", "HF_TOKEN"]\n')
    s = load_settings(str(cfg), env={})
    assert s.job.env == ["TOKENS=50", f"SECRETX={SECRET}", "HF_TOKEN"]
    assert load_settings(None, env={"GPUOPS_JOB_ENV": "TOKENS=50, HF_TOKEN"}).job.env == ["TOKENS=50", "HF_TOKEN"]
    assert load_settings(None, env={"GPUOPS_JOB_ENV": '["X=a,b"]'}).job.env == ["X=a,b"]  # JSON: a comma inside
    # `gpuops check` shows where each setting came from: the names, never a value
    shown = dict((k, v) for k, v, _ in setting_origins(s, {}))["job.env"]
    assert shown == ["TOKENS=(set)", "SECRETX=(set)", "HF_TOKEN"]


def test_a_bad_entry_in_the_file_or_the_variable_is_refused_without_its_value(tmp_path):
    cfg = tmp_path / "infra.toml"
    cfg.write_text(f'[job]\nenv = ["TOKENS=50", "9X={SECRET}"]\n')
    with pytest.raises(BadInput) as e:
        load_settings(str(cfg), env={})
    assert e.value.message.startswith(f"{cfg}:2: job.env: job env entry '9X'=... must be NAME or NAME=VALUE")
    assert SECRET not in e.value.message + e.value.fix
    with pytest.raises(BadInput) as e:
        load_settings(None, env={"GPUOPS_JOB_ENV": f"A=1,2BAD={SECRET}"})
    assert e.value.message.startswith("environment variable GPUOPS_JOB_ENV: job env entry '2BAD'=...")
    assert SECRET not in e.value.message + e.value.fix


@pytest.mark.e2e  # the dry run's offers start the local provider's containment probe
def test_up_dry_run_names_the_variables_and_never_shows_a_value(cli, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    r = cli(
        "up",
        "--job",
        str(job),
        "--env",
        "TOKENS=50",
        "--env",
        "SECRETX",
        "--dry-run",
        "--json",
        env={"SECRETX": SECRET},
    )
    assert r.returncode == 0, r
    plan = json.loads(r.stdout)
    assert plan["job"] == str(job) and plan["job_env"] == ["TOKENS", "SECRETX"]
    assert SECRET not in r.stdout + r.stderr and "50" not in json.dumps(plan["job_env"])
    r = cli("up", "--job", str(job), "--env", "TOKENS=50", "--dry-run")
    assert r.returncode == 0 and "would run: " in r.stdout and "with env TOKENS (values not shown)" in r.stdout


def test_up_env_flag_refused_before_anything_is_rented(cli, tmp_path, gpuops_home):
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    r = cli("up", "--job", str(job), "--env", "NOT_SET_IN_THIS_SHELL_X")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "error: --env NOT_SET_IN_THIS_SHELL_X: NOT_SET_IN_THIS_SHELL_X is not set in this shell "
        "(set it (export NOT_SET_IN_THIS_SHELL_X=...) or pass --env NOT_SET_IN_THIS_SHELL_X=VALUE)"
    ]
    assert not (gpuops_home / "ledger.db").exists()  # refused before the ledger is opened: nothing booked
