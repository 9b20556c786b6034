"""RunPod's REST API v2 against the RunPod emulator (every request and reply held to RunPod's
published spec): what is RunPod's own (stock and prices per cloud, the v2 shapes and errors, no
interruptible pods, the GraphQL balance and its degraded note). The contract both providers keep
(faults, retries, keys, waits) is tests/providers/test_provider_contract.py."""

from __future__ import annotations

import time

import pytest

from gpuops.errors import BadInput
from gpuops.providers.base import CreateSpec, InstanceStatus, OfferQuery, ProviderError, ProviderErrorKind
from gpuops.providers.wait import wait_for_ssh

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
        ("secure:NVIDIA GeForce RTX 4090", 1.38),
        ("community:NVIDIA GeForce RTX 4090", 0.68),
    }
    assert all(o.card == "rtx-4090" and o.gpu_count == 2 and o.vram_bytes == 24 * 2**30 and not o.spot for o in offers)

    before = p.balance()
    assert before.usd == pytest.approx(100.0, abs=1e-6) and before.spend_usd_per_hour == 0.0
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
    assert b.usd == pytest.approx(100.0 - 0.68, abs=0.01) and b.spend_usd_per_hour == pytest.approx(0.68, abs=1e-6)

    p.destroy(inst.id)
    p.destroy(inst.id)  # idempotent
    p.destroy(other.id)
    assert p.get(inst.id) is None and p.list("") == []
    assert emu.live() == [] and emu.market.crashes == []

    # What we sent: the v2 create body -- on-demand, 22/tcp exposed, our key for root.
    pod_req = emu.market.instances[inst.id].request
    assert pod_req == {
        "name": "gpuops-s1",
        "image": IMAGE,
        "cloud": "COMMUNITY",
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
        "disk": 30,
        "ports": ["22/tcp"],
        "env": {"PUBLIC_KEY": KEY},
        "startSsh": True,
    }
    paths = {(r["method"], r["path"].replace(inst.id, "{id}").replace(other.id, "{id}")) for r in emu.market.requests}
    assert paths == {
        ("GET", "/v2/catalog/gpus"),
        ("POST", "/v2/pods"),
        ("GET", "/v2/pods/{id}"),
        ("GET", "/v2/pods"),
        ("DELETE", "/v2/pods/{id}"),
        ("POST", "/graphql"),
    }
    assert {r["query"].get("include") for r in emu.market.requests if r["path"] == "/v2/catalog/gpus"} == {
        "AVAILABILITY"
    }
    assert all(r["auth"] == "Bearer rp_TESTKEY" for r in emu.market.requests)


def test_offers_only_what_is_in_stock(runpod_provider, runpod_emulator):
    p, emu = runpod_provider, runpod_emulator
    emu.gpus["NVIDIA GeForce RTX 4090"]["stock"] = 0
    assert p.offers(OfferQuery(cards=("rtx-4090",))) == []
    emu.gpus["NVIDIA GeForce RTX 4090"]["stock"] = 1
    assert {o.offer_id for o in p.offers(OfferQuery(cards=("rtx-4090",)))} == {
        "secure:NVIDIA GeForce RTX 4090",
        "community:NVIDIA GeForce RTX 4090",
    }
    assert p.offers(OfferQuery(cards=("rtx-4090",), gpu_count=9)) == []  # over maxCount: none in either cloud
    q = [r["query"] for r in emu.market.requests if r["path"] == "/v2/catalog/gpus"][-2:]
    assert [(x["product"], x["count"], x["cloud"]) for x in q] == [("POD", "9", "SECURE"), ("POD", "9", "COMMUNITY")]


def test_pod_stop_action_exits_the_pod(runpod_provider, runpod_emulator):
    p = runpod_provider
    inst = p.create(cheapest_4090(p), spec())
    wait_for_ssh(p, inst.id, timeout_s=10, poll_s=0.05)
    stopped = p.stop(inst.id)
    assert (stopped.status, stopped.raw_status, stopped.ssh) == (InstanceStatus.EXITED, "EXITED", None)
    assert (
        p.get(inst.id).status == InstanceStatus.EXITED and runpod_emulator.market.instances[inst.id].state == "stopped"
    )
    assert runpod_emulator.market.requests[-2]["body"] == {"action": "stop"}
    p.destroy(inst.id)  # a stopped pod still bills its disk: terminate
    assert runpod_emulator.live() == []


def test_errors_are_read_from_the_problem_detail(runpod_provider, runpod_emulator):
    p, emu = runpod_provider, runpod_emulator
    offer = cheapest_4090(p)
    emu.market.initial_balance = 0.01
    with pytest.raises(ProviderError) as e:
        p.create(offer, spec())
    assert e.value.kind == ProviderErrorKind.FUNDS and "Insufficient balance" in e.value.message
    emu.market.initial_balance = 100.0
    emu.faults.inject["create"] = [403]
    with pytest.raises(ProviderError) as e:
        p.create(offer, spec())
    assert (
        e.value.kind == ProviderErrorKind.OFFER_GONE
        and e.value.try_next_offer
        and "emulated HTTP 403" in e.value.message
    )
    emu.faults.inject["create"] = [422]
    sent = len(emu.market.requests)
    with pytest.raises(ProviderError) as e:
        p.create(offer, spec())
    assert e.value.kind == ProviderErrorKind.BAD_REQUEST and len(emu.market.requests) == sent + 1  # never retried
    assert emu.live() == []


def test_balance_degrades_to_a_note_when_graphql_answers_an_error(runpod_provider, runpod_emulator):
    runpod_emulator.graphql_retired = "errors"
    b = runpod_provider.balance()
    assert b.usd is None and b.spend_usd_per_hour is None
    assert "GraphQL" in b.note and "retired" in b.note


def _graphql_posts(emu) -> int:
    """``POST /graphql`` requests the emulator recorded."""
    return sum(1 for r in emu.market.requests if (r["method"], r["path"]) == ("POST", "/graphql"))


@pytest.mark.parametrize("retired, status", [("html", 200), ("404", 404)])
def test_a_web_page_or_a_404_for_the_balance_is_asked_once(runpod_provider, runpod_emulator, retired, status):
    """Not transient (the same POST gets the same page): raised at once, in the one line it always had."""
    runpod_emulator.graphql_retired = retired
    with pytest.raises(ProviderError) as e:
        runpod_provider.balance()
    assert e.value.kind == ProviderErrorKind.SERVER and not e.value.retryable
    said = f"RunPod answered with a web page or no data while trying to read the balance (HTTP {status})"
    assert e.value.message == said
    assert _graphql_posts(runpod_emulator) == 1


def test_a_gateways_502_page_for_the_balance_is_still_retried(runpod_provider, runpod_emulator):
    runpod_emulator.faults.inject["myself"] = [502, 502]  # a gateway's HTML page, twice, then the API
    assert runpod_provider.balance().usd == pytest.approx(100.0, abs=1e-6)
    assert _graphql_posts(runpod_emulator) == 3 and runpod_emulator.faults.inject["myself"] == []


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


def test_strings_reach_the_api_intact(runpod_provider, runpod_emulator):
    nasty = 'a"b\\c } mutation { podTerminate(input: {podId: "x"}) }'
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec(env={"NASTY": nasty}))
    env = runpod_emulator.market.instances[inst.id].request["env"]
    assert env["NASTY"] == nasty  # arrived intact, as one JSON value
    assert runpod_emulator.market.crashes == []
    runpod_provider.destroy(inst.id)


@pytest.mark.parametrize(
    "bad",
    [
        dict(image='img"; x'),
        dict(env={"BAD KEY": "v"}),
        dict(env={"K": "line1\nline2"}),
    ],
)
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
    assert (
        "no interruptible (spot) pods" in e.value.message
        and "--provider vast" in e.value.fix
        and "--on-demand" in e.value.fix
    )
    with pytest.raises(ProviderError) as e:
        runpod_provider.create(cheapest_4090(runpod_provider), spec(bid_usd_per_hour=0.2))
    assert e.value.kind == ProviderErrorKind.UNSUPPORTED and runpod_emulator.live() == []


def test_the_balance_needs_no_runpod_sdk(runpod_provider, runpod_emulator, monkeypatch):
    """The balance is one GraphQL POST through the project's one HTTP client: no ``runpod`` SDK is
    imported (none is installed), and no environment variable is swapped under the call."""
    import os
    import sys

    monkeypatch.setitem(sys.modules, "runpod", None)  # ``import runpod`` raises ImportError
    monkeypatch.setenv("RUNPOD_API_BASE_URL", "http://elsewhere.invalid")
    got = runpod_provider.balance()
    assert got.usd == pytest.approx(runpod_emulator.market.balance("acct-1"), abs=1e-6) and got.note == ""
    assert os.environ["RUNPOD_API_BASE_URL"] == "http://elsewhere.invalid"
    sent = [r for r in runpod_emulator.market.requests if r["path"] == "/graphql"]
    assert [r["body"] for r in sent] == [{"query": "query myself { myself { clientBalance currentSpendPerHr } }"}]
    assert sent[0]["headers"]["Authorization"] == f"Bearer {runpod_provider.credential.key}"


def test_server_errors_on_read_are_retried_then_named(runpod_provider, runpod_emulator):
    runpod_emulator.faults.inject["pod"] = [500, 502]
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec())
    assert runpod_provider.get(inst.id).id == inst.id  # a problem 500, a gateway's HTML 502: retried
    runpod_emulator.faults.inject["pod"] = [500] * 10
    with pytest.raises(ProviderError) as e:
        runpod_provider.get(inst.id)
    assert e.value.kind == ProviderErrorKind.SERVER and "server error 500" in e.value.message
    runpod_emulator.faults.inject.clear()
    runpod_provider.destroy(inst.id)
    assert runpod_emulator.live() == []


def test_unicode_and_tabs_survive_escaping(runpod_provider, runpod_emulator):
    value = "tab\there, ümlaut, emoji 🚀, backslash-n \\n"
    inst = runpod_provider.create(cheapest_4090(runpod_provider), spec(env={"V": value}))
    assert runpod_emulator.market.instances[inst.id].request["env"]["V"] == value
    runpod_provider.destroy(inst.id)


def test_gpu_type_withdrawn_between_search_and_create(runpod_provider, runpod_emulator):
    offer = cheapest_4090(runpod_provider)
    del runpod_emulator.gpus["NVIDIA GeForce RTX 4090"]  # the create is answered 400: cannot be placed
    with pytest.raises(ProviderError) as e:
        runpod_provider.create(offer, spec())
    assert e.value.kind == ProviderErrorKind.NO_CAPACITY and e.value.try_next_offer and runpod_emulator.live() == []


@pytest.mark.parametrize("how", ["private-address", "no-port-22"])
def test_a_running_pod_without_a_public_ssh_port_fails_the_wait_at_once(runpod_provider, runpod_emulator, how):
    """A pod whose 22/tcp is mapped on a private address only (or not at all) is never reachable:
    the wait ends at once with the reason, not paid until the ready timeout."""
    runpod_emulator.faults.boot_s = 0
    if how == "private-address":
        runpod_emulator.ssh_port_private = True
    else:
        runpod_emulator.faults.no_ssh_port = True
    o = [x for x in runpod_provider.offers(OfferQuery(cards=("rtx-4090",))) if x.offer_id.startswith("community")][0]
    inst = runpod_provider.create(o, spec())
    t = time.monotonic()
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(runpod_provider, inst.id, timeout_s=30, poll_s=0.05)
    assert time.monotonic() - t < 10  # not the 30 s ready timeout
    assert e.value.kind == ProviderErrorKind.UNSUPPORTED and e.value.instance_id == inst.id
    why = (
        "port 22 is published only on 10.65.0.7:22022, not on a public address"
        if how == "private-address"
        else "the running pod publishes no 22/tcp port (its ports: 8888/http)"
    )
    assert e.value.message == f"runpod instance {inst.id} runs without a public SSH port: {why}"
    runpod_provider.destroy(inst.id)
    assert runpod_emulator.live() == []


def test_a_429_without_retry_after_waits_for_the_exhausted_quota_window(runpod_provider, runpod_emulator):
    """RunPod's spec: RateLimit ``"minute";r=0;t=N`` says when the exhausted window resets."""
    from gpuops.providers.retry import wait_asked

    assert wait_asked(None, '"minute";r=0;t=12, "hour";r=2800;t=1812') == 12.0
    assert wait_asked("3", '"minute";r=0;t=12') == 3.0 and wait_asked(None, '"minute";r=5;t=12') is None
    runpod_emulator.faults.quota_reset_s = 0.4
    runpod_emulator.faults.inject["pods"] = [429]
    t = time.monotonic()
    assert runpod_provider.list() == []
    assert time.monotonic() - t >= 0.4
