"""Emulated instances can point SSH at a test sshd: the provider reports exactly that endpoint."""

from __future__ import annotations

import pytest

from gpuops.planning.offers import rank
from gpuops.providers.base import CreateSpec, OfferQuery
from gpuops.providers.rent import rent_first
from gpuops.providers.wait import wait_for_ssh


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_endpoint_points_at_the_test_sshd(name, request):
    emu = request.getfixturevalue(f"{name}_emulator")
    provider = request.getfixturevalue(f"{name}_provider")
    emu.market.ssh_endpoint = ("127.0.0.1", 2222)
    ranked = rank(provider.offers(OfferQuery(cards=("rtx-4090",), spot=False)))
    res = rent_first(provider, ranked, CreateSpec(label=f"gpuops-ssh-{name}", image="img/test:1"))
    ready = wait_for_ssh(provider, res.instance.id, timeout_s=10, poll_s=0.05)
    assert (ready.ssh.host, ready.ssh.port, ready.ssh.user) == ("127.0.0.1", 2222, "root")
    provider.destroy(ready.id)
    assert emu.live() == []
