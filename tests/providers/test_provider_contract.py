"""The contract every rented-GPU provider keeps, run against each one: RunPod's REST v2 client and
the vastai SDK talking to their emulators (each held to its provider's published spec). What differs between providers (operation names, the fault that makes
an offer vanish, the wording of the key variable) is in ``Side``; what a provider does that the
other does not (RunPod's stock and v2 errors, Vast's bids and pages) stays in test_runpod.py and
test_vast.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import graphql
import pytest

from gpuops.errors import BadInput
from gpuops.providers.base import CreateSpec, InstanceStatus, OfferQuery, ProviderError, ProviderErrorKind
from gpuops.providers.keys import Credential
from gpuops.providers.wait import wait_for_ssh
from tests.support.emulators import FAST_RETRY

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopstestkey gpuops@test"


@dataclass
class Side:
    """One provider under the contract."""

    name: str
    vendor: str  # as error messages name it
    key_var: str  # the variable the fix names
    emu: Any
    provider: Any
    make: Callable[[Credential | None, str], Any]  # (credential, url) -> a provider with FAST_RETRY
    image: str
    ops: dict[str, str]  # contract operation -> the emulator's op name (fault injection, counting)
    offer_gone: ProviderErrorKind  # what a vanished offer raises

    def offer(self):
        offers = self.provider.offers(OfferQuery(cards=("rtx-4090",), spot=False))
        return min(offers, key=lambda o: o.usd_per_hour)

    def spec(self, label: str = "gpuops-c1", **kw) -> CreateSpec:
        kw.setdefault("ssh_public_key", KEY)
        return CreateSpec(label=label, image=self.image, disk_gb=30, **kw)

    def sent(self, op: str) -> int:
        """Requests the emulator received for contract operation ``op``."""
        want = self.ops[op]
        return sum(1 for r in self.emu.market.requests if self._op_of(r) == want)

    def _op_of(self, r: dict) -> str:
        if self.name == "vast":
            return self.emu._op(r["method"], r["path"])[0]
        op = self.emu._route(r["method"], r["path"])[0]
        if op != "graphql":
            return op
        try:
            return (
                graphql.parse((r["body"] or {}).get("query", "")).definitions[0].selection_set.selections[0].name.value
            )
        except (graphql.GraphQLError, AttributeError, IndexError):
            return "?"


@pytest.fixture(params=["runpod", "vast"])
def side(request) -> Side:
    if request.param == "runpod":
        from gpuops.providers.runpod.compute import RunPodProvider

        emu = request.getfixturevalue("runpod_emulator")
        return Side(
            "runpod",
            "RunPod",
            "RUNPOD_API_KEY",
            emu,
            request.getfixturevalue("runpod_provider"),
            lambda cred, url: RunPodProvider(cred, url, retry=FAST_RETRY),
            "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
            {"list": "pods", "balance": "myself", "create": "create", "get": "pod"},
            ProviderErrorKind.NO_CAPACITY,
        )
    from gpuops.providers.vast.compute import VastProvider

    emu = request.getfixturevalue("vast_emulator")
    return Side(
        "vast",
        "Vast.ai",
        "VAST_API_KEY",
        emu,
        request.getfixturevalue("vast_provider"),
        lambda cred, url: VastProvider(cred, url, retry=FAST_RETRY, timeout_s=2),
        "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-devel",
        {"list": "list", "balance": "user", "create": "create", "get": "show"},
        ProviderErrorKind.OFFER_GONE,
    )


def test_create_wait_list_destroy(side):
    p, emu = side.provider, side.emu
    inst = p.create(side.offer(), side.spec())
    assert inst.status == InstanceStatus.PROVISIONING and inst.ssh is None and inst.label == "gpuops-c1"
    ready = wait_for_ssh(p, inst.id, timeout_s=10, poll_s=0.05)
    assert ready.status == InstanceStatus.RUNNING and (ready.ssh.host, ready.ssh.port) == ("203.0.113.10", 40022)
    assert [i.id for i in p.list("gpuops-")] == [inst.id] and p.list("nope-") == []
    p.destroy(inst.id)
    p.destroy(inst.id)  # idempotent
    assert p.get(inst.id) is None and p.list("gpuops-") == []
    assert emu.live() == [] and emu.market.crashes == []


@pytest.mark.parametrize(
    "bad",
    [
        dict(label='gpuops-x" } }'),
        dict(label="gpuops x"),
        dict(label="gpuops-$(reboot)"),
        dict(ssh_public_key="not a key"),
    ],
)
def test_bad_input_is_refused_before_any_request(side, bad):
    offer = side.offer()
    sent = len(side.emu.market.requests)
    with pytest.raises(BadInput):
        side.provider.create(offer, side.spec(**bad))
    assert len(side.emu.market.requests) == sent and side.emu.live() == []


def test_unauthorized_names_the_variable_and_never_the_key(side, caplog):
    caplog.set_level(logging.DEBUG)
    p = side.make(Credential("WRONGKEY_c0ffee", f"${side.key_var}"), side.emu.url)
    with pytest.raises(ProviderError) as e:
        p.balance()
    assert e.value.kind == ProviderErrorKind.AUTH and side.key_var in e.value.fix
    assert "WRONGKEY_c0ffee" not in str(e.value) and "WRONGKEY_c0ffee" not in caplog.text
    assert len(side.emu.market.requests) == 1  # 401 is not retried


def test_missing_key_names_the_variable(side):
    with pytest.raises(ProviderError) as e:
        side.make(None, "http://127.0.0.1:9").balance()
    assert e.value.kind == ProviderErrorKind.AUTH and side.key_var in e.value.fix


def test_rate_limit_is_retried_then_succeeds(side):
    side.emu.faults.inject[side.ops["list"]] = [429, 429]
    assert side.provider.list() == []
    assert side.sent("list") == 3  # our retries only: the SDK's own are off


def test_server_errors_are_bounded(side):
    side.emu.faults.inject[side.ops["balance"]] = [502] * 10
    with pytest.raises(ProviderError) as e:
        side.provider.balance()
    assert e.value.kind == ProviderErrorKind.SERVER and e.value.retryable
    assert side.sent("balance") == FAST_RETRY.attempts


def test_a_web_page_in_a_200_is_asked_once_not_retried(side):
    """A 2xx whose body is not JSON (a proxy's or a wrong host's page) is not transient: one request, one line."""
    side.emu.faults.web_page[side.ops["list"]] = 1
    with pytest.raises(ProviderError) as e:
        side.provider.list()
    assert e.value.kind == ProviderErrorKind.SERVER and not e.value.retryable
    assert e.value.message.startswith(f"{side.vendor} answered with something that is not JSON while trying to list ")
    assert "\n" not in e.value.message
    assert side.sent("list") == 1 and side.emu.faults.web_page[side.ops["list"]] == 0
    assert side.provider.list() == []  # past the page, the same call is answered


def test_create_that_fails_but_creates_is_recovered(side):
    side.emu.faults.create_fails_but_creates = 1
    inst = side.provider.create(side.offer(), side.spec())
    assert inst.extra["recovered_after"]
    assert [i.id for i in side.emu.live()] == [inst.id]  # exactly one instance, the one we track
    side.provider.destroy(inst.id)
    assert side.emu.live() == []


def test_a_create_that_keeps_failing_is_tried_attempts_times_with_a_look_up_after_each(side, monkeypatch):
    from types import SimpleNamespace

    from gpuops.providers import retry

    offer = side.offer()
    waits: list[float] = []
    monkeypatch.setattr(retry, "time", SimpleNamespace(sleep=waits.append, monotonic=time.monotonic))  # nothing sleeps
    side.emu.faults.inject[side.ops["create"]] = [502] * 10
    lists = side.sent("list")
    with pytest.raises(ProviderError) as e:
        side.provider.create(offer, side.spec())
    assert e.value.kind == ProviderErrorKind.SERVER
    assert side.sent("create") == FAST_RETRY.attempts and side.sent("list") - lists == FAST_RETRY.attempts
    assert waits == pytest.approx([0.01, 0.02, 0.04], abs=1e-9)  # wait_s doubling (cap 0.05 not reached), no budget_s
    assert side.emu.live() == []


def test_a_create_storm_waits_out_the_rate_limit_within_the_creates_deadline(side, monkeypatch):
    """A 429 refused the create: its Retry-After is waited (after the look-up) and the create tried
    again past ``attempts``, until the create's deadline; 5xx keep counting against ``attempts``."""
    from types import SimpleNamespace

    from gpuops.providers import retry

    offer = side.offer()
    waits: list[float] = []
    monkeypatch.setattr(retry, "time", SimpleNamespace(sleep=waits.append, monotonic=time.monotonic))  # nothing sleeps
    side.emu.faults.retry_after_s = 30  # the server asks for 30 s each time
    side.emu.faults.inject[side.ops["create"]] = [429] * 6
    inst = side.provider.create(offer, side.spec())
    assert side.sent("create") == 7 and waits == pytest.approx([30.0] * 6, abs=1e-9)
    assert [i.id for i in side.emu.live()] == [inst.id]
    side.provider.destroy(inst.id)


def test_a_rate_limit_longer_than_the_creates_deadline_ends_at_the_deadline(side):
    side.provider.create_deadline_s = 3.0
    offer = side.offer()
    side.emu.faults.retry_after_s = 1.0
    side.emu.faults.inject[side.ops["create"]] = [429] * 100
    t = time.monotonic()
    with pytest.raises(ProviderError) as e:
        side.provider.create(offer, side.spec())
    took = time.monotonic() - t
    # Waited out at least one Retry-After, and the create's deadline ended it: the next wait would
    # pass it (RATE_LIMIT), or, on a loaded machine, a call in flight reached it (TIMEOUT).
    assert e.value.kind in (ProviderErrorKind.RATE_LIMIT, ProviderErrorKind.TIMEOUT)
    assert 1.0 <= took < 3.0 + 2.0, took
    assert side.emu.live() == []


def test_offer_vanishing_between_search_and_create_says_try_the_next(side):
    offer = side.offer()
    side.emu.faults.vanish_on_create = True
    with pytest.raises(ProviderError) as e:
        side.provider.create(offer, side.spec())
    assert e.value.kind == side.offer_gone and e.value.try_next_offer and e.value.instance_id is None
    assert side.emu.live() == [] and side.provider.balance().usd == pytest.approx(100.0, abs=1e-6)


def test_insufficient_funds_rents_nothing(side):
    side.emu.market.initial_balance = 0.10
    with pytest.raises(ProviderError) as e:
        side.provider.create(side.offer(), side.spec())
    assert e.value.kind == ProviderErrorKind.FUNDS and side.emu.live() == []


def test_instance_that_never_publishes_port_22_fails_the_wait(side):
    """Vast: the wait times out (its answer cannot tell "not yet" from "never"). RunPod: a running
    pod whose runtime ports lack 22/tcp never gets one, so the wait fails at once with the reason."""
    side.emu.faults.no_ssh_port = True
    side.emu.faults.boot_s = 0  # running at once: the wait can only end in "no port 22"
    inst = side.provider.create(side.offer(), side.spec())
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(side.provider, inst.id, timeout_s=0.8, poll_s=0.05)
    if side.name == "runpod":
        assert e.value.kind == ProviderErrorKind.UNSUPPORTED and "publishes no 22/tcp port" in e.value.message
    else:
        assert e.value.kind == ProviderErrorKind.TIMEOUT and "never published port 22" in e.value.message
    assert e.value.instance_id == inst.id
    side.provider.destroy(inst.id)
    assert side.emu.live() == []


def test_instance_deleted_mid_wait_is_gone(side):
    side.emu.faults.boot_s = 30
    side.emu.faults.delete_after_s = 0.3  # deleted from the provider's console while we wait
    inst = side.provider.create(side.offer(), side.spec())
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(side.provider, inst.id, timeout_s=10, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.GONE
    side.provider.destroy(inst.id)  # destroying a gone instance is success
    assert side.emu.live() == []


@pytest.mark.parametrize("raw", ["MIGRATING", "hibernating"])
def test_undocumented_status_is_kept_and_the_wait_names_it(side, raw):
    side.emu.faults.stuck_status = raw
    inst = side.provider.create(side.offer(), side.spec())
    got = side.provider.get(inst.id)
    assert got.status == InstanceStatus.UNKNOWN and got.raw_status == raw
    with pytest.raises(ProviderError) as e:
        wait_for_ssh(side.provider, inst.id, timeout_s=0.5, poll_s=0.05)
    assert e.value.kind == ProviderErrorKind.TIMEOUT and f"'{raw}'" in e.value.message
    side.provider.destroy(inst.id)
    assert side.emu.live() == []


@pytest.mark.parametrize("status", [429, 502])
def test_wait_rides_out_transient_errors_while_polling(side, status):
    inst = side.provider.create(side.offer(), side.spec())
    side.emu.faults.inject[side.ops["get"]] = [
        status
    ] * 6  # more than one get() retries, fewer than the deadline allows
    ready = wait_for_ssh(side.provider, inst.id, timeout_s=10, poll_s=0.05)
    assert ready.ssh is not None and side.emu.faults.inject[side.ops["get"]] == []
    side.provider.destroy(inst.id)
    assert side.emu.live() == []


def test_latency_is_tolerated(side):
    side.emu.faults.latency_s = 0.2
    t = time.monotonic()
    assert side.provider.balance().usd == pytest.approx(100.0, abs=1e-6)
    assert time.monotonic() - t >= 0.2


def test_key_never_leaves_the_authorization_header(side, caplog):
    caplog.set_level(logging.DEBUG)
    side.emu.faults.inject[side.ops["create"]] = [502] * 4
    with pytest.raises(ProviderError) as e:
        side.provider.create(side.offer(), side.spec())
    key = side.emu.market.api_key
    assert key not in str(e.value) and key not in caplog.text and key not in side.emu.wire_text()
    assert all(r["auth"] == f"Bearer {key}" for r in side.emu.market.requests)
    assert side.emu.live() == []


def test_unreachable_endpoint_names_the_provider_and_url(side):
    p = side.make(Credential("k_x", "t"), "http://127.0.0.1:9")
    with pytest.raises(ProviderError) as e:
        p.list()
    assert (
        e.value.kind == ProviderErrorKind.SERVER
        and f"cannot reach {side.vendor} at http://127.0.0.1:9" in e.value.message
    )
