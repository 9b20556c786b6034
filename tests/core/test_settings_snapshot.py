"""gpuops/settings_snapshot.py: the settings `ps`, `watchdog --once` and the ledger reports read back
without pydantic are the full validation's, for defaults, the file and the environment alike;
anything unusual takes the full load; no text of the file or the environment is written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops.config import load_settings
from gpuops.errors import BadInput
from gpuops.settings_snapshot import SNAPSHOT_FILE, SNAPSHOT_SECTIONS, SettingsSnapshot, load
from tests.conftest import gpuops_cmd

SECRET_KEY = "rk_secret_4f1b9c"
SECRET_URL = "postgresql+psycopg://alice:pa55word@db.example/ledger"

CASES = {
    "defaults": ("", {}),
    "file": ('[user]\nname = "alice"\n[up]\nprovider = "vast"\nspot = false\ndisk_gb = 80\n'
             '[teardown]\nmax_hours = 2\nidle_minutes = "off"\nmonthly_cap_usd = 500.5\nlimits_scope = "team"\n'
             f'[ledger]\nurl = "{SECRET_URL}"\n[providers.runpod]\napi_key = "{SECRET_KEY}"\nbilling_increment_seconds = 60\n'
             '[providers.local]\nprice_per_hour = 0.25\n[storage]\nvolume = "runpod:vol-1"\n'
             '[bootstrap]\nweights = ["hf://org/model"]\ncommands = ["echo hi"]\n[job]\nenv = ["HF_TOKEN"]\n', {}),
    "environment over file": ('[teardown]\nmax_hours = 2\n[up]\nspot = false\n',
                              {"GPUOPS_TEARDOWN_MAX_HOURS": "3.5", "GPUOPS_UP_SPOT": "true", "GPUOPS_PROVIDERS_VAST_API_KEY": SECRET_KEY,
                               "GPUOPS_LEDGER_URL": SECRET_URL, "GPUOPS_TEARDOWN_IDLE_MINUTES": "7", "GPUOPS_USER_NAME": "bob"}),
}


def _flat(s) -> dict:
    """Every setting the snapshot keeps, plus the methods, as one comparable dict."""
    out = {"data_dir": s.data_dir, "source": s.source, "data_path": s.data_path(), "ledger_url": s.ledger_url(), "owner": s.owner()}
    for name in SNAPSHOT_SECTIONS:
        out[name] = getattr(s, name).model_dump()
    return out


def _env(tmp_path, extra: dict) -> dict:
    return {"GPUOPS_DATA_DIR": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), **extra}


@pytest.mark.parametrize("case", list(CASES))
def test_read_back_gives_the_full_validations_values(tmp_path, monkeypatch, case):
    text, extra = CASES[case]
    monkeypatch.chdir(tmp_path)
    cfg = None
    if text:
        (tmp_path / "infra.toml").write_text(text)
    env = _env(tmp_path, extra)
    want = load_settings(cfg, env=dict(env))
    first = load(cfg, env=env)
    assert not isinstance(first, SettingsSnapshot)  # the first load is the full one, and is kept
    snap = load(cfg, env=env)
    assert isinstance(snap, SettingsSnapshot)
    assert _flat(snap) == _flat(want) == _flat(first)
    assert snap.source == ("infra.toml" if text else None)
    # what is not kept comes from the full validation, on demand
    assert snap.bootstrap == want.bootstrap and snap.job == want.job and snap.full() == want
    stored = (tmp_path / "data" / SNAPSHOT_FILE).read_text()
    assert SECRET_KEY not in stored and "pa55word" not in stored and "alice" not in stored
    assert ((tmp_path / "data" / SNAPSHOT_FILE).stat().st_mode & 0o777) == 0o600


def test_a_changed_file_or_variable_is_read_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "infra.toml").write_text("[teardown]\nmax_hours = 2\n")
    env = _env(tmp_path, {})
    load(None, env=env)
    assert load(None, env=env).teardown.max_hours == 2.0
    (tmp_path / "infra.toml").write_text("[teardown]\nmax_hours = 3\n")
    s = load(None, env=env)
    assert not isinstance(s, SettingsSnapshot) and s.teardown.max_hours == 3.0
    assert load(None, env=env).teardown.max_hours == 3.0
    s = load(None, env=dict(env, GPUOPS_TEARDOWN_MAX_HOURS="5"))
    assert not isinstance(s, SettingsSnapshot) and s.teardown.max_hours == 5.0
    assert load(None, env=env).teardown.max_hours == 3.0  # the earlier entry is still there


def test_warnings_and_rewritten_text_are_never_kept(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    env = _env(tmp_path, {})
    (tmp_path / "infra.toml").write_text('[teardown]\nmax_hour = 1\n')  # lenient: a warning each time
    for _ in range(2):
        s = load(None, lenient=True, env=env)
        assert not isinstance(s, SettingsSnapshot)
        assert "teardown.max_hour: unknown key" in capsys.readouterr().err
    with pytest.raises(BadInput, match="max_hour: unknown key"):
        load(None, env=env)
    (tmp_path / "infra.toml").write_text('[user]\nname = " alice "\n')  # the validator strips it
    for _ in range(2):
        s = load(None, env=env)
        assert not isinstance(s, SettingsSnapshot) and s.owner() == "alice"
    with pytest.raises(BadInput, match="config file nowhere.toml not found"):
        load("nowhere.toml", env=env)


def test_snapshot_sections_are_read_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = _env(tmp_path, {})
    load(None, env=env)
    snap = load(None, env=env)
    with pytest.raises(AttributeError):
        snap.teardown.max_hours = 9
    with pytest.raises(AttributeError, match="no setting 'max_hour'"):
        _ = snap.teardown.max_hour


def test_hot_commands_read_back_without_pydantic(gpuops_home, cli_env, tmp_path):
    """The second `ps`, `watchdog --once` and `ledger month` import neither pydantic nor typer's
    adapters (lazy imports stay lazy), and say what the first said."""
    (tmp_path / "infra.toml").write_text('[teardown]\nmax_hours = 2\n[user]\nname = "carol"\n')
    probe = ("import sys, runpy; sys.argv = ['gpuops'] + sys.argv[1:]\n"
             "from gpuops.cli.app import main\n"
             "try:\n    main(fast_exit=False)\nexcept SystemExit:\n    pass\n"
             "print('PYDANTIC' if any(m.split('.')[0] in ('pydantic', 'pydantic_settings', 'pydantic_core') for m in sys.modules) else 'NONE',"
             " file=sys.stderr)\n")
    for args in (["ps"], ["watchdog", "--once"], ["ledger", "month", "--tz", "UTC"]):
        outs = []
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", probe, *args], env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            outs.append((r.stdout, r.stderr.strip().splitlines()[-1]))
        # the watchdog line's age ("last pass 0 s ago") moves with the clock between the two runs
        same = [re.sub(r"last pass \d+ (s|min|h|d) ago", "last pass N ago", out) for out, _ in outs]
        assert same[0] == same[1], args
        assert outs[1][1] == "NONE", args
    r = subprocess.run(gpuops_cmd("ps"), env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "open sessions of carol" in r.stdout
    stored = json.loads((gpuops_home / SNAPSHOT_FILE).read_text())
    assert len(stored["entries"]) == 1 and "carol" not in json.dumps(stored)
    assert Path(gpuops_home / SNAPSHOT_FILE).exists()


@pytest.mark.parametrize("garbage", ["", "{", '{"entries": 3}', '{"entries": [{"key": "KEY", "values": {"data_dir": 1}}]}'])
def test_a_broken_snapshot_file_means_a_full_load_and_is_rewritten(tmp_path, monkeypatch, garbage):
    monkeypatch.chdir(tmp_path)
    env = _env(tmp_path, {"GPUOPS_TEARDOWN_MAX_HOURS": "2"})
    load(None, env=env)
    stored = json.loads((tmp_path / "data" / SNAPSHOT_FILE).read_text())
    (tmp_path / "data" / SNAPSHOT_FILE).write_text(garbage.replace("KEY", stored["entries"][0]["key"]))
    s = load(None, env=env)
    assert not isinstance(s, SettingsSnapshot) and s.teardown.max_hours == 2.0
    s = load(None, env=env)
    assert isinstance(s, SettingsSnapshot) and s.teardown.max_hours == 2.0


@pytest.mark.parametrize("kind", ["fifo", "device", "oversized"])
def test_a_snapshot_path_that_is_no_small_file_is_never_read(tmp_path, monkeypatch, kind):
    """A FIFO (or a symlink to /dev/zero) in place of the snapshot made `ps` and `watchdog --once`
    wait forever in open()/read(); a file larger than any snapshot is not read either."""
    import os
    import threading

    from gpuops.settings_snapshot import SNAPSHOT_MAX_BYTES

    monkeypatch.chdir(tmp_path)
    env = _env(tmp_path, {"GPUOPS_TEARDOWN_MAX_HOURS": "2"})
    snap = tmp_path / "data" / SNAPSHOT_FILE
    (tmp_path / "data").mkdir()
    if kind == "fifo":
        os.mkfifo(snap)
    elif kind == "device":
        snap.symlink_to("/dev/null")  # /dev/zero would never end; /dev/null shows a device is refused alike
    else:
        load(None, env=env)
        snap.write_text(snap.read_text() + " " * SNAPSHOT_MAX_BYTES)
    got: list = []
    worker = threading.Thread(target=lambda: got.append(load(None, env=env)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():  # release the blocked open() so the test process can end
        os.close(os.open(snap, os.O_WRONLY | os.O_NONBLOCK)) if kind == "fifo" else None
        pytest.fail("load() blocked on the snapshot path")
    assert not isinstance(got[0], SettingsSnapshot) and got[0].teardown.max_hours == 2.0
    s = load(None, env=env)  # replaced by a regular snapshot file, read back
    assert isinstance(s, SettingsSnapshot) and s.teardown.max_hours == 2.0 and snap.is_file() and not snap.is_symlink()


def test_a_config_file_appearing_during_the_full_load_is_not_kept_under_the_old_key(tmp_path, monkeypatch):
    """load() keyed the user config dir's file; ./infra.toml, created while the full load ran, was
    the one it read. Its max_hours (a number, kept by value) was kept under the first file's key,
    and `watchdog --once` read that TTL back after ./infra.toml was gone."""
    from gpuops import settings_snapshot

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    user = tmp_path / "xdg" / "gpuops" / "infra.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[teardown]\nmax_hours = 2\n")
    env = _env(tmp_path, {})
    real = settings_snapshot._full_load

    def racing(*args):
        (tmp_path / "infra.toml").write_text("[teardown]\nmax_hours = 700\n")
        return real(*args)

    monkeypatch.setattr(settings_snapshot, "_full_load", racing)
    assert load(None, env=env).teardown.max_hours == 700.0  # what was there when it was read
    monkeypatch.setattr(settings_snapshot, "_full_load", real)
    (tmp_path / "infra.toml").unlink()
    assert load_settings(None, env=dict(env)).teardown.max_hours == 2.0
    assert load(None, env=env).teardown.max_hours == 2.0
    assert load(None, env=env).teardown.max_hours == 2.0


def test_two_spellings_of_one_variable_are_never_kept(tmp_path, monkeypatch):
    """gpuops_x and GPUOPS_X: the later in the environment wins; the key (sorted) did not hold
    the order, and the file agreeing with one value let it be kept for the other order."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "infra.toml").write_text("[teardown]\nmax_hours = 5\n")
    env = _env(tmp_path, {})
    first = dict(env, gpuops_teardown_max_hours="3", GPUOPS_TEARDOWN_MAX_HOURS="5")
    second = dict(env, GPUOPS_TEARDOWN_MAX_HOURS="5", gpuops_teardown_max_hours="3")
    for _ in range(2):
        assert load(None, env=first).teardown.max_hours == load_settings(None, env=dict(first)).teardown.max_hours == 5.0
        s = load(None, env=second)
        assert not isinstance(s, SettingsSnapshot) and s.teardown.max_hours == 3.0
