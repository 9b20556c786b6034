"""Progress on waits: a wait over a second shows what it waits for and the seconds elapsed on a
terminal's stderr; nothing when stderr is not a terminal; watchdog says what it did."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

from tests.conftest import REPO, gpuops_cmd

# The wait lasts until the test answers on stdin: on a terminal, once the status line is shown (a
# fixed sleep raced the status thread on a loaded machine: the first frame came after 1.5 s, "2 s").
SCRIPT = """
import sys
from gpuops.render.progress import waiting
with waiting("asking vast for offers"):
    sys.stdin.readline()
print("done", flush=True)
"""


def _run_in_pty(code: str, answer_on: bytes, timeout: float = 30.0) -> tuple[int, str]:
    """Run ``code`` with stderr and stdout on a pseudo-terminal; a line goes to its stdin once
    ``answer_on`` has appeared there (or at the deadline); (exit code, what it wrote)."""
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm-256color", COLUMNS="100")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout

    def answer() -> None:
        if not p.stdin.closed:
            p.stdin.write(b"\n")
            p.stdin.close()

    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
                if answer_on in out:
                    answer()
            elif p.poll() is not None:
                break
        answer()
        return p.wait(timeout=max(1.0, deadline - time.monotonic())), out.decode("utf-8", "replace")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)


def test_a_wait_on_a_terminal_says_what_and_how_long():
    code, out = _run_in_pty(SCRIPT, answer_on=b"asking vast for offers (")
    assert code == 0 and "done" in out
    shown = re.findall(r"asking vast for offers \((\d+) s\)", out)
    assert shown and int(shown[0]) >= 1, out  # shown only after SHOW_AFTER_S (1 s), with the seconds


def test_a_wait_off_a_terminal_writes_nothing():
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        input="\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 0 and p.stdout == "done\n" and p.stderr == ""


def test_watchdog_once_says_when_there_is_nothing_to_do_and_v_prints_each_pass(gpuops_home, cli_env):
    p = subprocess.run(gpuops_cmd("watchdog", "--once", "-v"), env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "nothing to do: no open session needed an action (one reconcile and one tick done)"
    passes = [line for line in p.stderr.splitlines() if " reconcile: " in line or " tick: " in line]
    assert len(passes) == 2 and passes[0].endswith(" s") and "0 actions" in passes[1], p.stderr
    quiet = subprocess.run(
        gpuops_cmd("watchdog", "--once", "--json"), env=cli_env, capture_output=True, text=True, timeout=120
    )
    # Seen: `watchdog --once --format json` printed nothing when idle; a script then had no document to read
    assert quiet.returncode == 0 and json.loads(quiet.stdout) == {
        "session": "",
        "kind": "idle",
        "detail": "nothing to do: no open session needed an action (one reconcile and one tick done)",
    }


REPORTER = """
import sys
from gpuops.cli.up_reporter import ConsoleReporter
r = ConsoleReporter()
r.stage("ready", "waiting for SSH")
sys.stdin.readline()
r.stage("job", "bench.sh")
r.job_line("job says hi")
r.close()
"""


def test_up_stage_that_lasts_shows_its_seconds_until_the_next_line():
    # Seen: "plan: waiting (5 s)" said nothing of what for; each stage's live line names its wait
    code, out = _run_in_pty(REPORTER, answer_on=b"ready: waiting for the box to answer (SSH, or the local box) (")
    assert code == 0, out
    shown = re.findall(r"ready: waiting for the box to answer \(SSH, or the local box\) \((\d+) s\)", out)
    assert shown and int(shown[0]) >= 1 and "job says hi" in out, out
    assert "job running" not in out.split("job says hi")[1]  # the live line stops at the job's first output
