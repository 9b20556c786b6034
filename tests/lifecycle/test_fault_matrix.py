"""The fault matrix: every stage of `gpuops up` x every way a laptop-side run ends, on the local
provider (a real `gpuops up` subprocess, real signals, a real pty hang-up, a real broken pipe).

The run is held at a stage by ``launcher.fault_point`` (``GPUOPS_TEST_PAUSE_AT``/``_FILE``), the
fault is injected there, and afterwards -- with at most the agent and one watchdog/reconcile pass
per poll where `up` was SIGKILLed -- every cell must show: 0 instances billing, the row closed with
the true reason, the end time the provider's own (``destroyed.json``), the tokens the job wrote,
and 0 processes left on the box.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from gpuops.config import load_settings
from gpuops.providers import get_provider
from gpuops.providers.base import InstanceStatus
from gpuops.teardown.reconcile import Context
from gpuops.teardown.watchdog import run as watchdog_run
from tests.lifecycle.upproc import FAST_ENV, UpProc, ledger, no_box_processes, only_row, up_env
from tests.support import procs
from tests.support.local_bill import local_bill
from tests.teardown.conftest import wait_for

STAGES = ("validate", "plan", "intent", "create", "ready", "arm", "bootstrap", "job", "collect", "teardown")
FAULTS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "hangup", "broken_pipe")  # hangup: the pty closes, then SIGHUP
RENTS = STAGES[STAGES.index("create") :]
JOB = 'echo \'{"tokens": 1000}\' >> "$GPUOPS_METRICS"\necho started\nsleep 0.3\n'
ENV = dict(
    FAST_ENV,
    GPUOPS_TEARDOWN_IDLE_MINUTES=str(1 / 60),
    GPUOPS_UP_READY_TIMEOUT_SECONDS="2",
    GPUOPS_TEARDOWN_JOB_END_GRACE_SECONDS="0.5",
)


def expected(stage: str, fault: str) -> tuple[str | None, int, object]:
    """(end reason or None for "no row", tokens booked, exit status or None when SIGKILLed)."""
    ran_job = stage in ("collect", "teardown")
    if fault == "broken_pipe":  # output lost, the run goes on to the end
        return "job_end", 1000, 0
    if fault == "SIGKILL":
        if stage in ("validate", "plan"):
            return None, 0, None
        reason = {
            "intent": "provision_failed",
            "create": "interrupted",
            "ready": "interrupted",
            "arm": "interrupted",
            "bootstrap": "idle",
            "job": "idle",
            "collect": "job_end",
            "teardown": "job_end",
        }[stage]
        # tokens: booked by `up` (teardown) or read from the box by the watchdog (collect)
        return reason, 1000 if ran_job else 0, None
    sig = "SIGHUP" if fault == "hangup" else fault
    if stage in ("validate", "plan"):  # before any row: the default action (Ctrl-C: click's abort)
        return None, 0, 130 if sig == "SIGINT" else -getattr(signal, sig)
    if stage == "teardown":  # teardown ignores signals and finishes with the job's outcome
        return "job_end", 1000, 0
    return "interrupted", 1000 if ran_job else 0, 130


@pytest.fixture
def matrix_env(gpuops_home, cli_env, fake_smi, monkeypatch, tmp_path):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    return up_env(cli_env, **ENV)


def _reconcile_until_done(sid: str, timeout: float = 30.0):
    settings = load_settings()
    led = ledger()
    provider = get_provider("local", settings)
    deadline = time.monotonic() + timeout
    while True:
        watchdog_run(settings, once=True, emit=lambda a: None, ctx=Context(settings, ledger=led, arm_margin_s=0.5))
        row = led.get(sid)
        inst = provider.get(row.label)
        if row.status == "closed" and (inst is None or inst.status == InstanceStatus.GONE):
            return row, inst
        assert time.monotonic() < deadline, (row, inst)
        time.sleep(0.3)


@pytest.mark.slow  # 60 real `up` runs, ~2.5 min on 2 cores
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("stage", STAGES)
def test_fault_matrix_local(matrix_env, gpuops_home, fake_smi, tmp_path, stage, fault):
    reason, tokens, status = expected(stage, fault)
    fake_smi.util(0 if (fault == "SIGKILL" and reason == "idle") else 70)  # busy unless the idle layer must act
    pause = tmp_path / "pause"
    pause.write_text("")
    env = dict(matrix_env, GPUOPS_TEST_PAUSE_AT=stage, GPUOPS_TEST_PAUSE_FILE=str(pause))
    up = UpProc(tmp_path, env, JOB, output="pty" if fault == "hangup" else "pipe")
    try:
        wait_for(lambda: (tmp_path / "pause.reached").exists(), 60)
        if fault == "broken_pipe":
            up.close_output()
            pause.unlink()
        elif fault == "SIGKILL":
            os.killpg(up.p.pid, signal.SIGKILL)  # `up` and anything it started in its group
        else:
            if fault == "hangup":
                up.close_output()
            sig = signal.SIGHUP if fault == "hangup" else getattr(signal, fault)
            up.signal(sig)
            if stage == "teardown":
                # Held at the pause inside teardown: the signal is taken (no longer pending) and
                # ignored or noted (not its default action), and `up` still runs; then go on.
                wait_for(lambda: procs.signal_held(up.p.pid, sig), 30)
                assert up.p.poll() is None, "a signal during teardown ended `up`"
                pause.unlink()
        rc = up.wait(60)
    finally:
        if pause.exists():
            pause.unlink()
        up.cleanup()
    if status is not None:
        assert rc == status
    row = only_row()
    if reason is None:
        assert row is None and not list((gpuops_home / "boxes").glob("gpuops-*"))
        return
    if fault == "SIGKILL":
        row, _ = _reconcile_until_done(row.id)
    assert (row.status, row.end_reason, row.tokens) == ("closed", reason, tokens)
    kinds = [e.kind for e in ledger().events(row.id)]
    # After the close only a replay's label may come: a write the killed `up` spooled (late under
    # load) is replayed by the reconcile that closed the row, and says so once it has run.
    after = kinds[kinds.index("closed") + 1 :] if "closed" in kinds else None
    assert kinds[0] == "intent" and kinds.count("closed") == 1 and set(after or ()) <= {"spool_replayed"}, kinds
    box = gpuops_home / "boxes" / row.label
    provider = get_provider("local", load_settings())
    if row.instance_id is None:
        assert not box.exists() and row.cost_usd == 0.0 and row.ended_at == row.created_at
        return
    inst = provider.get(row.instance_id)
    assert inst is None or inst.status == InstanceStatus.GONE  # 0 instances billing
    assert row.ended_at == pytest.approx(provider.destroyed_at(row.instance_id), abs=1e-6)  # the provider's end time
    secs, usd = local_bill(provider.boxes_dir, row.instance_id, 1.5)  # the box's own record, at the test's 1.5 USD/h
    assert row.billed_seconds == secs and row.cost_usd == pytest.approx(usd, abs=1e-6)
    no_box_processes(box)
