"""The SQLite ledger's busy timeout is the ledger URL's ``?timeout=SECONDS`` when it names one: a
command facing another process's write lock is refused ("database is locked") after that many
seconds, not after the default's 30; a timeout that is no number of seconds is a bad URL."""

from __future__ import annotations

import sqlite3
import time

import pytest
import sqlalchemy as sa

from ledger.store import Ledger

TIMEOUT_S = 0.5  # the URL's timeout in this test
DEFAULT_S = 30.0  # the documented default (README "Settings")


def test_a_locked_ledger_is_refused_after_the_urls_timeout(tmp_path):
    db = tmp_path / "ledger.db"
    Ledger(f"sqlite:///{db}")  # exists and is migrated, as a user's is
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write lock, held past any timeout
    try:
        t0 = time.monotonic()
        with pytest.raises(sa.exc.OperationalError, match="database is locked"):
            Ledger(f"sqlite:///{db}?timeout={TIMEOUT_S}")  # opening takes the write lock (migrations)
        took = time.monotonic() - t0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert TIMEOUT_S * 0.9 <= took < DEFAULT_S / 3, took  # it waited, for its own timeout, not the default
    Ledger(f"sqlite:///{db}?timeout={TIMEOUT_S}")  # the lock gone, the same URL opens


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_timeout_that_is_no_seconds_is_one_line_exit_2(value, cli, gpuops_home):
    url = f"sqlite:///{gpuops_home / 'ledger.db'}?timeout={value}"
    out = cli("ps", env={"GPUOPS_LEDGER_URL": url})
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr[-800:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"timeout='{value}'" in lines[0], out.stderr
    assert not (gpuops_home / "ledger.db").exists()  # refused before any file is made


def test_a_new_timeout_leaves_the_spool_where_it_was(tmp_path):
    db = tmp_path / "ledger.db"
    plain = Ledger(f"sqlite:///{db}")
    for query in ("?timeout=5", "?timeout=0.5"):
        led = Ledger(f"sqlite:///{db}{query}")
        assert (led.spool_path, led.fallback_spool_path) == (plain.spool_path, plain.fallback_spool_path), query
    other = Ledger(f"sqlite:///{tmp_path / 'other.db'}?timeout=5")
    assert other.spool_path != plain.spool_path  # another file's books spool apart
