"""This machine as a box (``LocalBox``).

Each process in its own process group, recorded so that the local provider's destroy ends them all.
A box given ``hide`` paths has its job contained (onbox/contain.py, through the job wrapper)."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from gpuops.box.base import (
    GET_MAX_BYTES,
    GET_MAX_FILES,
    READ_INTO_BYTES,
    OutputLines,
    _copy_tree_safely,
    _CopyBudget,
    _local_file,
)
from onbox.jobwrap import CONTAIN_ENV
from onbox.localbox import MARKER as BOX_MARKER

READ_BYTES = 1 << 16  # one read of a command's output: a line without end is handed on in pieces


def _drop(line: str) -> None:
    """An ``on_line`` that keeps nothing (``run`` without one still drains the output)."""


class LocalBox:
    """This machine as a box.

    ``root`` is a directory; each process runs in its own process group, recorded in
    ``root/.gpuops/pgids`` so that the local provider's destroy ends them all. ``local_reads``:
    reading a file of the box is a local read (callers may poll it often). ``hide``: absolute paths
    (gpuops' data dir, spool dirs, config and key files) the job must not see: when given, the job
    wrapper starts the job in its own user, mount and PID namespace where they are covered and the
    box stays visible (``CONTAIN_ENV``, onbox/jobwrap.py); None: the job runs uncontained."""

    local_reads = True

    def __init__(self, root: Path, base_env: dict[str, str] | None = None, hide: list[str] | None = None):
        self.root = str(root)
        self._base_env = dict(base_env or {})
        self._hide = None if hide is None else list(hide)
        Path(self.root, ".gpuops").mkdir(parents=True, exist_ok=True)

    # The job and bootstrap see python3 = the interpreter gpuops runs on (its venv), first on PATH.
    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        from gpuops.box.boxenv import local_box_env

        env = local_box_env(
            os.environ, os.path.abspath(self.root)
        )  # allow-listed, HOME = the box (gpuops/box/boxenv.py)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.update(self._base_env)
        env.update(extra or {})
        # Marks every process of this box, also those that leave its process groups (setsid,
        # daemonize): the local destroy finds them by it (onbox/localbox.py).
        env[BOX_MARKER] = os.path.abspath(self.root)
        if self._hide is not None:
            env[CONTAIN_ENV] = json.dumps({"keep": os.path.abspath(self.root), "hide": self._hide})
        return env

    def _record_pgid(self, pid: int) -> None:
        with open(Path(self.root, ".gpuops", "pgids"), "a", encoding="ascii") as f:
            f.write(f"{pid}\n")

    def _abs(self, path: str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else Path(self.root, p)

    def run(self, command, *, timeout, env=None, on_line=None):
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.root,
            env=self._env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
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
            assert isinstance(proc.stdout, io.BufferedReader)  # stdout=PIPE, buffered: read1 reads what is there
            lines = OutputLines(on_line or _drop)  # whole characters; a line without end in pieces
            while chunk := proc.stdout.read1(READ_BYTES):
                lines.feed(chunk)
            lines.close()
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
            ["bash", "-c", command],
            cwd=self.root,
            env=self._env(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._record_pgid(proc.pid)

    def put(self, local, remote):
        dest = self._abs(remote)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if Path(local).is_dir():
            shutil.copytree(local, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(local, dest)

    def get(self, remote, local, max_bytes: int = GET_MAX_BYTES):
        """Copy ``remote`` to ``local`` by the copy-back rules (module doc); False when absent.

        Raises UnsafeCopy past the caps."""
        src = self._abs(remote)
        self.skipped: list[str] = []
        if not src.exists():
            return False
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        budget = _CopyBudget(max_bytes, GET_MAX_FILES)
        try:
            if src.is_dir():
                _copy_tree_safely(src, local, budget)
            else:
                budget.file(src.stat().st_size)
                with open(src, "rb") as fin, _local_file(local.parent, [local.name]) as fout:
                    while chunk := fin.read(1 << 20):
                        budget.charge(len(chunk))
                        fout.write(chunk)
        finally:
            self.skipped = budget.skipped
        return True

    def read_file(self, remote, offset=0, limit=None):
        try:
            with open(self._abs(remote), "rb") as f:
                f.seek(offset)
                return f.read() if limit is None else f.read(limit)
        except FileNotFoundError:
            return None

    def read_into(self, remote, offset, sink):
        try:
            f = open(self._abs(remote), "rb")
        except FileNotFoundError:
            return False
        with f:
            left = os.fstat(f.fileno()).st_size - offset
            f.seek(offset)
            while left > 0 and (chunk := f.read(min(left, READ_INTO_BYTES))):
                left -= len(chunk)
                sink(chunk)
        return True

    def close(self):
        pass


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists (or is not ours)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
