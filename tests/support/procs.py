"""The processes this test run started, found through Linux /proc, so that none outlives the run.

Every process the suite starts inherits three environment variables set by tests/conftest.py:
``PYTEST_GPUOPS_RUN`` (one id per run, shared by the xdist workers), ``PYTEST_GPUOPS_ROOT`` (the
run's temp root, which is also ``TMPDIR``) and ``PYTEST_GPUOPS_TEST`` (the node id of the test that
was running, ``session`` for session-wide servers). Processes that lose their environment on the
way (an sshd session on the stand-in box gets a fresh one) are still found by path: their working
directory, their argv, or their ``GPUOPS_LOCAL_BOX`` marker (onbox/localbox.py) lies under the
run's temp root. Nothing is matched by name, so the machine's own sshd or PostgreSQL, and another
checkout's test run, are never touched.

Stdlib only; Linux only (``/proc``): elsewhere ``scan()`` finds nothing.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

RUN_VAR = "PYTEST_GPUOPS_RUN"
ROOT_VAR = "PYTEST_GPUOPS_ROOT"
TEST_VAR = "PYTEST_GPUOPS_TEST"
BOX_MARKER = "GPUOPS_LOCAL_BOX"  # onbox/localbox.py MARKER
SESSION = "session"


@dataclass
class Proc:
    """One live (not zombie) process: ``env`` holds only the variables above."""

    pid: int
    ppid: int
    pgid: int
    cmdline: str
    cwd: str
    env: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        test = self.env.get(TEST_VAR, "?")
        return f"pid {self.pid} (test {test}, cwd {self.cwd}): {self.cmdline[:300]}"


_KEEP = (RUN_VAR, ROOT_VAR, TEST_VAR, BOX_MARKER)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _exempt() -> set[int]:
    """This process and its ancestors (pytest, xdist's controller, the shell that started it)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            break
        text = stat.decode("ascii", "replace")
        pid = int(text[text.rfind(")") + 2 :].split()[1])
    return out


def scan() -> list[Proc]:
    """Every live process except this one and its ancestors, with its run variables."""
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    skip = _exempt()
    out = []
    for name in names:
        pid = int(name)
        if pid in skip:
            continue
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            continue
        text = stat.decode("ascii", "replace")
        rest = text[text.rfind(")") + 2 :].split()
        if len(rest) < 3 or rest[0] in ("Z", "X"):
            continue
        env_raw = _read(f"/proc/{pid}/environ") or b""
        env = {}
        for item in env_raw.split(b"\0"):
            k, _, v = item.partition(b"=")
            ks = k.decode("utf-8", "replace")
            if ks in _KEEP:
                env[ks] = v.decode("utf-8", "replace")
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        cmd = (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").decode("utf-8", "replace").strip()
        out.append(Proc(pid, int(rest[1]), int(rest[2]), cmd, cwd, env))
    return out


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots if r)


def is_xdist_worker(p: Proc) -> bool:
    """An xdist worker of this run (execnet starts it as ``python -c "import sys;exec(eval(...))"``):
    it carries the run id but is pytest itself, not something a test started."""
    return "exec(eval(sys.stdin.readline()))" in p.cmdline or "execnet" in p.cmdline


def of_run(run_id: str, roots: list[str], procs: list[Proc] | None = None) -> list[Proc]:
    """Processes started by this run: carrying its id, or living (cwd, argv, box marker) under one
    of ``roots`` (the run's temp root). xdist workers are not counted."""
    found = []
    for p in scan() if procs is None else procs:
        if is_xdist_worker(p):
            continue
        if (
            p.env.get(RUN_VAR) == run_id
            or _under(p.cwd, roots)
            or _under(p.env.get(BOX_MARKER, ""), roots)
            or any(r and r in p.cmdline for r in roots)
        ):
            found.append(p)
    return found


def of_test(nodeid: str, run_id: str, roots: list[str], procs: list[Proc] | None = None) -> list[Proc]:
    """Processes a single test of run ``run_id`` left: carrying its node id and the run's id, or
    living under its temp dirs. The run id keeps two suites on one machine (two checkouts, or CI
    beside an engineer's run) that run the same test at once from reaping each other's processes."""
    found = []
    for p in scan() if procs is None else procs:
        ours = p.env.get(TEST_VAR) == nodeid and p.env.get(RUN_VAR) == run_id
        if ours or (
            roots
            and p.env.get(TEST_VAR) != SESSION
            and (_under(p.cwd, roots) or _under(p.env.get(BOX_MARKER, ""), roots) or any(r in p.cmdline for r in roots))
        ):
            if not is_xdist_worker(p):
                found.append(p)
    return found


def wait_gone(find, timeout: float) -> list[Proc]:
    """Call ``find()`` until it returns nothing or ``timeout`` seconds pass; returns what is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = find()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def kill(procs: list[Proc]) -> None:
    """SIGKILL each process, and its whole group when it leads one that is not ours."""
    own = os.getpgrp()
    for p in procs:
        try:
            if p.pgid == p.pid and p.pgid != own:
                os.killpg(p.pgid, signal.SIGKILL)
            else:
                os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass


def signal_held(pid: int, signum: int) -> bool:
    """True when process ``pid`` has taken signal ``signum`` without acting on it by default: the
    signal is no longer pending (for its main thread or the process) and the process ignores or
    catches it (``/proc/<pid>/status``: ``SigPnd``, ``ShdPnd``, ``SigIgn``, ``SigCgt``, hex masks,
    bit ``signum - 1``). False while it is still pending, or when the process is gone or keeps the
    default action (a signal with the default action ends it)."""
    raw = _read(f"/proc/{pid}/status")
    if raw is None:
        return False
    masks = {}
    for line in raw.decode("ascii", "replace").splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd", "SigIgn", "SigCgt"):
            masks[key] = int(value.strip(), 16)
    bit = 1 << (signum - 1)
    if len(masks) < 4 or (masks["SigPnd"] | masks["ShdPnd"]) & bit:
        return False
    return bool((masks["SigIgn"] | masks["SigCgt"]) & bit)
