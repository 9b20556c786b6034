"""``ledger export`` writes the bytes the plain csv-module export wrote, on hostile rows.

The export formats common rows itself (for speed) and hands the rest to the csv module; this
compares it with the previous implementation, kept here verbatim as the reference (SQL with the
date's seconds formatted by the database, every row through ``csv.writer``), on SQLite and on
PostgreSQL: formula starts, quotes, commas, CR/LF/tab, non-Latin text, equal times ordered by id,
fractions of a microsecond, -0.0, NaN, None, odd types that only SQLite stores.
"""

from __future__ import annotations

import csv
import io
import random
from datetime import datetime, timezone
from itertools import groupby

import sqlalchemy as sa

from gpuops.accounting import ledger_service as books
from ledger.csvio import _RISKY_START, ALL_COLUMNS, neutralize

_REFERENCE_DATE_SQL = {
    "sqlite": "strftime('%Y-%m-%dT%H:%M:%S', CAST(created_at AS INTEGER), 'unixepoch')",
    "postgresql": "to_char(to_timestamp(trunc(created_at)) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS')",
}


def reference_export(led) -> str:
    """The export as it was before its rewrite for speed (ledger/csvio.py at 3b70e8c)."""
    sql = (
        f"SELECT created_at, {_REFERENCE_DATE_SQL[led.dialect]}, experiment, provider, card, gpu_count, usd_per_hour, "
        "billed_seconds / 3600.0, cost_usd, tokens, conclusion, simulated, id FROM sessions WHERE status = 'closed' "
        "AND (instance_id IS NOT NULL OR instance_created_at IS NOT NULL) ORDER BY created_at, id"
    )
    rows = led.iter_query(sql, {})
    out = io.StringIO()
    utc = timezone.utc
    fromts = datetime.fromtimestamp
    risky = _RISKY_START

    def records():
        for created, second, exp, prov, card, gpus, price, hours, cost, tokens, concl, sim, sid in rows:
            whole = int(created)
            us = round((created - whole) * 1e6)
            if second is None or created < 0 or us >= 1_000_000:
                date = fromts(created, utc).isoformat()
            else:
                date = f"{second}.{us:06d}+00:00" if us else f"{second}+00:00"
            yield (
                date,
                neutralize(exp) if exp[:1] in risky else exp,
                neutralize(prov) if prov[:1] in risky else prov,
                neutralize(card) if card[:1] in risky else card,
                gpus,
                None if price is None else float(price),
                None if hours is None else float(hours),
                None if cost is None else float(cost),
                tokens or 0,
                (neutralize(concl) if concl[:1] in risky else concl) if concl else "",
                "true" if sim else "false",
                neutralize(sid) if sid[:1] in risky else sid,
            )

    def has_cr(rec: tuple) -> bool:
        return "\r" in rec[1] or "\r" in rec[2] or "\r" in rec[3] or "\r" in rec[9] or "\r" in rec[11]

    w = csv.writer(out, lineterminator="\n")
    w.writerow(ALL_COLUMNS)
    quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for cr, run in groupby(records(), has_cr):
        (quoted if cr else w).writerows(run)
    return out.getvalue()


TEXTS = [
    "plain",
    "exp-001",
    "",
    " ",
    "a,b",
    'say "hi"',
    "two\nlines",
    "cr\rhere",
    "crlf\r\n",
    "\ttab",
    "=1+1",
    "+x",
    "-",
    "-3",
    "@SUM(A1)",
    "'quoted",
    "''=twice",
    "'",
    "é-ü",
    "中文,列",
    "Zeta",
    "alpha",
    "ALPHA",
    "a b c",
]
IDS = [
    "s-0001",
    "S-0001",
    "s-0002",
    "é1",
    "中1",
    "=id",
    "-id",
    "'id",
    "a,b",
    'q"x',
    "zz",
    "Z",
    "0",
    "00",
    "s\r1",
    "s\n2",
]
FLOATS = [
    None,
    0.0,
    -0.0,
    1e-7,
    0.1,
    0.35,
    1.89,
    2.0,
    100.0,
    1 / 3,
    2.675,
    1e15,
    1e16,
    123456789.123,
    5e-324,
    float("inf"),
]
TIMES = [
    0.0,
    1.0,
    86399.999999,
    86400.0000005,
    1762164000.0,
    1762164000.5,
    1762164000.25,
    1762164000.0000005,
    1762164000.0000015,
    1762164000.9999996,
    1762164059.123456,
    1762250399.999,
    253402300799.0,
    -1.5,
]


def _fill(led, rng: random.Random, n: int) -> None:
    rows = []
    for i in range(n):
        sid = rng.choice(IDS) + f"-{i}" if rng.random() < 0.7 else f"r{rng.randrange(10**6)}-{i}"
        rows.append(
            dict(
                id=sid,
                experiment=rng.choice(TEXTS),
                job="job.sh",
                provider=rng.choice(TEXTS),
                card=rng.choice(TEXTS),
                gpu_count=rng.choice([1, 2, 8]),
                spot=False,
                label="",
                simulated=rng.random() < 0.3,
                status="closed",
                created_at=rng.choice(TIMES) if rng.random() < 0.6 else rng.uniform(0, 2e9),
                instance_id=rng.choice([None, "i-1"]),
                instance_created_at=1.0,
                usd_per_hour=rng.choice(FLOATS),
                billed_seconds=rng.choice([None, 0.0, 1.0, 3600.0, 5401.0, 1234.567, 1e-3]),
                cost_usd=rng.choice(FLOATS),
                tokens=rng.choice([0, 1, 12_000_000, 2**62]),
                conclusion=rng.choice(TEXTS),
                note="",
                log_path="",
                results_path="",
            )
        )
    cols = list(rows[0])
    with led.engine.begin() as c:
        c.execute(
            sa.text(f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join(':' + k for k in cols)})"), rows
        )


def _export(led) -> str:
    buf = io.StringIO()
    books.export(led, buf)
    return buf.getvalue()


def test_the_export_is_byte_for_byte_the_csv_module_export(ledger):
    _fill(ledger, random.Random(16), 600)
    ours, ref = _export(ledger), reference_export(ledger)
    assert ours.count("\n") > 500  # CR/LF inside quoted cells add lines; 600 rows
    assert ours == ref


def test_odd_stored_types_take_the_csv_module_path(tmp_path):
    """SQLite keeps a text in an INTEGER column and a real in a BIGINT one: such rows are written
    exactly as the csv module writes them (quoted text, 1.5 tokens), between ordinary rows."""
    from ledger import Ledger

    led = Ledger(f"sqlite:///{tmp_path / 'odd.db'}")
    try:
        _fill(led, random.Random(7), 50)
        with led.engine.begin() as c:
            c.exec_driver_sql(
                "INSERT INTO sessions (id, experiment, job, provider, card, gpu_count, spot, label, simulated, status, "
                "created_at, instance_id, usd_per_hour, billed_seconds, cost_usd, tokens, conclusion, note, log_path, results_path) "
                "VALUES ('odd-1', 'e', '', 'vast', 'c', '2,5', 0, '', 'yes', 'closed', 1762164000.0, 'i', 1, 7200, 2, 1.5, 'x', '', '', ''),"
                "       ('odd-2', 'e', '', 'vast', 'c', 1, 0, '', 0, 'closed', 1762164000, 'i', '0.5', 60, '3', 7, 'x', '', '', '')"
            )
        ours = _export(led)
        assert ',"2,5",' in ours and ",1.5,x,true,odd-1" in ours
        assert ours == reference_export(led)
    finally:
        led.engine.dispose()


def test_long_runs_of_equal_times_are_read_again_by_id(ledger, monkeypatch):
    """Rows of one time beyond ``_TIE_RUN_MAX`` are not sorted in memory but read again, by id:
    the same bytes."""
    from ledger import csvio

    _fill(ledger, random.Random(3), 400)
    monkeypatch.setattr(csvio, "_TIE_RUN_MAX", 3)
    ours, ref = _export(ledger), reference_export(ledger)
    assert ours == ref
    assert len(ours.splitlines()) > 300
