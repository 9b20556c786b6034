"""Fixtures for the storage tests: provider emulators that also serve volumes, providers wired to
them, and a real sshd on 127.0.0.1 (a stand-in nvidia-smi on its PATH, gpuops' key authorized)."""

from __future__ import annotations

import pytest

from gpuops.emulators import nvidia_smi as fake_nvidia_smi
from gpuops.emulators.sshd import SshServer
from gpuops.emulators.volumes import RunPodVolumeEmulator, VastVolumeEmulator
from gpuops.providers.keys import Credential
from tests.support.emulators import FAST_RETRY


@pytest.fixture
def runpod_vol_emulator():
    emu = RunPodVolumeEmulator().start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def vast_vol_emulator():
    emu = VastVolumeEmulator().start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def runpod_vol_provider(runpod_vol_emulator):
    from gpuops.providers.runpod.compute import RunPodProvider

    return RunPodProvider(
        Credential(runpod_vol_emulator.market.api_key, "test"), runpod_vol_emulator.url, retry=FAST_RETRY
    )


@pytest.fixture
def vast_vol_provider(vast_vol_emulator):
    from gpuops.providers.vast.compute import VastProvider

    return VastProvider(
        Credential(vast_vol_emulator.market.api_key, "test"), vast_vol_emulator.url, retry=FAST_RETRY, timeout_s=10
    )


@pytest.fixture
def vol_env(runpod_vol_emulator, vast_vol_emulator, monkeypatch):
    """Provider variables pointing gpuops (in-process or a subprocess) at both volume emulators."""
    monkeypatch.setenv("RUNPOD_API_KEY", runpod_vol_emulator.market.api_key)
    monkeypatch.setenv("RUNPOD_API_BASE_URL", runpod_vol_emulator.url)
    monkeypatch.setenv("VAST_API_KEY", vast_vol_emulator.market.api_key)
    monkeypatch.setenv("VAST_URL", vast_vol_emulator.url)
    return {"runpod": runpod_vol_emulator, "vast": vast_vol_emulator}


@pytest.fixture
def sshd(tmp_path):
    """A started sshd on 127.0.0.1; stopped (and what it started ended) after the test."""
    smi = tmp_path / "smi-bin"
    fake_nvidia_smi.install(smi)
    s = SshServer(tmp_path / "sshd", extra_path=[smi])
    try:
        s.start()
        yield s
    finally:
        s.stop()
        s.end_box_processes()
