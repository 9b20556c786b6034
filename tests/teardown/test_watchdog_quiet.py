"""The watchdog daemon's stderr holds its own lines only: none of APScheduler's (a tick that runs
past the interval makes APScheduler warn "skipped: maximum number of running instances reached")."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

from tests.conftest import gpuops_cmd


def test_the_daemon_leaks_no_scheduler_lines(gpuops_home, cli_env):
    p = subprocess.Popen(
        gpuops_cmd("watchdog", "--interval", "0.01", "-v"),
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while (
            sum(" tick: " in line for line in lines) < 30 and time.monotonic() < deadline
        ):  # ticks past 10 ms overlap the next
            time.sleep(0.05)
        assert sum(" tick: " in line for line in lines) >= 30, lines
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        reader.join(timeout=30)
    err = "".join(lines)
    assert lines[0] == "gpuops watchdog: every 0.01 s; Ctrl-C stops it\n"
    ours = [line for line in lines[1:] if " reconcile: " in line or " tick: " in line]
    assert ours == lines[1:] and "apscheduler" not in err.lower(), err
