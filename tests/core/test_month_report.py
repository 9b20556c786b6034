"""The month report's figures on a hand-computed set of sessions."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpuops.accounting.ledger_service import month
from ledger import Ledger
from ledger.reports import month_bounds


def ts(day: int, hour: int = 12, month: int = 11) -> float:
    return datetime(2026, month, day, hour, tzinfo=timezone.utc).timestamp()


def book(
    led: Ledger,
    sid: str,
    *,
    exp: str,
    card: str,
    provider: str,
    price: float | None,
    hours: float | None,
    tokens: int = 0,
    simulated: bool = False,
    gpus: int = 1,
    day: int = 5,
    month: int = 11,
    rented: bool = True,
) -> None:
    led.add_session(
        dict(
            id=sid,
            experiment=exp,
            card=card,
            provider=provider,
            gpu_count=gpus,
            simulated=simulated,
            created_at=ts(day, month=month),
            label=f"gpuops-{sid}",
        )
    )
    if rented:
        led.update(
            sid,
            instance_id=f"i-{sid}",
            instance_created_at=ts(day, month=month) + 10,
            usd_per_hour=price,
            tokens=tokens,
        )
        led.close(sid, ended_at=ts(day, month=month) + 10 + hours * 3600, reason="job_end", exit_code=0)
    else:
        led.close(sid, ended_at=ts(day, month=month) + 5, reason="provision_failed")


@pytest.fixture
def led(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    # a: 2 h x 1.50 = 3.00 USD, 10M tokens -> 0.30 USD/Mtok
    book(led, "a", exp="llama", card="a100-80gb-sxm", provider="runpod", price=1.5, hours=2, tokens=10_000_000)
    # b: 0.5 h x 2 GPUs x (4.00 USD/h for the box) = 2.00 USD, 1 GPU-h, no tokens
    book(led, "b", exp="llama", card="h100-sxm", provider="vast", price=4.0, hours=0.5, gpus=2, day=20)
    # c: simulated, 1 h x 0.90 = 0.90 simulated USD, 1M tokens
    book(
        led, "c", exp="smoke", card="a100-40gb", provider="local", price=0.9, hours=1, tokens=1_000_000, simulated=True
    )
    # d: a launch that never got an instance: costs 0, not counted
    book(led, "d", exp="llama", card="h100-sxm", provider="runpod", price=None, hours=None, rented=False)
    # e: October: outside the month
    book(led, "e", exp="llama", card="a100-80gb-sxm", provider="runpod", price=1.5, hours=10, month=10)
    return led


def test_month_totals_and_breakdowns(led):
    rep = month(led, "2026-11", "UTC")
    assert rep["total_usd"] == pytest.approx(5.0, abs=1e-6)
    assert rep["simulated_usd"] == pytest.approx(0.9, abs=1e-6)
    assert rep["gpu_hours"] == pytest.approx(2 + 1 + 1, abs=1e-6)
    assert rep["sessions"] == 3
    assert rep["tokens"] == 11_000_000
    assert rep["usd_per_mtoken"] == pytest.approx(5.0 / 10, abs=1e-6)  # real money over real tokens
    assert rep["simulated_usd_per_mtoken"] == pytest.approx(0.9, abs=1e-6)
    by_exp = {r["name"]: r for r in rep["by_experiment"]}
    assert by_exp["llama"]["cost_usd"] == pytest.approx(5.0, abs=1e-6) and by_exp["llama"]["sessions"] == 2
    assert by_exp["llama"]["usd_per_mtoken"] == pytest.approx(0.5, abs=1e-6)
    assert by_exp["smoke"]["cost_usd"] == 0 and by_exp["smoke"]["simulated_usd"] == pytest.approx(0.9, abs=1e-6)
    assert by_exp["smoke"]["usd_per_mtoken"] is None
    by_card = {r["name"]: r for r in rep["by_card"]}
    assert (
        by_card["h100-sxm x2"]["gpu_hours"] == pytest.approx(1.0, abs=1e-6)
        and by_card["h100-sxm x2"]["usd_per_mtoken"] is None
    )
    by_provider = {r["name"]: r for r in rep["by_provider"]}
    assert set(by_provider) == {"runpod", "vast", "local"}
    assert by_provider["runpod"]["sessions"] == 1 and by_provider["runpod"]["cost_usd"] == pytest.approx(3.0, abs=1e-6)


def test_month_bounds_reject_bad_months():
    for bad in ("2026-13", "2026-1", "26-11", "november", "2026-00"):
        with pytest.raises(ValueError):
            month_bounds(bad, "UTC")
