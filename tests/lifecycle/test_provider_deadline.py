"""Every provider call has a total deadline and a reply size cap (gpuops/providers/http_guard.py),
through the real SDKs against the emulators: a reply trickled one byte at a time ends at the
deadline instead of after minutes, and a huge reply is refused instead of read into memory."""

from __future__ import annotations

import time

import pytest

from gpuops.providers.base import OfferQuery, ProviderError, ProviderErrorKind
from gpuops.providers.keys import Credential
from gpuops.providers.retry import RetryPolicy

POLICY = RetryPolicy(attempts=3, wait_s=0.01, max_wait_s=0.05, budget_s=10.0, call_deadline_s=1.5, max_reply_bytes=1 * 2**20)


def _provider(name, emu):
    if name == "runpod":
        from gpuops.providers.runpod import RunPodProvider

        return RunPodProvider(Credential(emu.market.api_key, "test"), emu.url, retry=POLICY)
    from gpuops.providers.vast import VastProvider

    return VastProvider(Credential(emu.market.api_key, "test"), emu.url, retry=POLICY, timeout_s=30)


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_trickling_reply_ends_at_the_calls_deadline(emulator_env, name):
    emu = emulator_env[name]
    p = _provider(name, emu)
    p.balance()  # imports and warms the SDK outside the timed call
    emu.market.faults.trickle_s = 0.02  # one byte every 20 ms: a 5 KB reply would take 100 s
    t0 = time.monotonic()
    with pytest.raises(ProviderError) as e:
        p.offers(OfferQuery(cards=("rtx-4090",)))
    took = time.monotonic() - t0
    emu.market.faults.trickle_s = 0.0
    assert e.value.kind == ProviderErrorKind.TIMEOUT and "deadline" in e.value.message
    assert took < 1.5 + 1.0  # the deadline, plus at most one trickled byte and slack


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_huge_reply_is_refused_not_read(emulator_env, name):
    emu = emulator_env[name]
    p = _provider(name, emu)
    p.balance()  # imports and warms the SDK outside the call under test: under load, a cold vastai
    # import alone can outlast the 1.5 s call deadline, and the deadline then fires before the cap
    emu.market.faults.pad_reply_bytes = 50 * 2**20  # a 50 MB reply against a 1 MiB cap
    t0 = time.monotonic()
    with pytest.raises(ProviderError) as e:
        p.balance()
    emu.market.faults.pad_reply_bytes = 0
    assert "cap" in e.value.message and time.monotonic() - t0 < 5
    assert p.balance().usd == pytest.approx(100.0, abs=1.0)  # outside the fault, the same call works


def test_guard_leaves_other_threads_and_code_alone(emulator_env):
    import requests

    from gpuops.providers.http_guard import guard

    emu = emulator_env["vast"]
    with guard("outer", deadline_s=0.0001):
        time.sleep(0.001)
        with pytest.raises(ProviderError):
            requests.get(emu.url + "/api/v0/users/current/", timeout=5)
    assert requests.get(emu.url + "/api/v0/users/current/", timeout=5).status_code in (200, 401)


def test_trickling_api_cannot_hold_up_past_its_ready_timeout(gpuops_home, emulator_env, monkeypatch):
    """The 10 s ready timeout holds even when every poll trickles: `up` destroys and books
    ssh_never_ready at the deadline instead of 90 s later while the pod bills."""
    import gpuops.launcher as launcher
    from gpuops.config import load_settings
    from gpuops.launcher import Reporter, UpRequest, run_up

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    emu = emulator_env["runpod"]
    emu.market.faults.boot_s = 60  # provisioning: `up` has to poll
    prov = _provider("runpod", emu)
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
