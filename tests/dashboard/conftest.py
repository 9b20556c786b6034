"""Dashboard fixtures: the hand-computed books (tests/books) on SQLite and PostgreSQL, a running
`gpuops dashboard` process, a headless chromium. Every process is ended by its fixture."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.books.conftest import _rented, build_books, ledger_url, utc  # noqa: F401  (fixture)
from tests.conftest import REPO, CliResult, cli_in_process, gpuops_cmd
from tests.support.browser import Browser
from tests.support.postgres import postgres_server  # noqa: F401  (fixture)

HOSTILE_NOTE = "<script>window.pwned=1</script> <img src=x onerror=\"window.pwned=2\"> & 'quotes' {{ 7*7 }}"
SERVER_START_S = 90.0


def artifacts_dir() -> Path:
    """Where screenshots and saved pages are kept: $GPUOPS_TEST_ARTIFACTS or <repo>/test-artifacts."""
    return Path(os.environ.get("GPUOPS_TEST_ARTIFACTS") or REPO / "test-artifacts") / "dashboard"


def add_earlier_months(led) -> None:
    """Sessions before November, for the trend (with tests/books' s7, Oct 31 -> Nov 1):

    s8  2026-09-30 23:00 UTC  sweep  runpod rtx-4090  1.00 $/h  7200 s: 1 h in September, 1 h in October
    s9  2026-08-12 10:00 UTC  sim    local  a100-40gb 0.90 $/h  1800 s  0.45 $ SIMULATED
    """
    t8 = utc(2026, 9, 30, 23, 0)
    _rented(led, "s8", t8, price=1.00, started=t8, experiment="sweep", card="rtx-4090")
    led.close("s8", t8 + 7200.0, "job_end", exit_code=0)
    t9 = utc(2026, 8, 12, 10, 0)
    _rented(led, "s9", t9, price=0.90, started=t9, experiment="sim", provider="local", card="a100-40gb", simulated=True)
    led.close("s9", t9 + 1800.0, "job_end", exit_code=0)


def add_sweep(led) -> None:
    """A sweep ``sweep-lr`` (max_usd 20) of 4 jobs: done, running, queued, failed. The done job's run
    holds s1 (2.40 $) and s5 (6.40 $): the sweep has spent 8.80 $, 0.44 of its max_usd."""
    from ledger import sweeps as queue

    t = utc(2026, 11, 3, 9, 0)
    led.add_run(dict(id="run-lr-1", experiment="llama-serve", created_at=t, sweep_id="sweep-lr"))
    for sid in ("s1", "s5"):
        led.update(sid, run_id="run-lr-1")
    sweep = {"id": "sweep-lr", "name": "lr", "experiment": "llama-serve", "status": "open", "created_at": t,
             "max_parallel": 2, "max_usd": 20.0, "max_hours": None, "detached": True, "owner": "test"}  # fmt: skip
    states = [("done", "run-lr-1"), ("running", "run-lr-2"), ("queued", None), ("failed", None)]
    jobs = [{"seq": i, "name": f"LR={i}", "state": st, "run_id": run, "args_json": "{}", "script_sha256": "0" * 64,
             "worst_usd": 10.0, "worst_hours": 1.0} for i, (st, run) in enumerate(states)]  # fmt: skip
    queue.enqueue(led.engine, sweep, jobs, [{"sha256": "0" * 64, "data": b"#!/bin/sh\n", "name": "job.sh"}])


@pytest.fixture
def dash_env(cli_env, ledger_url):  # noqa: F811
    """cli_env pointed at a ledger holding the books of tests/books plus a note full of markup."""
    from ledger import Ledger

    led = Ledger(ledger_url)
    try:
        build_books(led)
        add_earlier_months(led)
        add_sweep(led)
        led.note("s4", HOSTILE_NOTE)
    finally:
        led.engine.dispose()
    env = dict(cli_env)
    env["GPUOPS_LEDGER_URL"] = ledger_url
    env["TZ"] = "UTC"
    return env


def run_cli(env: dict, *args: str) -> CliResult:
    """``gpuops *args`` with ``env`` as its whole environment, in this process (``cli_in_process``):
    what a command reads and prints is the same code in a process of its own, which would pay
    the imports again (0.6-0.9 s of CPU each) for every comparison."""
    return cli_in_process(*args, env=env, whole_env=True)


@pytest.fixture
def dashboard_url(dash_env):
    """`gpuops dashboard --port 0` running; yields its URL; ended (TERM, then KILL) afterwards."""
    proc = subprocess.Popen(
        gpuops_cmd("dashboard", "--port", "0", "--month", "2026-11", "--tz", "UTC"),
        env=dash_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + SERVER_START_S
        url = None
        while url is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if "http://127.0.0.1:" in line:
                url = line.split()[2]
            elif proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"gpuops dashboard did not start (rc {proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}"
                )
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture(scope="session")
def chromium():
    """One headless chromium per test session (per xdist worker), not one per module: xdist spreads a
    module's tests over the workers, and each worker would start its own for every module again.
    Ended whatever happens."""
    b = Browser()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def browser(chromium):
    """The session's chromium for one test: the tabs the test opens are closed after it."""
    yield chromium
    chromium.close_pages()
