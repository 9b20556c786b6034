"""Fixtures that start the provider emulators on 127.0.0.1 and providers wired to them.

Use from any test area with ``from tests.support.emulators import *`` in its conftest (or import
the fixtures by name). ``emulator_env`` points a gpuops subprocess at both emulators through the
same variables a user would set (``RUNPOD_API_KEY``, ``RUNPOD_API_BASE_URL``, ``VAST_API_KEY``,
``VAST_URL``). To point instances at a test sshd: ``emu.market.ssh_endpoint = (host, port)``.
"""

from __future__ import annotations

import pytest

from gpuops.providers.keys import Credential
from gpuops.providers.retry import RetryPolicy
from tests.emulators import RunPodEmulator, VastEmulator

# Retries as in production (bounded, exponential) but with millisecond waits.
FAST_RETRY = RetryPolicy(attempts=4, wait_s=0.01, max_wait_s=0.05, budget_s=10.0)


@pytest.fixture
def runpod_emulator():
    """A started RunPodEmulator (key ``rp_TESTKEY``, 100 USD of credit); stopped after the test."""
    emu = RunPodEmulator().start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def vast_emulator():
    """A started VastEmulator (key ``vast_TESTKEY``, 100 USD of credit); stopped after the test."""
    emu = VastEmulator().start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def runpod_provider(runpod_emulator):
    """gpuops' RunPodProvider talking to ``runpod_emulator`` (REST v2 and its one GraphQL POST)."""
    from gpuops.providers.runpod.compute import RunPodProvider

    return RunPodProvider(Credential(runpod_emulator.market.api_key, "test"), runpod_emulator.url, retry=FAST_RETRY)


@pytest.fixture
def vast_provider(vast_emulator):
    """gpuops' VastProvider talking to ``vast_emulator`` through the vastai SDK."""
    from gpuops.providers.vast.compute import VastProvider

    return VastProvider(
        Credential(vast_emulator.market.api_key, "test"), vast_emulator.url, retry=FAST_RETRY, timeout_s=10
    )


@pytest.fixture
def emulator_env(runpod_emulator, vast_emulator, monkeypatch):
    """Set the provider variables so that gpuops (in-process or a subprocess) uses both emulators."""
    monkeypatch.setenv("RUNPOD_API_KEY", runpod_emulator.market.api_key)
    monkeypatch.setenv("RUNPOD_API_BASE_URL", runpod_emulator.url)
    monkeypatch.setenv("VAST_API_KEY", vast_emulator.market.api_key)
    monkeypatch.setenv("VAST_URL", vast_emulator.url)
    return {"runpod": runpod_emulator, "vast": vast_emulator}
