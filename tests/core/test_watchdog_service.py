"""`gpuops watchdog --install/--uninstall/--status`: the rendered systemd unit checked by
`systemd-analyze verify`, the launchd plist read back by plistlib, the systemctl and launchctl
calls made to stand-ins on PATH that record their arguments (no real service starts), secrets kept
out of the unit, and one line (exit 2) where there is no user service manager."""

from __future__ import annotations

import json
import os
import plistlib
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops.teardown import watchdog_service as svc

SECRET = "rp-secret-key-0123456789"


def verify_unit(tmp_path: Path, text: str) -> str:
    """`systemd-analyze verify --user` on ``text`` as gpuops-watchdog.service; returns what it said
    about this unit (the other units installed on the machine are not ours to judge). The user
    manager it simulates needs a runtime dir, short enough for the socket paths of those units."""
    import shutil
    import tempfile

    unit = tmp_path / "units" / svc.UNIT_NAME
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(text)
    run_dir = tempfile.mkdtemp(prefix="sd-", dir="/tmp")
    try:
        env = dict(os.environ, XDG_RUNTIME_DIR=run_dir)
        r = subprocess.run(
            ["systemd-analyze", "verify", "--user", str(unit)], capture_output=True, text=True, timeout=60, env=env
        )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    assert r.returncode == 0 or svc.UNIT_NAME in r.stderr, r.stderr
    return "".join(
        line + "\n" for line in (r.stdout + r.stderr).splitlines() if svc.UNIT_NAME in line or str(unit.parent) in line
    )


def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    argv = svc.watchdog_argv(20, tmp_path / "cfg" / "watchdog.env", None)
    assert verify_unit(tmp_path, svc.render_unit(argv)) == ""


def test_systemd_analyze_catches_a_broken_unit(tmp_path):
    # the check is real: a misspelt key and a bad Restart= value are named
    bad = svc.render_unit(svc.watchdog_argv(20, tmp_path / "e.env", None)).replace(
        "Restart=on-failure", "Restart=sometimes\nRestrat=no"
    )
    said = verify_unit(tmp_path, bad)
    assert "Failed to parse service restart specifier" in said and "Unknown key 'Restrat'" in said


def test_a_path_with_spaces_percent_and_dollar_survives_systemd_quoting(tmp_path):
    odd = tmp_path / "my venv %h $HOME"
    odd.mkdir()
    py = odd / "python"
    py.symlink_to(sys.executable)
    config = odd / "infra.toml"
    config.write_text("")
    argv = svc.watchdog_argv(7.5, odd / "watch dog.env", str(config), python=str(py))
    text = svc.render_unit(argv)
    assert verify_unit(tmp_path, text) == ""
    exec_line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert exec_line.startswith('ExecStart="' + str(py).replace("%", "%%") + '" ')  # the path is not $-expanded
    assert '"' + str(config).replace("%", "%%").replace("$", "$$") + '"' in exec_line  # an argument is
    assert "--interval 7.5" in exec_line


def test_the_plist_reads_back_as_the_launchd_agent(tmp_path):
    argv = svc.watchdog_argv(45, tmp_path / "watchdog.env", str(tmp_path / "infra.toml"))
    plist = plistlib.loads(svc.render_plist(argv, tmp_path / "logs" / "watchdog.log"))
    assert plist["Label"] == svc.LAUNCHD_LABEL
    assert plist["ProgramArguments"] == [
        sys.executable,
        "-m",
        "gpuops",
        "watchdog",
        "--interval",
        "45",
        "--env-file",
        str(tmp_path / "watchdog.env"),
        "--config",
        str(tmp_path / "infra.toml"),
    ]
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}  # restarted when it fails
    assert plist["StandardOutPath"] == plist["StandardErrorPath"] == str(tmp_path / "logs" / "watchdog.log")


def test_env_file_round_trips_through_dotenv(tmp_path):
    env = {
        "GPUOPS_LEDGER_URL": 'postgresql+psycopg://u:p"a\\ss$x@db/gpuops',
        "RUNPOD_API_KEY": SECRET,
        "GPUOPS_NOTE": "two\nlines",
    }
    path = tmp_path / "w.env"
    path.write_text(svc.env_file_text(env))
    path.chmod(0o600)
    assert svc.read_env_file(path) == env
    path.chmod(0o644)
    with pytest.raises(svc.BadInput, match="readable by others"):
        svc.read_env_file(path)


def test_service_env_takes_gpuops_variables_and_provider_keys_only():
    env = {
        "GPUOPS_USER_NAME": "alice",
        "RUNPOD_API_KEY": "k",
        "VAST_URL": "http://127.0.0.1:1",
        "HOME": "/h",
        "AWS_SECRET": "no",
        "XDG_CONFIG_HOME": "/c",
    }
    assert svc.service_env(env) == {
        "GPUOPS_USER_NAME": "alice",
        "RUNPOD_API_KEY": "k",
        "VAST_URL": "http://127.0.0.1:1",
        "XDG_CONFIG_HOME": "/c",
    }


def test_no_service_manager_is_one_line_and_exit_2(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(svc, "detect", lambda *a, **k: None)
    for flag in ("--install", "--uninstall", "--status"):
        r = cli("watchdog", flag, "--interval", "60")
        assert r.returncode == 2, r
        assert "no user service manager here" in r.stderr and "run `gpuops watchdog --interval 60`" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        # Seen: the cron line the README describes was not named.
        assert r.stderr.rstrip().endswith(f"* * * * * {sys.executable} -m gpuops watchdog --once --interval 60)"), (
            r.stderr
        )
    assert not (tmp_path / "xdg-config" / "systemd").exists() and not (tmp_path / "xdg-config" / "gpuops").exists()


def test_install_flags_go_one_at_a_time(cli):
    r = cli("watchdog", "--install", "--once")
    assert r.returncode == 2 and "one at a time" in r.stderr


# -- the manager calls, against stand-ins on PATH ----------------------------------------------------------
STAND_IN = """#!/bin/sh
printf '%s\\n' "$(basename "$0") $*" >> "{log}"
case "$*" in
  "--user show-environment") exit {bus} ;;
  *"show gpuops-watchdog.service"*) printf 'ActiveState=active\\nSubState=running\\nMainPID=4242\\nActiveEnterTimestamp=@1764581000\\n' ;;
  "print gui/"*) printf 'gui/501/dev.gpuops.watchdog = {{\\n\\tactive count = 1\\n\\tstate = running\\n\\tpid = 777\\n}}\\n' ;;
esac
exit 0
"""


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """``systemctl`` and ``launchctl`` on PATH that append ``name args`` to a log; returns a reader."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in ("systemctl", "launchctl"):
        p = bin_dir / name
        p.write_text(STAND_IN.format(log=log, bus=0))
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return lambda: log.read_text().splitlines() if log.exists() else []


@pytest.mark.e2e
def test_install_status_uninstall_on_systemd(cli, stand_ins, tmp_path, gpuops_home):
    cfg = tmp_path / "infra.toml"
    hook = "json://127.0.0.1:9/hook/NOTIFY-TOKEN-1"
    cfg.write_text(f'[teardown]\nmonthly_cap_usd = 50.0\n[notify]\nurls = ["{hook}"]\n')
    r = cli("watchdog", "--install", "--interval", "20", "--config", str(cfg), env={"RUNPOD_API_KEY": SECRET})
    assert r.returncode == 0, r
    unit = tmp_path / "xdg-config" / "systemd" / "user" / svc.UNIT_NAME
    env_file = tmp_path / "xdg-config" / "gpuops" / "watchdog.env"
    assert stand_ins() == [
        "systemctl --user show-environment",
        "systemctl --user daemon-reload",
        f"systemctl --user enable {svc.UNIT_NAME}",
        f"systemctl --user restart {svc.UNIT_NAME}",
    ]
    text = unit.read_text()
    assert SECRET not in text and "Restart=on-failure" in text and "StandardOutput=journal" in text
    assert f"--env-file {env_file}" in text and f"--config {cfg}" in text and "--interval 20" in text
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert svc.read_env_file(env_file)["RUNPOD_API_KEY"] == SECRET
    assert svc.read_env_file(env_file)["GPUOPS_DATA_DIR"] == str(gpuops_home)
    assert svc.read_env_file(env_file)["GPUOPS_NOTIFY_URLS"] == hook  # [notify] carried into the 0600 file
    assert "NOTIFY-TOKEN-1" not in text + r.stdout + r.stderr
    assert verify_unit(tmp_path, text) == ""

    r = cli("watchdog", "--status", "--json")
    assert r.returncode == 0, r
    st = json.loads(r.stdout)
    assert (st["manager"], st["installed"], st["active"], st["pid"], st["since_at"]) == (
        "systemd",
        True,
        True,
        4242,
        "2025-12-01T09:23:20Z",
    )
    assert st["watchdogs"] == []
    r = cli("watchdog", "--status")
    assert (
        "running, active (running) since 2025-12-01T09:23:20Z (pid 4242)" in r.stdout and "no watchdog pass" in r.stdout
    )

    r = cli("watchdog", "--uninstall")
    assert r.returncode == 0 and "removed" in r.stdout
    assert stand_ins()[-2:] == [f"systemctl --user disable --now {svc.UNIT_NAME}", "systemctl --user daemon-reload"]
    assert not unit.exists() and not env_file.exists()
    assert cli("watchdog", "--uninstall").stdout.startswith("no service installed")  # idempotent


@pytest.mark.e2e
def test_no_user_bus_means_no_systemd(stand_ins, tmp_path):
    (tmp_path / "bin" / "systemctl").write_text(STAND_IN.format(log=tmp_path / "calls.log", bus=1))
    assert svc.detect(platform="linux") is None
    assert svc.detect(platform="linux", run=lambda argv: subprocess.CompletedProcess(argv, 0)) == "systemd"


@pytest.mark.e2e
def test_install_status_uninstall_on_launchd(cli, stand_ins, tmp_path, monkeypatch, gpuops_home):
    real = svc.detect
    monkeypatch.setattr(svc, "detect", lambda: real(platform="darwin"))
    r = cli("watchdog", "--install", env={"VAST_API_KEY": SECRET})
    assert r.returncode == 0, r
    plist_path = tmp_path / "home" / "Library" / "LaunchAgents" / f"{svc.LAUNCHD_LABEL}.plist"
    raw = plist_path.read_bytes()
    assert SECRET.encode() not in raw
    plist = plistlib.loads(raw)
    assert plist["ProgramArguments"][3:6] == ["watchdog", "--interval", "30"]
    assert Path(plist["StandardOutPath"]).parent.is_dir()  # launchd does not create the log's folder
    uid = os.getuid()
    assert stand_ins() == [
        f"launchctl bootout gui/{uid}/{svc.LAUNCHD_LABEL}",
        f"launchctl bootstrap gui/{uid} {plist_path}",
    ]
    st = json.loads(cli("watchdog", "--status", "--json").stdout)
    assert (st["manager"], st["active"], st["pid"]) == ("launchd", True, 777)
    assert cli("watchdog", "--uninstall").returncode == 0
    assert not plist_path.exists() and stand_ins()[-1] == f"launchctl bootout gui/{uid}/{svc.LAUNCHD_LABEL}"


@pytest.mark.e2e
def test_the_service_command_line_starts_the_watchdog_with_the_env_file(cli_env, tmp_path):
    # what the unit runs, run once: --env-file's variables reach the settings (the ledger it books in)
    ledger = tmp_path / "other" / "ledger.db"
    env_file = tmp_path / "w.env"
    env_file.write_text(svc.env_file_text({"GPUOPS_LEDGER_URL": f"sqlite:///{ledger}"}))
    env_file.chmod(0o600)
    argv = svc.watchdog_argv(30, env_file, None)
    r = subprocess.run([*argv, "--once"], env=cli_env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    from ledger import Ledger

    passes = Ledger(f"sqlite:///{ledger}").watchdog_passes()
    assert [(p.checked, p.interval_seconds) for p in passes] == [(0, 30.0)]
