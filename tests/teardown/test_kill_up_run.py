"""A SIGKILLed `up --recover` leaves its run (``runs``, m010) open; the watchdog or reconcile that
closes its last rental closes the run with it, with that rental's reason -- and leaves open a run
whose live `up` would re-rent (a reason it recovers on, attempts left)."""

from __future__ import annotations

import shlex
from types import SimpleNamespace

import pytest

from gpuops.config import load_settings
from gpuops.teardown.lifecycle import Ended
from gpuops.teardown.reconcile import Context, close_run_of, reconcile
from gpuops.teardown.watchdog import run
from ledger.store import Ledger
from tests.lifecycle.upproc import UpProc, has_event, no_box_processes, only_row, up_env
from tests.teardown.conftest import wait_for


@pytest.mark.parametrize("closer", ["watchdog", "reconcile"])
def test_a_killed_up_leaves_no_run_open(closer, gpuops_home, cli_env, fake_smi, tmp_path):
    fake_smi.util(70)  # the job holds the GPU: not idle
    gate = tmp_path / "job-may-end"  # the job runs until `up` is killed: under load a fixed job may end first
    job = f"for i in $(seq 1200); do [ -e {shlex.quote(str(gate))} ] && exit 0; sleep 0.05; done; exit 1\n"
    up = UpProc(tmp_path, up_env(cli_env), job, "--recover", "1")
    try:
        wait_for(has_event("job_started"), 90)
        up.p.kill()  # `up` alone (the box's processes are their own groups): its run stays open
        up.p.wait(30)
    finally:
        gate.touch()
        up.cleanup()
    row = only_row()
    box = gpuops_home / "boxes" / row.label
    wait_for(lambda: (box / "destroyed.json").exists(), 60)  # the agent ends the box at the job's end
    no_box_processes(box)
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    assert led.get_run(row.run_id).status == "open"
    ctx = Context(settings, ledger=led)
    if closer == "watchdog":
        run(settings, once=True, emit=lambda a: None, ctx=ctx)
    else:
        reconcile(ctx)
    row = led.get(row.id)
    got = led.get_run(row.run_id)
    assert (row.status, row.end_reason) == ("closed", "job_end")
    assert (got.status, got.end_reason) == ("closed", "job_end")
    assert got.ended_at == pytest.approx(row.ended_at, abs=1e-6) and row.id in got.detail


def test_a_run_that_would_re_rent_stays_open(gpuops_home):
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    ctx = Context(settings, ledger=led)
    for rid, attempts in (("run-a", 1), ("run-b", 2)):
        led.add_run(
            dict(
                id=rid,
                experiment="x",
                job="j",
                provider="local",
                status="open",
                created_at=1_800_000_000.0,
                recover=1,
                recover_on="preempted",
                attempts=attempts,
            )
        )
        led.add_session(dict(id=f"s-{rid}", created_at=1_800_000_000.0, status="closed", run_id=rid, attempt=attempts))
    closed = Ended("s", "i", True, True, "preempted", ended_at=1_800_000_100.0)
    assert not close_run_of(
        ctx, SimpleNamespace(id="s-run-a", run_id="run-a", attempt=1), closed
    )  # its `up` rents attempt 2
    assert led.get_run("run-a").status == "open"
    assert close_run_of(ctx, SimpleNamespace(id="s-run-b", run_id="run-b", attempt=2), closed)  # recover 1: spent
    assert (led.get_run("run-b").status, led.get_run("run-b").end_reason) == ("closed", "attempts_spent")
    assert not close_run_of(ctx, SimpleNamespace(id="s-run-b", run_id="run-b", attempt=2), closed)  # closed once
