"""The box: one interface to run, copy and read on a rented machine (SSH) or on this one (local).

Commands are bash command strings run in the box's root directory; every value interpolated into
them must go through ``shlex.quote`` (``q`` below). Secrets never go on a command line: they go in
a 0600 file or in ``env`` (the channel's environment).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Protocol

q = shlex.quote

LineSink = Callable[[str], None]


class Box(Protocol):
    """A session's machine. ``root`` is the absolute directory the session owns on it."""

    root: str

    def run(self, command: str, *, timeout: float, env: dict[str, str] | None = None, on_line: LineSink | None = None) -> int:
        """Run ``command`` (bash) in ``root``, stream stdout+stderr lines to ``on_line``, return
        the exit status. Raises TimeoutError after ``timeout`` seconds (the command is killed)."""
        ...

    def run_detached(self, command: str, *, env: dict[str, str] | None = None) -> None:
        """Start ``command`` in its own session (setsid), not tied to this connection."""
        ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a file or directory to ``remote`` (relative to ``root`` unless absolute)."""
        ...

    def get(self, remote: str, local: Path) -> bool:
        """Copy ``remote`` (file or dir) to ``local``; False when it does not exist."""
        ...

    def read_file(self, remote: str, offset: int = 0) -> bytes | None:
        """Bytes of ``remote`` from ``offset`` on, or None when it does not exist."""
        ...

    def close(self) -> None: ...


class LocalBox:
    """This machine as a box: ``root`` is a directory; each process runs in its own process
    group, recorded in ``root/.gpuops/pgids`` so that the local provider's destroy ends them all."""

    def __init__(self, root: Path, base_env: dict[str, str] | None = None):
        self.root = str(root)
        self._base_env = dict(base_env or {})
        Path(self.root, ".gpuops").mkdir(parents=True, exist_ok=True)

    # The job and bootstrap see python3 = the interpreter gpuops runs on (its venv), first on PATH.
    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.update(self._base_env)
        env.update(extra or {})
        return env

    def _record_pgid(self, pid: int) -> None:
        with open(Path(self.root, ".gpuops", "pgids"), "a", encoding="ascii") as f:
            f.write(f"{pid}\n")

    def _abs(self, path: str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else Path(self.root, p)

    def run(self, command, *, timeout, env=None, on_line=None):
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=self.root, env=self._env(env), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self._record_pgid(proc.pid)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                if on_line:
                    on_line(raw.decode("utf-8", "replace").rstrip("\n"))
            rc = proc.wait()
        except BaseException:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            timer.cancel()
        if expired.is_set():
            raise TimeoutError(f"command ran past {timeout:.0f} s")
        return rc

    def run_detached(self, command, *, env=None):
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=self.root, env=self._env(env), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self._record_pgid(proc.pid)

    def put(self, local, remote):
        dest = self._abs(remote)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if Path(local).is_dir():
            shutil.copytree(local, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(local, dest)

    def get(self, remote, local):
        src = self._abs(remote)
        if not src.exists():
            return False
        local.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, local, dirs_exist_ok=True)
        else:
            shutil.copy2(src, local)
        return True

    def read_file(self, remote, offset=0):
        try:
            with open(self._abs(remote), "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return None

    def close(self):
        pass


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists (or is not ours)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _reap(pgid: int) -> None:
    """Collect exited children of ours in group ``pgid``: a zombie still answers kill(0)."""
    try:
        while os.waitpid(-pgid, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def end_process_groups(pgids: list[int], grace_seconds: float) -> None:
    """TERM every group, wait up to ``grace_seconds`` for them to go, then KILL what is left."""
    alive = [g for g in pgids if _killpg(g, signal.SIGTERM)]
    deadline = time.monotonic() + grace_seconds
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        for g in alive:
            _reap(g)
        alive = [g for g in alive if _killpg(g, 0)]
    for g in alive:
        _killpg(g, signal.SIGKILL)
