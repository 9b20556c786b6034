"""Where the destroy-on-certainty rules meet the end-time rule: a look-up that fails and then
answers, a reused id under a watchdog, a spooled close of a box whose provider's clock is behind
ours. On the emulators (their own billing clock is the reference)."""

from __future__ import annotations

import pytest

from ledger.store import Ledger
from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401  (fixtures)
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


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_a_spooled_close_of_a_box_whose_providers_clock_is_behind_is_applied(
    name, gpuops_home, request, monkeypatch, cli
):
    """The provider's clock runs 3 s behind ours, so the instance's create time (the provider's) is
    before the row's intent (ours). The box is deleted with no proof of life: it ends at its create
    time. The ledger is locked at the close, which is spooled; the next `ps` applies it, as a
    direct close would have: not quarantined as "before the row was written"."""
    import sqlite3

    emu = request.getfixturevalue(f"{name}_emulator")
    emu.market.offset_s = -3.0  # the provider's clock, 3 s behind ours
    emu, prov, settings, sid, iid = _booked(name, request, monkeypatch)
    url = settings.ledger_url()
    led = Ledger(url)
    (listed,) = prov.list()  # the create time as the provider records it (what an adopt by label books)
    led.update(sid, instance_created_at=listed.created_at)
    created = emu.market.instances[iid].created_t
    assert listed.created_at == pytest.approx(created, abs=1.0) and created < led.get(sid).created_at - 2.0
    emu.delete_from_console(iid)
    from gpuops.teardown.lifecycle import end_rental

    con = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None, timeout=10)
    con.execute("BEGIN IMMEDIATE")  # every write now waits out the bound, then spools
    try:
        with led.bounded(0.2):
            got = end_rental(led, prov, sid, "manual", by="down:test", sleep=lambda s: None)
    finally:
        con.execute("ROLLBACK")
        con.close()
    assert got.error == "ledger write spooled" and got.already_gone
    out = cli("ps", "--json")
    assert out.returncode == 0 and "not applied" not in out.stderr, out
    row = Ledger(url).get(sid)
    assert (row.status, row.end_reason) == ("closed", "manual")
    assert row.ended_at == pytest.approx(created, abs=1.0)  # no proof of life: its create time, the provider's
    assert row.billed_seconds <= 2.0


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_a_watchdog_never_books_a_reused_ids_box_as_ours(name, gpuops_home, request, monkeypatch, sshd):
    """Our instance is deleted and its id handed to a teammate's running box, whose agent
    heartbeats (its status file fresh on that box, which our key reaches). A watchdog pass reads
    nothing of that box as ours: no heartbeat, tokens or live status booked on our row, which closes
    at our instance's end on the provider's billing clock, not at the watchdog's pass; the
    teammate's box is untouched."""
    import json
    import time

    from gpuops.box.ssh import ensure_ssh_key
    from gpuops.teardown.reconcile import Context
    from gpuops.teardown.watchdog import run

    emu = request.getfixturevalue(f"{name}_emulator")
    emu.market.ssh_endpoint = (sshd.host, sshd.port)
    emu, prov, settings, sid, iid = _booked(name, request, monkeypatch)
    sshd.authorize(ensure_ssh_key(settings.data_path())[1])
    led = Ledger(settings.ledger_url())
    time.sleep(2.0)  # our box bills a while: what is under test is the time itself
    led.heartbeat(sid, time.time())  # our agent's last word, as the box went
    other = emu.market.reuse_id(iid, label="gpuops-20261201-120000-beef")  # a teammate's box, same account
    ours = emu.market.instances[f"{iid}~old"]
    theirs = sshd.home / "gpuops" / other.label / ".gpuops"
    theirs.mkdir(parents=True)
    (theirs / "agent-status.json").write_text(json.dumps({"heartbeat": time.time() + 6.0, "sample_seconds": 10}))
    (theirs / "metrics.jsonl").write_text('{"tokens": 999}\n')
    time.sleep(5.0)  # the watchdog comes by later
    ctx = Context(settings, ledger=led, providers={name: prov}, arm_margin_s=1e6, ssh_connect_s=5.0)
    run(settings, once=True, emit=lambda a: None, ctx=ctx)
    row = Ledger(settings.ledger_url()).get(sid)
    assert other.state == "running" and emu.market.instances[iid] is other  # theirs: untouched
    assert row.status == "closed" and not row.tokens, (row.status, row.tokens, row.last_heartbeat_at - ours.ended_t)
    assert row.last_heartbeat_at < ours.ended_t  # theirs never booked as our proof of life
    assert abs(row.ended_at - ours.ended_t) <= 1.0, (row.ended_at - ours.ended_t, row.end_source)
    billed = ours.ended_t - ours.created_t
    assert abs(row.billed_seconds - billed) <= 1.0, (row.billed_seconds, billed)
