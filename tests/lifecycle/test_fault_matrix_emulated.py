"""The fault matrix on the emulated RunPod and Vast.ai (their wire protocols through the real SDKs,
boxes on a real sshd): every stage of a real `gpuops up` subprocess with one signal each (RunPod:
SIGTERM, Vast: SIGINT). Afterwards: 0 instances billing on the emulator, the row closed with the
true reason, the end time within 2 s of the emulator's billing clock, the tokens the job wrote."""

from __future__ import annotations

import signal

import pytest

from gpuops.box.ssh import ensure_ssh_key
from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401
from tests.lifecycle.test_fault_matrix import JOB, STAGES
from tests.lifecycle.upproc import UpProc, ledger, only_row, up_env, wait_closed
from tests.teardown.conftest import wait_for

SIGNAL = {"runpod": signal.SIGTERM, "vast": signal.SIGINT}
ARGS = {
    "runpod": ("--provider", "runpod", "--card", "rtx-4090", "--on-demand"),
    "vast": ("--provider", "vast", "--card", "rtx-4090", "--on-demand"),
}
ENV = {
    "GPUOPS_UP_READY_TIMEOUT_SECONDS": "30",
    "GPUOPS_TEARDOWN_IDLE_MINUTES": "off",
    "GPUOPS_TEARDOWN_KILL_GRACE_SECONDS": "0.5",
    "GPUOPS_TEARDOWN_SAMPLE_SECONDS": "0.3",
}


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_fault_matrix_emulated(gpuops_home, cli_env, emulator_env, sshd, tmp_path, name, stage):
    emu = emulator_env[name]
    emu.market.ssh_endpoint = (sshd.host, sshd.port)
    emu.market.faults.boot_s = 0.0  # the SSH endpoint is published at once: no 3 s ready poll
    sshd.authorize(ensure_ssh_key(gpuops_home)[1])
    sig = SIGNAL[name]
    pause = tmp_path / "pause"
    pause.write_text("")
    env = up_env(cli_env, **ENV, GPUOPS_TEST_PAUSE_AT=stage, GPUOPS_TEST_PAUSE_FILE=str(pause))
    up = UpProc(tmp_path, env, JOB, *ARGS[name])
    try:
        wait_for(lambda: (tmp_path / "pause.reached").exists(), 90)
        up.signal(sig)
        if stage == "teardown":
            wait_for(lambda: up.p.poll() is None, 1)
            pause.unlink()
        rc = up.wait(90)
    finally:
        if pause.exists():
            pause.unlink()
        up.cleanup()
    if stage in ("validate", "plan"):
        assert only_row() is None and emu.live() == []
        assert rc == (130 if sig == signal.SIGINT else -sig)
        return
    row = wait_closed(10)
    reason = "job_end" if stage == "teardown" else "interrupted"
    tokens = 1000 if stage in ("collect", "teardown") else 0
    assert (row.end_reason, row.tokens, rc) == (reason, tokens, 0 if stage == "teardown" else 130)
    assert emu.live() == []  # 0 instances billing
    kinds = [e.kind for e in ledger().events(row.id)]
    assert kinds[-1] == "closed" and kinds.count("closed") == 1
    if row.instance_id is None:
        assert stage == "intent" and row.cost_usd == 0.0
        return
    inst = emu.market.instances[row.instance_id]
    assert inst.state == "destroyed" and abs(row.ended_at - inst.ended_t) <= 2.0  # the emulator's billing clock
    # the money: the emulator's own bill for the box, within the 2 s its end may differ by (+ 1 s increment)
    assert row.cost_usd == pytest.approx(inst.billed_cost(), abs=3.0 * inst.usd_per_hour / 3600)
