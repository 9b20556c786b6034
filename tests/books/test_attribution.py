"""The one attribution rule (ledger/attribution.py) and the monthly cap that uses it (SQLite and
PostgreSQL). The worked example: a rental from 31 Oct 22:00 to 1 Nov 10:00 UTC at 10 USD/h is
20 USD of October and 100 USD of November, so a November cap of 50 USD is already crossed."""

from __future__ import annotations

import pytest

from ledger.attribution import accrued, fraction, split
from tests.books.conftest import _rented, utc


def test_fraction_and_split_by_the_hour():
    a, b = utc(2026, 10, 31, 22), utc(2026, 11, 1, 10)
    assert fraction(a, b, utc(2026, 10, 1), utc(2026, 11, 1)) == pytest.approx(2 / 12, abs=1e-9)
    assert fraction(a, b, utc(2026, 11, 1), utc(2026, 12, 1)) == pytest.approx(10 / 12, abs=1e-9)
    assert fraction(a, None, utc(2026, 11, 1), utc(2026, 12, 1)) == 0.0  # open: no cost in the books
    assert fraction(a, a, a - 1, a + 1) == 1.0 and fraction(a, a, a + 1, a + 2) == 0.0  # zero-length: where it started
    hours = [a + 3600 * i for i in range(13)]
    parts = list(split(a, b, hours))
    assert [i for i, _ in parts] == list(range(12)) and all(s == pytest.approx(1 / 12, abs=1e-9) for _, s in parts)
    days = [utc(2026, 10, 31), utc(2026, 11, 1), utc(2026, 11, 2)]
    assert [(i, round(s, 6)) for i, s in split(a, b, days)] == [(0, round(2 / 12, 6)), (1, round(10 / 12, 6))]


def test_open_session_accrues_only_inside_the_period():
    class Row:
        status, usd_per_hour, instance_id = "running", 10.0, "i-1"
        instance_created_at = created_at = utc(2026, 10, 31, 22)
        ended_at = None

    assert accrued(Row, utc(2026, 11, 1), utc(2026, 12, 1), now=utc(2026, 11, 1, 10)) == pytest.approx(100.0, abs=1e-6)
    assert accrued(Row, utc(2026, 10, 1), utc(2026, 11, 1), now=utc(2026, 11, 1, 10)) == pytest.approx(20.0, abs=1e-6)


def test_monthly_cap_counts_the_hours_inside_the_month(ledger):
    from gpuops.accounting import ledger_service as books
    from ledger.limits import month_spend

    t = utc(2026, 10, 31, 21, 59)
    _rented(ledger, "b1", t, price=10.0, started=utc(2026, 10, 31, 22), provider="vast")
    ledger.close("b1", utc(2026, 11, 1, 10), "job_end")
    nov, dec = (utc(2026, 11, 1), utc(2026, 12, 1)), (utc(2026, 10, 1), utc(2026, 11, 1))
    assert month_spend(ledger, *nov, now=utc(2026, 11, 2)) == pytest.approx(100.0, abs=1e-6)
    assert month_spend(ledger, *dec, now=utc(2026, 11, 2)) == pytest.approx(20.0, abs=1e-6)
    assert books.month(ledger, "2026-11", "UTC")["total_usd"] == 100.0
    assert books.month(ledger, "2026-10", "UTC")["total_usd"] == 20.0
    # An open rental counts its hours so far, inside the month only.
    _rented(ledger, "b2", utc(2026, 11, 2), price=4.0, started=utc(2026, 11, 2), provider="vast")
    assert month_spend(ledger, *nov, now=utc(2026, 11, 2, 3)) == pytest.approx(112.0, abs=1e-6)
    assert books.month(ledger, "2026-11", "UTC")["total_usd"] == 100.0  # the books: no cost until it closes
    # The watchdog's cap check is the same function: past a 50 USD cap in November.
    from gpuops.errors import BadInput
    from gpuops.teardown.budget import check_budget

    with pytest.raises(BadInput, match="monthly cap"):
        check_budget(1.0, 1.0, None, None, month_spend(ledger, *nov, now=utc(2026, 11, 2, 3)), 50.0)


@pytest.mark.parametrize("tz", ["UTC", "Asia/Tokyo"])
def test_the_month_and_its_days_give_the_books_money_by_hand(books, tz):
    """The database's sums (ledger/aggregate.py, the rule in SQL), asked with and without the
    day-by-day split, give the books' money as worked out by hand."""
    from gpuops.accounting import ledger_service as cmds

    # The books' real money by hand (tests/books/conftest.py: build_books): s1 2.40, s3 0.525097 (5401 s
    # at 0.35 $/h), s5 6.40, s7 0.40 from 31 Oct 23:31 UTC for an hour: 29/60 of it in October in UTC,
    # all of it in November in Tokyo (UTC+9); s4 is simulated (0.45), s6 open, s2 never rented.
    old_oct = {"UTC": 0.40 * 29 / 60, "Asia/Tokyo": 0.0}[tz]
    by_hand = {
        "2026-10": {"old": old_oct} if old_oct else {},
        "2026-11": {"llama-serve": 2.40 + 0.525097, "finetune": 6.40, "cpu-sim": 0.0, "old": 0.40 - old_oct},
    }
    for month, experiments in by_hand.items():
        for path in (None, "day"):
            got = cmds.month(books, month, tz, by=path)
            assert got["total_usd"] == pytest.approx(sum(experiments.values()), abs=1e-6), (month, path)
            assert {e["name"]: e["cost_usd"] for e in got["by_experiment"]} == {
                k: pytest.approx(v, abs=1e-6) for k, v in experiments.items()
            }, (month, path)
            assert got["simulated_usd"] == pytest.approx(0.45 if month == "2026-11" else 0.0, abs=1e-6)
    # 4-10 Nov: s3 whole, s4 simulated, and s5 (3 Nov 22:31 to 4 Nov 00:31 UTC): its last 31 of
    # 120 minutes in UTC, all of it in Tokyo (4 Nov 00:00 JST is 3 Nov 15:00 UTC)
    week = {
        e["name"]: (e["cost_usd"], e["simulated_usd"])
        for e in cmds.experiments(books, "2026-11-04", "2026-11-10", tz)["experiments"]
    }
    s5 = {"UTC": 6.40 * 31 / 120, "Asia/Tokyo": 6.40}[tz]
    assert week == {
        "llama-serve": (pytest.approx(0.525097, abs=1e-6), 0.0),
        "cpu-sim": (0.0, pytest.approx(0.45, abs=1e-6)),
        "finetune": (pytest.approx(s5, abs=1e-6), 0.0),
    }
    every = {
        e["name"]: e["cost_usd"] for e in cmds.experiments(books, tz=tz)["experiments"]
    }  # all time: each row whole
    assert every == {
        "llama-serve": pytest.approx(2.925097, abs=1e-6),
        "finetune": pytest.approx(6.40, abs=1e-6),
        "cpu-sim": 0.0,
        "old": pytest.approx(0.40, abs=1e-6),
    }


def test_sql_rule_at_every_edge_gives_the_money_by_hand(ledger):
    """Rows at each edge of the period (inside, zero-length at lo and at hi, across lo, across hi,
    no instance time, closed without an end, an end before the start, open): the reports' SQL (the
    inside rows summed plainly, the others attributed), its days and the cap give each row's cost
    x its share of the period (and of each day), worked out by hand."""
    import sqlalchemy as sa

    from gpuops.accounting import ledger_service as cmds
    from ledger.limits import month_spend
    from ledger.models import sessions
    from ledger.reports import month_bounds

    lo, hi = month_bounds("2026-11", "UTC")
    H = 3600.0
    edges = [  # (instance_created_at, ended_at, status, instance_id)
        (lo + H, lo + 3 * H, "closed", "i"),
        (lo, lo, "closed", "i"),
        (hi, hi, "closed", "i"),
        (hi - 1, hi - 1, "closed", "i"),
        (lo - 2 * H, lo + H, "closed", "i"),
        (hi - H, hi + 2 * H, "closed", "i"),
        (lo - H, hi + H, "closed", "i"),
        (None, lo + 5 * H, "closed", "i"),
        (lo + H, None, "closed", "i"),
        (lo + 4 * H, lo + 2 * H, "closed", "i"),
        (lo + H, hi, "closed", "i"),
        (lo - H, lo, "closed", "i"),
        (lo + 2 * H, None, "running", "i"),
        (None, None, "closed", None),
    ]
    rows = []
    for i, (began, ended, status, iid) in enumerate(edges):
        rows.append(
            dict(
                id=f"e{i:02d}",
                experiment=f"x{i % 3}",
                job="",
                provider="vast",
                card="a100-80gb",
                gpu_count=1 + i % 2,
                spot=False,
                label="",
                instance_id=iid,
                simulated=i == 3,
                status=status,
                created_at=(began or lo + 5 * H) - 60.0,
                instance_created_at=began,
                ended_at=ended,
                usd_per_hour=3.0,
                billed_seconds=7200.0,
                cost_usd=6.0 + i,
                tokens=1000 * i,
                job_seconds=3600.0,
                conclusion=f"c{i}" if i % 4 else "",
                note="",
                log_path="",
                results_path="",
                source="gpuops",
                cost_source="charged" if i % 2 else "estimate",
            )
        )
    with ledger.engine.begin() as conn:
        conn.execute(sessions.insert(), rows)

    # November's real money by hand, cost x the share of [start, end) inside [lo, hi) (the month is
    # 720 h): e00 6, e01 7 (zero-length at lo), e04 10 x 1/3, e05 11 x 1/3, e06 12 x 720/722, e07 13
    # (no instance time: from its intent, 60 s inside), e08 14 (closed without an end: zero-length
    # inside), e09 15 (ends before it starts: likewise), e10 16; e02 (at hi) and e11 (before lo) 0;
    # e03 simulated (9); e12 open (no cost in the books); e13 never rented.
    total = 6 + 7 + 10 / 3 + 11 / 3 + 12 * 720 / 722 + 13 + 14 + 15 + 16
    month = cmds.month(ledger, "2026-11", "UTC")
    assert month["total_usd"] == pytest.approx(total, abs=1e-6)
    assert month["simulated_usd"] == pytest.approx(9.0, abs=1e-6)
    by_experiment = {e["name"]: e["cost_usd"] for e in month["by_experiment"]}
    assert by_experiment == {
        "x0": pytest.approx(6 + 12 * 720 / 722 + 15, abs=1e-6),  # e00, e06, e09 (e03 simulated, e12 open)
        "x1": pytest.approx(7 + 10 / 3 + 13 + 16, abs=1e-6),  # e01, e04, e07, e10
        "x2": pytest.approx(11 / 3 + 14, abs=1e-6),  # e05, e08 (e02, e11 outside)
    }
    days = cmds.month(ledger, "2026-11", "UTC", by="day")  # the same month, and its money split day by day
    assert days["total_usd"] == pytest.approx(total, abs=1e-6) and days["simulated_usd"] == pytest.approx(9.0, abs=1e-6)
    assert {e["name"]: e["cost_usd"] for e in days["by_experiment"]} == by_experiment
    # Each day by hand, a day being 24 of e06's 722 hours and of e10's 719 (e10's first day: 23):
    # 1 Nov holds e00, e01 (zero-length at lo), e04's 1 of 3 hours, e07 (from its intent), e08 and
    # e09 (zero-length, where they began) whole, and counts the open e12 (no money); 30 Nov holds
    # e05's 1 of 3 hours and the simulated e03 (zero-length a second before hi); e02 (at hi) and e11
    # (ending at lo) spend in no day.
    d = {x["date"]: x for x in days["days"]}
    assert len(d) == 30
    assert d["2026-11-01"]["cost_usd"] == pytest.approx(
        6 + 7 + 10 / 3 + 12 * 24 / 722 + 13 + 14 + 15 + 16 * 23 / 719, abs=1e-6
    )
    assert d["2026-11-01"]["sessions"] == 9 and d["2026-11-01"]["simulated_usd"] == 0.0
    assert d["2026-11-15"]["cost_usd"] == pytest.approx(12 * 24 / 722 + 16 * 24 / 719, abs=1e-6)
    assert d["2026-11-15"]["sessions"] == 2
    assert d["2026-11-30"]["cost_usd"] == pytest.approx(11 / 3 + 12 * 24 / 722 + 16 * 24 / 719, abs=1e-6)
    assert d["2026-11-30"]["simulated_usd"] == pytest.approx(9.0, abs=1e-6) and d["2026-11-30"]["sessions"] == 4
    # GPU-hours: 2 billed hours x GPUs (1 + i % 2) x the day's share: e03 4, e05 4/3, e06 and e10 2 x 24/722, 2 x 24/719
    assert d["2026-11-30"]["gpu_hours"] == pytest.approx(4 + 4 / 3 + 2 * 24 / 722 + 2 * 24 / 719, abs=1e-6)
    assert sum(x["cost_usd"] for x in days["days"]) == pytest.approx(total, abs=1e-5)
    assert (
        month["sessions"] == 11 and month["open_sessions"] == 1
    )  # the 3 outside rows and the never-rented one: not counted
    got = cmds.experiments(ledger, "2026-11-01", "2026-11-30", "UTC")
    assert {e["name"]: e["cost_usd"] for e in got["experiments"]} == by_experiment
    # the newest intent time among counted rows; e13 (never rented) shares e07's intent time: no candidate
    assert {e["name"]: e["latest_conclusion"] for e in got["experiments"]} == {"x0": "c3", "x1": "c7", "x2": "c5"}
    # open sides (ledger experiments' default is all time): the inside rule drops what an open side makes
    # true, and the rows it does not prove inside still pay the share (e07 without an instance time, e08
    # closed without an end, e09 ending before its start): every closed rented row whole, once. From
    # 1 Nov on: e02 (at hi) 8 and e05 11 whole, e06 12 x 721/722, e11 (ends at lo) 0; to 30 Nov:
    # e04 10 and e11 17 whole, e06 12 x 721/722, e05 11 x 1/3, e02 (at hi) 0.
    e06 = 12 * 721 / 722
    for since, until, want in (
        (None, None, {"x0": 6 + 12 + 15, "x1": 7 + 10 + 13 + 16, "x2": 8 + 11 + 14 + 17}),
        ("2026-11-01", None, {"x0": 6 + e06 + 15, "x1": 7 + 10 / 3 + 13 + 16, "x2": 8 + 11 + 14}),
        (None, "2026-11-30", {"x0": 6 + e06 + 15, "x1": 7 + 10 + 13 + 16, "x2": 11 / 3 + 14 + 17}),
    ):
        got_open = cmds.experiments(ledger, since, until, "UTC")["experiments"]
        assert {e["name"]: e["cost_usd"] for e in got_open} == {k: pytest.approx(v, abs=1e-6) for k, v in want.items()}
    every = cmds.experiments(ledger)["experiments"]
    assert (
        round(sum(e["cost_usd"] for e in every), 6) == 129.0 and sum(e["simulated_usd"] for e in every) == 9.0
    )  # 6+..+17, e03 simulated
    assert sum(e["sessions"] for e in every) == 13 and sum(e["open_sessions"] for e in every) == 1
    # the cap: the same real money, plus the open row's hour so far at 3 USD/h
    assert month_spend(ledger, lo, hi, now=lo + 3 * H) == pytest.approx(total + 3.0, abs=1e-6)
    # per owner: rows from before owners were booked count for everyone; another owner's do not
    assert month_spend(ledger, lo, hi, now=lo + 3 * H, owner="me") == pytest.approx(total + 3.0, abs=1e-6)
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("UPDATE sessions SET owner = 'them' WHERE id = 'e00'"))
    assert month_spend(ledger, lo, hi, now=lo + 3 * H, owner="me") == pytest.approx(total + 3.0 - 6.0, abs=1e-6)
    assert month_spend(ledger, lo, hi, now=lo + 3 * H, owner="them") == pytest.approx(total + 3.0, abs=1e-6)
    with ledger.engine.connect() as conn:  # the fixture's rows are all there is
        assert conn.execute(sa.text("SELECT COUNT(*) FROM sessions")).scalar() == len(edges)


def test_reports_on_postgres_count_the_storage_lines(postgres_server):
    """`ledger month` on PostgreSQL counts a session's storage line and an account-level one (1.25 + 0.5 USD)."""
    from gpuops.accounting import ledger_service as cmds
    from ledger import Ledger
    from tests.books.conftest import build_books

    url = postgres_server.new_database()
    led = Ledger(url)
    build_books(led)
    import sqlalchemy as sa

    with led.engine.begin() as conn:  # storage lines: one on a session, one account-level (a volume)
        sid = (
            conn.execute(sa.text("SELECT id FROM sessions WHERE status = 'closed' AND cost_usd > 0 ORDER BY id"))
            .scalars()
            .first()
        )
        for i, (session, usd) in enumerate(((sid, 1.25), (None, 0.5))):
            conn.execute(
                sa.text(
                    "INSERT INTO cost_lines (session_id, provider, instance_id, kind, start_at, end_at, usd, simulated, source,"
                    " description, booked_at, line_key) VALUES (:s, 'vast', 'v1', 'storage', :a, :b, :u, false, 'provider',"
                    " 'disk', 0, :k)"
                ),
                {"s": session, "a": utc(2026, 11, 5), "b": utc(2026, 11, 6), "u": usd, "k": f"k{i}"},
            )
    via_engine = {
        "month": cmds.month(led, "2026-11", "UTC"),
        "experiments": cmds.experiments(led, "2026-11-01", None, "UTC"),
    }
    led.engine.dispose()
    assert via_engine["month"]["storage_usd"] == 1.75


def test_token_sums_past_64_bits_do_not_overflow(ledger):
    """Two sessions of one group with the largest token count the ledger takes: the SQL sums add
    floats (SQLite's integer SUM raises "integer overflow" past 2**63 - 1)."""
    from gpuops.accounting import ledger_service as cmds
    from gpuops.accounting.ledger_service import MAX_TOKENS
    from ledger.models import sessions
    from ledger.reports import month_bounds

    lo, _ = month_bounds("2026-11", "UTC")
    with ledger.engine.begin() as conn:
        conn.execute(
            sessions.insert(),
            [
                dict(
                    id=f"t{i}",
                    experiment="big",
                    job="",
                    provider="vast",
                    card="h100-sxm",
                    gpu_count=1,
                    spot=False,
                    label="",
                    instance_id="i",
                    simulated=False,
                    status="closed",
                    created_at=lo + 60.0 * i,
                    instance_created_at=lo + 60.0 * i + 1,
                    ended_at=lo + 60.0 * i + 30,
                    usd_per_hour=2.0,
                    billed_seconds=29.0,
                    cost_usd=0.5,
                    tokens=MAX_TOKENS,
                    conclusion="",
                    note="",
                    log_path="",
                    results_path="",
                    source="gpuops",
                )
                for i in range(2)
            ],
        )
    assert cmds.month(ledger, "2026-11", "UTC")["tokens"] == int(round(2.0 * MAX_TOKENS))
    assert cmds.experiments(ledger, "2026-11-01", None, "UTC")["experiments"][0]["tokens"] == int(
        round(2.0 * MAX_TOKENS)
    )


# -- the rule's pieces, at their edges (pure functions, no ledger) ---------------------------------
def test_interval_of_a_row():
    from types import SimpleNamespace as R

    from ledger.attribution import interval

    assert (
        interval(R(instance_id=None, instance_created_at=None, created_at=5.0, ended_at=9.0, status="closed")) is None
    )
    assert interval(R(instance_id="i", instance_created_at=None, created_at=5.0, ended_at=9.0, status="closed")) == (
        5.0,
        9.0,
    )
    assert interval(R(instance_id=None, instance_created_at=6.0, created_at=5.0, ended_at=9.0, status="closed")) == (
        6.0,
        9.0,
    )
    assert interval(R(instance_id="i", instance_created_at=6.0, created_at=5.0, ended_at=None, status="running")) == (
        6.0,
        None,
    )
    assert interval(R(instance_id="i", instance_created_at=6.0, created_at=5.0, ended_at=None, status="closed")) == (
        6.0,
        6.0,
    )
    assert interval(R(instance_id="i", instance_created_at=6.0, created_at=5.0, ended_at=4.0, status="closed")) == (
        6.0,
        6.0,
    )


def test_fraction_at_the_edges_of_a_period():
    assert fraction(0.0, 10.0, 10.0, 20.0) == 0.0 and fraction(0.0, 10.0, 20.0, 30.0) == 0.0  # touching, disjoint
    assert fraction(10.0, 20.0, 0.0, 10.0) == 0.0
    assert fraction(0.0, 10.0, 9.5, 20.0) == pytest.approx(0.05, abs=1e-12)  # half a second of ten
    assert fraction(0.0, 10.0, -5.0, 20.0) == 1.0
    assert fraction(5.0, 5.0, 0.0, 5.0) == 0.0 and fraction(5.0, 5.0, 5.0, 6.0) == 1.0  # zero-length: where it started
    assert fraction(5.0, 4.0, 5.0, 6.0) == 1.0  # an end before the start counts as zero-length


def test_overlaps_at_the_edges():
    from ledger.attribution import overlaps

    assert overlaps(0.0, None, 0.0, 1.0) and not overlaps(1.0, None, 0.0, 1.0)  # open: from its start on
    assert overlaps(0.0, 2.0, 1.0, 3.0) and not overlaps(0.0, 1.0, 1.0, 3.0) and not overlaps(3.0, 4.0, 1.0, 3.0)
    assert overlaps(1.0, 1.0, 1.0, 3.0) and not overlaps(3.0, 3.0, 1.0, 3.0)  # zero-length: where it started


def test_split_buckets_and_shares():
    edges = [0.0, 10.0, 20.0, 30.0]
    assert list(split(5.0, 25.0, edges)) == [(0, 0.25), (1, 0.5), (2, 0.25)]
    assert list(split(10.0, 20.0, edges)) == [(1, 1.0)]  # exactly one bucket; the next does not get a zero share
    assert list(split(-10.0, 5.0, edges)) == [(0, 5.0 / 15.0)]  # before the first edge: only the part inside
    assert list(split(25.0, 45.0, edges)) == [(2, 0.25)]
    assert list(split(30.0, 40.0, edges)) == [] and list(split(-5.0, 0.0, edges)) == []
    assert list(split(0.0, 0.5, edges)) == [(0, 1.0)] and list(split(29.5, 30.0, edges)) == [(2, 1.0)]
    assert (
        list(split(5.0, None, edges)) == [] and list(split(5.0, 6.0, [0.0])) == [] and list(split(5.0, 6.0, [])) == []
    )


def test_split_of_a_zero_length_interval_goes_to_the_bucket_holding_it():
    edges = [0.0, 10.0, 20.0]
    assert list(split(10.0, 10.0, edges)) == [(1, 1.0)] and list(split(0.0, 0.0, edges)) == [(0, 1.0)]
    assert list(split(12.0, 3.0, edges)) == [(1, 1.0)]  # an end before the start: zero-length
    assert list(split(20.0, 20.0, edges)) == [] and list(split(-1.0, -1.0, edges)) == []
    assert list(split(5.0, 5.0, [0.0, 10.0])) == [(0, 1.0)]


def test_accrued_only_for_open_priced_rows_inside_the_period():
    class Open:
        status, usd_per_hour, instance_id = "running", 3.6, "i-1"
        instance_created_at, created_at, ended_at = 1000.0, 900.0, None

    assert accrued(Open, 0.0, 10_000.0, now=1000.0 + 1800.0) == pytest.approx(1.8, abs=1e-9)
    assert accrued(Open, 1500.0, 10_000.0, now=2000.0) == pytest.approx(0.5, abs=1e-9)  # from the period's start
    assert accrued(Open, 0.0, 1200.0, now=2000.0) == pytest.approx(0.2, abs=1e-9)  # to the period's end
    assert accrued(Open, 0.0, 1000.5, now=2000.0) == pytest.approx(0.0005, abs=1e-12)  # half a second
    assert accrued(Open, 0.0, 900.0, now=2000.0) == 0.0 and accrued(Open, 3000.0, 4000.0, now=2000.0) == 0.0
    Closed = type("Closed", (Open,), {"status": "closed", "ended_at": 2000.0})
    Free = type("Free", (Open,), {"usd_per_hour": 0.0})
    Never = type("Never", (Open,), {"instance_id": None, "instance_created_at": None})
    assert accrued(Closed, 0.0, 10_000.0, now=3000.0) == 0.0 and accrued(Free, 0.0, 10_000.0, now=3000.0) == 0.0
    assert accrued(Never, 0.0, 10_000.0, now=3000.0) == 0.0
