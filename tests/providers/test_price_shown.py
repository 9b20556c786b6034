"""One price per offer (what the row costs per hour rented as shown: the bid on spot), the on-demand
price beside it only where it differs, in `offers` at 80 and 120 columns, its JSON, and `up`'s
plan and create line."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from gpuops.config import load_settings
from gpuops.render.offers import render
from gpuops.rental.offers import find_offers

STORAGE = 0.15 * 40 / 730  # the emulated Vast's 40 GB disk at 0.15 USD/GB-month, per hour
VAST_1002_ON_DEMAND = round(0.28 + STORAGE, 6)  # dph_total: GPU + storage
VAST_1002_BID = round(0.15 + STORAGE, 6)  # what a spot rental is charged: the min bid + storage


@pytest.fixture
def settings(gpuops_home, emulator_env, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return load_settings()


def rows_of(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]


@pytest.mark.parametrize("width", [80, 120])
def test_the_price_column_is_the_price_paid_and_stays_at_any_width(settings, width):
    console = Console(record=True, width=width)
    render(find_offers(settings, card="4090", limit=4), console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "provider" in line)
    assert "USD/h" in text and "kind" in header and "min bid" not in text
    rows = rows_of(text)
    # first row: Vast 1002 as a spot bid: 0.15 + 40 GB of storage (0.008) in the price column, its on-demand 0.288 beside it
    first, third = rows[0], rows[2]
    bid = f"{VAST_1002_BID:.4f}"  # a rate: to 4 places
    assert bid in first and "spot (bid)" in first and f"{VAST_1002_ON_DEMAND:.4f}" in first
    assert first.index(bid) < first.index("spot (bid)") < first.index(f"{VAST_1002_ON_DEMAND:.4f}")
    # the on-demand row of the same machine: its price once, the on-demand cell empty
    assert (
        third.count(f"{VAST_1002_ON_DEMAND:.4f}") == 1
        and "on-demand" in third
        and third[-1 if width == 80 else -3] == ""
    )
    assert all(len(line) <= width for line in text.splitlines())
    left = next((line for line in text.splitlines() if line.startswith("left out")), "")
    assert "USD/h" not in left.split("(")[0]  # neither price is left out at 80 columns
    if width == 120:
        assert "offer" in header and "1002" in first


def test_json_has_the_price_as_rented_and_the_on_demand_price_where_it_differs(settings):
    from gpuops.render.offers import to_json

    got = json.loads(to_json(find_offers(settings, card="4090", limit=3)))
    assert [(r["offer_id"], r["spot"], r["price_usd_per_hour"], r["on_demand_usd_per_hour"]) for r in got] == [
        ("1002", True, VAST_1002_BID, VAST_1002_ON_DEMAND),
        ("1001", True, round(0.18 + STORAGE, 6), round(0.30 + STORAGE, 6)),
        ("1002", False, VAST_1002_ON_DEMAND, None),
    ]


def test_up_dry_run_plans_and_projects_at_the_bid(emulator_env, cli, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    out = cli(
        "up", "--job", str(job), "--dry-run", "--json", "--provider", "vast", "--card", "4090", "--max-hours", "2"
    )
    plan = json.loads(out.stdout)
    # spot preferred ([up] spot = true) asks Vast for both kinds: the bid wins on price, its on-demand price known
    assert (plan["usd_per_hour"], plan["on_demand_usd_per_hour"], plan["spot"]) == (
        VAST_1002_BID,
        VAST_1002_ON_DEMAND,
        True,
    )
    assert plan["projected_cost_usd"] == round(2 * VAST_1002_BID, 4)
    out = cli("up", "--job", str(job), "--dry-run", "--provider", "vast", "--card", "4090", "--max-hours", "2")
    assert f"at ${VAST_1002_BID:.4f}/h, spot bid (on-demand ${VAST_1002_ON_DEMAND:.4f}/h)\n" in out.stdout
    assert f"projected cost of max_hours=2: ${2 * VAST_1002_BID:.4f}" in out.stdout
