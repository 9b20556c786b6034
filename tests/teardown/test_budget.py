"""Pre-rent money check: price x max_hours against balance - floor and the monthly cap."""

from __future__ import annotations

import pytest

from gpuops.errors import BadInput
from gpuops.teardown.budget import check_budget


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


@pytest.mark.parametrize(
    "field,value",
    [
        ("balance", NAN),
        ("balance", INF),
        ("balance", -INF),
        ("floor", NAN),
        ("floor", INF),
        ("month_spent", NAN),
        ("month_spent", -INF),
        ("cap", NAN),
        ("cap", INF),
    ],
)
def test_a_money_figure_that_is_not_finite_refuses(field, value):
    """NaN compares false with everything (``need > room`` is False): unchecked, it would pass
    every limit; an infinite balance or cap would make any rental fit."""
    money = dict(balance=20.0, floor=5.0, month_spent=10.0, cap=100.0)  # $8 fits all of these
    assert check_budget(2.0, 4.0, **money) == 8.0
    money[field] = value
    what = {"balance": "balance", "floor": "floor", "month_spent": "month-to-date spend", "cap": "monthly cap"}[field]
    with pytest.raises(
        BadInput, match=rf"^{what} {value!r} is not a finite number: cannot check the budget, refusing to rent"
    ) as e:
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
    from ledger.store import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'l.db'}")
    now = time.time()
    base = dict(
        experiment="e", job="j", provider="local", card="c", gpu_count=1, spot=False, label="x", status="provisioning"
    )
    led.add_session(dict(id="a", created_at=now - 7200, simulated=False, usd_per_hour=3.0, **base))
    led.update("a", instance_created_at=now - 7200)
    led.close("a", now - 3600, "job_end")  # 1 h at $3 = $3
    led.add_session(dict(id="b", created_at=now - 1800, simulated=False, usd_per_hour=2.0, **base))
    led.update("b", instance_created_at=now - 1800, status="running")  # open: 0.5 h at $2 = $1 accrued
    led.add_session(dict(id="c", created_at=now - 1800, simulated=True, usd_per_hour=50.0, **base))
    led.update("c", instance_created_at=now - 1800, status="running")  # simulated: not money
    assert month_spend(led, now - 10 * 86400, now + 1, now=now) == pytest.approx(4.0, abs=1e-6)


def test_month_spend_at_most_bounds_the_exact_spend_of_every_owner(gpuops_home):
    """The watchdog's cheap bound (``month_spend_at_most``) is never below the exact spend
    (``month_spend``) of the team or of any owner, whatever the rows: edges of the month, a
    negative charge (a refund), simulated rows, another owner, no instance, open rows, storage
    lines across the month start; and a month with no such row bounds nothing more than it holds."""
    import sqlalchemy as sa

    from ledger.limits import month_spend, month_spend_at_most
    from ledger.models import sessions
    from ledger.reports import month_bounds
    from ledger.store import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'l.db'}")
    lo, hi = month_bounds("2026-11", "UTC")
    H = 3600.0
    edges = [  # (instance_created_at, ended_at, status, instance_id, cost_usd, simulated, owner)
        (lo + H, lo + 3 * H, "closed", "i", 6.0, False, None),
        (lo, lo, "closed", "i", 7.0, False, "me"),
        (hi - 1, hi - 1, "closed", "i", 8.0, False, "them"),
        (lo - 2 * H, lo + H, "closed", "i", 9.0, False, "me"),
        (hi - H, hi + 2 * H, "closed", "i", 10.0, False, None),
        (lo - H, hi + H, "closed", "i", 11.0, False, "them"),
        (None, lo + 5 * H, "closed", "i", 12.0, False, None),
        (lo + H, None, "closed", "i", 13.0, False, "me"),
        (lo + 4 * H, lo + 2 * H, "closed", "i", 14.0, False, None),
        (lo + H, lo + 2 * H, "closed", "i", -5.0, False, "me"),
        (lo + H, lo + 2 * H, "closed", "i", 50.0, True, "me"),
        (None, None, "closed", None, 3.0, False, None),
        (lo + 2 * H, None, "running", "i", None, False, "me"),
        (lo + 2 * H, None, "running", "i", None, False, "them"),
        (lo - 3 * H, lo - H, "closed", "i", 99.0, False, None),
    ]
    rows = [
        dict(
            id=f"e{i:02d}",
            experiment="x",
            job="",
            provider="vast",
            card="a100",
            gpu_count=1,
            spot=False,
            label="",
            instance_id=iid,
            simulated=sim,
            status=status,
            created_at=(began or lo + 5 * H) - 60.0,
            instance_created_at=began,
            ended_at=ended,
            usd_per_hour=3.0,
            billed_seconds=7200.0,
            cost_usd=cost,
            owner=owner,
            tokens=0,
            job_seconds=None,
            conclusion="",
            note="",
            log_path="",
            results_path="",
            source="gpuops",
            cost_source="estimate",
        )
        for i, (began, ended, status, iid, cost, sim, owner) in enumerate(edges)
    ]
    with led.engine.begin() as conn:
        conn.execute(sessions.insert(), rows)
        conn.execute(
            sa.text(
                "INSERT INTO cost_lines (session_id, provider, kind, start_at, end_at, usd, simulated, source, description,"
                " booked_at, line_key) VALUES (:sid, 'vast', 'storage', :a, :b, :usd, 0, 'provider', '', :a, :k)"
            ),
            [
                dict(sid="e03", a=lo - 10 * H, b=lo + 10 * H, usd=4.0, k="k1"),
                dict(sid="e02", a=lo, b=lo + H, usd=2.0, k="k2"),
                dict(sid=None, a=lo, b=lo + H, usd=-1.0, k="k3"),
            ],
        )
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


# -- the whole line a user reads: the message and its fix ------------------------------------------
def _refused(**kw) -> BadInput:
    with pytest.raises(BadInput) as e:
        check_budget(**kw)
    return e.value


def test_each_refusal_names_the_fix():
    e = _refused(price_usd_h=NAN, max_hours=4.0, balance=None, floor=None, month_spent=None, cap=None)
    assert (e.message, e.fix) == (
        "price nan USD/h is not a finite number >= 0: refusing to rent",
        "the provider's price is not a price; pick another offer, --card or --provider",
    )
    e = _refused(price_usd_h=1.0, max_hours=0, balance=None, floor=None, month_spent=None, cap=None)
    assert (e.message, e.fix) == ("max_hours 0 is not a finite number > 0", "pass --max-hours, e.g. --max-hours 2")
    e = _refused(price_usd_h=1.0, max_hours=2.0, balance=None, floor=None, month_spent="12", cap=50.0)
    assert (e.message, e.fix) == (
        "month-to-date spend '12' is not a finite number: cannot check the budget, refusing to rent",
        "check the provider balance and `gpuops ledger month` for a row with a broken cost",
    )
    e = _refused(price_usd_h=2.5, max_hours=4.0, balance=12.0, floor=5.0, month_spent=0.0, cap=None)
    assert (e.message, e.fix) == (
        "$2.5000/h x 4 h = $10.00 does not fit in balance $12.00 minus floor $5.00 = $7.00: short by $3.00",
        "use --max-hours 2.80 or less, a cheaper offer, or top up the account, or lower balance_floor_usd",
    )
    e = _refused(price_usd_h=2.0, max_hours=4.0, balance=None, floor=None, month_spent=None, cap=5.0)
    assert (e.message, e.fix) == (
        "$2.0000/h x 4 h = $8.00 does not fit in monthly cap $5.00 minus $0.00 spent this month = $5.00: short by $3.00",
        "use --max-hours 2.50 or less, a cheaper offer, or raise monthly_cap_usd",
    )
    e = _refused(price_usd_h=1.0, max_hours=8.0, balance=None, floor=None, month_spent=52.0, cap=50.0)
    assert (e.message, e.fix) == (
        "$1.0000/h x 8 h = $8.00 does not fit in monthly cap $50.00 minus $52.00 spent this month = $-2.00: short by $10.00",
        "raise monthly_cap_usd; nothing fits now",
    )
    e = _refused(price_usd_h=10.0, max_hours=1.0, balance=5.05, floor=5.0, month_spent=None, cap=None)  # fits 0.005 h
    assert e.fix == "top up the account, or lower balance_floor_usd; nothing fits now"


def test_the_balance_is_checked_before_the_cap_and_both_count():
    e = _refused(price_usd_h=2.0, max_hours=4.0, balance=6.0, floor=0.0, month_spent=49.0, cap=50.0)
    assert "balance $6.00 minus floor $0.00" in e.message  # both short: the balance is named first
    e = _refused(price_usd_h=2.0, max_hours=4.0, balance=100.0, floor=0.0, month_spent=49.0, cap=50.0)
    assert "monthly cap $50.00 minus $49.00" in e.message


def test_the_worst_case_is_rounded_to_the_micro_dollar():
    assert check_budget(1 / 3, 3.0, balance=None, floor=None, month_spent=None, cap=None) == 1.0
    assert check_budget(0.1234567, 1.0, balance=None, floor=None, month_spent=None, cap=None) == 0.123457
    # within 1e-9 of the room left: fits (float dust is not a shortfall)
    assert check_budget(0.1, 3.0, balance=0.3, floor=0.0, month_spent=None, cap=None) == 0.3


# -- refusals the watchdog recorded, and what `up` asks before renting ----------------------------
@pytest.fixture
def led(tmp_path):
    from ledger.store import Ledger

    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield ledger
    ledger.engine.dispose()


def test_an_active_refusal_stops_up_with_the_watchdogs_words(led):
    from datetime import datetime

    from gpuops.teardown.budget import assert_not_refused
    from ledger.limits import lift_refusal, set_refusal

    assert_not_refused(led, "runpod", "runpod:aaaa1111", "alice")  # nothing refused
    at = 1_800_000_000.0
    set_refusal(
        led,
        "runpod",
        "balance_floor",
        "runpod balance $4.20 is below the floor $5.00",
        now=at,
        account="runpod:aaaa1111",
    )
    since = datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M")
    with pytest.raises(BadInput) as e:
        assert_not_refused(led, "runpod", "runpod:aaaa1111", "alice")
    assert (e.value.message, e.value.fix) == (
        f"new boxes refused (balance_floor, since {since}): runpod balance $4.20 is below the floor $5.00",
        "top up the account",
    )
    assert_not_refused(led, "runpod", "runpod:bbbb2222", "bob")  # another account's floor
    assert_not_refused(led, "vast", "runpod:aaaa1111", "alice")  # another provider
    set_refusal(led, "*", "monthly_cap", "month-to-date $51.00 reached the cap $50.00", now=at, account="alice")
    with pytest.raises(BadInput) as e:
        assert_not_refused(led, "vast", "vast:cccc3333", "alice")
    assert (e.value.message, e.value.fix) == (
        f"new boxes refused (monthly_cap, since {since}): month-to-date $51.00 reached the cap $50.00",
        "raise teardown.monthly_cap_usd or wait for next month",
    )
    assert_not_refused(led, "vast", "vast:cccc3333", "bob")
    lift_refusal(led, "*", "monthly_cap", account="alice")
    lift_refusal(led, "runpod", "balance_floor", account="runpod:aaaa1111")
    assert_not_refused(led, "runpod", "runpod:aaaa1111", "alice")


class _Funded:
    """What budget_for_up reads of a provider: its name, account and balance."""

    name, account = "runpod", "runpod:aaaa1111"

    def __init__(self, usd=None, error=False):
        self.usd, self.error = usd, error

    def balance(self):
        from gpuops.providers.base import Balance, ProviderError, ProviderErrorKind

        if self.error:
            raise ProviderError(ProviderErrorKind.SERVER, "balance unavailable")
        return Balance(usd=self.usd)


def _settings(max_hours=4.0, floor=None, cap=None, scope="user", owner="alice"):
    from types import SimpleNamespace

    teardown = SimpleNamespace(max_hours=max_hours, balance_floor_usd=floor, monthly_cap_usd=cap, limits_scope=scope)
    return SimpleNamespace(teardown=teardown, owner=lambda: owner)


def _spent(led, sid, owner, usd):
    """One closed hour at ``usd`` USD/h inside this local month (its first hour: the month's rows
    are summed by time, so a row ended "later today" counts the same)."""
    from gpuops.teardown.budget import month_start_end

    lo, _ = month_start_end()
    led.add_session(
        dict(
            id=sid,
            experiment="e",
            job="j",
            provider="runpod",
            card="c",
            gpu_count=1,
            spot=False,
            label=sid,
            status="provisioning",
            created_at=lo + 60,
            simulated=False,
            usd_per_hour=usd,
            owner=owner,
        )
    )
    led.update(sid, instance_id="i-" + sid, instance_created_at=lo + 60)
    led.close(sid, lo + 3660, "job_end")


def test_budget_for_up_checks_the_balance_and_the_month(led):
    from gpuops.teardown.budget import budget_for_up

    assert budget_for_up(led, _settings(), _Funded(usd=None), 2.0) == 8.0  # no balance reported, no cap
    assert budget_for_up(led, _settings(floor=5.0), _Funded(usd=13.0), 2.0) == 8.0
    with pytest.raises(BadInput, match=r"balance \$12.00 minus floor \$5.00 = \$7.00: short by \$1.00"):
        budget_for_up(led, _settings(floor=5.0), _Funded(usd=12.0), 2.0)
    assert budget_for_up(led, _settings(), _Funded(error=True), 2.0) == 8.0  # unreadable, no floor: not checked
    # a floor that cannot be checked, and no monthly cap to stand in: nothing is rented
    with pytest.raises(BadInput, match=r"^runpod: the balance floor \$5.00 cannot be enforced: .*monthly_cap_usd"):
        budget_for_up(led, _settings(floor=5.0), _Funded(error=True), 2.0)
    assert budget_for_up(led, _settings(floor=5.0, cap=50.0), _Funded(error=True), 2.0) == 8.0  # the cap stands in
    _spent(led, "a1", "alice", 40.0)
    _spent(led, "b1", "bob", 45.0)
    assert budget_for_up(led, _settings(cap=50.0), _Funded(), 2.0) == 8.0  # alice spent 40: 10 left, 8 fits
    with pytest.raises(BadInput, match=r"monthly cap \$50.00 minus \$85.00 spent this month"):
        budget_for_up(led, _settings(cap=50.0, scope="team"), _Funded(), 2.0)  # the team spent 85
    with pytest.raises(BadInput, match=r"monthly cap \$50.00 minus \$45.00 spent this month = \$5.00: short by \$3.00"):
        budget_for_up(led, _settings(cap=50.0, owner="bob"), _Funded(), 2.0)


def test_budget_for_up_asks_the_refusals_first(led):
    from gpuops.teardown.budget import budget_for_up
    from ledger.limits import set_refusal

    set_refusal(led, "runpod", "balance_floor", "below the floor", account="runpod:aaaa1111")
    with pytest.raises(BadInput, match=r"^new boxes refused \(balance_floor"):
        budget_for_up(led, _settings(), _Funded(usd=1000.0), 2.0)


def test_the_month_is_the_local_calendar_month():
    from datetime import datetime

    from gpuops.teardown.budget import month_start_end

    now = datetime(2026, 11, 17, 15, 30).timestamp()  # local time
    lo, hi = month_start_end(now)
    assert (datetime.fromtimestamp(lo), datetime.fromtimestamp(hi)) == (datetime(2026, 11, 1), datetime(2026, 12, 1))
    lo, hi = month_start_end(datetime(2026, 12, 31, 23, 59).timestamp())
    assert (datetime.fromtimestamp(lo), datetime.fromtimestamp(hi)) == (datetime(2026, 12, 1), datetime(2027, 1, 1))
    import time

    lo, hi = month_start_end()
    assert lo <= time.time() < hi


def test_the_largest_ttl_that_fits_is_named_to_the_hundredth():
    e = _refused(
        price_usd_h=0.5, max_hours=10.0, balance=3.0, floor=0.0, month_spent=None, cap=None
    )  # a price under $1/h
    assert e.fix == "use --max-hours 6.00 or less, a cheaper offer, or top up the account, or lower balance_floor_usd"
    e = _refused(price_usd_h=2.0, max_hours=4.0, balance=1.0, floor=0.0, month_spent=None, cap=None)
    assert e.fix.startswith("use --max-hours 0.50 or less")
    e = _refused(price_usd_h=1.0, max_hours=2.0, balance=0.01, floor=0.0, month_spent=None, cap=None)  # exactly 0.01 h
    assert e.fix.startswith("use --max-hours 0.01 or less")


def test_a_free_box_under_the_floor_is_refused_without_dividing_by_its_price():
    e = _refused(price_usd_h=0.0, max_hours=4.0, balance=3.0, floor=5.0, month_spent=None, cap=None)
    assert (e.message, e.fix) == (
        "$0.0000/h x 4 h = $0.00 does not fit in balance $3.00 minus floor $5.00 = $-2.00: short by $2.00",
        "top up the account, or lower balance_floor_usd; nothing fits now",
    )


def test_a_worst_case_of_float_dust_over_the_room_fits():
    assert check_budget(1e-9, 1.0, balance=5.0, floor=5.0, month_spent=None, cap=None) == 0.0


def test_budget_for_up_checks_the_users_own_refusal(led):
    from gpuops.teardown.budget import budget_for_up
    from ledger.limits import set_refusal

    set_refusal(led, "*", "monthly_cap", "alice's month is spent", account="alice")
    with pytest.raises(BadInput, match=r"^new boxes refused \(monthly_cap.*alice's month is spent"):
        budget_for_up(led, _settings(owner="alice"), _Funded(usd=1000.0), 2.0)
    assert budget_for_up(led, _settings(owner="bob"), _Funded(usd=1000.0), 2.0) == 8.0
