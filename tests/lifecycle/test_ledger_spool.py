"""The ledger refuses writes mid-job (another process holds SQLite's write lock past the busy
timeout): the job's exit and its tokens are spooled to a local file and replayed by the next write
that succeeds, so the session closes job_end with its tokens instead of losing them."""

from __future__ import annotations

import sqlite3
import threading

from gpuops.config import load_settings
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from tests.teardown.conftest import wait_for


def test_job_exit_and_tokens_survive_a_locked_ledger(gpuops_home, fake_smi, tmp_path, monkeypatch):
    import ledger.engine
    from ledger.store import Ledger

    monkeypatch.setattr(ledger.engine, "SQLITE_BUSY_TIMEOUT_MS", 300)  # a writer gives up after 0.3 s
    monkeypatch.setenv("GPUOPS_SPOOL_DIR", str(tmp_path / "spool"))
    fake_smi.util(70)
    settings = load_settings(None, {"teardown": {"kill_grace_seconds": 0.5, "idle_minutes": "off"}, "providers": {"local": {"price_per_hour": 1.0}}})
    led = Ledger(settings.ledger_url())
    go = tmp_path / "go"
    job = tmp_path / "job.sh"
    job.write_text(f'echo \'{{"tokens": 1000}}\' >> "$GPUOPS_METRICS"\nwhile [ ! -f {go} ]; do sleep 0.05; done\n')
    db = settings.ledger_url()[len("sqlite:///"):]
    release = threading.Event()
    state: dict = {}

    def competitor():
        rows = wait_for(lambda: led.sessions_between(0, 2e10), 60)
        wait_for(lambda: any(e.kind == "job_started" for e in led.events(rows[0].id)), 60)
        con = sqlite3.connect(db, isolation_level=None, timeout=10)
        con.execute("BEGIN IMMEDIATE")  # holds the write lock: every gpuops write now fails after 0.3 s
        state["locked"] = True
        go.write_text("")  # the job exits while the ledger refuses writes
        release.wait(60)
        con.execute("ROLLBACK")
        con.close()

    t = threading.Thread(target=competitor, daemon=True)
    t.start()

    def releaser():
        wait_for(lambda: len(led.spooled()) >= 2, 60)  # job_exited and the tokens are in the spool
        state["spooled"] = [e["op"] for e in led.spooled()]
        release.set()

    r = threading.Thread(target=releaser, daemon=True)
    r.start()
    try:
        summ = run_up(UpRequest(job=job), settings, Reporter(), ledger=led)
    finally:
        release.set()
        go.write_text("")
        t.join(10)
        r.join(10)
    assert state.get("locked") and "event" in state["spooled"]
    row = led.get(summ["session"])
    assert (row.status, row.end_reason, row.exit_code, row.tokens) == ("closed", "job_end", 0, 1000)
    kinds = [e.kind for e in led.events(row.id)]
    assert "job_exited" in kinds and "spool_replayed" in kinds and kinds.count("closed") == 1
    assert kinds[-1] in ("closed", "spool_replayed")  # the close itself may be what waited in the spool
    assert led.spooled() == [] and not led.spool_path.exists()
