"""The books' edges found by trying to break them: a ledger a newer gpuops wrote (refused before
anything is rented), identical spreadsheet lines without session ids (booked, noted; refused with
--strict), a month past the calendar, a damaged SQLite file (a hint that fits SQLite)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gpuops.accounting import ledger_service as cmds
from gpuops.errors import BadInput

SHEET = (
    "date,experiment,provider,card,gpu_count,usd_per_hour,hours,cost_usd,tokens,conclusion\n"
    "2026-11-03,sweep,runpod,h100-sxm,1,2.4,1.0,2.4,0,\n"
    "2026-11-04,sweep,vast,rtx-4090,1,0.35,2.0,0.7,0,\n"
    "2026-11-03,sweep,runpod,h100-sxm,1,2.4,1.0,2.4,0,\n"
)


def _future(url: str) -> None:
    """Mark the ledger at ``url`` as migrated by a newer gpuops (a migration this one lacks)."""
    eng = sa.create_engine(url)
    try:
        with eng.begin() as c:
            c.execute(sa.text("INSERT INTO schema_migrations (name, applied_at) VALUES ('m999_from_the_future', 0)"))
    finally:
        eng.dispose()


def test_a_newer_gpuops_ledger_is_refused_before_anything_is_rented(ledger_url, gpuops_home, cli, tmp_path):
    from ledger import Ledger
    from ledger.migrations import LedgerTooNew

    Ledger(ledger_url).engine.dispose()
    _future(ledger_url)
    with pytest.raises(LedgerTooNew, match="m999_from_the_future"):
        Ledger(ledger_url)
    job = tmp_path / "ok.sh"
    job.write_text("true\n")
    for args in (["up", "--job", str(job)], ["ps"], ["ledger", "month"]):
        out = cli(*args, env={"GPUOPS_LEDGER_URL": ledger_url})
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, (args, out)
        assert lines[0].startswith("error: the ledger was written by a newer gpuops") and "upgrade gpuops" in lines[0]
    assert not (gpuops_home / "boxes").exists()  # nothing rented


def test_identical_lines_without_session_ids_are_booked_and_noted(ledger, tmp_path):
    p = tmp_path / "sheet.csv"
    p.write_text(SHEET)
    r = cmds.import_csv(ledger, p, tz="UTC")
    assert r["imported"] == 3 and r["cost_usd"] == pytest.approx(5.5, abs=1e-9)
    assert [(line, "repeats an earlier line exactly" in msg) for line, msg in r["warnings"]] == [(4, True)]


def test_identical_lines_without_session_ids_are_refused_with_strict(ledger, tmp_path):
    p = tmp_path / "sheet.csv"
    p.write_text(SHEET)
    with pytest.raises(BadInput, match="sheet.csv:4: repeats an earlier line exactly"):
        cmds.import_csv(ledger, p, tz="UTC", strict=True)
    with ledger.engine.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM sessions")).scalar_one() == 0


@pytest.mark.parametrize("month", ["9999-12", "0000-06"])
def test_a_month_past_the_calendar_is_one_line(gpuops_home, cli, month):
    out = cli("ledger", "month", month)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"error: month {month} is outside the months the books can count (0001-01 .. 9999-11) (pass the month as YYYY-MM, e.g. 2026-11)"
    ]
    assert cli("ledger", "month", "9999-11", "--tz", "UTC").returncode == 0  # the last month that has an end


@pytest.mark.parametrize("damage", ["not a ledger", "truncated"])
def test_a_damaged_sqlite_ledger_gets_an_sqlite_hint(gpuops_home, cli, damage):
    from ledger import Ledger

    db = gpuops_home / "ledger.db"
    if damage == "not a ledger":
        gpuops_home.mkdir(parents=True, exist_ok=True)
        db.write_bytes(b"not a database " * 400)
    else:
        Ledger(f"sqlite:///{db}").engine.dispose()
        raw = db.read_bytes()
        db.write_bytes(raw[:100] + b"\xff" * (len(raw) - 100))  # the header stays, the pages are garbage
    out = cli("ps")
    line = out.stderr.strip()
    assert out.returncode == 1 and len(line.splitlines()) == 1, out
    assert "postgresql" not in line.lower() and "mv ledger.db ledger.db.bad" in line and ".recover" in line
