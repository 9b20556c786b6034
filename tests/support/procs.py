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


# --- Runs that died: their owner record and what they left running ---------------------------

SUITE_PREFIX = "gpuops-suite-"  # tests/conftest.py: each run's temp root is <outer tmp>/gpuops-suite-*
OWNER_FILE = ".owner"  # in a run's temp root: "<pid> <start time in clock ticks>" of the pytest that owns it


def _start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot (``/proc/<pid>/stat`` field 22,
    proc(5)); None when it is gone or a zombie."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    rest = stat.decode("ascii", "replace")
    rest_fields = rest[rest.rfind(")") + 2 :].split()
    if len(rest_fields) < 20 or rest_fields[0] in ("Z", "X"):
        return None
    return int(rest_fields[19])


def write_owner(root: str) -> None:
    """Record this process as the owner of run root ``root`` (``OWNER_FILE``)."""
    pid = os.getpid()
    with open(os.path.join(root, OWNER_FILE), "w") as f:
        f.write(f"{pid} {_start_ticks(pid)}\n")


def owner_gone(root: str) -> bool:
    """True only when the pytest that owned run root ``root`` is certainly gone: its owner record
    names a pid that is not alive, or alive with another start time (a reused pid). A root whose
    record is missing or unreadable (a run from before records, one being set up) is not gone:
    doubt keeps it."""
    raw = _read(os.path.join(root, OWNER_FILE))
    try:
        pid_text, ticks_text = (raw or b"").decode("ascii").split()
        pid, ticks = int(pid_text), int(ticks_text)
    except ValueError:
        return False
    return _start_ticks(pid) != ticks


def of_root(root: str, procs: list[Proc] | None = None) -> list[Proc]:
    """Processes of the run whose temp root is ``root``: carrying it as ``ROOT_VAR``, or living
    under it (working directory, box marker, a path in their argv such as PostgreSQL's
    ``-D <root>/gpuops-pg-*/data``). A dead run's xdist workers count too: their servers end with them."""
    base = root.rstrip("/")
    return [
        p
        for p in (scan() if procs is None else procs)
        if p.env.get(ROOT_VAR) == base
        or _under(p.cwd, [base])
        or _under(p.env.get(BOX_MARKER, ""), [base])
        or any(_under(arg.split("=", 1)[-1], [base]) for arg in p.cmdline.split())
    ]


def end_dead_runs(outer: str, grace_s: float = 10.0) -> list[Proc]:
    """End what runs that died left behind (a SIGKILLed pytest runs no teardown): for each
    ``<outer>/gpuops-suite-*`` whose owner is certainly gone (``owner_gone``), TERM every process
    of that root (``of_root``: a PostgreSQL server whose data folder is in it, an sshd, a
    chromium, a job of a local box), KILL what is left after ``grace_s``, then remove the root.
    Returns the processes it signalled. Roots of live runs, and roots in doubt, are untouched."""
    import glob
    import shutil

    ended: list[Proc] = []
    for root in sorted(glob.glob(os.path.join(outer, SUITE_PREFIX + "*"))):
        if not owner_gone(root):
            continue
        left = of_root(root)
        ended += left
        for p in left:
            try:
                os.kill(p.pid, signal.SIGTERM)
            except OSError:
                pass
        left = wait_gone(lambda r=root: of_root(r), grace_s)
        kill(left)
        if not wait_gone(lambda r=root: of_root(r), grace_s):
            shutil.rmtree(root, ignore_errors=True)
    return ended
