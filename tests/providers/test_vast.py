"""The vastai SDK against the Vast.ai emulator: the whole lifecycle, then each fault."""

from __future__ import annotations

import logging
import shlex

import pytest

from gpuops.errors import BadInput
from gpuops.providers.base import CreateSpec, InstanceStatus, OfferQuery, ProviderError, ProviderErrorKind
from gpuops.providers.keys import Credential
from gpuops.providers.vast import VastProvider
from gpuops.providers.wait import wait_for_ssh
from tests.support.emulators import FAST_RETRY

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopstestkey gpuops@test"
IMAGE = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-devel"
STORAGE_40GB = 0.15 * 40 / 730  # emulator storage_cost USD/GB/month x 40 GB / 730 h


def spec(label="gpuops-v1", **kw):
    kw.setdefault("ssh_public_key", KEY)
    return CreateSpec(label=label, image=IMAGE, disk_gb=40, **kw)


def offer(p, spot=False, card="rtx-4090", oid=None):
    offers = [o for o in p.offers(OfferQuery(cards=(card,), spot=spot)) if oid is None or o.offer_id == oid]
    return min(offers, key=lambda o: (o.min_bid if spot else o.usd_per_hour))


def test_lifecycle_on_demand(vast_provider, vast_emulator):
    emu, p = vast_emulator, vast_provider
    offers = p.offers(OfferQuery(cards=("rtx-4090",), spot=False))
    assert [o.offer_id for o in offers] == ["1002", "1001"]  # dph_total ascending; the 2-GPU box is filtered out
    o = offers[0]
    assert (o.card, o.gpu_count, o.vram_bytes, o.spot, o.min_bid, o.reliability, o.region) == (
        "rtx-4090", 1, 24564 * 2**20, False, None, 0.97, "Texas, US")
    assert o.usd_per_hour == pytest.approx(0.28 + STORAGE_40GB, abs=1e-6)

    inst = p.create(o, spec())
    assert inst.status == InstanceStatus.PROVISIONING and inst.ssh is None
    assert inst.usd_per_hour == pytest.approx(0.28 + STORAGE_40GB, abs=1e-6)
    ready = wait_for_ssh(p, inst.id, timeout_s=10, poll_s=0.05)
    assert ready.status == InstanceStatus.RUNNING and (ready.ssh.host, ready.ssh.port) == ("203.0.113.10", 40022)
    assert ready.extra["ssh_proxy"].host == "ssh5.emulator.invalid"

    body = emu.market.instances[inst.id].request
    assert body["price"] is None and body["runtype"] == "ssh_direc ssh_proxy" and body["label"] == "gpuops-v1" and body["disk"] == 40.0
    assert KEY in shlex.split(body["onstart"])  # the key reaches the box as one quoted argument

    assert [i.id for i in p.list("gpuops-")] == [inst.id] and p.list("nope-") == []
    emu.advance(3600)
    assert p.balance().usd == pytest.approx(100.0 - (0.28 + STORAGE_40GB), abs=0.01)
    p.destroy(inst.id)
    p.destroy(inst.id)  # idempotent
    assert p.get(inst.id) is None and emu.live() == [] and emu.market.crashes == []


def test_lifecycle_interruptible_bids_the_minimum(vast_provider, vast_emulator):
    o = offer(vast_provider, spot=True)
    assert (o.offer_id, o.spot, o.min_bid) == ("1002", True, 0.15)
    inst = vast_provider.create(o, spec())
    # A bid search followed by a create without price would rent on-demand: we always send the bid.
    assert vast_emulator.market.instances[inst.id].request["price"] == 0.15
    assert inst.extra["spot"] is True and inst.usd_per_hour == pytest.approx(0.15 + STORAGE_40GB, abs=1e-6)
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_card_mapping_uses_vram_to_tell_a100s_apart(vast_provider):
    offers = vast_provider.offers(OfferQuery(cards=("a100-80gb-sxm", "a100-40gb"), spot=False))
    assert {(o.offer_id, o.card) for o in offers} == {("2001", "a100-80gb-sxm"), ("2002", "a100-40gb")}
    # Offers for GPUs the catalog does not know are dropped (a card must be a catalog name).
    from gpuops.catalog import cards

    ids = {o.offer_id for o in vast_provider.offers(OfferQuery(spot=False))}
    assert {"1001", "1002", "2001", "2002", "3001"} <= ids and "1003" not in ids  # 1003 has 2 GPUs
    assert ("4001" in ids) == any(c.vast_name == "RTX 3070" for c in cards())
    big = vast_provider.offers(OfferQuery(min_vram_bytes=70 * 10**9, spot=False))
    assert {o.offer_id for o in big} == {"2001", "3001"}


def test_bid_below_minimum_leaves_nothing_billing(vast_provider, vast_emulator):
    o = offer(vast_provider, spot=True)
    with pytest.raises(ProviderError) as e:
        vast_provider.create(o, spec(bid_usd_per_hour=0.01))
    err = e.value
    assert err.kind == ProviderErrorKind.BID_TOO_LOW and err.instance_id is not None and "min_bid" in err.fix
    assert f"stopped instance {err.instance_id} it left was destroyed" in err.message
    left = vast_emulator.market.instances[err.instance_id]
    assert left.state == "destroyed" and vast_emulator.live() == []


def test_preemption_during_wait(vast_provider, vast_emulator):
    vast_emulator.faults.boot_s = 30
    inst = vast_provider.create(offer(vast_provider, spot=True), spec())
    vast_emulator.preempt(inst.id)
    got = vast_provider.get(inst.id)
    assert got.status == InstanceStatus.STOPPED and got.extra["preempted"] is True and got.raw_status == "stopped"
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(vast_provider, inst.id, timeout_s=5, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.PREEMPTED and "outbid" in e.value.message
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_preemption_while_running_is_visible(vast_provider, vast_emulator):
    inst = vast_provider.create(offer(vast_provider, spot=True), spec())
    wait_for_ssh(vast_provider, inst.id, timeout_s=10, poll_s=0.05)
    vast_emulator.preempt(inst.id)
    got = vast_provider.get(inst.id)
    assert got.status == InstanceStatus.STOPPED and got.extra["preempted"] and got.ssh is None
    vast_emulator.advance(3600)  # a preempted instance still bills its disk until destroyed
    assert vast_emulator.market.instances[inst.id].billed_usd >= STORAGE_40GB * 0.99
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_offer_vanishes_between_search_and_create(vast_provider, vast_emulator):
    o = offer(vast_provider)
    vast_emulator.take_offer(int(o.offer_id))
    with pytest.raises(ProviderError) as e:
        vast_provider.create(o, spec())
    assert e.value.kind == ProviderErrorKind.OFFER_GONE and e.value.try_next_offer and e.value.instance_id is None
    assert vast_emulator.live() == [] and vast_provider.balance().usd == pytest.approx(100.0)


def test_create_that_fails_but_creates_is_recovered(vast_provider, vast_emulator):
    vast_emulator.faults.create_fails_but_creates = 1
    inst = vast_provider.create(offer(vast_provider), spec())
    assert "server error 500" in inst.extra["recovered_after"]
    assert [i.id for i in vast_emulator.live()] == [inst.id]
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_unauthorized(vast_emulator, caplog):
    caplog.set_level(logging.DEBUG)
    p = VastProvider(Credential("vast_WRONGKEY", "$VAST_API_KEY"), vast_emulator.url, retry=FAST_RETRY)
    with pytest.raises(ProviderError) as e:
        p.balance()
    assert e.value.kind == ProviderErrorKind.AUTH and "VAST_API_KEY" in e.value.fix
    assert "vast_WRONGKEY" not in str(e.value) and "vast_WRONGKEY" not in caplog.text
    assert len(vast_emulator.market.requests) == 1


def test_rate_limit_retried_by_us_only(vast_provider, vast_emulator):
    vast_emulator.faults.inject["list"] = [429, 429]
    assert vast_provider.list() == []
    # SDK retry=1: each of our attempts is exactly one request.
    assert sum(1 for r in vast_emulator.market.requests if r["path"] == "/api/v1/instances/") == 3


def test_server_errors_are_bounded(vast_provider, vast_emulator):
    vast_emulator.faults.inject["user"] = [503] * 10
    with pytest.raises(ProviderError) as e:
        vast_provider.balance()
    assert e.value.kind == ProviderErrorKind.SERVER
    assert sum(1 for r in vast_emulator.market.requests if r["path"] == "/api/v0/users/current") == FAST_RETRY.attempts


def test_stuck_loading_times_out(vast_provider, vast_emulator):
    vast_emulator.faults.stuck_status = "loading"
    inst = vast_provider.create(offer(vast_provider), spec())
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(vast_provider, inst.id, timeout_s=0.5, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.TIMEOUT and "stuck in provisioning (provider status 'loading')" in e.value.message
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_never_publishes_port_22(vast_provider, vast_emulator):
    vast_emulator.faults.no_ssh_port = True
    vast_emulator.faults.boot_s = 0  # running at once: the wait can only end in "no port 22"
    inst = vast_provider.create(offer(vast_provider), spec())
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(vast_provider, inst.id, timeout_s=0.8, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.TIMEOUT and "never published port 22" in e.value.message
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_deleted_mid_wait(vast_provider, vast_emulator):
    vast_emulator.faults.boot_s = 30
    inst = vast_provider.create(offer(vast_provider), spec())
    vast_emulator.delete_from_console(inst.id)
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(vast_provider, inst.id, timeout_s=5, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.GONE
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_unknown_status_maps_to_unknown(vast_provider, vast_emulator):
    vast_emulator.faults.stuck_status = "hibernating"
    inst = vast_provider.create(offer(vast_provider), spec())
    got = vast_provider.get(inst.id)
    assert got.status == InstanceStatus.UNKNOWN and got.raw_status == "hibernating"
    vast_provider.destroy(inst.id)


def test_list_follows_pages(vast_provider, vast_emulator):
    o = vast_emulator.offers[1001]
    for n in range(27):
        vast_emulator.market.new_instance(f"gpuops-page-{n}", o, 0.3, 0.01)
    assert len(vast_provider.list("gpuops-page-")) == 27


def test_onstart_quotes_the_key_comment(vast_provider, vast_emulator):
    evil = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me'; touch /tmp/pwned; echo '"
    inst = vast_provider.create(offer(vast_provider), spec(ssh_public_key=evil))
    words = shlex.split(vast_emulator.market.instances[inst.id].request["onstart"])
    assert evil in words and "touch" not in words
    vast_provider.destroy(inst.id)


def test_bad_input_refused_before_any_request(vast_provider, vast_emulator):
    o = offer(vast_provider)
    sent = len(vast_emulator.market.requests)
    with pytest.raises(BadInput):
        vast_provider.create(o, spec(label="gpuops-$(reboot)"))
    with pytest.raises(BadInput):
        vast_provider.create(o, spec(bid_usd_per_hour=0.5))  # a bid on an on-demand offer
    assert len(vast_emulator.market.requests) == sent


def test_key_never_in_bodies_or_errors(vast_provider, vast_emulator, caplog):
    caplog.set_level(logging.DEBUG)
    vast_emulator.faults.inject["create"] = [500] * 4
    with pytest.raises(ProviderError) as e:
        vast_provider.create(offer(vast_provider), spec())
    key = vast_emulator.market.api_key
    assert key not in str(e.value) and key not in caplog.text and key not in vast_emulator.wire_text()
    assert vast_emulator.live() == []


def test_unreachable_endpoint():
    p = VastProvider(Credential("vast_x", "t"), "http://127.0.0.1:9", retry=FAST_RETRY, timeout_s=2)
    with pytest.raises(ProviderError) as e:
        p.list()
    assert e.value.kind == ProviderErrorKind.SERVER and "cannot reach Vast.ai at http://127.0.0.1:9" in e.value.message


def test_wait_tolerates_server_errors_while_polling(vast_provider, vast_emulator):
    inst = vast_provider.create(offer(vast_provider), spec())
    vast_emulator.faults.inject["show"] = [502] * 6
    ready = wait_for_ssh(vast_provider, inst.id, timeout_s=10, poll_s=0.05)
    assert ready.ssh is not None and vast_emulator.faults.inject["show"] == []
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_latency_is_tolerated(vast_provider, vast_emulator):
    import time

    vast_emulator.faults.latency_s = 0.2
    t = time.monotonic()
    assert vast_provider.balance().usd == pytest.approx(100.0)
    assert time.monotonic() - t >= 0.2


def test_retry_after_is_honoured(vast_provider, vast_emulator):
    import time

    vast_emulator.faults.inject["user"] = [429]
    vast_emulator.faults.retry_after_s = 0.5  # longer than FAST_RETRY's own backoff (<= 0.05 s)
    t = time.monotonic()
    assert vast_provider.balance().usd == pytest.approx(100.0)
    assert time.monotonic() - t >= 0.5
