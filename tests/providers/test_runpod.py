"""The runpod SDK against the RunPod emulator: the whole lifecycle, then each fault."""

from __future__ import annotations

import logging
import time

import pytest

from gpuops.errors import BadInput
from gpuops.providers.base import CreateSpec, InstanceStatus, OfferQuery, ProviderError, ProviderErrorKind
from gpuops.providers.keys import Credential
from gpuops.providers.runpod import RunPodProvider
from gpuops.providers.wait import wait_for_ssh
from tests.support.emulators import FAST_RETRY

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopstestkey gpuops@test"
IMAGE = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"


def spec(label="gpuops-s1", **kw):
    return CreateSpec(label=label, image=IMAGE, disk_gb=30, ssh_public_key=KEY, **kw)


def cheapest_4090(p):
    offers = p.offers(OfferQuery(cards=("rtx-4090",)))
    return min(offers, key=lambda o: o.usd_per_hour)


def test_lifecycle(runpod_provider, runpod_emulator):
    emu, p = runpod_emulator, runpod_provider
    offers = p.offers(OfferQuery(cards=("rtx-4090",), gpu_count=2))
    assert {(o.offer_id, o.usd_per_hour) for o in offers} == {
        ("secure:NVIDIA GeForce RTX 4090", 1.38), ("community:NVIDIA GeForce RTX 4090", 0.68)}
    assert all(o.card == "rtx-4090" and o.gpu_count == 2 and o.vram_bytes == 24 * 2**30 and not o.spot for o in offers)

    before = p.balance()
    assert before.usd == pytest.approx(100.0) and before.spend_usd_per_hour == 0.0
    offer = cheapest_4090(p)
    asked = time.time()
    inst = p.create(offer, spec())
    assert inst.created_at >= asked  # RunPod's stamp has whole seconds; never before we asked
    assert inst.status == InstanceStatus.PROVISIONING and inst.ssh is None and inst.usd_per_hour == 0.34
    assert inst.label == "gpuops-s1" and inst.created_at is not None

    ready = wait_for_ssh(p, inst.id, timeout_s=10, poll_s=0.05)
    assert ready.status == InstanceStatus.RUNNING and ready.raw_status == "RUNNING"
    assert (ready.ssh.host, ready.ssh.port, ready.ssh.user) == ("203.0.113.10", 40022, "root")

    other = p.create(offer, spec(label="someone-else"))
    assert [i.id for i in p.list("gpuops-")] == [inst.id]
    assert {i.id for i in p.list("")} == {inst.id, other.id}

    emu.advance(3600)  # one emulated hour of two running pods at 0.34 USD/h each
    b = p.balance()
    assert b.usd == pytest.approx(100.0 - 0.68, abs=0.01) and b.spend_usd_per_hour == pytest.approx(0.68)

    p.destroy(inst.id)
    p.destroy(inst.id)  # idempotent
    p.destroy(other.id)
    assert p.get(inst.id) is None and p.list("") == []
    assert emu.live() == [] and emu.market.crashes == []

    # What the SDK sent: the pod is on-demand, exposes 22/tcp, and carries our key for root.
    pod_req = emu.market.instances[inst.id].request
    assert pod_req["cloudType"] == "COMMUNITY" and pod_req["ports"] == "22/tcp" and pod_req["containerDiskInGb"] == 30
    assert {"key": "PUBLIC_KEY", "value": KEY} in pod_req["env"]


def test_all_cards_and_filters(runpod_provider):
    p = runpod_provider
    offers = p.offers(OfferQuery())
    cards = {o.card for o in offers}
    assert {"rtx-4090", "a100-80gb-sxm", "a100-80gb-pcie", "h100-sxm"} <= cards
    # RTX 3070 is served by the emulator but is only listed when the catalog has it.
    big = p.offers(OfferQuery(min_vram_bytes=70 * 10**9))
    assert big and all(o.vram_bytes >= 80 * 2**30 for o in big)
    cheap = p.offers(OfferQuery(cards=("h100-sxm",), max_usd_per_hour=2.8))
    assert [(o.offer_id, o.usd_per_hour) for o in cheap] == [("community:NVIDIA H100 80GB HBM3", 2.69)]


def test_strings_reach_graphql_escaped(runpod_provider, runpod_emulator):
    nasty = 'a"b\\c } mutation { podTerminate(input: {podId: "x"}) }'
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec(env={"NASTY": nasty}))
    env = runpod_emulator.market.instances[inst.id].request["env"]
    assert {"key": "NASTY", "value": nasty} in env  # arrived intact, as one value
    assert runpod_emulator.market.crashes == []
    runpod_provider.destroy(inst.id)


@pytest.mark.parametrize("bad", [
    dict(label='gpuops-x" } }'), dict(label="gpuops x"), dict(image='img"; x'), dict(env={"BAD KEY": "v"}), dict(env={"K": "line1\nline2"}),
    dict(ssh_public_key="not a key"),
])
def test_bad_input_is_refused_before_any_request(runpod_provider, runpod_emulator, bad):
    offer = cheapest_4090(runpod_provider)
    sent = len(runpod_emulator.market.requests)
    kw = dict(label="gpuops-s1", image=IMAGE, ssh_public_key=KEY)
    kw.update(bad)
    with pytest.raises(BadInput):
        runpod_provider.create(offer, CreateSpec(**kw))
    assert len(runpod_emulator.market.requests) == sent and runpod_emulator.live() == []


def test_spot_is_refused_clearly(runpod_provider, runpod_emulator):
    with pytest.raises(ProviderError) as e:
        runpod_provider.offers(OfferQuery(spot=True))
    assert e.value.kind == ProviderErrorKind.UNSUPPORTED
    assert "withdrew interruptible" in e.value.message and "--provider vast" in e.value.fix and "--on-demand" in e.value.fix
    with pytest.raises(ProviderError) as e:
        runpod_provider.create(cheapest_4090(runpod_provider), spec(bid_usd_per_hour=0.2))
    assert e.value.kind == ProviderErrorKind.UNSUPPORTED and runpod_emulator.live() == []


def test_unauthorized(runpod_emulator, caplog):
    caplog.set_level(logging.DEBUG)
    p = RunPodProvider(Credential("rp_WRONGKEY", "$RUNPOD_API_KEY"), runpod_emulator.url, retry=FAST_RETRY)
    with pytest.raises(ProviderError) as e:
        p.offers(OfferQuery())
    assert e.value.kind == ProviderErrorKind.AUTH and "RUNPOD_API_KEY" in e.value.fix
    assert "rp_WRONGKEY" not in str(e.value) and "rp_WRONGKEY" not in caplog.text
    assert len(runpod_emulator.market.requests) == 1  # 401 is not retried


def test_missing_key():
    p = RunPodProvider(None, "http://127.0.0.1:9")
    with pytest.raises(ProviderError) as e:
        p.balance()
    assert e.value.kind == ProviderErrorKind.AUTH and "RUNPOD_API_KEY" in e.value.fix


def test_rate_limit_is_retried_then_succeeds(runpod_provider, runpod_emulator):
    runpod_emulator.faults.inject["myself"] = [429, 429]
    assert runpod_provider.list() == []
    assert sum(1 for r in runpod_emulator.market.requests if "myself" in r["raw"]) == 3


def test_server_errors_are_bounded(runpod_provider, runpod_emulator):
    runpod_emulator.faults.inject["myself"] = [502] * 10
    with pytest.raises(ProviderError) as e:
        runpod_provider.balance()
    assert e.value.kind == ProviderErrorKind.SERVER and e.value.retryable
    assert sum(1 for r in runpod_emulator.market.requests if "myself" in r["raw"]) == FAST_RETRY.attempts


def test_create_that_fails_but_creates_is_recovered(runpod_provider, runpod_emulator):
    runpod_emulator.faults.create_fails_but_creates = 1
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec())
    assert "error page" in inst.extra["recovered_after"]
    assert [i.id for i in runpod_emulator.live()] == [inst.id]  # exactly one pod, the one we track
    runpod_provider.destroy(inst.id)
    assert runpod_emulator.live() == []


def test_offer_vanishes_between_search_and_create(runpod_provider, runpod_emulator):
    offer = cheapest_4090(runpod_provider)
    runpod_emulator.faults.vanish_on_create = True
    with pytest.raises(ProviderError) as e:
        runpod_provider.create(offer, spec())
    assert e.value.kind == ProviderErrorKind.NO_CAPACITY and e.value.try_next_offer
    assert runpod_emulator.live() == [] and runpod_provider.balance().usd == pytest.approx(100.0)


def test_insufficient_funds(runpod_emulator):
    runpod_emulator.market.initial_balance = 0.10
    p = RunPodProvider(Credential(runpod_emulator.market.api_key, "t"), runpod_emulator.url, retry=FAST_RETRY)
    with pytest.raises(ProviderError) as e:
        p.create(cheapest_4090(p), spec())
    assert e.value.kind == ProviderErrorKind.FUNDS and "Billing" in e.value.fix and runpod_emulator.live() == []


def test_pod_that_never_publishes_port_22(runpod_provider, runpod_emulator):
    runpod_emulator.faults.no_ssh_port = True
    runpod_emulator.faults.boot_s = 0  # running at once: the wait can only end in "no port 22"
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec())
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(runpod_provider, inst.id, timeout_s=0.8, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.TIMEOUT and "never published port 22" in e.value.message
    assert e.value.instance_id == inst.id
    runpod_provider.destroy(e.value.instance_id)
    assert runpod_emulator.live() == []


def test_pod_deleted_mid_wait(runpod_provider, runpod_emulator):
    runpod_emulator.faults.boot_s = 30
    runpod_emulator.faults.delete_after_s = 0.3
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec())
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(runpod_provider, inst.id, timeout_s=10, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.GONE and "disappeared" in e.value.message
    runpod_provider.destroy(inst.id)  # destroying a gone pod is success
    assert runpod_emulator.live() == []


def test_unknown_status_is_kept_not_raised(runpod_provider, runpod_emulator):
    runpod_emulator.faults.stuck_status = "MIGRATING"
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec())
    got = runpod_provider.get(inst.id)
    assert got.status == InstanceStatus.UNKNOWN and got.raw_status == "MIGRATING"
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(runpod_provider, inst.id, timeout_s=0.5, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.TIMEOUT and "'MIGRATING'" in e.value.message
    runpod_provider.destroy(inst.id)
    assert runpod_emulator.live() == []


def test_latency_is_tolerated(runpod_provider, runpod_emulator):
    runpod_emulator.faults.latency_s = 0.2
    t = time.monotonic()
    assert runpod_provider.balance().usd == pytest.approx(100.0)
    assert time.monotonic() - t >= 0.2


def test_key_never_leaves_the_header(runpod_provider, runpod_emulator, caplog):
    caplog.set_level(logging.DEBUG)
    runpod_emulator.faults.inject["podFindAndDeployOnDemand"] = [502, 502, 502, 502]
    with pytest.raises(ProviderError) as e:
        runpod_provider.create(cheapest_4090(runpod_provider), spec())
    key = runpod_emulator.market.api_key
    assert key not in str(e.value) and key not in caplog.text and key not in runpod_emulator.wire_text()
    assert all(r["auth"] == f"Bearer {key}" for r in runpod_emulator.market.requests)


def test_sdk_global_state_is_restored(runpod_provider, monkeypatch):
    import os

    monkeypatch.setenv("RUNPOD_API_BASE_URL", "http://elsewhere.invalid")
    runpod_provider.balance()
    import runpod

    assert os.environ["RUNPOD_API_BASE_URL"] == "http://elsewhere.invalid" and runpod.api_key != runpod_provider.credential.key


def test_json_without_data_is_a_server_error(runpod_provider, runpod_emulator):
    runpod_emulator.faults.inject["pod"] = [500, 500]
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec())  # create reads the pod back: retried
    assert runpod_provider.get(inst.id).id == inst.id
    runpod_emulator.faults.inject["pod"] = [500] * 10
    with pytest.raises(ProviderError) as e:
        runpod_provider.get(inst.id)
    assert e.value.kind == ProviderErrorKind.SERVER and "no data" in e.value.message
    runpod_emulator.faults.inject.clear()
    runpod_provider.destroy(inst.id)
    assert runpod_emulator.live() == []


def test_unreachable_endpoint():
    p = RunPodProvider(Credential("rp_x", "t"), "http://127.0.0.1:9", retry=FAST_RETRY)
    with pytest.raises(ProviderError) as e:
        p.list()
    assert e.value.kind == ProviderErrorKind.SERVER and "cannot reach RunPod at http://127.0.0.1:9" in e.value.message


def test_wait_tolerates_rate_limits_while_polling(runpod_provider, runpod_emulator):
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec())
    runpod_emulator.faults.inject["pod"] = [429] * 6  # more than one get() retries, fewer than the deadline allows
    ready = wait_for_ssh(runpod_provider, inst.id, timeout_s=10, poll_s=0.05)
    assert ready.ssh is not None and runpod_emulator.faults.inject["pod"] == []
    runpod_provider.destroy(inst.id)


def test_unicode_and_tabs_survive_escaping(runpod_provider, runpod_emulator):
    value = "tab\there, ümlaut, emoji 🚀, backslash-n \\n"
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec(env={"V": value}))
    assert {"key": "V", "value": value} in runpod_emulator.market.instances[inst.id].request["env"]
    runpod_provider.destroy(inst.id)


def test_gpu_type_withdrawn_between_search_and_create(runpod_provider, runpod_emulator):
    offer = cheapest_4090(runpod_provider)
    del runpod_emulator.gpus["NVIDIA GeForce RTX 4090"]  # create_pod's own get_gpu() check now finds nothing
    with pytest.raises(ProviderError) as e:
        runpod_provider.create(offer, spec())
    assert e.value.kind == ProviderErrorKind.OFFER_GONE and e.value.try_next_offer and runpod_emulator.live() == []
