"""lifecycle.end_rental at the provider boundary (the emulated RunPod through the real SDK):
idempotent, retried, the reason on the row before the destroy, a destroy that keeps failing leaves
the row open for reconcile, and `gpuops down` while another end is requested keeps the first."""

from __future__ import annotations

import time

from gpuops.providers.base import CreateSpec, OfferQuery
from gpuops.providers.keys import Credential
from gpuops.teardown.lifecycle import end_rental
from ledger.store import Ledger
from onbox.vocabulary import EndReason
from tests.support.emulators import FAST_RETRY


def _rent(gpuops_home, emu, sid="s1"):
    from gpuops.config import load_settings
    from gpuops.providers.runpod.compute import RunPodProvider

    p = RunPodProvider(Credential(emu.market.api_key, "test"), emu.url, retry=FAST_RETRY)
    o = min(p.offers(OfferQuery(cards=("rtx-4090",), spot=False)), key=lambda o: o.usd_per_hour)
    inst = p.create(o, CreateSpec(label=f"gpuops-{sid}", image="img", ssh_public_key="ssh-ed25519 AAAA t"))
    led = Ledger(load_settings().ledger_url())
    led.add_session(
        dict(
            id=sid,
            provider="runpod",
            card=o.card,
            label=f"gpuops-{sid}",
            instance_id=inst.id,
            instance_created_at=inst.created_at,
            usd_per_hour=inst.usd_per_hour,
            status="running",
            created_at=time.time(),
            account=p.account,
        )
    )  # as `up` books it (gpuops.ownership)
    return p, led, inst


def test_retried_then_idempotent(gpuops_home, runpod_emulator):
    emu = runpod_emulator
    p, led, inst = _rent(gpuops_home, emu)
    emu.market.faults.inject["terminate"] = [502] * (FAST_RETRY.attempts + 2)  # 1st try fails whole, 2nd gets through
    got = end_rental(led, p, "s1", EndReason.JOB_END, by="up:test", sleep=lambda s: None)
    assert (got.destroyed, got.closed, got.reason, got.end_source) == (True, True, "job_end", "destroy")
    assert emu.live() == [] and abs(got.ended_at - emu.market.instances[inst.id].ended_t) <= 2.0
    kinds = [e.kind for e in led.events("s1")]
    assert kinds.count("destroy_failed") == 1 and kinds[-2:] == ["destroyed", "closed"]
    assert kinds.index("end_requested") < kinds.index("destroyed") < kinds.index("closed")
    again = end_rental(led, p, "s1", EndReason.MANUAL, by="down:test", sleep=lambda s: None)
    assert (again.closed, again.reason, again.ended_at) == (True, "job_end", got.ended_at)  # nothing new booked
    assert [e.kind for e in led.events("s1")].count("closed") == 1


def test_destroy_that_keeps_failing_leaves_the_row_open(gpuops_home, runpod_emulator):
    emu = runpod_emulator
    p, led, inst = _rent(gpuops_home, emu)
    emu.market.faults.inject["terminate"] = [502] * 100
    got = end_rental(led, p, "s1", EndReason.IDLE, by="watchdog:test", attempts=2, sleep=lambda s: None)
    assert (got.destroyed, got.closed) == (False, False) and "server error 502" in got.error
    row = led.get("s1")
    assert row.status != "closed" and row.end_reason == "idle"  # requested: whoever closes it books idle
    assert [e.kind for e in led.events("s1")].count("destroy_gave_up") == 1 and len(emu.live()) == 1
    emu.market.faults.inject["terminate"] = []
    later = end_rental(led, p, "s1", EndReason.INTERRUPTED, by="reconcile:test", sleep=lambda s: None)
    assert (later.closed, later.reason) == (True, "idle") and emu.live() == []


def test_gone_before_the_destroy_is_booked_at_the_last_proof_of_life(gpuops_home, runpod_emulator):
    emu = runpod_emulator
    p, led, inst = _rent(gpuops_home, emu)
    seen = time.time()
    led.heartbeat("s1", seen)
    emu.delete_from_console(inst.id)
    got = end_rental(led, p, "s1", EndReason.AGENT_ENDED, by="reconcile:test")
    assert got.already_gone and got.end_source == "heartbeat" and got.ended_at == seen
