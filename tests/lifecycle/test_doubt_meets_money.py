"""Where the destroy-on-certainty rules meet the end-time rule: a look-up that fails and then
answers, a reused id under a watchdog, a spooled close of a box whose provider's clock is behind
ours. On the emulators (their own billing clock is the reference)."""

from __future__ import annotations

import pytest

from ledger.store import Ledger
from tests.lifecycle.test_destroy_path import GET_OP, _booked
from tests.support.emulators import FAST_RETRY, runpod_provider, vast_provider  # noqa: F401  (fixtures)


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_down_whose_first_read_fails_says_it_destroyed_ours_found_by_label(
    name, gpuops_home, request, monkeypatch, cli
):
    """The read of the id fails (every retry of it), the list answers it labelled ours: ours is
    destroyed under its label. `down` says so, not "not touched" nor "ours is gone"."""
    emu, prov, settings, sid, iid = _booked(name, request, monkeypatch)
    emu.faults.inject[GET_OP[name]] = [500] * FAST_RETRY.attempts  # the first read only, all its tries
    res = cli("down", sid)
    emu.faults.inject.clear()
    assert emu.live() == [] and emu.market.instances[iid].state == "destroyed"
    row = Ledger(settings.ledger_url()).get(sid)
    assert (row.status, row.end_reason) == ("closed", "manual")
    assert f"destroyed {iid} (manual)" in res.stdout, res.stdout
    assert "not touched" not in res.stdout and "ours is gone" not in res.stdout, res.stdout
    assert res.returncode == 0
