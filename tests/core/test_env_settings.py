"""GPUOPS_* variables: a typo is an error, and errors name the variable."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuops.config import load_settings
from gpuops.errors import BadInput
from tests.conftest import gpuops_cmd


def test_typo_in_a_teardown_variable_is_refused(gpuops_home, cli_env, tmp_path):
    # Seen: GPUOPS_TEARDOWN_MAX_HOUR=3 was ignored without a word; the box got the 4 h default.
    job = tmp_path / "ok.sh"
    job.write_text("true\n")
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job)),
        env=dict(cli_env, GPUOPS_TEARDOWN_MAX_HOUR="3"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "GPUOPS_TEARDOWN_MAX_HOUR names no setting" in lines[0]
    assert "did you mean GPUOPS_TEARDOWN_MAX_HOURS?" in lines[0]
    assert not (gpuops_home / "ledger.db").exists()


# variable -> (value set, how to read it back from the settings, what it must read)
REAL_SETTINGS = {
    "GPUOPS_TEARDOWN_MAX_HOURS": ("2", lambda s: s.teardown.max_hours, 2.0),
    "GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR": ("2", lambda s: s.providers.local.price_per_hour, 2.0),
    "GPUOPS_LEDGER_URL": ("sqlite:///x.db", lambda s: s.ledger_url(), "sqlite:///x.db"),
    "GPUOPS_UP_READY_TIMEOUT_SECONDS": ("2", lambda s: s.up.ready_timeout_seconds, 2.0),
    "GPUOPS_DATA_DIR": ("/tmp/x", lambda s: s.data_path(), Path("/tmp/x")),
}


@pytest.mark.parametrize("var", list(REAL_SETTINGS))
def test_real_setting_variables_are_accepted(var):
    value, read, expected = REAL_SETTINGS[var]
    assert read(load_settings(None, env={var: value})) == expected
    assert read(load_settings(None, env={})) != expected  # the variable, not the default, set it


@pytest.mark.parametrize(
    "var", ["GPUOPS_SESSION", "GPUOPS_EXPERIMENT", "GPUOPS_METRICS", "GPUOPS_LOCAL_BOX", "GPUOPS_AGENT_SSH_USERS"]
)
def test_variables_that_are_not_settings_are_left_alone(var):
    # gpuops run inside a job sees the job contract's variables; they are not settings.
    assert load_settings(None, env={var: "x"}) == load_settings(None, env={})


def test_providers_typo_is_refused():
    with pytest.raises(BadInput, match="GPUOPS_PROVIDERS_RUNPOD_APIKEY names no setting"):
        load_settings(None, env={"GPUOPS_PROVIDERS_RUNPOD_APIKEY": "k"})


def test_a_bad_value_names_the_variable_not_the_key_path():
    # Seen: "environment (GPUOPS_*): providers.local.price_per_hour: Input should be a valid number".
    with pytest.raises(BadInput) as e:
        load_settings(None, env={"GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR": "abc"})
    assert str(e.value).startswith(
        "environment variable GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR: Input should be a valid number"
    )


def test_a_variable_set_in_lower_case_is_checked_and_named_as_set(tmp_path):
    """gpuops_teardown_max_hours is read like GPUOPS_TEARDOWN_MAX_HOURS (as pydantic-settings did); a bad value
    in lower case was blamed on the "command line" and refused even by `ps` (lenient), a typo was
    "Extra inputs", and a file with a skipped key overrode the lower-case variable."""
    env = {"GPUOPS_DATA_DIR": str(tmp_path / "data")}
    assert load_settings(None, env=dict(env, gpuops_teardown_max_hours="3")).teardown.max_hours == 3.0
    with pytest.raises(
        BadInput, match=r"^environment variable gpuops_teardown_max_hours: Input should be a valid number"
    ):
        load_settings(None, env=dict(env, gpuops_teardown_max_hours="abc"))
    warned: list[str] = []
    s = load_settings(None, env=dict(env, gpuops_teardown_max_hours="abc"), lenient=True, warn=warned.append)
    assert s.teardown.max_hours == 4.0 and "environment variable gpuops_teardown_max_hours:" in warned[0]
    with pytest.raises(
        BadInput,
        match=r"^environment variable Gpuops_Teardown_Max_Hour names no setting \(did you mean GPUOPS_TEARDOWN_MAX_HOURS\?",
    ):
        load_settings(None, env=dict(env, Gpuops_Teardown_Max_Hour="3"))
    cfg = tmp_path / "infra.toml"
    cfg.write_text("[teardown]\nmax_hours = 2\nmax_hour = 1\n")  # lenient: the typo key is skipped, the rest kept
    s = load_settings(str(cfg), env=dict(env, gpuops_teardown_max_hours="3"), lenient=True, warn=warned.append)
    assert s.teardown.max_hours == 3.0  # the variable over the file, as in upper case
    # both spellings set: the later one wins
    both = dict(env, gpuops_teardown_max_hours="3", GPUOPS_TEARDOWN_MAX_HOURS="5")
    assert load_settings(None, env=both).teardown.max_hours == 5.0
    both = dict(env, GPUOPS_TEARDOWN_MAX_HOURS="5", gpuops_teardown_max_hours="3")
    assert load_settings(None, env=both).teardown.max_hours == 3.0


def test_a_bad_number_from_a_variable_is_blamed_on_the_variable():
    # Seen (pydantic-settings): GPUOPS_TEARDOWN_IDLE_MINUTES=nan was "command line: ..." and refused even by `ps`.
    with pytest.raises(
        BadInput, match=r"^environment variable GPUOPS_TEARDOWN_IDLE_MINUTES: Input should be a finite number"
    ):
        load_settings(None, env={"GPUOPS_TEARDOWN_IDLE_MINUTES": "nan"})
    warned: list[str] = []
    s = load_settings(None, env={"GPUOPS_TEARDOWN_IDLE_MINUTES": "nan"}, lenient=True, warn=warned.append)
    assert (
        s.teardown.idle_minutes == 15.0
        and "GPUOPS_TEARDOWN_IDLE_MINUTES: Input should be a finite number; ignored" in warned[0]
    )


def test_a_whole_table_as_json_lies_under_its_key_variables():
    env = {"GPUOPS_TEARDOWN": '{"max_hours": 2, "idle_minutes": "off"}'}
    s = load_settings(None, env=env)
    assert (s.teardown.max_hours, s.teardown.idle_minutes) == (2.0, "off")
    assert load_settings(None, env=dict(env, GPUOPS_TEARDOWN_MAX_HOURS="3")).teardown.max_hours == 3.0
    with pytest.raises(
        BadInput, match=r"^environment variable GPUOPS_TEARDOWN: Input should be less than or equal to 720"
    ):
        load_settings(None, env={"GPUOPS_TEARDOWN": '{"max_hours": 1000}'})


def test_list_variables_are_json_or_comma_separated_text():
    s = load_settings(
        None,
        env={
            "GPUOPS_BOOTSTRAP_PACKAGES": '["a==1", "b"]',
            "GPUOPS_JOB_ENV": "HF_TOKEN, WANDB_KEY",
            "GPUOPS_JOB_RECOVER_ON": "preempted,provider_error",
            "GPUOPS_UP_SPOT": "no",
        },
    )
    assert s.bootstrap.packages == ["a==1", "b"] and s.job.env == ["HF_TOKEN", "WANDB_KEY"]
    assert s.job.recover_on == ["preempted", "provider_error"] and s.up.spot is False
