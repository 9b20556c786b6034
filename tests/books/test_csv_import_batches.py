"""``ledger import`` checks a batch of lines column by column and words a problem line by line: the
rows, line numbers, errors and warnings are those of the line-by-line parser alone, and a batch
the database refuses leaves nothing written."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from gpuops.accounting import ledger_service as books
from gpuops.errors import BadInput
from ledger import csvio

HEAD = "date,experiment,provider,card,gpu_count,usd_per_hour,hours,cost_usd,tokens,conclusion,simulated,session\n"
CARDS = {"rtx-4090", "a100-80gb", "h100-sxm"}
PROVIDERS = {"runpod", "vast"}


def _clean(n: int, start: int = 0) -> str:
    return "".join(
        f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:07.250000+00:00,exp-{i % 3},vast,a100-80gb,{1 + i % 8},"
        f"1.89,{0.25 + i / 7},{round(1.89 * (0.25 + i / 7), 6)},{i * 1000},ok {i},{'true' if i % 5 == 0 else 'false'},s-{i:04d}\n"
        for i in range(start, start + n)
    )


# Odd but valid cells (each in a batch of its own at size 4), then bad lines.
ODD = (
    "2026-11-03 10:00,  exp-naive ,runpod, H100-SXM ,2,$2.50,1.5,3.75,,fine,yes,s-naive\n"  # naive date, "$", no tokens
    '2026-11-03T10:00:00Z,\'=cmd,vast,rtx-4090,1,0.35,2,0.7,5,"two\nlines, and ""quotes""",TRUE,s-z\n'
    "2026-11-04,,vast,rtx-4090,1,0.35,2,0.7,1_000,'+guarded,false,'-s-quoted\n"
    "2026-11-05T01:02:03+05:30,exp,vast,tpu-v9,1,0.35,2,0.7,0,unknown card,false,s-warn\n"  # a warning
    "2026-11-06T00:00:00+00:00,exp,vast,rtx-4090,1,0.35,2,9.99,0,cost off,false,s-off\n"  # a warning
    "2026-11-07T00:00:00+00:00,exp,vast,rtx-4090,1,0.35,2,0.7,0,no id,false,\n"  # numbered by its digest
    "\n"
    "yesterday,exp,vast,rtx-4090,1,0.35,2,0.7,0,bad date,false,s-bad1\n"
    "2026-11-08T00:00:00+00:00,exp,vast,rtx-4090,0,0.35,2,0.7,0,no gpu,false,s-bad2\n"
    "2026-11-08T00:00:00+00:00,exp,vast,rtx-4090,1,nan,2,0.7,0,nan price,false,s-bad3\n"
    "2026-11-08T00:00:00+00:00,exp,vast\n"
)


def _read(text: str, size: int, line_by_line: bool, monkeypatch, tz: str = "Europe/Berlin", strict: bool = False):
    if line_by_line:
        monkeypatch.setattr(csvio, "_chunk_parser", lambda *a, **k: lambda records, columns=None: None)
    imp = csvio.CsvImport(text, tz, providers=PROVIDERS, cards=CARDS, strict=strict)
    got = [(list(lines), rows) for lines, rows in imp.chunks(size)]
    monkeypatch.undo()
    return [x for lines, _ in got for x in lines], [r for _, rows in got for r in rows], list(imp.errors), imp.warnings


@pytest.mark.parametrize("size", [4, 5000])
@pytest.mark.parametrize("strict", [False, True])
def test_batches_give_what_the_line_by_line_parser_gives(monkeypatch, size, strict):
    text = HEAD + _clean(9) + ODD + _clean(9, start=9)
    batched = _read(text, size, False, monkeypatch, strict=strict)
    assert batched == _read(text, size, True, monkeypatch, strict=strict)
    lines, rows, errors, warnings = batched
    by_id = dict(zip((r[0] for r in rows), zip(lines, rows)))
    # Real values: line 2 is the first clean row; the naive date is Berlin time (UTC+1 in November).
    line, row = by_id["s-0000"]
    assert line == 2 and row == (
        "s-0000",
        "exp-0",
        "vast",
        "a100-80gb",
        1,
        1.89,
        True,
        datetime(2026, 11, 1, 0, 0, 7, 250000, tzinfo=timezone.utc).timestamp(),
        datetime(2026, 11, 1, 0, 0, 7, 250000, tzinfo=timezone.utc).timestamp(),
        datetime(2026, 11, 1, 0, 15, 7, 250000, tzinfo=timezone.utc).timestamp(),
        900.0,
        0.4725,
        0,
        "ok 0",
    )
    line, row = by_id["s-naive"]
    assert line == 11 and row[1:7] == ("exp-naive", "runpod", "H100-SXM", 2, 2.5, True)
    assert row[7] == datetime(2026, 11, 3, 9, 0, tzinfo=timezone.utc).timestamp() and row[12] == 0
    line, row = by_id["s-z"]
    assert line == 12 and row[1] == "=cmd" and row[13] == 'two\nlines, and "quotes"'
    line, row = by_id["-s-quoted"]
    assert line == 14 and row[1] == "default" and row[12] == 1000 and row[13] == "+guarded"
    assert by_id["s-0009"][0] == 23  # after the two-line cell and the blank line
    bad = [(n, m.split(" ")[0]) for n, m in errors]
    assert bad[-4:] == [(19, "date"), (20, "gpu_count"), (21, "usd_per_hour"), (22, "has")]
    if strict:
        assert {n for n, _ in errors} >= {15, 16} and not warnings and "s-warn" not in by_id
    else:
        assert [n for n, _ in warnings] == [15, 16] and "unknown card 'tpu-v9'" in warnings[0][1]
        assert any(r[0].startswith("imp-") for r in rows)


def test_a_sheet_without_cost_or_ids_derives_what_the_line_by_line_parser_derives(monkeypatch):
    text = "date,provider,card,usd_per_hour,hours\n" + "".join(
        f"2026-10-{1 + i % 30:02d},runpod,h100-sxm,{2.99 + i / 100},{i / 3}\n" for i in range(30)
    )
    batched = _read(text, 7, False, monkeypatch, tz="UTC")
    assert batched == _read(text, 7, True, monkeypatch, tz="UTC")
    assert batched[1][3][11] == round((2.99 + 0.03) * 1.0, 6) and batched[1][3][10] == 3600.0


def test_a_sheet_goes_into_a_current_sqlite_ledger_once(tmp_path):
    from ledger import Ledger

    path = tmp_path / "l.db"
    Ledger(f"sqlite:///{path}").engine.dispose()  # a current ledger file
    led = Ledger(f"sqlite:///{path}")
    f = tmp_path / "sheet.csv"
    f.write_text(HEAD + _clean(40))
    r = books.import_csv(led, f, "UTC")
    assert r["imported"] == 40 and r["cost_usd"] == round(
        sum(round(1.89 * (0.25 + i / 7), 6) for i in range(40) if i % 5), 6
    )
    with sqlite3.connect(path) as con:
        got = con.execute(
            "SELECT id, provider, card, gpu_count, usd_per_hour, billed_seconds, cost_usd, tokens, conclusion, simulated,"
            " status, source, end_reason FROM sessions WHERE id = 's-0013'"
        ).fetchone()
    assert got == (
        "s-0013",
        "vast",
        "a100-80gb",
        6,
        1.89,
        round((0.25 + 13 / 7) * 3600, 3),
        round(1.89 * (0.25 + 13 / 7), 6),
        13000,
        "ok 13",
        0,
        "closed",
        "import",
        "imported",
    )
    with pytest.raises(BadInput) as e:  # the same file again: every line named, nothing written
        books.import_csv(Ledger(f"sqlite:///{path}"), f, "UTC")
    assert "40 bad row(s)" in str(e.value) and "sheet.csv:2: session s-0000 is already in the ledger" in str(e.value)
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (40,)


def test_a_database_error_in_a_later_batch_is_sqlalchemys_and_leaves_nothing(tmp_path):
    from ledger import Ledger
    from ledger.csvio import IMPORT_CONSTANTS, IMPORT_ROW

    path = tmp_path / "l.db"
    Ledger(f"sqlite:///{path}").engine.dispose()
    led = Ledger(f"sqlite:///{path}")
    rows = [r for _, rs in csvio.CsvImport(HEAD + _clean(5), "UTC").chunks() for r in rs]
    rows[3] = rows[3][:1] + (None,) + rows[3][2:]  # experiment NOT NULL, in the second batch
    with pytest.raises(sa.exc.IntegrityError):
        led.import_chunks([([2, 3], rows[:2]), ([4, 5, 6], rows[2:])], columns=IMPORT_ROW, constants=IMPORT_CONSTANTS)
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_a_clean_sheet_is_checked_by_whole_batches(monkeypatch):
    taken = []
    compiled = csvio._chunk_parser

    def counting(*a, **k):
        parse = compiled(*a, **k)
        return lambda records, columns=None: (
            taken.append(parse(records, columns) is not None) or parse(records, columns)
        )

    monkeypatch.setattr(csvio, "_chunk_parser", counting)
    naive, no_id = ODD.splitlines(keepends=True)[0], ODD.splitlines(keepends=True)[6]
    imp = csvio.CsvImport(HEAD + _clean(10) + naive + _clean(4, 10) + no_id, "UTC", providers=PROVIDERS, cards=CARDS)
    assert sum(len(rows) for _, rows in imp.chunks(5)) == 16
    # The naive date, "$2.50", the blank tokens and "yes" are converted once per distinct cell; a
    # row without a session id is numbered line by line.
    assert taken == [True, True, True, False]


# Lines the plain split must read as the csv module does, or leave to it: widths that make up for
# each other, blank lines, quotes, CR, CRLF, NUL, separators the csv module does not split on.
HOSTILE = (
    "2026-11-09T00:00:00+00:00,exp,vast,rtx-4090,1,0.35,2,0.7,0,a,false,s-w1,extra\n"
    "2026-11-09T00:00:00+00:00,exp,vast,rtx-4090,1,0.35,2,0.7,0,false,s-w2\n"
    "2026-11-09T00:00:00+00:00, exp ,vast,rtx-4090,1,0.35,2,0.7,0,  spaced\u2028sep\x0cff\x85 ,false,s-sp\n"
    "2026-11-09T00:00:00+00:00,exp,vast,rtx-4090,1,0.35,2,0.7,0,crlf,false,s-crlf\r\n"
    "2026-11-09T00:00:00+00:00,exp,vast,rtx-4090,1,0.35,2,0.7,0,nul\0,false,s-nul\n"
    "\n"
    ",,,,,,,,,,,\n"
    '2026-11-09T00:00:00+00:00,exp,vast,rtx-4090,1,0.35,2,0.7,0,"quoted, cell",false,s-q\n'
    "2026-11-09T00:00:00+00:00,exp,vast,rtx-4090,1,0.35,2,0.7,0,last line,false,s-last"
)


def test_the_plain_split_is_the_csv_modules_reading():
    import csv
    import io

    lines = list(io.StringIO(HEAD + _clean(3) + ODD + HOSTILE))
    got = {}
    for i in range(len(lines)):
        for j in range(i + 1, min(len(lines), i + 6) + 1):
            part = lines[i:j]
            columns = csvio._split_plain(part, 12)
            records = list(csv.reader(part, strict=True)) if '"' not in "".join(part) else None
            if columns is not None:
                assert records is not None and {len(r) for r in records} == {12}, part
                assert columns == [list(c) for c in zip(*records)], part
            got[len(part), columns is not None] = True
    assert got[5, True] and got[5, False]  # both ways taken
    assert csvio._split_plain(["a,b,c\n", "d\n", "e,f,g,h,i\n"], 3) is None  # 2 + 0 + 4 commas
    assert csvio._split_plain(["a,b\n", "c,d"], 2) == [["a", "c"], ["b", "d"]]  # the file's last line


@pytest.mark.parametrize("size", [3, 5000])
@pytest.mark.parametrize("strict", [False, True])
def test_batches_split_in_c_give_what_the_csv_module_gives(monkeypatch, tmp_path, size, strict):
    """The same rows, line numbers, errors and warnings whether a batch is split by ``_split_plain``
    or read by the csv module, from a string and from a file opened as ``ledger import`` opens it."""
    import io

    text = HEAD + _clean(7) + ODD + _clean(5, start=7) + HOSTILE + "\n" + _clean(4, start=12)
    path = tmp_path / "sheet.csv"
    path.write_bytes(("\ufeff" + text).encode())

    def read(split: bool) -> list:
        if not split:
            monkeypatch.setattr(csvio, "_split_plain", lambda lines, width: None)
        out = []
        for source in (text, path):
            with open(source, newline="", encoding="utf-8-sig") if source is path else io.StringIO(source) as f:
                imp = csvio.CsvImport(f, "UTC", providers=PROVIDERS, cards=CARDS, strict=strict)
                got = [(list(lines), rows) for lines, rows in imp.chunks(size)]
                out.append((got, list(imp.errors), imp.warnings))
        monkeypatch.undo()
        return out

    split, by_csv = read(True), read(False)
    assert split == by_csv
    (batches, errors, _), _ = split
    by_id = {r[0]: n for lines, rows in batches for n, r in zip(lines, rows)}
    assert [by_id[s] for s in ("s-sp", "s-crlf", "s-q", "s-last", "s-0012", "s-0015")] == [28, 29, 33, 34, 35, 38]
    assert errors[-3:] == [
        (26, "has 13 fields, the header has 12"),
        (27, "has 11 fields, the header has 12"),
        (30, "conclusion contains a NUL character (\\x00); use visible text"),
    ]
