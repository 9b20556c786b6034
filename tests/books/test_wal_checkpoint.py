"""A command that wrote the SQLite ledger leaves it checkpointed: the CLI exits through os._exit, so
SQLite's own checkpoint on the last close never runs; without ours a big write leaves a big
``-wal`` file that every later opener pays for."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

from ledger.checkpoint import WRITTEN, checkpoint_written
from tests.books.conftest import build_books
from tests.conftest import gpuops_cmd


def run(env, *args):
    p = subprocess.run(gpuops_cmd(*args), env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    return p


def wal(db: Path) -> int:
    w = db.with_name(db.name + "-wal")
    return w.stat().st_size if w.exists() else 0


def _books_csv(env, tmp_path, copies=400) -> Path:
    """An export of the test books, its rows repeated under new ids (a few thousand rows)."""
    from ledger import Ledger

    led = Ledger(f"sqlite:///{tmp_path / 'seed.db'}")
    build_books(led)
    led.engine.dispose()
    text = run(dict(env, GPUOPS_LEDGER_URL=f"sqlite:///{tmp_path / 'seed.db'}"), "ledger", "export", "--csv").stdout
    head, *rows = text.splitlines()
    out = [head] + [f"{r}-c{i}" for i in range(copies) for r in rows]  # the session id is the last column
    f = tmp_path / "many.csv"
    f.write_text("\n".join(out) + "\n")
    return f


def test_ledger_import_up_and_watchdog_leave_no_wal(gpuops_home, cli_env, tmp_path):
    db = gpuops_home / "ledger.db"
    f = _books_csv(cli_env, tmp_path)
    out = run(cli_env, "ledger", "import", str(f)).stdout
    assert out.startswith("imported 2,000 sessions")
    assert db.stat().st_size > 500_000 and wal(db) == 0  # the rows are in the file, the -wal is empty

    job = tmp_path / "job.sh"
    job.write_text("#!/usr/bin/env bash\necho hi\n")
    run(cli_env, "up", "--job", str(job), "--json")
    assert wal(db) == 0
    con = sqlite3.connect(
        db
    )  # held open, as another process reading the books would: the watchdog's close is not the last
    try:
        assert (
            con.execute("SELECT count(*) FROM sessions WHERE status = 'closed' AND end_reason = 'job_end'").fetchone()[
                0
            ]
            == 1
        )
        run(cli_env, "watchdog", "--once")
        assert wal(db) == 0
        assert con.execute("SELECT count(*) FROM watchdog_passes").fetchone()[0] == 1  # it wrote, and checkpointed
    finally:
        con.close()


def test_checkpoint_waits_briefly_on_another_writer_then_leaves(tmp_path):
    from ledger import Ledger

    WRITTEN.clear()  # what earlier tests in this process wrote
    url = f"sqlite:///{tmp_path / 'l.db'}"
    led = Ledger(url)
    build_books(led)
    assert str(tmp_path / "l.db") in WRITTEN
    holder = sqlite3.connect(tmp_path / "l.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process's write in progress
        holder.execute("UPDATE sessions SET note = 'x'")
        import time

        t0 = time.monotonic()
        got = checkpoint_written(wait_ms=100)
        assert time.monotonic() - t0 < 5.0  # bounded: 0.1 s of busy wait, with room for a loaded machine
        assert got == {str(tmp_path / "l.db"): "busy"}
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    led.engine.dispose()
    assert not WRITTEN  # cleared: the next write marks it again
