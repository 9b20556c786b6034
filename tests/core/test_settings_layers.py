"""Settings (gpuops/config.py): layering, strict file types, the closest name for a file typo with
its line, and emergency commands that still run on a broken infra.toml."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuops.config import load_settings
from gpuops.errors import BadInput
from tests.conftest import gpuops_cmd


def _toml(tmp_path, text: str):
    p = tmp_path / "infra.toml"
    p.write_text(text)
    return str(p)


def test_layers_file_then_environment_then_flags(tmp_path):
    cfg = _toml(tmp_path, "[teardown]\nmax_hours = 1\nidle_minutes = 5\n\n[providers.local]\nprice_per_hour = 0.25\n")
    s = load_settings(cfg, env={})
    assert (s.teardown.max_hours, s.teardown.idle_minutes, s.providers.local.price_per_hour) == (1.0, 5.0, 0.25)
    s = load_settings(cfg, env={"GPUOPS_TEARDOWN_MAX_HOURS": "2", "GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR": "0.5"})
    assert (s.teardown.max_hours, s.teardown.idle_minutes, s.providers.local.price_per_hour) == (2.0, 5.0, 0.5)
    s = load_settings(cfg, {"teardown": {"max_hours": 3}}, env={"GPUOPS_TEARDOWN_MAX_HOURS": "2"})
    assert (s.teardown.max_hours, s.teardown.idle_minutes) == (3.0, 5.0) and s.source == cfg


def test_file_typo_gets_the_closest_name_and_its_line(tmp_path):
    cfg = _toml(tmp_path, "# limits\n[teardown]\nidle_minutes = 5\nmax_hour = 1\n")
    with pytest.raises(BadInput) as e:
        load_settings(cfg, env={})
    assert str(e.value).startswith(f"{cfg}:4: teardown.max_hour: unknown key (did you mean max_hours?)")
    cfg = _toml(tmp_path, "[teardwn]\nmax_hours = 1\n")
    with pytest.raises(BadInput, match=r"infra.toml:1: teardwn: unknown key \(did you mean teardown\?\)"):
        load_settings(cfg, env={})


@pytest.mark.parametrize(
    "text,where",
    [
        ('[teardown]\nmax_hours = "2"\n', ":2: teardown.max_hours: Input should be a valid number"),
        ('[up]\nspot = "yes"\n', ":2: up.spot: Input should be a valid boolean"),
        ("[up]\ndisk_gb = true\n", ":2: up.disk_gb: Input should be a valid number"),
    ],
)
def test_file_types_are_strict(tmp_path, text, where):
    with pytest.raises(BadInput) as e:
        load_settings(_toml(tmp_path, text), env={})
    assert where in str(e.value)
    if '"' in text:
        assert "write it without quotes" in str(e.value)


def test_environment_text_is_parsed_and_integers_stay_numbers(tmp_path):
    s = load_settings(
        _toml(tmp_path, "[teardown]\nmax_hours = 2\n[up]\nspot = false\n"), env={"GPUOPS_UP_SPOT": "true"}
    )
    assert s.teardown.max_hours == 2.0 and s.up.spot is True


def test_a_moved_key_says_where_it_went(tmp_path):
    cfg = _toml(tmp_path, "[storage]\nresults_deadline_seconds = 60\n")
    with pytest.raises(BadInput) as e:
        load_settings(cfg, env={})
    assert str(e.value).startswith(
        f"{cfg}:2: storage.results_deadline_seconds: unknown key (moved: write fetch_deadline_seconds under [teardown])"
    )


def test_lenient_skips_broken_keys_keeps_the_rest_and_warns_once(tmp_path):
    cfg = _toml(
        tmp_path, '[teardown]\nmax_hour = 1\n\n[up]\nspot = "yes"\n\n[ledger]\nurl = "sqlite:////tmp/elsewhere.db"\n'
    )
    lines: list[str] = []
    s = load_settings(cfg, env={"GPUOPS_TEARDOWN_MAX_HOUR": "3"}, lenient=True, warn=lines.append)
    assert s.ledger.url == "sqlite:////tmp/elsewhere.db" and s.teardown.max_hours == 4.0 and s.up.spot is True
    assert len(lines) == 1 and lines[0].startswith("warning: ")
    assert "infra.toml:2: teardown.max_hour: unknown key (did you mean max_hours?)" in lines[0]
    assert "infra.toml:5: up.spot" in lines[0] and "GPUOPS_TEARDOWN_MAX_HOUR names no setting" in lines[0]
    bad = _toml(tmp_path, "[teardown\nmax_hours = 1\n")
    s = load_settings(bad, env={}, lenient=True, warn=lines.append)
    assert s.teardown.max_hours == 4.0 and "malformed TOML" in lines[-1]


def test_emergency_commands_run_on_a_broken_config_and_up_refuses(gpuops_home, cli_env, tmp_path):
    (tmp_path / "infra.toml").write_text("[teardown]\nmax_hour = 1\n")

    def run(*a):
        return subprocess.run(gpuops_cmd(*a), env=cli_env, capture_output=True, text=True, timeout=120, cwd=tmp_path)

    for args in (["ps"], ["down", "--all"], ["ledger", "month"], ["ledger", "sessions"]):
        out = run(*args)
        assert out.returncode == 0, (args, out.stderr)
        warn = [x for x in out.stderr.splitlines() if x.startswith("warning:")]
        assert len(warn) == 1 and "infra.toml:2: teardown.max_hour: unknown key (did you mean max_hours?)" in warn[0], (
            out.stderr
        )
    job = tmp_path / "j.sh"
    job.write_text("true\n")
    up = run("up", "--job", str(job))
    assert up.returncode == 2 and "infra.toml:2: teardown.max_hour: unknown key (did you mean max_hours?)" in up.stderr


def test_settings_import_no_pydantic(cli_env):
    """The settings path is msgspec over tomllib: loading them pulls in neither pydantic nor pydantic-settings."""
    code = "import sys, gpuops.config as c; c.load_settings(None, env={}); print(sorted({'pydantic', 'pydantic_settings'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], env=cli_env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_source_is_not_a_key_of_the_file(tmp_path):
    # Seen (pydantic-settings): "command line: source: Extra inputs are not permitted", blaming a flag.
    cfg = _toml(tmp_path, "[teardown]\nmax_hours = 1\n\nsource = 'x'\n")
    with pytest.raises(BadInput) as e:
        load_settings(cfg, env={})
    assert "infra.toml:4: teardown.source: unknown key" in str(e.value)
    cfg = _toml(tmp_path, "source = 'x'\n")
    with pytest.raises(BadInput, match=r"infra.toml:1: source: unknown key"):
        load_settings(cfg, env={})


def test_bounds_and_choices_read_as_before(tmp_path):
    for text, where in [
        ("[teardown]\nmax_hours = 721\n", ":2: teardown.max_hours: Input should be less than or equal to 720"),
        (
            "[teardown]\nidle_util_percent = -1\n",
            ":2: teardown.idle_util_percent: Input should be greater than or equal to 0",
        ),
        ("[up]\nprovider = 'aws'\n", ":2: up.provider: Input should be 'local', 'runpod', 'vast' or 'any'"),
        ("[job]\nrecover = 1.5\n", ":2: job.recover: Input should be a valid integer"),
        ("[[bootstrap.weights]]\nsha256 = 'ab'\n", "infra.toml: bootstrap.weights.0.source: Field required"),
        (
            "[providers]\nlocal = 3\n",
            ":2: providers.local: Input should be a valid dictionary or instance of LocalProviderSettings",
        ),
    ]:
        with pytest.raises(BadInput) as e:
            load_settings(_toml(tmp_path, text), env={})
        assert where in str(e.value), (text, str(e.value))
