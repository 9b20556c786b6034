"""Every provider call has a total deadline and a reply size cap (gpuops/providers/http_guard.py),
through the real SDKs against the emulators: a reply trickled one byte at a time ends at the
deadline instead of after minutes, and a huge reply is refused instead of read into memory."""

from __future__ import annotations

import time

import pytest

from gpuops.providers.base import OfferQuery, ProviderError, ProviderErrorKind
from gpuops.providers.keys import Credential
from gpuops.providers.retry import RetryPolicy

DEADLINE_S = 1.5
CAP = 1 * 2**20
# Built with a call deadline no loaded machine reaches (a cold vastai import alone took over 1.5 s
# at load 8): the SDK is imported and warmed, and the size cap is tested, with no clock in the way.
# A deadline test narrows ``call_deadline_s`` (the provider's own setting) after the warm-up.
POLICY = RetryPolicy(
    attempts=3, wait_s=0.01, max_wait_s=0.05, budget_s=600.0, call_deadline_s=600.0, max_reply_bytes=CAP
)
# A loaded machine's slack on "the call ended at its deadline": the faults below would hold the call
# for 100 s (trickle) or for as long as they are set (stall), so ending within it is the deadline.
LOADED_SLACK_S = 10.0


def _provider(name, emu):
    if name == "runpod":
        from gpuops.providers.runpod.compute import RunPodProvider

        p = RunPodProvider(Credential(emu.market.api_key, "test"), emu.url, retry=POLICY)
    else:
        from gpuops.providers.vast.compute import VastProvider

        p = VastProvider(Credential(emu.market.api_key, "test"), emu.url, retry=POLICY, timeout_s=30)
    p.balance()  # imports and warms the SDK under the generous deadline, outside any call under test
    return p


def _ends_at_the_deadline(p, call, faults, **fault):
    """Run ``call`` with ``fault`` set and the call deadline narrowed; return (error, seconds taken)."""
    p.call_deadline_s = DEADLINE_S
    for k, v in fault.items():
        setattr(faults, k, v)
    t0 = time.monotonic()
    try:
        with pytest.raises(ProviderError) as e:
            call()
        return e.value, time.monotonic() - t0
    finally:
        for k in fault:
            setattr(faults, k, type(getattr(faults, k))())
        p.call_deadline_s = POLICY.call_deadline_s


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_trickling_reply_ends_at_the_calls_deadline(emulator_env, name):
    emu = emulator_env[name]
    p = _provider(name, emu)
    # one byte every 20 ms: a 5 KB reply would take 100 s
    err, took = _ends_at_the_deadline(
        p, lambda: p.offers(OfferQuery(cards=("rtx-4090",))), emu.market.faults, trickle_s=0.02
    )
    assert err.kind == ProviderErrorKind.TIMEOUT and "deadline" in err.message
    assert DEADLINE_S - 0.05 <= took < DEADLINE_S + LOADED_SLACK_S, took


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_reply_that_never_completes_ends_at_the_calls_deadline(emulator_env, name):
    emu = emulator_env[name]
    p = _provider(name, emu)
    err, took = _ends_at_the_deadline(p, p.balance, emu.market.faults, stall_reply=True)
    assert err.kind == ProviderErrorKind.TIMEOUT and "deadline" in err.message
    assert DEADLINE_S - 0.05 <= took < DEADLINE_S + LOADED_SLACK_S, took
    assert p.balance().usd == pytest.approx(100.0, abs=1.0)  # outside the fault, the same call works


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "no-length"])
@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_huge_reply_is_refused_not_read(emulator_env, name, declared):
    """Refused by size, never by the clock: the call deadline (600 s) is out of reach, and a 4 MiB
    reply against the 1 MiB cap arrives at once. With the cap removed the padded reply is valid
    JSON and the call succeeds, so this test fails."""
    emu = emulator_env[name]
    p = _provider(name, emu)
    emu.market.faults.hide_length = not declared  # no Content-Length: the cap on what is read
    emu.market.faults.pad_reply_bytes = 4 * CAP
    try:
        with pytest.raises(ProviderError) as e:
            p.balance()
    finally:
        emu.market.faults.pad_reply_bytes = 0
        emu.market.faults.hide_length = False
    assert e.value.kind == ProviderErrorKind.SERVER, e.value.message
    assert f"over the {CAP}-byte cap" in e.value.message
    if declared:  # refused on its Content-Length, before a byte of the body is read
        assert "bytes is over" in e.value.message, e.value.message
    assert p.balance().usd == pytest.approx(100.0, abs=1.0)  # outside the fault, the same call works


def test_guard_leaves_other_threads_and_code_alone(emulator_env):
    import requests

    from gpuops.providers.http_guard import guard

    emu = emulator_env["vast"]
    auth = {"Authorization": f"Bearer {emu.market.api_key}"}  # as Vast's spec requires of every call
    with guard("outer", deadline_s=0.0001):
        time.sleep(0.001)
        with pytest.raises(ProviderError):
            requests.get(emu.url + "/api/v0/users/current", headers=auth, timeout=5)
    assert requests.get(emu.url + "/api/v0/users/current", headers=auth, timeout=5).status_code == 200


def test_trickling_api_cannot_hold_up_past_its_ready_timeout(gpuops_home, emulator_env, monkeypatch):
    """The 10 s ready timeout holds even when every poll trickles: `up` destroys and books
    ssh_never_ready at the deadline instead of 90 s later while the pod bills."""
    import gpuops.rental.launcher as launcher
    from gpuops.config import load_settings
    from gpuops.rental.launcher import Reporter, UpRequest, run_up

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    emu = emulator_env["runpod"]
    emu.market.faults.boot_s = 60  # provisioning: `up` has to poll
    prov = _provider("runpod", emu)
    prov.call_deadline_s = DEADLINE_S
    times: dict = {}

    class R(Reporter):
        def stage(self, n, d=""):
            times[n] = time.monotonic()
            if n == "ready":
                emu.market.faults.trickle_s = 0.05  # from now on every reply trickles
            if n == "teardown":
                emu.market.faults.trickle_s = 0.0

    s = load_settings(None, {"up": {"ready_timeout_seconds": 2.0}})
    job = gpuops_home.parent / "job.sh"
    job.write_text("true\n")
    summ = run_up(UpRequest(job=job, provider="runpod", card="rtx-4090", spot=False), s, R(), provider=prov)
    assert summ["end_reason"] == "ssh_never_ready"
    assert times["teardown"] - times["ready"] < 2.0 + 1.5
    assert emu.live() == []
