"""The vastai SDK against the Vast.ai emulator: what is Vast's own (bids and interruptible
instances, preemption, card names by VRAM, paged lists, the onstart script, Retry-After). The
contract both providers keep (faults, retries, keys, waits) is
tests/providers/test_provider_contract.py."""

from __future__ import annotations

import shlex
import time

import pytest

from gpuops.errors import BadInput
from gpuops.providers.base import CreateSpec, InstanceStatus, OfferQuery, ProviderError, ProviderErrorKind
from gpuops.providers.wait import wait_for_ssh

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopstestkey gpuops@test"
IMAGE = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-devel"
STORAGE_40GB = 0.15 * 40 / 730  # emulator storage_cost USD/GB/month x 40 GB / 730 h


def spec(label="gpuops-v1", **kw):
    kw.setdefault("ssh_public_key", KEY)
    return CreateSpec(label=label, image=IMAGE, disk_gb=40, **kw)


def offer(p, spot=False, card="rtx-4090", oid=None):
    offers = [o for o in p.offers(OfferQuery(cards=(card,), spot=spot)) if oid is None or o.offer_id == oid]
    return min(offers, key=lambda o: o.min_bid if spot else o.usd_per_hour)


def test_lifecycle_on_demand(vast_provider, vast_emulator):
    emu, p = vast_emulator, vast_provider
    offers = p.offers(OfferQuery(cards=("rtx-4090",), spot=False))
    assert [o.offer_id for o in offers] == ["1002", "1001"]  # dph_total ascending; the 2-GPU box is filtered out
    o = offers[0]
    assert (o.card, o.gpu_count, o.vram_bytes, o.spot, o.min_bid, o.reliability, o.region) == (
        "rtx-4090",
        1,
        24564 * 2**20,
        False,
        None,
        0.97,
        "Texas, US",
    )
    assert o.usd_per_hour == pytest.approx(0.28 + STORAGE_40GB, abs=1e-6)

    inst = p.create(o, spec())
    assert inst.status == InstanceStatus.PROVISIONING and inst.ssh is None
    assert inst.usd_per_hour == pytest.approx(0.28 + STORAGE_40GB, abs=1e-6)
    ready = wait_for_ssh(p, inst.id, timeout_s=10, poll_s=0.05)
    assert ready.status == InstanceStatus.RUNNING and (ready.ssh.host, ready.ssh.port) == ("203.0.113.10", 40022)
    assert ready.extra["ssh_proxy"].host == "ssh5.emulator.invalid"

    body = emu.market.instances[inst.id].request
    assert (
        body["price"] is None
        and body["runtype"] == "ssh_direc ssh_proxy"
        and body["label"] == "gpuops-v1"
        and body["disk"] == 40.0
    )
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
    assert o.usd_per_hour == pytest.approx(
        0.15 + STORAGE_40GB, abs=1e-6
    )  # the offer is priced at its bid, not dph_base
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_card_mapping_uses_vram_to_tell_a100s_apart(vast_provider, vast_emulator):
    offers = vast_provider.offers(OfferQuery(cards=("a100-80gb-sxm", "a100-40gb"), spot=False))
    assert {(o.offer_id, o.card) for o in offers} == {("2001", "a100-80gb-sxm"), ("2002", "a100-40gb")}
    # Offers for GPUs the catalog does not know are dropped (a card must be a catalog name).
    from gpuops.catalog import cards

    ids = {o.offer_id for o in vast_provider.offers(OfferQuery(spot=False))}
    assert {"1001", "1002", "2001", "2002", "3001"} <= ids and "1003" not in ids  # 1003 has 2 GPUs
    # 4001 is really on offer (an RTX 3070, which the catalog really lacks): it is dropped for that
    assert vast_emulator.offers[4001]["gpu_name"] == "RTX 3070" and not vast_emulator.offers[4001]["rented"]
    assert not any("3070" in " ".join(filter(None, (c.name, c.display, c.vast_name))) for c in cards())
    assert "4001" not in ids
    big = vast_provider.offers(OfferQuery(min_vram_bytes=70 * 10**9, spot=False))
    assert {o.offer_id for o in big} == {"2001", "3001"}


@pytest.mark.parametrize("leaves", [True, False], ids=["leaves-a-stopped-instance", "makes-nothing"])
def test_bid_below_minimum_leaves_nothing_billing(vast_provider, vast_emulator, leaves):
    """Undocumented both ways: a too-low bid may leave a stopped (disk-billing) instance or make
    nothing; the spec's answer (400 invalid_price) names no instance. Either way: BID_TOO_LOW with
    Vast's own words, and nothing left."""
    vast_emulator.low_bid_leaves_instance = leaves
    o = offer(vast_provider, spot=True)
    with pytest.raises(ProviderError) as e:
        vast_provider.create(o, spec(bid_usd_per_hour=0.01))
    err = e.value
    assert err.kind == ProviderErrorKind.BID_TOO_LOW and "min_bid" in err.fix
    assert "Bid price 0.0100 is below the minimum bid 0.1500" in err.message  # the provider's words
    if leaves:
        assert (
            err.instance_id is not None and f"stopped instance {err.instance_id} it left was destroyed" in err.message
        )
        assert vast_emulator.market.instances[err.instance_id].state == "destroyed"
    else:
        assert err.instance_id is None and vast_emulator.market.instances == {}
    assert vast_emulator.live() == []


@pytest.mark.parametrize("state", ["offline", "unknown", "exited"])
def test_states_that_never_run_fail_the_wait_at_once_naming_the_state(vast_provider, vast_emulator, state):
    vast_emulator.faults.stuck_status = state
    inst = vast_provider.create(offer(vast_provider), spec())
    t = time.monotonic()
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(vast_provider, inst.id, timeout_s=30, poll_s=0.05)
    assert time.monotonic() - t < 10  # not the 30 s ready timeout
    assert (
        e.value.kind == ProviderErrorKind.GONE
        and f"(status {state})" in e.value.message
        and e.value.instance_id == inst.id
    )
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_error_words_are_read_from_msg_message_or_detail(vast_provider):
    p = vast_provider
    assert (
        "pod not found here" in p._body_error(400, {"message": "pod not found here"}, "read", False).message
    )  # RunPod style
    assert "slow down" in p._body_error(400, {"detail": "slow down"}, "read", False).message
    assert (
        "bad disk"
        in p._body_error(400, {"success": False, "error": "invalid_args", "msg": "bad disk"}, "rent", True).message
    )
    assert "HTTP 400" in p._body_error(400, {}, "rent", True).message


def test_charges_read_per_contract_with_the_specs_item_types(vast_provider, monkeypatch):
    """One entry per contract, items gpu/disk/bwd/bwu; an item past the asked window counts only
    for its part inside it (attributed by time)."""
    page = {
        "success": True,
        "count": 1,
        "total": 1,
        "next_token": None,
        "results": [
            {
                "start": 1000,
                "end": 5000,
                "type": "instance",
                "source": "instance-42",
                "amount": 7.5,
                "metadata": {"label": "gpuops-x"},
                "items": [
                    {"start": 1000, "end": 3000, "type": "gpu", "amount": 4.0},
                    {"start": 1000, "end": 5000, "type": "disk", "amount": 2.0},
                    {"start": 1000, "end": 3000, "type": "bwd", "amount": 1.0},
                    {"start": 1000, "end": 3000, "type": "bwu", "amount": 0.5},
                ],
            }
        ],
    }
    monkeypatch.setattr(vast_provider, "_call", lambda action, fn, **kw: page)
    lines = vast_provider.billing(2000.0, 4000.0)
    got = sorted((c.kind, round(c.usd, 6), c.start, c.end, c.instance_id, c.label) for c in lines)
    assert got == [
        ("gpu", 2.0, 2000.0, 3000.0, "42", "gpuops-x"),
        ("network", 0.25, 2000.0, 3000.0, "42", "gpuops-x"),
        ("network", 0.5, 2000.0, 3000.0, "42", "gpuops-x"),
        ("storage", 1.0, 2000.0, 4000.0, "42", "gpuops-x"),
    ]


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


def test_the_emulators_charges_state_the_hours_billed_as_the_spec_does(vast_provider, vast_emulator):
    """The spec's gpu item: "96.000 hours at $0.389/hour". An outbid instance runs 2 h, then stands
    stopped 3 h billing its disk: its gpu item spans the contract (5 h) and states the 2 h it ran,
    which is where the booked GPU line ends (billing.running_end)."""
    import re

    inst = vast_provider.create(offer(vast_provider, spot=True), spec())
    wait_for_ssh(vast_provider, inst.id, timeout_s=10, poll_s=0.05)
    vast_emulator.advance(2 * 3600)
    vast_emulator.preempt(inst.id)
    vast_emulator.advance(3 * 3600)
    vast_provider.destroy(inst.id)
    emu_inst = vast_emulator.market.instances[inst.id]
    entry = next(r for r in vast_emulator.charge_rows(0, 4e9) if r["source"] == f"instance-{inst.id}")
    gpu = next(i for i in entry["items"] if i["type"] == "gpu")
    disk = next(i for i in entry["items"] if i["type"] == "disk")
    m = re.fullmatch(r"(\d+\.\d{3}) hours at \$(\d+\.\d{3})/hour", gpu["description"])
    assert m is not None, gpu["description"]
    ran_h = emu_inst.billed_s("gpu") / 3600  # the emulator's own billing clock: the running stretches
    assert float(m.group(1)) == pytest.approx(ran_h, abs=0.0005) and ran_h == pytest.approx(2.0, abs=0.01)
    assert float(m.group(2)) == pytest.approx(gpu["amount"] / ran_h, abs=0.0005)
    assert (gpu["start"], gpu["end"]) == (disk["start"], disk["end"]) == (entry["start"], entry["end"])
    assert re.fullmatch(r"\d+\.\d{3} hours at \$\d+\.\d{3}/hour", disk["description"])
    assert re.fullmatch(rf"Instance {inst.id} Charges - \d+ days?", entry["description"])
    assert entry["amount"] == pytest.approx(emu_inst.billed_usd, abs=1e-9)
    lines = [c for c in vast_provider.billing(entry["start"] - 1.0, entry["end"] + 1.0) if c.instance_id == inst.id]
    booked_gpu = next(c for c in lines if c.kind == "gpu")
    assert booked_gpu.end - booked_gpu.start == pytest.approx(float(m.group(1)) * 3600, abs=1e-6)
    assert sum(c.usd for c in lines) == pytest.approx(emu_inst.billed_usd, abs=1e-9)


def test_a_500_is_tried_once_a_gateways_502_503_504_again_as_vastais_own_client_does(vast_provider, vast_emulator):
    from vastai.api import client as vast_client

    from gpuops.providers.vast.client import TRANSIENT_STATUSES
    from tests.support.emulators import FAST_RETRY

    # the 5xx vastai 1.9.1 retries (its _RETRYABLE_STATUS, beside 429) are the ones we try again
    assert set(TRANSIENT_STATUSES) == set(vast_client._RETRYABLE_STATUS) - {429}

    def sent() -> int:
        return sum(1 for r in vast_emulator.market.requests if r["path"].startswith("/api/v0/users/current"))

    vast_emulator.faults.inject["user"] = [500] * 10
    with pytest.raises(ProviderError) as e:
        vast_provider.balance()
    vast_emulator.faults.inject.clear()
    assert e.value.kind == ProviderErrorKind.SERVER and not e.value.retryable and sent() == 1
    assert "emulated HTTP 500" in e.value.message  # the spec's Error body's msg, read
    vast_emulator.faults.inject["user"] = [502, 503, 504]
    assert vast_provider.balance().usd == pytest.approx(100.0, abs=1e-9)
    assert sent() == 1 + 4  # three gateway pages (HTML), each tried again, then the answer
    vast_emulator.faults.inject["user"] = [503] * 10
    with pytest.raises(ProviderError) as e:
        vast_provider.balance()
    assert e.value.retryable and "gateway error 503" in e.value.message and sent() == 5 + FAST_RETRY.attempts


def test_a_create_answered_500_is_looked_up_by_label_not_tried_again(vast_provider, vast_emulator):
    """A 500 is not retried (vastai does not), but it may hide a create that happened: the label
    look-up finds the instance it made, and no second create is sent."""
    vast_emulator.faults.create_fails_but_creates = 1
    inst = vast_provider.create(offer(vast_provider), spec())
    creates = [r for r in vast_emulator.market.requests if r["method"] == "PUT" and "/asks/" in r["path"]]
    assert len(creates) == 1 and inst.extra["recovered_after"]
    assert [i.id for i in vast_emulator.live()] == [inst.id]
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


def test_stuck_loading_times_out(vast_provider, vast_emulator):
    vast_emulator.faults.stuck_status = "loading"
    inst = vast_provider.create(offer(vast_provider), spec())
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(vast_provider, inst.id, timeout_s=0.5, poll_s=0.05)
    assert (
        e.value.kind == ProviderErrorKind.TIMEOUT
        and "stuck in provisioning (provider status 'loading')" in e.value.message
    )
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


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


def test_bid_on_an_on_demand_offer_is_refused_before_any_request(vast_provider, vast_emulator):
    o = offer(vast_provider)
    sent = len(vast_emulator.market.requests)
    with pytest.raises(BadInput):
        vast_provider.create(o, spec(bid_usd_per_hour=0.5))  # a bid on an on-demand offer
    assert len(vast_emulator.market.requests) == sent


def test_retry_after_is_honoured(vast_provider, vast_emulator):
    import time

    vast_emulator.faults.inject["user"] = [429]
    vast_emulator.faults.retry_after_s = 0.5  # longer than FAST_RETRY's own backoff (<= 0.05 s)
    t = time.monotonic()
    assert vast_provider.balance().usd == pytest.approx(100.0, abs=1e-6)
    assert time.monotonic() - t >= 0.5


def test_on_demand_search_sends_what_vasts_own_clients_send(vast_provider, vast_emulator):
    """vastai's search_offers default, vast-cli and the spec's own example send "on-demand" (the
    spec's enum says "ondemand"): the client that runs on real accounts wins."""
    vast_provider.offers(OfferQuery(cards=("rtx-4090",), spot=None))
    sent = [r["body"]["type"] for r in vast_emulator.market.requests if r["path"] == "/api/v0/bundles/"]
    assert sent == ["on-demand", "bid"]


@pytest.mark.parametrize("kind", ["on-demand", "ondemand"])
def test_emulator_serves_both_spellings_of_on_demand(vast_emulator, kind):
    import requests

    r = requests.post(
        f"{vast_emulator.url}/api/v0/bundles/",
        json={"type": kind, "limit": 2, "order": [["dph_total", "asc"]]},
        headers={"Authorization": f"Bearer {vast_emulator.market.api_key}"},
        timeout=10,
    )
    assert r.status_code == 200
    offers = r.json()["offers"]
    assert [o["is_bid"] for o in offers] == [False, False]
    assert offers[0]["dph_total"] == pytest.approx(0.06 + 0.15 * 5 / 730, abs=1e-6)  # dph_base + 5 GB storage
    assert vast_emulator.contract.violations == []


def test_balance_reads_the_documented_field_not_credit(vast_provider, vast_emulator):
    """The spec's /users/current lists ``balance``; ``credit`` is undocumented: an answer without it
    still gives the balance."""
    vast_emulator.user_without = {"credit"}
    b = vast_provider.balance()
    assert b.usd == pytest.approx(100.0, abs=1e-6) and not b.unreadable


def test_balance_without_its_field_cannot_be_read(vast_provider, vast_emulator):
    vast_emulator.user_without = {"balance"}
    b = vast_provider.balance()
    assert b.usd is None and b.unreadable
    assert b.note == "Vast.ai's account answer (/api/v0/users/current) has no balance field"


@pytest.mark.parametrize("leaves", [True, False], ids=["leaves-a-stopped-instance", "makes-nothing"])
def test_a_refused_bid_is_known_by_its_code_not_its_words(vast_provider, vast_emulator, leaves):
    """The spec's 400 ``invalid_price`` in words that say neither "bid" nor "low": still BID_TOO_LOW,
    and what it left is found by its label and destroyed."""
    vast_emulator.low_bid_leaves_instance = leaves
    vast_emulator.low_bid_msg = "Your offer is not competitive for this machine."
    with pytest.raises(ProviderError) as e:
        vast_provider.create(offer(vast_provider, spot=True), spec(bid_usd_per_hour=0.01))
    err = e.value
    assert err.kind == ProviderErrorKind.BID_TOO_LOW and "Your offer is not competitive" in err.message
    if leaves:
        assert vast_emulator.market.instances[err.instance_id].state == "destroyed"
    else:
        assert err.instance_id is None and vast_emulator.market.instances == {}
    assert vast_emulator.live() == []


def test_a_destroy_answered_success_false_is_failed_and_retried(vast_provider, vast_emulator):
    inst = vast_provider.create(offer(vast_provider), spec())
    vast_emulator.destroy_unsuccessful = 1
    vast_provider.destroy(inst.id)
    deletes = [r for r in vast_emulator.market.requests if r["method"] == "DELETE"]
    assert len(deletes) == 2 and vast_emulator.live() == []


def test_a_destroy_that_keeps_answering_success_false_raises(vast_provider, vast_emulator):
    from tests.support.emulators import FAST_RETRY

    inst = vast_provider.create(offer(vast_provider), spec())
    vast_emulator.destroy_unsuccessful = 100
    with pytest.raises(ProviderError) as e:
        vast_provider.destroy(inst.id)
    assert e.value.kind == ProviderErrorKind.SERVER and "success: false" in e.value.message
    assert "Unable to destroy the instance right now." in e.value.message
    assert len([r for r in vast_emulator.market.requests if r["method"] == "DELETE"]) == FAST_RETRY.attempts
    assert [i.id for i in vast_emulator.live()] == [inst.id]
    vast_emulator.destroy_unsuccessful = 0
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []


@pytest.mark.parametrize("intended", ["running", "stopped"])
def test_an_outbid_box_in_either_shape_is_preempted_during_the_wait(vast_provider, vast_emulator, intended):
    """dstack reads cur_state == intended_status == next_state == "stopped" as outbid: preempted
    (the next offer is tried), never gone."""
    vast_emulator.outbid_intended = intended
    vast_emulator.faults.boot_s = 30
    inst = vast_provider.create(offer(vast_provider, spot=True), spec())
    vast_emulator.preempt(inst.id)
    got = vast_provider.get(inst.id)
    assert got.extra["intended_status"] == intended and got.extra["preempted"] is True
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(vast_provider, inst.id, timeout_s=5, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.PREEMPTED and "outbid" in e.value.message
    vast_provider.destroy(inst.id)
    assert vast_emulator.live() == []
