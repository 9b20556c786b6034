"""A close that was spooled (the ledger refused it) tells nothing then: the books do not have it yet.
When the spool is replayed -- here by the next `gpuops ps`, as any later actor does -- the replay
tells it, once, through the same claim row a direct close takes."""

from __future__ import annotations

import sqlite3
import subprocess

import pytest

from gpuops.config import load_settings
from gpuops.notify import notifier
from gpuops.teardown.lifecycle import end_rental
from ledger.store import Ledger
from onbox.vocabulary import EndReason
from tests.conftest import gpuops_cmd
from tests.notify.test_delivery import _arm, _rent
from tests.support.receivers import JsonReceiver

pytestmark = pytest.mark.e2e  # a receiver, the emulator, `gpuops ps`


@pytest.fixture(autouse=True)
def _disarm():
    yield
    if notifier.active() is not None:
        notifier.drain()
    notifier._active = None


def test_a_spooled_close_is_told_once_when_its_replay_books_it(
    gpuops_home, runpod_emulator, cli_env, monkeypatch, tmp_path
):
    spool = tmp_path / "spool"
    monkeypatch.setenv("GPUOPS_SPOOL_DIR", str(spool))
    url = load_settings().ledger_url()
    with JsonReceiver() as hook:
        _arm(monkeypatch, hook.url())
        p, led, _ = _rent(runpod_emulator, "sp1")
        con = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None, timeout=10)
        con.execute("BEGIN IMMEDIATE")  # another process holds the write lock: every write spools
        try:
            got = end_rental(led, p, "sp1", EndReason.JOB_END, by="up:test", exit_code=0, sleep=lambda s: None)
        finally:
            con.execute("ROLLBACK")
            con.close()
        assert got.destroyed and not got.closed and got.error == "ledger write spooled"
        assert runpod_emulator.live() == []
        notifier.drain()
        assert hook.posts == []  # not told: the books do not hold the close yet
        env = dict(cli_env, GPUOPS_NOTIFY_URLS=hook.url(), GPUOPS_SPOOL_DIR=str(spool))
        for _ in range(2):  # the first replays the close and tells it; the second finds nothing to do
            ps = subprocess.run(gpuops_cmd("ps", "--json"), env=env, capture_output=True, text=True, timeout=60)
            assert ps.returncode == 0 and ps.stdout.strip() == "[]", ps.stderr
        (post,) = hook.posts  # both `ps` have exited: their sends are done
        row = Ledger(url).get("sp1")
        assert (row.status, row.end_reason, row.exit_code) == ("closed", "job_end", 0)
        text = post["body"]["message"]
        assert text.startswith("gpuops: sp1 (exp1, runpod) ended (job_end): exit 0, "), text
        assert f"${row.cost_usd:,.4f}" in text  # the figure the replayed close booked
        replayed_at = max(e.at for e in Ledger(url).events("sp1") if e.kind == "spool_replayed")
        assert post["wall"] >= replayed_at - 0.05  # told after the books took it
        again = end_rental(Ledger(url), p, "sp1", EndReason.MANUAL, by="down:test", sleep=lambda s: None)
        assert again.closed
        notifier.drain()
        assert len(hook.posts) == 1
