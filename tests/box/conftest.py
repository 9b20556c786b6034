"""Fixtures for the box tests: a real sshd on 127.0.0.1 with a stand-in nvidia-smi on its PATH,
gpuops' own key authorized, and a connected SSHBox factory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpuops.box.ssh import HostKeyPins, SSHBox, ensure_ssh_key
from gpuops.emulators import nvidia_smi as fake_nvidia_smi
from gpuops.emulators.sshd import SshServer


@pytest.fixture
def smi_bin(tmp_path) -> Path:
    d = tmp_path / "smi-bin"
    fake_nvidia_smi.install(d)
    return d


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return tmp_path / "gpuops-data"


@pytest.fixture
def client_key(data_dir):
    return ensure_ssh_key(data_dir)


@pytest.fixture
def sshd_unstarted(tmp_path, smi_bin, client_key):
    s = SshServer(tmp_path / "sshd", extra_path=[smi_bin])
    s.authorize(client_key[1])
    yield s
    s.stop()
    s.end_box_processes()


@pytest.fixture
def sshd(sshd_unstarted):
    sshd_unstarted.start()
    return sshd_unstarted


@pytest.fixture
def make_box(data_dir, client_key):
    """make_box(server, port=None, pin="gpuops-t/i-1", root="gpuops/s1", timeout=10) -> connected SSHBox."""
    boxes = []

    def make(server, port=None, pin="gpuops-t/i-1", root="gpuops/s1", timeout=10.0, **kw) -> SSHBox:
        b = SSHBox(
            server.host,
            port or server.port,
            server.user,
            key_path=client_key[0],
            pins=HostKeyPins(data_dir / "known_hosts"),
            pin_name=pin,
            root=root,
            **kw,
        )
        boxes.append(b)
        return b.connect(time.monotonic() + timeout)

    yield make
    for b in boxes:
        b.close()
