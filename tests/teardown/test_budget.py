"""Pre-rent money check: price x max_hours against balance - floor and the monthly cap."""

from __future__ import annotations

import pytest

from gpuops.budget import check_budget
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
    assert month_spend(led, now - 10 * 86400, now + 1, now=now) == pytest.approx(4.0)
