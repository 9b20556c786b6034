"""Pre-rent money check: price x max_hours against balance - floor and the monthly cap."""

from __future__ import annotations

import pytest

from gpuops.rental.budget import check_budget
from gpuops.errors import BadInput


def test_fits():
    assert check_budget(2.0, 4.0, balance=20.0, floor=5.0, month_spent=10.0, cap=100.0) == 8.0
    assert check_budget(2.0, 4.0, balance=None, floor=5.0, month_spent=None, cap=None) == 8.0  # nothing known: no limit


def test_short_of_balance_minus_floor_says_by_how_much():
    with pytest.raises(BadInput) as e:
        check_budget(2.5, 4.0, balance=12.0, floor=5.0, month_spent=0.0, cap=None)
    msg = str(e.value)
    assert "$2.5000/h x 4 h = $10.00 does not fit in balance $12.00 minus floor $5.00 = $7.00: short by $3.00" in msg
    assert "--max-hours 2.80 or less" in msg
    assert e.value.exit_code == 2


def test_no_floor_means_zero_floor():
    with pytest.raises(BadInput, match=r"minus floor \$0.00 = \$3.00: short by \$1.00"):
        check_budget(1.0, 4.0, balance=3.0, floor=None, month_spent=None, cap=None)


def test_short_of_monthly_cap():
    with pytest.raises(BadInput, match=r"monthly cap \$50.00 minus \$45.50 spent this month = \$4.50: short by \$3.50"):
        check_budget(2.0, 4.0, balance=1000.0, floor=5.0, month_spent=45.5, cap=50.0)


def test_cap_already_spent():
    with pytest.raises(BadInput, match=r"short by \$10.00.*nothing fits now"):
        check_budget(1.0, 8.0, balance=None, floor=None, month_spent=52.0, cap=50.0)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("field,value", [
    ("balance", NAN), ("balance", INF), ("balance", -INF), ("floor", NAN), ("floor", INF),
    ("month_spent", NAN), ("month_spent", -INF), ("cap", NAN), ("cap", INF),
])
def test_a_money_figure_that_is_not_finite_refuses(field, value):
    """NaN compares false with everything (``need > room`` is False): unchecked, it would pass
    every limit; an infinite balance or cap would make any rental fit."""
    money = dict(balance=20.0, floor=5.0, month_spent=10.0, cap=100.0)  # $8 fits all of these
    assert check_budget(2.0, 4.0, **money) == 8.0
    money[field] = value
    what = {"balance": "balance", "floor": "floor", "month_spent": "month-to-date spend", "cap": "monthly cap"}[field]
    with pytest.raises(BadInput, match=rf"^{what} {value!r} is not a finite number: cannot check the budget, refusing to rent") as e:
        check_budget(2.0, 4.0, **money)
    assert e.value.exit_code == 2


@pytest.mark.parametrize("price", [NAN, INF, -0.5, "1.0", None])
def test_a_price_that_is_not_a_price_refuses(price):
    with pytest.raises(BadInput, match=r"USD/h is not a finite number >= 0: refusing to rent"):
        check_budget(price, 4.0, balance=None, floor=None, month_spent=None, cap=None)


@pytest.mark.parametrize("hours", [NAN, INF, 0.0, -1.0])
def test_a_ttl_that_is_not_positive_and_finite_refuses(hours):
    with pytest.raises(BadInput, match=r"max_hours .* is not a finite number > 0"):
        check_budget(2.0, hours, balance=None, floor=None, month_spent=None, cap=None)


def test_a_free_box_fits_and_the_limit_is_inclusive():
    assert check_budget(0.0, 4.0, balance=5.0, floor=5.0, month_spent=None, cap=None) == 0.0  # local: price 0
    assert check_budget(1.75, 4.0, balance=12.0, floor=5.0, month_spent=43.0, cap=50.0) == 7.0  # exactly the room left


def test_month_spend_counts_real_closed_and_accrued_open(gpuops_home):
    import time

    from ledger.limits import month_spend
    from ledger.models import Session
    from ledger.store import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'l.db'}")
    now = time.time()
    base = dict(experiment="e", job="j", provider="local", card="c", gpu_count=1, spot=False, label="x", status="provisioning")
    led.add_session(Session(id="a", created_at=now - 7200, simulated=False, usd_per_hour=3.0, **base))
    led.update("a", instance_created_at=now - 7200)
    led.close("a", now - 3600, "job_end")  # 1 h at $3 = $3
    led.add_session(Session(id="b", created_at=now - 1800, simulated=False, usd_per_hour=2.0, **base))
    led.update("b", instance_created_at=now - 1800, status="running")  # open: 0.5 h at $2 = $1 accrued
    led.add_session(Session(id="c", created_at=now - 1800, simulated=True, usd_per_hour=50.0, **base))
    led.update("c", instance_created_at=now - 1800, status="running")  # simulated: not money
    assert month_spend(led, now - 10 * 86400, now + 1, now=now) == pytest.approx(4.0, abs=1e-6)


def test_month_spend_at_most_bounds_the_exact_spend_of_every_owner(gpuops_home):
    """The watchdog's cheap bound (``month_spend_at_most``) is never below the exact spend
    (``month_spend``) of the team or of any owner, whatever the rows: edges of the month, a
    negative charge (a refund), simulated rows, another owner, no instance, open rows, storage
    lines across the month start; and a month with no such row bounds nothing more than it holds."""
    import sqlalchemy as sa

    from ledger.limits import month_spend, month_spend_at_most
    from ledger.models import Session
    from ledger.reports import month_bounds
    from ledger.store import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'l.db'}")
    lo, hi = month_bounds("2026-11", "UTC")
    H = 3600.0
    edges = [  # (instance_created_at, ended_at, status, instance_id, cost_usd, simulated, owner)
        (lo + H, lo + 3 * H, "closed", "i", 6.0, False, None), (lo, lo, "closed", "i", 7.0, False, "me"),
        (hi - 1, hi - 1, "closed", "i", 8.0, False, "them"), (lo - 2 * H, lo + H, "closed", "i", 9.0, False, "me"),
        (hi - H, hi + 2 * H, "closed", "i", 10.0, False, None), (lo - H, hi + H, "closed", "i", 11.0, False, "them"),
        (None, lo + 5 * H, "closed", "i", 12.0, False, None), (lo + H, None, "closed", "i", 13.0, False, "me"),
        (lo + 4 * H, lo + 2 * H, "closed", "i", 14.0, False, None), (lo + H, lo + 2 * H, "closed", "i", -5.0, False, "me"),
        (lo + H, lo + 2 * H, "closed", "i", 50.0, True, "me"), (None, None, "closed", None, 3.0, False, None),
        (lo + 2 * H, None, "running", "i", None, False, "me"), (lo + 2 * H, None, "running", "i", None, False, "them"),
        (lo - 3 * H, lo - H, "closed", "i", 99.0, False, None),
    ]
    rows = [dict(id=f"e{i:02d}", experiment="x", job="", provider="vast", card="a100", gpu_count=1, spot=False, label="",
                 instance_id=iid, simulated=sim, status=status, created_at=(began or lo + 5 * H) - 60.0, instance_created_at=began,
                 ended_at=ended, usd_per_hour=3.0, billed_seconds=7200.0, cost_usd=cost, owner=owner, tokens=0, job_seconds=None,
                 conclusion="", note="", log_path="", results_path="", source="gpuops", cost_source="estimate")
            for i, (began, ended, status, iid, cost, sim, owner) in enumerate(edges)]
    with led.engine.begin() as conn:
        conn.execute(Session.__table__.insert(), rows)
        conn.execute(sa.text("INSERT INTO cost_lines (session_id, provider, kind, start_at, end_at, usd, simulated, source, description,"
                             " booked_at, line_key) VALUES (:sid, 'vast', 'storage', :a, :b, :usd, 0, 'provider', '', :a, :k)"), [
            dict(sid="e03", a=lo - 10 * H, b=lo + 10 * H, usd=4.0, k="k1"), dict(sid="e02", a=lo, b=lo + H, usd=2.0, k="k2"),
            dict(sid=None, a=lo, b=lo + H, usd=-1.0, k="k3")])
    now = lo + 3 * H
    bound = month_spend_at_most(led, lo, hi, now=now)
    spends = {who: month_spend(led, lo, hi, now=now, owner=who) for who in (None, "me", "them", "nobody")}
    assert all(s <= bound + 1e-9 for s in spends.values()), (spends, bound)
    assert spends[None] > 0 and spends["me"] < spends[None]
    # what the bound adds up: the positive charges ended in the month or closed without an end (not
    # e14, ended before it), both open rows' hour at 3 USD/h, the positive storage lines
    positive = sum(r["cost_usd"] for r in rows if r["cost_usd"] and r["cost_usd"] > 0 and r["id"] != "e14")
    assert bound == pytest.approx(positive + 2 * 3.0 + 4.0 + 2.0, abs=1e-6)
    with led.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM sessions"))
        conn.execute(sa.text("DELETE FROM cost_lines"))
    assert month_spend_at_most(led, lo, hi, now=now) == 0.0 == month_spend(led, lo, hi, now=now)
