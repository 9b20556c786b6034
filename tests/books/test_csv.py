"""export --csv and import FILE.csv: lossless round trip, bad rows by line number, all or nothing."""

from __future__ import annotations

import io

import pytest
import sqlalchemy as sa

from gpuops.accounting import ledger_service as cmds
from gpuops.errors import BadInput
from ledger.csvio import ALL_COLUMNS, parse_csv


def _export(led, month=None, tz=None) -> str:
    buf = io.StringIO()
    cmds.export(led, buf, month, tz)
    return buf.getvalue()


def _count(led) -> int:
    with led.engine.connect() as c:
        return c.execute(sa.text("SELECT count(*) FROM sessions")).scalar_one()


def test_export_columns_and_rows(books):
    text = _export(books)
    lines = text.splitlines()
    assert lines[0] == ",".join(ALL_COLUMNS)
    assert lines[0].startswith("date,experiment,provider,card,gpu_count,usd_per_hour,hours,cost_usd,tokens,conclusion")
    # s2 (never rented) and s6 (open) are not rentals with a cost: 5 rows, in intent-time order.
    assert [ln.rsplit(",", 1)[1] for ln in lines[1:]] == ["s7", "s1", "s5", "s3", "s4"]
    assert (
        lines[2]
        == '2026-11-03T10:00:00+00:00,llama-serve,runpod,h100-sxm,1,2.4,1.0,2.4,12000000,"vLLM 7B fp16: 1,100 tok/s at batch 1",false,s1'
    )
    assert lines[4].startswith(
        "2026-11-05T08:00:00+00:00,llama-serve,vast,rtx-4090,1,0.35,1.5002777777777778,0.525097,0,"
    )
    assert lines[5].endswith(",true,s4")
    assert _export(books, "2026-10", "UTC").splitlines()[1:] == [lines[1]]


def test_round_trip_is_lossless(books, tmp_path, fresh_url):
    from ledger import Ledger

    first = _export(books)
    path = tmp_path / "books.csv"
    path.write_text(first)
    fresh = Ledger(fresh_url)
    try:
        r = cmds.import_csv(fresh, path)
        assert r == {"file": str(path), "imported": 5, "cost_usd": 9.725097, "simulated_usd": 0.45, "warnings": []}
        second = _export(fresh)
        assert second == first
        a, b = cmds.month(books, "2026-11", "Asia/Tokyo"), cmds.month(fresh, "2026-11", "Asia/Tokyo")
        for k in ("total_usd", "simulated_usd", "gpu_hours", "tokens", "usd_per_mtoken", "simulated_usd_per_mtoken"):
            assert a[k] == b[k], k
        assert b["sessions"] == a["sessions"] - 1  # the open s6 is not exported
        s1 = fresh.get("s1")
        assert (s1.source, s1.end_source, s1.billed_seconds, s1.cost_usd) == ("import", "import", 3600.0, 2.4)
        # importing the same file again is refused as a whole, naming every line
        with pytest.raises(BadInput) as e:
            cmds.import_csv(fresh, path)
        assert [n for n, _ in e.value.errors] == [2, 3, 4, 5, 6]
        assert "already in the ledger" in str(e.value)
        assert _count(fresh) == 5
    finally:
        fresh.engine.dispose()


SPREADSHEET = """date,experiment,card,provider,usd_per_hour,hours,cost_usd,conclusion
2026-11-02,w1-ledger,rtx-4090,vast,0.35,2,,first box
2026-11-02,w1-ledger,rtx-4090,vast,0.35,2,,first box
2026-11-04,w3-roofline,a100-80gb,runpod,,1.5,2.85,"bandwidth 1.6 TB/s, 78% of peak"
2026-11-05,w3-roofline,h100-sxm,runpod,2.99,,5.98,
"""


def test_import_a_users_spreadsheet(ledger, tmp_path):
    p = tmp_path / "sheet.csv"
    p.write_text(SPREADSHEET)
    r = cmds.import_csv(ledger, p, tz="UTC")
    assert r["imported"] == 4 and r["cost_usd"] == round(0.7 + 0.7 + 2.85 + 5.98, 6)
    rep = cmds.month(ledger, "2026-11", "UTC")
    assert rep["total_usd"] == 10.23 and rep["sessions"] == 4
    assert rep["gpu_hours"] == 7.5  # 2 + 2 + 1.5 + 5.98/2.99
    exp = {e["name"]: e for e in cmds.experiments(ledger)["experiments"]}
    assert exp["w3-roofline"]["latest_conclusion"] == "bandwidth 1.6 TB/s, 78% of peak"
    rows = {round(s.usd_per_hour, 6) for s in ledger.rows_between()}
    assert rows == {0.35, 1.9, 2.99}  # 2.85 / 1.5 derived
    with pytest.raises(BadInput):  # the same spreadsheet twice would double the books
        cmds.import_csv(ledger, p, tz="UTC")
    assert _count(ledger) == 4


def test_bad_rows_are_named_and_nothing_is_imported(ledger, tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text(
        "date,experiment,provider,card,gpu_count,usd_per_hour,hours,cost_usd,tokens,conclusion\n"
        "2026-11-01,a,vast,rtx-4090,1,0.35,1,0.35,0,ok\n"
        "2026-11-02,a,vast,rtx-4090,1,abc,1,0.35,0,price is text\n"
        "2026-11-03,a,vast,,1,0.35,1,0.35,0,no card\n"
        '2026-11-04,a,vast,rtx-4090,1,0.35,1,0.35,0,"a conclusion\nover two lines"\n'
        "2026-13-01,a,vast,rtx-4090,1,0.35,1,0.35,0,bad date\n"
        "2026-11-06,a,vast,rtx-4090,0,0.35,1,0.35,0,no gpus\n"
        "2026-11-07,a,vast,rtx-4090,1,0.35,1,0.35,1.5,half a token\n"
        "2026-11-08,a,vast,rtx-4090,1,0.35,1\n"
        "2026-11-09,a,vast,rtx-4090,1,-0.35,1,0.35,0,negative\n"
    )
    before = _count(ledger)
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p)
    lines = [n for n, _ in e.value.errors]
    assert lines == [3, 4, 7, 8, 9, 10, 11]  # the quoted two-line field moves every later line down
    msgs = dict(e.value.errors)
    assert "usd_per_hour 'abc' is not a number" in msgs[3]
    assert "card" in msgs[4] and "ISO 8601" in msgs[7] and "gpu_count" in msgs[8]
    assert "whole number" in msgs[9] and "fields" in msgs[10] and ">= 0" in msgs[11]
    assert str(e.value).startswith("7 bad row(s): bad.csv:3: usd_per_hour 'abc' is not a number")
    assert "nothing was imported" in str(e.value)
    assert _count(ledger) == before


def test_implausible_numbers_are_refused_per_line():
    # Seen: `ledger import` of a row with usd_per_hour, hours and cost_usd 1e300 was booked,
    # and `ledger month` then said the month cost $1,000,000,...,160.
    head = "date,provider,card,usd_per_hour,hours,cost_usd\n"
    _, _, errs = parse_csv(
        head + "2026-11-01,vast,rtx-4090,1e300,1e300,1e300\n"
        "2026-11-02,vast,rtx-4090,0.35,90000,\n"
        "2026-11-03,vast,rtx-4090,,1,5000\n"
        "2025-01-04,vast,rtx-4090,0.35,8000,2800\n"  # 333 days, over before today: booked
    )
    assert [n for n, _ in errs] == [2, 3, 4]
    assert "hours 1e+300 is more than one rental can last" in errs[0][1]
    assert "hours 90000" in errs[1][1] and "usd_per_hour 5000 is above $1000/h" in errs[2][1]


def test_bad_headers():
    assert parse_csv("")[2] == [(1, "the file is empty; expected a header line: " + ",".join(ALL_COLUMNS[:10]))]
    errs = parse_csv("date,provider,card,price,hours\n")[2]
    assert errs[0][0] == 1 and "unknown column(s) price" in errs[0][1]
    assert "need two of" in parse_csv("date,provider,card,hours\n2026-11-01,v,c,1\n")[2][0][1]
    assert "missing column(s) provider" in parse_csv("date,card,hours,cost_usd\n")[2][0][1]
    assert parse_csv("date,provider,card,hours,cost_usd\n")[2] == [(1, "no data rows after the header")]


def test_a_header_cell_that_is_empty_or_holds_a_line_break_is_named_on_one_line():
    # A spreadsheet's trailing comma gives an empty header cell; a quoted one may hold a newline.
    errs = parse_csv("date,provider,card,usd_per_hour,hours,\n2026-11-01,vast,a100,1,1,\n")[2]
    assert errs[0][1].startswith("unknown column(s) '' (an empty header cell: a trailing comma?); expected "), errs
    errs = parse_csv('"da\nte",provider,card,usd_per_hour,hours\n')[2]
    assert (
        errs[0][1].startswith("unknown column(s) 'da\\nte'; missing column(s) date; expected ")
        and "\n" not in errs[0][1]
    )


def test_a_failure_mid_import_leaves_nothing(ledger):
    good, _, errs = parse_csv(SPREADSHEET, tz="UTC")
    assert not errs
    broken = dict(good[3], experiment=None)  # NOT NULL violation in the second chunk
    with pytest.raises(sa.exc.IntegrityError):
        ledger.import_rows(enumerate(good[:3] + [broken], 1), chunk=2)
    assert _count(ledger) == 0


HOSTILE = [
    '=HYPERLINK("http://x","cost")',
    "+1+1",
    "-2+3",
    "@SUM(A1)",
    "\tTAB",
    "\rCR",
    "'=already quoted",
    "''+twice",
    "'plain quote",
    "-",
    "safe text",
    "",
]


def test_formula_cells_are_neutralized_and_round_trip(ledger, tmp_path, fresh_url):
    """A cell starting =, +, -, @, tab or CR is written with a leading quote (OWASP CSV
    Injection); numbers stay numbers; our own export imports back to the same text."""
    from ledger import Ledger
    from ledger.csvio import neutralize, unneutralize
    from tests.books.conftest import _rented, utc

    for t in HOSTILE:
        assert unneutralize(neutralize(t)) == t, t
    assert neutralize("=1") == "'=1" and neutralize("'=1") == "''=1" and neutralize("'x") == "'x"
    for i, text in enumerate(HOSTILE[:-1]):
        sid = f"h{i:02d}"
        _rented(ledger, sid, utc(2026, 11, 3, 10, i), price=0.5, experiment=text if text else "default")
        ledger.note(sid, text)
        ledger.close(sid, utc(2026, 11, 3, 11, i), "job_end")
    first = _export(ledger)
    import csv

    for cells in list(csv.reader(io.StringIO(first)))[1:]:
        for c in (cells[1], cells[9]):  # experiment, conclusion
            assert c[:1] not in ("=", "+", "-", "@", "\t", "\r"), cells
        assert float(cells[5]) == 0.5 and cells[5] == "0.5"  # numeric cells are plain numbers
    assert "'=HYPERLINK(" in first and ",'-2+3," in first and ",'''+twice," in first
    path = tmp_path / "hostile.csv"
    path.write_text(first)
    fresh = Ledger(fresh_url)
    try:
        assert cmds.import_csv(fresh, path)["imported"] == len(HOSTILE) - 1
        assert _export(fresh) == first
        assert {r.experiment for r in fresh.rows_between()} == set(HOSTILE[:-1])
        assert {r.conclusion for r in fresh.rows_between()} == set(HOSTILE[:-1]) - {"\tTAB", "\rCR"} | {"TAB", "CR"}
    finally:
        fresh.engine.dispose()


def test_unknown_names_and_costs_off_price_are_reported_per_line(ledger, tmp_path):
    """Provider aws, card notacard and $99 where price x hours is $7 are reported by
    line and imported; --strict refuses the file, naming the same lines."""
    p = tmp_path / "odd.csv"
    p.write_text(
        "date,provider,card,usd_per_hour,hours,cost_usd\n"
        "2026-11-01,vast,rtx-4090,0.35,2,0.7\n"
        "2026-11-02,aws,rtx-4090,0.35,2,0.7\n"
        "2026-11-03,runpod,notacard,1,1,1\n"
        "2026-11-04,runpod,h100-sxm,3.5,2,99\n"
        "2026-11-05,runpod,A100,3.5,2,7.009\n"
    )
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p, tz="UTC", strict=True)
    assert [n for n, _ in e.value.errors] == [3, 4, 5]
    assert "--strict" in str(e.value) and _count(ledger) == 0
    r = cmds.import_csv(ledger, p, tz="UTC")
    assert r["imported"] == 5
    w = dict(r["warnings"])
    assert list(w) == [3, 4, 5]
    assert (
        w[3].startswith("unknown provider 'aws'")
        and w[4] == "unknown card 'notacard' (`gpuops cards` lists the known cards)"
    )
    assert w[5] == "cost_usd 99 differs from usd_per_hour x hours = 3.5 x 2 = 7.0000 by more than $0.01"


def test_a_misspelt_provider_is_refused_with_the_name_it_misses(ledger, tmp_path):
    """Seen: provider `runpood` imported with a warning (only --strict refused it): its money stood
    apart from RunPod's in every report. A near miss of a known provider is refused, naming it; a
    name like no provider of ours (aws) is still noted, as above."""
    p = tmp_path / "typo.csv"
    p.write_text(
        "date,provider,card,usd_per_hour,hours\n2026-11-01,vast,rtx-4090,0.35,2\n2026-11-02,runpood,rtx-4090,0.35,2\n"
        "2026-11-03,Vastt,rtx-4090,0.35,2\n"
    )
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p, tz="UTC")
    assert e.value.errors == [
        (3, "unknown provider 'runpood': did you mean 'runpod'?"),
        (4, "unknown provider 'Vastt': did you mean 'vast'?"),
    ]
    assert _count(ledger) == 0


def test_import_streams_in_batches_inside_one_transaction(ledger):
    """Rows go in per chunk; a clash in a late chunk rolls the earlier chunks back."""
    from ledger.store import ImportRejected

    rows, lines, errs = parse_csv(SPREADSHEET, tz="UTC")
    assert ledger.import_rows(enumerate(rows[:1], 1)) == 1
    with pytest.raises(ImportRejected) as e:
        ledger.import_rows(zip([10, 11, 12, 13], rows[1:] + rows[:1]), chunk=1)
    assert e.value.errors == [(13, f"session {rows[0]['id']} is already in the ledger (imported before?)")]
    assert _count(ledger) == 1
    assert ledger.import_rows(zip([2, 3, 4], rows[1:]), chunk=2) == 3 and _count(ledger) == 4


def test_a_long_conclusion_round_trips_and_an_oversized_cell_is_a_bad_line(tmp_path):
    """`ledger note` takes a 200 KB conclusion and export writes it; import died on it with a
    traceback (the csv module's 131,072-character field limit). Past MAX_CELL_CHARS: a bad line."""
    from ledger import Ledger
    from ledger.csvio import MAX_CELL_CHARS
    from tests.books.conftest import _rented, utc

    led, fresh = Ledger(f"sqlite:///{tmp_path / 'a.db'}"), Ledger(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        _rented(led, "s1", utc(2026, 11, 3, 10), price=2.0)
        led.close("s1", utc(2026, 11, 3, 11), "job_end")
        cmds.note(led, "s1", "x" * 200_000)
        first = _export(led)
        path = tmp_path / "long.csv"
        path.write_text(first)
        assert cmds.import_csv(fresh, path)["imported"] == 1
        assert _export(fresh) == first and fresh.get("s1").conclusion == "x" * 200_000
    finally:
        led.engine.dispose()
        fresh.engine.dispose()
    text = "date,provider,card,usd_per_hour,hours,conclusion\n2026-11-02,vast,rtx-4090,0.35,2,ok\n"
    rows, _, errors = parse_csv(text + f'2026-11-02,vast,rtx-4090,0.35,2,"{"y" * (MAX_CELL_CHARS + 1)}"\n', tz="UTC")
    assert errors == [
        (3, f"not readable as CSV: field larger than field limit ({MAX_CELL_CHARS}); nothing after it was read")
    ]


def test_an_id_repeated_further_apart_than_a_chunk_is_named_a_repeat(ledger):
    """An id repeated 5,000+ lines apart (another chunk) was "already in the ledger (imported
    before?)", on a ledger that never saw it; an id from an earlier import still reads so."""
    from ledger.store import ImportRejected

    rows, _, errs = parse_csv(SPREADSHEET, tz="UTC")
    assert ledger.import_rows(enumerate(rows[:1], 1)) == 1
    with pytest.raises(ImportRejected) as e:
        ledger.import_rows(zip([2, 3, 4, 5], [rows[1], rows[2], rows[1], rows[0]]), chunk=1)
    assert e.value.errors == [
        (4, f"session {rows[1]['id']} repeats an earlier line of this file"),
        (5, f"session {rows[0]['id']} is already in the ledger (imported before?)"),
    ]
    assert _count(ledger) == 1


def test_a_nul_character_is_a_bad_line_on_every_backend(ledger, tmp_path):
    """A NUL in a conclusion or session cell: SQLite booked it, PostgreSQL died mid-import with a
    DataError traceback. Now a bad line, named, on both."""
    p = tmp_path / "nul.csv"
    p.write_text(
        "date,provider,card,usd_per_hour,hours,conclusion,session\n2026-11-02,vast,rtx-4090,0.35,2,ok,s1\n"
        "2026-11-02,vast,rtx-4090,0.35,2,a\x00b,s2\n2026-11-02,vast,rtx-4090,0.35,2,ok,s\x003\n"
    )
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p)
    assert e.value.errors == [
        (3, "conclusion contains a NUL character (\\x00); use visible text"),
        (4, "session contains a NUL character (\\x00); use visible text"),
    ]
    assert _count(ledger) == 0


def test_counts_past_their_columns_are_bad_lines(ledger, tmp_path):
    """tokens or gpu_count past the column (BIGINT / INTEGER) died mid-import with an OverflowError
    (SQLite) or DataError (PostgreSQL) traceback; now bad lines, and the largest that fit import."""
    p = tmp_path / "big.csv"
    p.write_text(
        "date,provider,card,usd_per_hour,hours,gpu_count,tokens,session\n"
        f"2026-11-02,vast,rtx-4090,0.35,2,1,{2**63},s1\n2026-11-02,vast,rtx-4090,0.35,2,{2**31},0,s2\n"
    )
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p)
    assert e.value.errors == [
        (2, f"tokens {2**63} is above {2**63 - 1:,} (the ledger's tokens column)"),
        (3, f"gpu_count {2**31} is above {2**31 - 1:,} (the ledger's gpu_count column)"),
    ]
    p.write_text(
        "date,provider,card,usd_per_hour,hours,gpu_count,tokens,session\n"
        f"2026-11-02,vast,rtx-4090,0.35,2,{2**31 - 1},{2**63 - 1},s1\n"
    )
    assert cmds.import_csv(ledger, p)["imported"] == 1 and _count(ledger) == 1


def test_a_date_whose_utc_time_is_past_year_9999_is_a_bad_line():
    """9999-12-31T23:00-05:00 (10000-01-01 UTC) was booked, and every later `ledger export` died
    with "year 10000 is out of range"."""
    head = "date,provider,card,usd_per_hour,hours\n"
    rows, _, errors = parse_csv(
        head + "9999-12-31T23:00:00-05:00,vast,rtx-4090,0.35,2\n"
        "9999-12-30T23:00:00+00:00,vast,rtx-4090,0.35,2\n0001-01-01T00:00:00+00:00,vast,rtx-4090,0.35,2\n"
        "9999-12-29T00:00:00+00:00,vast,rtx-4090,0.35,2\n",
        tz="UTC",
    )
    assert errors == [
        (2, "date '9999-12-31T23:00:00-05:00' (to its end, 2 h later) is outside 0001-01-02 .. 9999-12-31 UTC"),
        (3, "date '9999-12-30T23:00:00+00:00' (to its end, 2 h later) is outside 0001-01-02 .. 9999-12-31 UTC"),
        (4, "date '0001-01-01T00:00:00+00:00' (to its end, 2 h later) is outside 0001-01-02 .. 9999-12-31 UTC"),
        (
            5,
            "date '9999-12-29T00:00:00+00:00' plus 2 h ends in the future: a rental not over yet, or a typo in the year?",
        ),
    ]
    assert rows == []
    out = io.StringIO()
    from datetime import datetime, timezone

    from ledger.csvio import write_export

    late = datetime(9999, 12, 29, tzinfo=timezone.utc).timestamp()  # what an export of such a row writes
    write_export([(late, "e", "vast", "rtx-4090", 1, 0.35, 2.0, 0.7, 0, "", False, "s-1")], out)
    assert out.getvalue().splitlines()[1].startswith("9999-12-29T00:00:00+00:00,")


def test_a_file_of_bad_lines_keeps_the_first_errors_and_counts_them_all(ledger, tmp_path, monkeypatch):
    """Every line bad (a date format; the same file imported twice) held one message per line in
    memory: 126 MB at 300k lines. The first LineErrors.KEEP are kept, all are counted."""
    from ledger.csvio import LineErrors

    monkeypatch.setattr(LineErrors, "KEEP", 3)
    p = tmp_path / "sheet.csv"
    p.write_text(
        "date,provider,card,usd_per_hour,hours,session\n"
        + "".join(f"2026-11-{d:02d},vast,rtx-4090,0.35,2,s{d}\n" for d in range(1, 11))
    )
    assert cmds.import_csv(ledger, p)["imported"] == 10
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p)
    assert len(e.value.errors) == 3 and str(e.value).startswith("10 bad row(s): sheet.csv:")
    assert "; and 5 more bad rows" in str(e.value) and _count(ledger) == 10
    p.write_text(p.read_text().replace("2026-11-", "11/"))
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p)
    assert [n for n, _ in e.value.errors] == [2, 3, 4] and str(e.value).startswith(
        "10 bad row(s): sheet.csv:2: date '11/01' is not ISO 8601"
    )


def test_an_unterminated_quote_is_refused_naming_its_line(ledger, tmp_path):
    """A quote never closed made the csv module read every later line into one cell: 4 data rows
    were "imported 1 session". Refused, naming the line the quoted cell starts on; nothing written.
    A quoted cell over two lines still imports."""
    p = tmp_path / "quote.csv"
    head = "date,provider,card,usd_per_hour,hours,conclusion\n"
    p.write_text(
        head + "2026-11-01,vast,rtx-4090,0.35,1,ok\n"
        '2026-11-02,vast,rtx-4090,0.35,1,"forgot to close\n'
        "2026-11-03,vast,rtx-4090,0.35,1,ok\n"
        "2026-11-04,vast,rtx-4090,0.35,1,ok\n"
    )
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p, tz="UTC")
    assert [n for n, _ in e.value.errors] == [3]
    assert "quoted cell that starts on this line is never closed" in e.value.errors[0][1]
    assert "\n" not in str(e.value) and _count(ledger) == 0
    # closed by a later cell's quote: the text after that quote gives it away
    _, _, errs = parse_csv(
        head + '2026-11-01,vast,rtx-4090,0.35,1,"oops\n2026-11-02,vast,rtx-4090,0.35,1,"x"\n', tz="UTC"
    )
    assert [n for n, _ in errs] == [2] and "never closed" in errs[0][1]
    rows, lines, errs = parse_csv(
        head + '2026-11-01,vast,rtx-4090,0.35,1,"two\nlines, fine"\n2026-11-02,vast,rtx-4090,0.35,1,ok\n', tz="UTC"
    )
    assert errs == [] and lines == [2, 4] and rows[0]["conclusion"] == "two\nlines, fine"


def test_a_session_id_off_the_id_rule_is_a_bad_line(ledger, tmp_path):
    """The session column took anything: a 5,000-character id, an ESC, a `;`. Those lines are
    refused, naming line and column; ids this tool or a teammate's sheet writes still import."""
    head = "date,provider,card,usd_per_hour,hours,session\n"
    good = ["20261103-140500-3f9a", "llama-sweep-1", "imp-0123456789abcdef", "S_7.run:2", "-s-quoted"]
    bad = ["x" * 5000, "s\x1b[2J", "s1;drop", "two words", "x" * 65]
    rows, _, errs = parse_csv(head + "".join(f"2026-11-02,vast,rtx-4090,0.35,1,{s}\n" for s in good), tz="UTC")
    assert errs == [] and [r["id"] for r in rows] == good
    p = tmp_path / "ids.csv"
    p.write_text(head + "".join(f"2026-11-02,vast,rtx-4090,0.35,1,{s}\n" for s in ["ok-1", *bad]))
    with pytest.raises(BadInput) as e:
        cmds.import_csv(ledger, p, tz="UTC")
    assert [n for n, _ in e.value.errors] == [3, 4, 5, 6, 7]
    msgs = dict(e.value.errors)
    assert msgs[3] == (
        "session 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' (+4960 more characters) is not a session id: "
        "use 1-64 letters, digits and . _ : - (e.g. s-0001 or 20261103-140500-3f9a)"
    )
    assert msgs[4].startswith("session 's\\x1b[2J' is not a session id") and "'s1;drop'" in msgs[5]
    assert _count(ledger) == 0


def test_a_bad_time_zone_says_the_fix_once(ledger):
    """`--tz Mars/Base` said "use an IANA name" twice: in the message and again in the fix."""
    with pytest.raises(BadInput) as e:
        cmds.month(ledger, "2026-11", "Mars/Base")
    assert (
        e.value.message == "unknown time zone 'Mars/Base'"
        and e.value.fix == "pass an IANA name, e.g. --tz Europe/Berlin or --tz UTC"
    )


def test_a_row_that_ends_in_the_future_is_refused(ledger, tmp_path):
    """A rental dated 2099 was booked without a word, then with a note (a day's tolerance). A row
    that ends in the future is no past rental: refused, whatever --strict says; the slack is clock
    skew (minutes), so a row ending in 12 h is refused too."""
    from datetime import datetime, timedelta, timezone

    soon = (datetime.now(timezone.utc) + timedelta(hours=12)).isoformat(timespec="seconds")
    ended = (datetime.now(timezone.utc) - timedelta(hours=2)).isoformat(timespec="seconds")
    p = tmp_path / "future.csv"
    p.write_text(
        "date,provider,card,usd_per_hour,hours\n"
        f"2026-11-01,vast,rtx-4090,0.35,1\n{soon},vast,rtx-4090,0.35,1\n2099-11-01,vast,rtx-4090,0.35,1\n"
        f"{ended},vast,rtx-4090,0.35,3\n{ended},vast,rtx-4090,0.35,1\n"
    )
    for strict in (False, True):
        with pytest.raises(BadInput) as e:
            cmds.import_csv(ledger, p, tz="UTC", strict=strict)
        assert [n for n, _ in e.value.errors] == [3, 4, 5] and _count(ledger) == 0
        why = dict(e.value.errors)
        assert why[4] == (
            "date '2099-11-01' plus 1 h ends in the future: a rental not over yet, or a typo in the year?"
        )
        assert why[5].endswith("plus 3 h ends in the future: a rental not over yet, or a typo in the year?")
