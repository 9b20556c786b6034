"""A real `gpuops up` subprocess and the faults a laptop can throw at it: signals, a terminal that
goes away (a pty whose master is closed: writes fail with EIO, as when an SSH session drops), a
pipe whose reader exits (EPIPE), fds closed at start. The helpers wait for ledger STATES with
deadlines, never for fixed times."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import time
from pathlib import Path

from gpuops.config import load_settings
from ledger.store import Ledger
from tests.conftest import gpuops_cmd
from tests.teardown.conftest import wait_for

FAST_ENV = {
    "GPUOPS_TEARDOWN_SAMPLE_SECONDS": "0.3",
    "GPUOPS_TEARDOWN_JOB_END_GRACE_SECONDS": "1.0",
    "GPUOPS_TEARDOWN_KILL_GRACE_SECONDS": "0.5",
    "GPUOPS_TEARDOWN_IDLE_MINUTES": "off",
    "GPUOPS_UP_READY_TIMEOUT_SECONDS": "5",
    "GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR": "1.5",
}
# A job that books 1000 tokens at once, prints a line every 0.05 s, then runs long (the test ends it).
TOKENS_JOB = 'echo \'{"tokens": 1000}\' >> "$GPUOPS_METRICS"\nfor i in $(seq 1 40); do echo "line $i"; sleep 0.05; done\nsleep 120\n'


def up_env(cli_env: dict, **extra: str) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = cli_env["PYTHONPATH"]
    e.update(FAST_ENV)
    e.update(extra)
    return e


def ledger() -> Ledger:
    return Ledger(load_settings().ledger_url())


def only_row(led: Ledger | None = None):
    led = led or ledger()
    rows = led.rows_between(0, 2e10)
    return rows[0] if len(rows) == 1 else None


def has_event(kind: str):
    def pred():
        row = only_row()
        return row is not None and any(e.kind == kind for e in ledger().events(row.id))

    return pred


class UpProc:
    """`gpuops up --job JOB ...` with stdout/stderr on ``output``: "pipe" (we read, then may close
    our end), "pty" (a terminal we may hang up), "closed" (fds 1 and 2 closed at start)."""

    def __init__(self, tmp_path: Path, env: dict, job_body: str, *args: str, output: str = "pipe"):
        job = tmp_path / "job.sh"
        job.write_text(job_body)
        argv = gpuops_cmd("up", "--job", str(job), *args)
        self.master = None
        if output == "pty":
            self.master, slave = pty.openpty()
            self.p = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, start_new_session=True
            )
            os.close(slave)
        elif output == "closed":
            self.p = subprocess.Popen(
                ["bash", "-c", 'exec "$@" >&- 2>&-', "up", *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        else:
            self.p = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )

    def close_output(self) -> None:
        """The terminal/reader goes away: the next write of `up` fails (EIO on a pty, EPIPE on a pipe)."""
        if self.master is not None:
            os.close(self.master)
            self.master = None
        else:
            for f in (self.p.stdout, self.p.stderr):
                if f is not None:
                    f.close()

    def signal(self, sig: int) -> None:
        self.p.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        return self.p.wait(timeout=timeout)

    def cleanup(self) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait()
        if self.master is not None:
            os.close(self.master)
            self.master = None


def box_processes(root: str | Path) -> list[int]:
    """PIDs whose cwd or command line is under the box directory (what the box left running)."""
    root = str(root)
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2] == "Z":
            continue
        if root in cmd or cwd.startswith(root):
            found.append(int(pid))
    return found


def no_box_processes(root, timeout: float = 10.0) -> None:
    wait_for(lambda: not box_processes(root), timeout)


def wait_closed(timeout: float = 30.0):
    return wait_for(lambda: (lambda r: r if r is not None and r.status == "closed" else None)(only_row()), timeout)


def now() -> float:
    return time.time()


def tag() -> str:
    """A name no other process carries: a job starts a process as ``exec -a TAG ...`` (bash) and
    the test follows it by ``tagged(TAG)``. A contained local job has its own PID namespace, so a
    pid it writes down is not this machine's number for it."""
    import uuid

    return f"gpuops-test-{uuid.uuid4().hex}"


def tagged(name: str) -> list[int]:
    """Live (not zombie) pids of this machine whose command line starts with ``name``."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0]
            with open(f"/proc/{p}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if argv0 == name.encode() and state not in ("Z", "X"):
            out.append(int(p))
    return out
