"""`gpuops demo start | stop | status | env`: the demo's folder, its background process, its environment.

The demo lives in one folder, ``demo_home()`` (``platformdirs.user_data_dir("gpuops-demo")``:
``~/.local/share/gpuops-demo`` on Linux), never the user's data directory:

- ``data/``: the demo's data directory (``GPUOPS_DATA_DIR``): its SQLite ledger, logs, results,
  gpuops' SSH key and known hosts; it holds gpuops.config's ``SIMULATED_MARKER``, so every command
  pointed at it says SIMULATED and books every rental as simulated;
- ``spool/``, ``spool-fallback/``: the ledger spool (``GPUOPS_SPOOL_DIR``), so a spooled demo write
  is never replayed into the user's own ledger;
- ``box/``: the sshd every emulated instance answers on (host key, config, authorized key, the
  box's home and the stand-in ``nvidia-smi``) and the box's stand-in PID 1 environment
  (``GPUOPS_AGENT_ENVIRON_FILE``, gpuops/emulators/box_key.py: the agent's narrow key);
- ``demo.json``: the running demo (its process, deadline, URLs), written by the process once it
  serves and removed when it ends; ``demo.log``: that process's output.

``start`` runs ``python -m gpuops.demo.server`` in a session of its own and waits (at most
``START_DEADLINE_S``) for ``demo.json``; the process ends itself at its deadline (``--minutes``,
default ``TTL_MINUTES``) or on SIGTERM (``stop``, which waits ``STOP_DEADLINE_S`` before SIGKILL).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuops.errors import BadInput, GpuopsError

HOME_NAME = "gpuops-demo"  # the folder platformdirs names under the user's data directory
TTL_MINUTES = 60.0  # a demo ends itself this long after its start unless stopped first
MAX_TTL_MINUTES = 24 * 60.0
START_DEADLINE_S = 30.0  # the background process serves within this, or start fails and ends it
STOP_DEADLINE_S = 15.0  # SIGTERM, then this long for it to end, then SIGKILL
POLL_S = 0.05
# The demo accounts' keys: the emulators' only keys, and what its environment sets (no secret: they
# open nothing but the emulators on 127.0.0.1).
RUNPOD_KEY = "rp_DEMO_SIMULATED"
VAST_KEY = "vast_DEMO_SIMULATED"
BALANCE_USD = 100.0  # each demo account's credit
SERVER_MODULE = "gpuops.demo.server"
MARKER_TEXT = (
    "gpuops demo's data directory: every rental booked here is simulated (RunPod and Vast.ai emulated "
    "on 127.0.0.1, boxes on this machine); nothing here was rented or charged.\n"
)


def demo_home() -> Path:
    """The demo's folder: ``platformdirs.user_data_dir("gpuops-demo")`` (honours ``XDG_DATA_HOME``)."""
    import platformdirs

    return Path(platformdirs.user_data_dir(HOME_NAME, appauthor=False)).absolute()


@dataclass(frozen=True)
class DemoPaths:
    """Where the demo keeps each thing, under ``home`` (the module docstring)."""

    home: Path

    @property
    def data(self) -> Path:
        """The demo's gpuops data folder (its ledger and SSH key)."""
        return self.home / "data"

    @property
    def spool(self) -> Path:
        """The demo's spool folder."""
        return self.home / "spool"

    @property
    def spool_fallback(self) -> Path:
        """The demo's fallback spool folder."""
        return self.home / "spool-fallback"

    @property
    def box(self) -> Path:
        """The stand-in box's folder (its sshd, its nvidia-smi, its environment)."""
        return self.home / "box"

    @property
    def box_home(self) -> Path:
        """The box's home directory: every job and agent of a demo box runs under it."""
        return self.box / "sshd" / "home"

    @property
    def environ(self) -> Path:
        """The file the box's process 1 environment is written to."""
        return self.box / "pid1-environ"

    @property
    def state(self) -> Path:
        """The running demo's state (``DemoState``, JSON)."""
        return self.home / "demo.json"

    @property
    def log(self) -> Path:
        """The demo process's log."""
        return self.home / "demo.log"


@dataclass(frozen=True)
class DemoState:
    """A running demo as ``demo.json`` holds it.

    ``pid`` of its process, ``deadline`` (epoch s), the emulators' base URLs, ``box`` (``host:port``
    of its sshd, "" when none) and ``box_note`` (why there is none, or what it cannot do)."""

    pid: int
    started_at: float
    deadline: float
    runpod_url: str
    vast_url: str
    box: str
    box_note: str


def prepare(paths: DemoPaths) -> None:
    """Make the demo's folders (0700) and mark its data directory simulated."""
    from gpuops.config import SIMULATED_MARKER

    for d in (paths.home, paths.data, paths.spool, paths.spool_fallback, paths.box):
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)
    marker = paths.data / SIMULATED_MARKER
    if not marker.is_file():
        marker.write_text(MARKER_TEXT, encoding="utf-8")


def read_state(paths: DemoPaths) -> DemoState | None:
    """The running demo, or None: no ``demo.json``, an unreadable one, or its process gone."""
    try:
        data = json.loads(paths.state.read_text(encoding="utf-8"))
        state = DemoState(**{k: data[k] for k in DemoState.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if _is_server(state.pid, paths) else None


def write_state(paths: DemoPaths, state: DemoState) -> None:
    """``demo.json``, replaced at once (a reader never sees half of it), 0600."""
    tmp = paths.state.with_name(paths.state.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(state.__dict__, f)
    os.replace(tmp, paths.state)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, ended but not yet reaped, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _is_server(pid: int, paths: DemoPaths) -> bool:
    """True when ``pid`` is this demo's server process.

    Its command line names the module and the folder: a pid reused by another process is never signalled."""
    args = _cmdline(pid)
    return _alive(pid) and SERVER_MODULE in args and str(paths.home) in args


def _wait_gone(pid: int, deadline_s: float) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(POLL_S)
    return not _alive(pid)


def start(paths: DemoPaths, minutes: float = TTL_MINUTES) -> tuple[DemoState, bool]:
    """Start the demo (or find it running): (its state, True when this call started it).

    Raises BadInput for a lifetime outside (0, ``MAX_TTL_MINUTES``]; GpuopsError when the process does
    not serve within ``START_DEADLINE_S`` (it is ended, and its log's last lines are said)."""
    if not 0 < minutes <= MAX_TTL_MINUTES:
        raise BadInput(
            f"--minutes must be above 0 and at most {MAX_TTL_MINUTES:g}, got {minutes:g}", "e.g. --minutes 60"
        )
    import subprocess
    import sys

    running = read_state(paths)
    if running is not None:
        return running, False
    prepare(paths)
    deadline = time.time() + minutes * 60
    with open(paths.log, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, str(paths.home), f"{deadline:.3f}"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # not ended by this terminal's Ctrl-C or hang-up: by its deadline or `stop`
        )
    end = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < end:
        state = read_state(paths)
        if state is not None and state.pid == proc.pid:
            return state, True
        if proc.poll() is not None:
            break
        time.sleep(POLL_S)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_DEADLINE_S)
    tail = _log_tail(paths)
    raise GpuopsError(
        f"the demo did not start within {START_DEADLINE_S:g} s (exit {proc.returncode}){': ' + tail if tail else ''}",
        f"see {paths.log}",
    )


def _log_tail(paths: DemoPaths) -> str:
    try:
        lines = [ln for ln in paths.log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def stop(paths: DemoPaths) -> bool:
    """End the running demo: SIGTERM, ``STOP_DEADLINE_S`` for it to end, then SIGKILL.

    Returns False when none ran. Whatever it left (its sshd, a box's job or agent) is ended too.
    Raises GpuopsError when the process outlives its SIGKILL's deadline."""
    state = read_state(paths)
    if state is not None:
        try:
            os.kill(state.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not _wait_gone(state.pid, STOP_DEADLINE_S):
            try:
                os.kill(state.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if not _wait_gone(state.pid, STOP_DEADLINE_S):
                raise GpuopsError(f"the demo's process {state.pid} did not end", f"kill -9 {state.pid}")
    _end_leftovers(paths)
    try:
        paths.state.unlink()
    except FileNotFoundError:
        pass
    return state is not None


def _end_leftovers(paths: DemoPaths) -> None:
    """End what the demo's process left: its sshd and every process under the box's home.

    The sshd by its pid file, only when its command line names the demo's config (a SIGKILLed
    server ends none of them)."""
    from gpuops.emulators.sshd import end_processes_under

    pidfile = paths.box / "sshd" / "sshd.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        pid = 0
    if pid and _alive(pid) and str(paths.box / "sshd" / "sshd_config") in _cmdline(pid):
        try:
            os.kill(pid, signal.SIGTERM)
            if not _wait_gone(pid, STOP_DEADLINE_S):
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended meanwhile
            pass
    if paths.box_home.is_dir():
        end_processes_under(paths.box_home)


def environment(paths: DemoPaths, state: DemoState) -> list[tuple[str, str]]:
    """The variables that point gpuops at the demo, as (name, value).

    Its data directory, ledger and spool; the emulators' URLs (``GPUOPS_PROVIDERS_*_URL``: above an
    infra.toml's) and keys; the box's stand-in PID 1 environment; no notification target (the
    user's own are not told)."""
    return [
        ("GPUOPS_DATA_DIR", str(paths.data)),
        ("GPUOPS_LEDGER_URL", f"sqlite:///{paths.data / 'ledger.db'}"),
        ("GPUOPS_SPOOL_DIR", str(paths.spool)),
        ("GPUOPS_SPOOL_FALLBACK_DIR", str(paths.spool_fallback)),
        ("GPUOPS_PROVIDERS_RUNPOD_URL", state.runpod_url),
        ("GPUOPS_PROVIDERS_VAST_URL", state.vast_url),
        ("RUNPOD_API_KEY", RUNPOD_KEY),
        ("VAST_API_KEY", VAST_KEY),
        ("GPUOPS_AGENT_ENVIRON_FILE", str(paths.environ)),
        ("GPUOPS_NOTIFY_URLS", "[]"),
        ("GPUOPS_NOTIFY_DEADMAN_URL", ""),
    ]


# What `demo env` keeps of the shell it points at the demo, so `demo env --unset` gives it back:
# SAVED (exported: a shell pointed at the demo, and the names it had before, space-separated) and
# WAS + NAME (a shell variable, never exported: the value NAME had, copied by the shell itself).
SAVED = "_GPUOPS_DEMO_SAVED"
WAS = "_GPUOPS_DEMO_WAS_"
_NO_STATE = DemoState(0, 0, 0, "", "", "", "")
_URLS = ("GPUOPS_PROVIDERS_RUNPOD_URL", "GPUOPS_PROVIDERS_VAST_URL")  # the values that come from a running demo


def _names() -> list[str]:
    """The variables ``environment`` sets, in its order."""
    return [n for n, _ in environment(DemoPaths(Path("/")), _NO_STATE)]


def export_lines(paths: DemoPaths, state: DemoState, environ: Mapping[str, str] | None = None) -> list[str]:
    """The lines ``eval "$(gpuops demo env)"`` runs: ``export NAME=value`` for each of ``environment``, quoted for a POSIX shell.

    First, in a shell not yet pointed at the demo (no ``SAVED`` in ``environ``, default
    ``os.environ``: the shell's exported variables), what it had: ``WAS<NAME>="$NAME"`` for each
    of those names it has (the shell copies the value: a key is never printed; a shell variable,
    not exported, so no child sees the copy) and ``export SAVED='<those names>'``. A second
    ``demo env`` in that shell keeps the first record (``unset_lines`` gives it back)."""
    env = os.environ if environ is None else environ
    pairs = environment(paths, state)
    lines = []
    if SAVED not in env:
        had = [n for n, _ in pairs if n in env]
        lines += [f'{WAS}{n}="${n}"' for n in had]
        lines.append(f"export {SAVED}={shlex.quote(' '.join(had))}")
    return lines + [f"export {name}={shlex.quote(value)}" for name, value in pairs]


def unset_lines(paths: DemoPaths, environ: Mapping[str, str] | None = None) -> list[str]:
    """The lines ``eval "$(gpuops demo env --unset)"`` runs: the shell back to what it had before ``demo env``.

    With ``export_lines``' record (``SAVED`` in ``environ``, default ``os.environ``): each name the
    shell had gets its value back (from ``WAS<NAME>``, copied by the shell; unset where that copy is
    missing, as in a child shell), the others the demo set are unset, then the record. Without one
    (the variables set by hand, or by a gpuops before the record): only the variables that hold
    what ``demo env`` exports are unset (the URLs only while the demo runs: a stopped one's ports
    are unknown); anything else may be the user's and is left as it is."""
    env = os.environ if environ is None else environ
    names = _names()
    if SAVED in env:
        had = [n for n in env[SAVED].split() if n in names]  # the record is input: only the demo's names
        back = [f'if [ -n "${{{WAS}{n}+x}}" ]; then export {n}="${WAS}{n}"; else unset {n}; fi' for n in had]
        gone = [n for n in names if n not in had]
        return (
            back
            + ([f"unset {' '.join(gone)}"] if gone else [])
            + [f"unset {' '.join([SAVED] + [WAS + n for n in had])}"]
        )
    state = read_state(paths)
    theirs = dict(environment(paths, state or _NO_STATE))
    if state is None:
        for n in _URLS:
            del theirs[n]
    demo = [n for n in names if n in env and n in theirs and env[n] == theirs[n]]
    return [f"unset {' '.join(demo)}"] if demo else []
