"""Faults during the provider create, through the real SDKs against the emulators: Ctrl-C/SIGTERM
while create waits on its answer (the instance already exists), a Vast create answered
``200 {"success": false}`` that did make the instance, and a non-provider exception inside create.
Each time the instance is found by its label, booked and destroyed: 0 instances left billing, the
row closed with the instance id and the cost up to the destroy (±2 s of the emulator's clock)."""

from __future__ import annotations

import signal

import pytest

from gpuops.config import load_settings
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from tests.lifecycle.upproc import UpProc, ledger, only_row, up_env, wait_closed
from tests.teardown.conftest import wait_for

ARGS = {
    "runpod": ("--provider", "runpod", "--card", "rtx-4090", "--on-demand"),
    "vast": ("--provider", "vast", "--card", "rtx-4090", "--on-demand"),
}
CREATE_OP = {"runpod": "create", "vast": "create"}


def _check_booked_and_destroyed(emu, reason: str):
    row = wait_closed(10)
    assert row.end_reason == reason
    assert emu.live() == []  # nothing left billing
    inst = emu.market.instances[row.instance_id]  # the row names the instance the provider made
    assert inst.label == row.label and inst.state == "destroyed"
    assert abs(row.ended_at - inst.ended_t) <= 2.0
    assert row.cost_usd > 0 and row.billed_seconds >= 1
    kinds = [e.kind for e in ledger().events(row.id)]
    assert "create_left_instance" in kinds and kinds.count("closed") == 1
    return row


@pytest.mark.parametrize(
    "name,sig",
    [("runpod", signal.SIGINT), ("runpod", signal.SIGTERM), ("vast", signal.SIGINT), ("vast", signal.SIGHUP)],
)
def test_signal_while_create_waits_on_its_answer(gpuops_home, cli_env, emulator_env, tmp_path, name, sig):
    emu = emulator_env[name]
    emu.market.faults.reply_delay_s = {CREATE_OP[name]: 60.0}  # made, but the answer never comes in time
    up = UpProc(tmp_path, up_env(cli_env), "sleep 1\n", *ARGS[name])
    try:
        wait_for(lambda: emu.live(), 60)
        wait_for(lambda: only_row() is not None, 10)
        up.signal(sig)
        rc = up.wait(60)
    finally:
        emu.market.faults.reply_delay_s = {}
        up.cleanup()
    assert rc == 130
    _check_booked_and_destroyed(emu, "interrupted")


def test_vast_success_false_that_created_is_found_and_destroyed(gpuops_home, cli_env, emulator_env, tmp_path):
    emu = emulator_env["vast"]
    emu.market.faults.create_unsuccessful_but_creates = 1
    up = UpProc(tmp_path, up_env(cli_env), "sleep 1\n", *ARGS["vast"])
    try:
        rc = up.wait(90)
    finally:
        up.cleanup()
    assert rc == 1
    _check_booked_and_destroyed(emu, "provision_failed")


def test_non_provider_exception_inside_create(gpuops_home, emulator_env):
    emu = emulator_env["runpod"]
    from gpuops.providers import get_provider

    settings = load_settings(overrides={"up": {"provider": "runpod"}})
    real = get_provider("runpod", settings)

    class Broken(type(real)):
        def create(self, offer, spec):
            super().create(offer, spec)  # the pod exists...
            raise KeyError("id")  # ...and then something that is not a ProviderError breaks

    broken = Broken(real.credential, real.url)
    job = gpuops_home.parent / "job.sh"
    job.write_text("true\n")
    summ = run_up(
        UpRequest(job=job, card="rtx-4090", provider="runpod", spot=False), settings, Reporter(), provider=broken
    )
    assert summ["end_reason"] == "error" and "KeyError" in summ["error"]
    _check_booked_and_destroyed(emu, "error")
