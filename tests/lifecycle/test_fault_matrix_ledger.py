"""The fault matrix, "ledger unavailable" row: at every stage of a real `gpuops up` subprocess the
ledger stops answering -- SQLite: another process takes the write lock and keeps it past every
busy timeout; PostgreSQL: the server this test started is stopped -- and stays so until `up` has
exited. Before the row exists (validate, plan) nothing is rented and `up` says so in one line.
After it, `up` finishes the rental without the ledger (the box is destroyed by `up` itself, from
what it holds in memory) and, once the ledger is back, ONE reconcile pass books the truth: the
reason, the tokens, the end time within 2 s of the provider's own (``destroyed.json``)."""

from __future__ import annotations

import sqlite3
import time

import pytest

from gpuops.config import load_settings
from gpuops.providers import get_provider
from gpuops.providers.base import InstanceStatus
from gpuops.teardown.reconcile import Context, reconcile
from ledger.store import Ledger
from tests.lifecycle.test_fault_matrix import JOB, STAGES
from tests.lifecycle.upproc import UpProc, no_box_processes, up_env
from tests.support.local_bill import local_bill
from tests.support.postgres import PostgresServer, halting_postgres_server, own_postgres  # noqa: F401  (fixtures)
from tests.teardown.conftest import wait_for

END_TOLERANCE_S = 2.0
# The SQLite ledger's busy timeout in this test (seconds), set as a user sets it: ``?timeout=`` in
# the ledger URL. The outage holds the write lock until `up` has exited, so `up` waits out whatever
# the timeout is before refusing; at the default (30 s) the validate and plan rows cost 30 s each.
SQLITE_TIMEOUT_S = 1


class Outage:
    """Makes the ledger at ``url`` unavailable (``start``) and available again (``end``)."""

    def __init__(self, backend: str, url: str, server: PostgresServer | None):
        self.backend, self.url, self.server = backend, url, server
        self.con = None

    def start(self) -> None:
        if self.backend == "sqlite":
            path = self.url[len("sqlite:///") :].split("?", 1)[0]
            self.con = sqlite3.connect(path, isolation_level=None, timeout=30)
            self.con.execute("BEGIN IMMEDIATE")  # held until end(): every write of `up` is refused
        else:
            self.server.halt()

    def end(self) -> None:
        if self.con is not None:
            self.con.execute("ROLLBACK")
            self.con.close()
            self.con = None
        elif self.backend == "postgres":
            self.server.resume()


@pytest.fixture
def ledger_backend(request, gpuops_home, monkeypatch):
    """(backend, url, server): the SQLite ledger of ``gpuops_home`` (busy timeout
    ``SQLITE_TIMEOUT_S``), or a database of its own on a PostgreSQL server no other test uses
    meanwhile (``own_postgres``: it is stopped mid-run)."""
    if request.param == "sqlite":
        return "sqlite", f"sqlite:///{gpuops_home / 'ledger.db'}?timeout={SQLITE_TIMEOUT_S}", None
    server = request.getfixturevalue("own_postgres")
    url = server.new_database()
    monkeypatch.setenv("GPUOPS_LEDGER_URL", url)
    return "postgres", url, server


@pytest.mark.slow  # 20 real `up` runs
@pytest.mark.parametrize("ledger_backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("stage", STAGES)
def test_ledger_unavailable_at_every_stage(ledger_backend, gpuops_home, cli_env, fake_smi, tmp_path, stage):
    backend, url, server = ledger_backend
    fake_smi.util(70)
    Ledger(url)  # the ledger exists (migrated) before the run, as a user's does
    pause = tmp_path / "pause"
    pause.write_text("")
    env = up_env(cli_env, GPUOPS_LEDGER_URL=url, GPUOPS_TEST_PAUSE_AT=stage, GPUOPS_TEST_PAUSE_FILE=str(pause))
    outage = Outage(backend, url, server)
    up = UpProc(tmp_path, env, JOB)
    try:
        wait_for(lambda: (tmp_path / "pause.reached").exists(), 90)
        outage.start()
        pause.unlink()
        rc = up.wait(120)
        err = up.p.stderr.read().decode()
    finally:
        if pause.exists():
            pause.unlink()
        up.cleanup()
        outage.end()
    settings = load_settings()
    led = Ledger(url)
    rows = led.rows_between(0, 2e10)
    boxes = list((gpuops_home / "boxes").glob("gpuops-*")) if (gpuops_home / "boxes").exists() else []
    if stage in ("validate", "plan"):  # no row could be written: nothing rented, one line
        assert rc == 1 and rows == [] and boxes == [], (rc, err)
        assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [err.strip().splitlines()[-1]]
        assert "the ledger database failed" in err
        return
    assert rc == 0, err[-3000:]
    # `up` destroyed the box itself, the ledger still down: 0 instances billing before any reconcile
    provider = get_provider("local", settings)
    assert len(boxes) == 1 and provider.get(boxes[0].name).status == InstanceStatus.GONE
    reconcile(Context(settings, ledger=Ledger(url), arm_margin_s=0.5))  # the one pass once the ledger is back
    led = Ledger(url)
    (row,) = led.rows_between(0, 2e10)
    assert (row.status, row.end_reason, row.tokens, row.exit_code) == ("closed", "job_end", 1000, 0)
    assert row.instance_id == boxes[0].name
    assert abs(row.ended_at - provider.destroyed_at(row.instance_id)) <= END_TOLERANCE_S
    secs, usd = local_bill(provider.boxes_dir, row.instance_id, 1.5)  # the box's own record, at the test's 1.5 USD/h
    assert secs > 0 and abs(row.billed_seconds - secs) <= END_TOLERANCE_S + 1.0, (row.billed_seconds, secs)
    assert row.cost_usd == pytest.approx(usd, abs=(END_TOLERANCE_S + 1.0) * 1.5 / 3600)
    kinds = [e.kind for e in led.events(row.id)]
    assert kinds[0] == "intent" and kinds.count("closed") == 1 and "job_exited" in kinds
    assert not led.has_spool()
    no_box_processes(boxes[0])
    assert time.time() - row.ended_at < 600
