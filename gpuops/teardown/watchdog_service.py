"""`gpuops watchdog --install | --uninstall | --status`.

The watchdog as a user service that outlives the terminal and comes back after a reboot.

Linux: a systemd user unit (``~/.config/systemd/user/gpuops-watchdog.service``, run by
``systemctl --user``; ``Restart=on-failure``; its output goes to the journal:
``journalctl --user -u gpuops-watchdog``). macOS: a launchd agent
(``~/Library/LaunchAgents/dev.gpuops.watchdog.plist``, loaded into ``gui/<uid>``; ``KeepAlive``
restarts it when it fails; its output goes to ``<data dir>/logs/watchdog.log``). Where neither is
there (a container, CI: no systemd user bus), nothing is written and the user is told the command
to run under their own supervisor (``NoServiceManager``, exit 2).

The service runs ``<this python> -m gpuops watchdog --interval S --env-file FILE [--config PATH]``:
the config file this command found, and FILE (``<user config dir>/gpuops/watchdog.env``, 0600)
holding the variables that shaped this command's settings (every ``GPUOPS_*``, the provider keys
and API URLs, the XDG directories) as ``NAME="value"`` lines (python-dotenv's format). No value is
written into the unit or the plist, which carry paths only; keys in the providers' own files
(``~/.runpod/config.toml``, ``~/.vast_api_key``) are read where they are.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuops.errors import BadInput, GpuopsError

UNIT_NAME = "gpuops-watchdog.service"
LAUNCHD_LABEL = "dev.gpuops.watchdog"
# Variables, besides every GPUOPS_*, that shape what the watchdog sees (gpuops/providers/keys.py:
# the keys and the API base URLs; the XDG directories: where config, data and spool live).
PASSED_VARS = (
    "RUNPOD_API_KEY",
    "VAST_API_KEY",
    "RUNPOD_API_BASE_URL",
    "VAST_URL",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
)
RESTART_SECONDS = 15  # systemd RestartSec / launchd ThrottleInterval: a crash loop costs a line per 15 s, not a CPU
COMMAND_TIMEOUT_S = 30.0  # each systemctl / launchctl call


class NoServiceManager(BadInput):
    """Neither a systemd user manager nor launchd here: nothing was written (exit 2)."""


@dataclass
class ServiceFiles:
    """What ``--install`` writes: the unit (or plist) at ``path`` and the environment file."""

    manager: str  # "systemd" | "launchd"
    path: Path
    text: bytes
    env_path: Path
    env_text: str
    argv: list[str] = field(default_factory=list)


# -- what the service runs ----------------------------------------------------------------------------
def service_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` the service needs to see the same settings, ledger and keys.

    Every ``GPUOPS_*`` and ``PASSED_VARS``, in name order."""
    return {k: environ[k] for k in sorted(environ) if k.startswith("GPUOPS_") or k in PASSED_VARS}


def env_file_text(env: Mapping[str, str]) -> str:
    """``env`` as python-dotenv lines, ``NAME="value"``, read back by ``read_env_file``.

    ``env`` as python-dotenv lines, ``NAME="value"`` (backslash, double quote and newline escaped),
    read back by ``read_env_file``. Raises BadInput for a name that is not a variable name."""
    out = ["# gpuops watchdog service environment (gpuops watchdog --install); secrets: keep it 0600"]
    for k, v in env.items():
        if not k.replace("_", "a").isalnum() or k[0].isdigit():
            raise BadInput(
                f"environment variable name {k!r} cannot be passed to the service", "unset it and run --install again"
            )
        esc = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
        out.append(f'{k}="{esc}"')
    return "\n".join(out) + "\n"


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of an environment file ``path`` (python-dotenv's format).

    Raises BadInput when it is missing, or readable or writable by group or others (it may hold
    provider keys)."""
    try:
        st = path.stat()
    except OSError as e:
        raise BadInput(
            f"--env-file {path}: {e.strerror}", "run `gpuops watchdog --install` again to write it"
        ) from None
    if st.st_mode & 0o077:
        raise BadInput(
            f"--env-file {path} is readable by others (mode {st.st_mode & 0o777:o}); it may hold API keys",
            f"chmod 600 {path}",
        )
    from dotenv import dotenv_values

    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def watchdog_argv(interval: float, env_path: Path, config_file: str | None, python: str | None = None) -> list[str]:
    """The service's command line: this interpreter running ``gpuops watchdog`` (no secret in it)."""
    argv = [
        python or sys.executable,
        "-m",
        "gpuops",
        "watchdog",
        "--interval",
        f"{interval:g}",
        "--env-file",
        str(env_path),
    ]
    if config_file:
        argv += ["--config", str(Path(config_file).resolve())]
    return argv


def systemd_quote(arg: str, executable: bool = False) -> str:
    """One ExecStart word as systemd.service(5) reads it.

    ``%`` doubled (specifiers), ``$`` doubled in the arguments (variable expansion; the executable's
    path is not expanded, so its ``$`` stays single), and wrapped in double quotes (``\\`` and ``"``
    escaped) when it holds a space, a quote, a backslash or a semicolon."""
    a = arg.replace("%", "%%") if executable else arg.replace("%", "%%").replace("$", "$$")
    if a and not any(c.isspace() or c in "\"'\\;" for c in a):
        return a
    return '"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(argv: list[str]) -> str:
    """The systemd user unit running ``argv``.

    Restarted on failure, logging to the journal, started with the user's session manager
    (``default.target``)."""
    return "\n".join(
        [
            "# written by `gpuops watchdog --install`; `gpuops watchdog --uninstall` removes it",
            "[Unit]",
            "Description=gpuops watchdog: job end, idle GPU, TTL, balance floor and monthly cap for every open rental",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            "ExecStart=" + " ".join(systemd_quote(a, executable=i == 0) for i, a in enumerate(argv)),
            "Restart=on-failure",
            f"RestartSec={RESTART_SECONDS}",
            "StandardOutput=journal",
            "StandardError=journal",
            "SyslogIdentifier=gpuops-watchdog",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def render_plist(argv: list[str], log_path: Path) -> bytes:
    """The launchd agent running ``argv``.

    At load, again whenever it exits unsuccessfully (``KeepAlive.SuccessfulExit = false``), its
    output appended to ``log_path``."""
    return plistlib.dumps(
        {
            "Label": LAUNCHD_LABEL,
            "ProgramArguments": list(argv),
            "RunAtLoad": True,
            "KeepAlive": {"SuccessfulExit": False},
            "ThrottleInterval": RESTART_SECONDS,
            "ProcessType": "Background",
            "StandardOutPath": str(log_path),
            "StandardErrorPath": str(log_path),
        }
    )


# -- where, and which manager ------------------------------------------------------------------------
def env_file_path() -> Path:
    """``<user config dir>/gpuops/watchdog.env`` (platformdirs: ``~/.config/gpuops`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("gpuops", appauthor=False)) / "watchdog.env"


def unit_path(manager: str, environ: Mapping[str, str] | None = None) -> Path:
    """Where ``manager``'s file goes.

    ``$XDG_CONFIG_HOME/systemd/user/`` (default ``~/.config``), or ``~/Library/LaunchAgents/`` for
    launchd."""
    env = os.environ if environ is None else environ
    if manager == "launchd":
        return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    base = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "systemd" / "user" / UNIT_NAME


Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def run_command(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a service manager command (``systemctl``/``launchctl``) with a deadline; never a shell."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:g} s")
    except OSError as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))


def detect(platform: str | None = None, run: Runner = run_command) -> str | None:
    """The user service manager here.

    ``launchd`` (macOS with ``launchctl``), ``systemd`` (a ``systemctl`` whose user manager answers:
    ``systemctl --user show-environment``), else None."""
    platform = sys.platform if platform is None else platform
    if platform == "darwin":
        return "launchd" if shutil.which("launchctl") else None
    if shutil.which("systemctl") and run(["systemctl", "--user", "show-environment"]).returncode == 0:
        return "systemd"
    return None


def cron_line(python: str | None = None) -> str:
    """The crontab line that runs one watchdog pass a minute with this interpreter.

    ``--interval 60`` is cron's period, so the views know when a pass is late."""
    import shlex

    return f"* * * * * {shlex.quote(python or sys.executable)} -m gpuops watchdog --once --interval 60"


def no_manager(interval: float) -> NoServiceManager:
    """The one line for a machine without a user service manager, naming what to run instead.

    A supervisor of its own, or the cron line (``cron_line``)."""
    return NoServiceManager(
        "no user service manager here (no systemd user bus, no launchd: a container or CI?); nothing was written",
        f"run `gpuops watchdog --interval {interval:g}` under this machine's own supervisor "
        "(in a container it is the gpuops image's entry point: see README, keeping the watchdog running), "
        f"or from cron (`crontab -e`; cron passes no API key from your shell: keep it in infra.toml): {cron_line()}",
    )


def notify_env(settings: Any, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``[notify]``'s targets added as the service's variables.

    ``GPUOPS_NOTIFY_URLS`` and ``GPUOPS_NOTIFY_DEADMAN_URL``, where the environment does not already
    set them. So the service's 0600 env file carries the URLs whatever file they were read from; they hold
    tokens, and the unit holds paths only."""
    env = dict(environ)
    n = settings.notify
    if n.urls and "GPUOPS_NOTIFY_URLS" not in env:
        env["GPUOPS_NOTIFY_URLS"] = ",".join(n.urls)
    if n.deadman_url and "GPUOPS_NOTIFY_DEADMAN_URL" not in env:
        env["GPUOPS_NOTIFY_DEADMAN_URL"] = n.deadman_url
    return env


# -- install, uninstall, status ----------------------------------------------------------------------
def plan_files(
    manager: str,
    interval: float,
    config_file: str | None,
    environ: Mapping[str, str],
    log_dir: Path,
    python: str | None = None,
) -> ServiceFiles:
    """The files ``--install`` writes for ``manager`` (nothing written yet)."""
    env_path = env_file_path()
    argv = watchdog_argv(interval, env_path, config_file, python)
    text = render_plist(argv, log_dir / "watchdog.log") if manager == "launchd" else render_unit(argv).encode()
    return ServiceFiles(manager, unit_path(manager, environ), text, env_path, env_file_text(service_env(environ)), argv)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` at mode 0600 from its first byte, atomically (a temp file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _write_public(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _checked(run: Runner, argv: list[str]) -> None:
    r = run(argv)
    if r.returncode != 0:
        why = (r.stderr or r.stdout or "").strip().splitlines()
        raise GpuopsError(f"`{' '.join(argv)}` failed (exit {r.returncode}): {why[-1] if why else 'no output'}")


def _launchd_domain() -> str:
    return f"gui/{os.getuid()}"


def install(files: ServiceFiles, run: Runner = run_command) -> list[list[str]]:
    """Write ``files`` and enable the service now and at every login; returns the commands run.

    Raises GpuopsError when the manager refuses (the files stay, ``--uninstall`` removes them)."""
    _write_private(files.env_path, files.env_text)
    _write_public(files.path, files.text)
    if files.manager == "launchd":
        Path(render_log_dir(files)).mkdir(
            parents=True, exist_ok=True, mode=0o700
        )  # launchd opens the log, never creates its folder
        cmds = [
            ["launchctl", "bootout", f"{_launchd_domain()}/{LAUNCHD_LABEL}"],  # a loaded older copy; fails when none
            ["launchctl", "bootstrap", _launchd_domain(), str(files.path)],
        ]
        run(cmds[0])
        _checked(run, cmds[1])
        return cmds
    cmds = [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", UNIT_NAME],
        ["systemctl", "--user", "restart", UNIT_NAME],
    ]  # restart: a running copy takes the new settings
    for c in cmds:
        _checked(run, c)
    return cmds


def render_log_dir(files: ServiceFiles) -> str:
    """The folder of the launchd agent's log file (from its plist)."""
    return str(Path(plistlib.loads(files.text)["StandardOutPath"]).parent)


def uninstall(manager: str, environ: Mapping[str, str] | None = None, run: Runner = run_command) -> dict:
    """Stop and disable the service, remove its file and the environment file; says what was there.

    Idempotent: nothing installed is not an error."""
    path = unit_path(manager, environ)
    was = path.exists()
    if manager == "launchd":
        cmds = [["launchctl", "bootout", f"{_launchd_domain()}/{LAUNCHD_LABEL}"]]
        run(cmds[0])  # not loaded: fine
    else:
        cmds = [["systemctl", "--user", "disable", "--now", UNIT_NAME]]
        run(cmds[0])  # not installed: fine
    for p in (path, env_file_path()):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
    if manager == "systemd":
        cmds.append(["systemctl", "--user", "daemon-reload"])
        run(cmds[-1])
    return {"manager": manager, "path": str(path), "removed": was, "commands": cmds}


def status(manager: str, environ: Mapping[str, str] | None = None, run: Runner = run_command) -> dict:
    """Whether the service is installed and runs, since when.

    ``{"manager","path","installed", "active" (bool),"state" (the manager's words),"since_at" (epoch
    s or None),"pid"}``."""
    path = unit_path(manager, environ)
    out = {
        "manager": manager,
        "path": str(path),
        "installed": path.exists(),
        "active": False,
        "state": "not loaded",
        "since_at": None,
        "pid": None,
    }
    if manager == "launchd":
        r = run(["launchctl", "print", f"{_launchd_domain()}/{LAUNCHD_LABEL}"])
        if r.returncode == 0:
            fields = dict(_launchd_fields(r.stdout))
            out["state"] = fields.get("state", "loaded")
            out["active"] = out["state"] == "running"
            out["pid"] = int(fields["pid"]) if fields.get("pid", "").isdigit() else None
        return out
    r = run(
        [
            "systemctl",
            "--user",
            "show",
            UNIT_NAME,
            "--property=ActiveState,SubState,MainPID,ActiveEnterTimestamp",
            "--timestamp=unix",
        ]
    )
    if r.returncode != 0:
        return out
    props = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    out["state"] = f"{props.get('ActiveState', 'unknown')} ({props.get('SubState', 'unknown')})"
    out["active"] = props.get("ActiveState") == "active"
    pid = props.get("MainPID", "")
    out["pid"] = int(pid) if pid.isdigit() and int(pid) > 0 else None
    since = props.get("ActiveEnterTimestamp", "")
    if out["active"] and since.startswith("@") and since[1:].replace(".", "", 1).isdigit():
        out["since_at"] = float(since[1:])
    return out


def _launchd_fields(text: str):
    """``key = value`` pairs of `launchctl print`'s top level (state, pid, ...)."""
    for line in text.splitlines():
        if line.startswith("\t") and not line.startswith("\t\t") and " = " in line:
            k, v = line.strip().split(" = ", 1)
            yield k, v.strip()


@dataclass
class ServiceOutcome:
    """What ``run_service`` did.

    ``what`` (install, uninstall, status), the ``manager`` (systemd, launchd), ``out`` (the JSON object `watchdog --json` prints) and, for an install, where its log
    goes (``log_dir``: the launchd agent's folder; None under systemd, which keeps it in the journal)."""

    what: str
    manager: str
    out: dict[str, Any]
    log_dir: str | None = None


def run_service(
    what: str, settings: Any, interval: float, last_passes: Callable[[], list] | None = None
) -> ServiceOutcome:
    """Install, uninstall or read the status of the watchdog's user service for ``settings``.

    ``interval``: seconds between passes of the installed watchdog. ``last_passes``: for a status,
    the newest watchdog passes the books hold (``watchdog_passes.last_passes`` of the ledger; the cli
    opens it). Raises NoServiceManager (exit 2) where there is no user service manager, GpuopsError
    (exit 1) when the manager refuses."""
    manager = detect()
    if manager is None:
        raise no_manager(interval)
    if what == "install":
        files = plan_files(
            manager, interval, settings.source, notify_env(settings, os.environ), settings.private_data_path() / "logs"
        )
        cmds = install(files)
        out: dict[str, Any] = {
            "manager": manager,
            "path": str(files.path),
            "env_file": str(files.env_path),
            "command": files.argv,
            "ran": [" ".join(c) for c in cmds],
        }
        return ServiceOutcome(what, manager, out, None if manager == "systemd" else render_log_dir(files))
    if what == "uninstall":
        out = uninstall(manager)
        out["commands"] = [" ".join(c) for c in out["commands"]]
        return ServiceOutcome(what, manager, out)
    out = status(manager)
    out["watchdogs"] = last_passes() if last_passes is not None else []
    return ServiceOutcome(what, manager, out)
