"""A big SQLite import builds the secondary indexes after the rows, and leaves the
schema exactly as it found it, whether the import commits or is refused."""

from __future__ import annotations

import sqlite3

import pytest

from gpuops.accounting import ledger_service as books

HEAD = "date,experiment,provider,card,gpu_count,usd_per_hour,hours,cost_usd,tokens,conclusion,simulated,session\n"


def _schema(path) -> list[str]:
    with sqlite3.connect(path) as con:
        return sorted(r[0] for r in con.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))


def _lines(n: int, start: int = 0) -> str:
    return "".join(
        f"2026-11-{1 + i % 28:02d}T10:{i % 60:02d}:00+00:00,exp-{i % 7},vast,rtx-4090,1,0.35,1.5,0.525,{i},ok,false,s-{i:05d}\n"
        for i in range(start, start + n)
    )


@pytest.fixture
def small_threshold(monkeypatch):
    import ledger.store

    monkeypatch.setattr(ledger.store, "IMPORT_DEFER_INDEXES_ROWS", 10)


def test_a_big_import_rebuilds_every_index(tmp_path, small_threshold):
    from ledger import Ledger

    path = tmp_path / "l.db"
    led = Ledger(f"sqlite:///{path}")
    try:
        before = _schema(path)
        assert sum("CREATE INDEX" in s for s in before) >= 8
        f = tmp_path / "big.csv"
        f.write_text(HEAD + _lines(200))
        assert books.import_csv(led, f)["imported"] == 200
        assert _schema(path) == before
        with sqlite3.connect(path) as con:
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            plan = " ".join(
                r[3] for r in con.execute("EXPLAIN QUERY PLAN SELECT id FROM sessions WHERE experiment = 'exp-1'")
            )
            assert "ix_sessions_experiment" in plan
            assert con.execute(
                "SELECT count(*) FROM sessions INDEXED BY ix_sessions_created_at WHERE created_at > 0"
            ).fetchone() == (200,)
    finally:
        led.engine.dispose()


def test_a_refused_big_import_leaves_rows_and_indexes_as_they_were(tmp_path, small_threshold):
    from ledger import Ledger
    from ledger.csvio import IMPORT_CONSTANTS, IMPORT_ROW, CsvImport
    from ledger.store import ImportRejected

    path = tmp_path / "l.db"
    led = Ledger(f"sqlite:///{path}")

    def load(text: str) -> int:
        imp = CsvImport(text, "UTC")
        return led.import_rows(imp, imp.errors, chunk=10, columns=IMPORT_ROW, constants=IMPORT_CONSTANTS)

    try:
        assert load(HEAD + _lines(30)) == 30
        before = _schema(path)
        # a bad line after 100 good ones (10 chunks written, the indexes dropped after the third)
        with pytest.raises(ImportRejected) as e:
            load(HEAD + _lines(100, 30) + "2026-11-01,e,vast,rtx-4090,1,abc,1,,0,,false,bad\n")
        assert [n for n, _ in e.value.errors] == [102]
        # a clash with the first import, found in the last chunk
        with pytest.raises(ImportRejected) as e:
            load(HEAD + _lines(100, 30) + _lines(1, 0))
        assert e.value.errors == [(102, "session s-00000 is already in the ledger (imported before?)")]
        assert _schema(path) == before
        with sqlite3.connect(path) as con:
            assert con.execute("SELECT count(*) FROM sessions").fetchone() == (30,)
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert load(HEAD + _lines(100, 30)) == 100 and _schema(path) == before
    finally:
        led.engine.dispose()
