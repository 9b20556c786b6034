"""`gpuops plan storage`: the keep-or-refetch arithmetic with its numbers, and its advice."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from gpuops.errors import BadInput
from gpuops.planning.storage import storage_plan
from tests.conftest import gpuops_cmd

LLAMA3_8B_BF16 = 8_030_261_248 * 2  # bytes: parameters from the config's shapes x 2 B


def test_numbers_behind_the_recommendation():
    sp = storage_plan("llama-3-8b", runs_per_month="30", download_gbps="2", usd_per_hour="2.0")
    assert sp.weights_bytes == LLAMA3_8B_BF16
    assert sp.volume_gb == math.ceil(LLAMA3_8B_BF16 / 1e9 * 1.1) == 18
    assert sp.volume_usd_per_month == pytest.approx(18 * 0.07, abs=1e-6)
    secs = LLAMA3_8B_BF16 * 8 / 2e9
    assert sp.download_seconds == pytest.approx(secs, abs=0.05)
    assert sp.refetch_usd_per_run == pytest.approx(secs / 3600 * 2.0, abs=1e-6)  # rounded to 1e-6 USD
    assert sp.break_even_runs == pytest.approx(18 * 0.07 / (secs / 3600 * 2.0), abs=0.01)  # 35.3 runs
    assert sp.recommendation == "refetch the weights every run (no volume)"
    more = storage_plan("llama-3-8b", runs_per_month="40", download_gbps="2", usd_per_hour="2.0")
    assert more.recommendation == "keep the weights on a volume"
    assert any(r.startswith("weights: 40 runs/month") and "break-even 35.3 runs" in r for r in more.reasons)


def test_a_download_past_five_minutes_argues_for_the_volume():
    sp = storage_plan("llama-3-70b", runs_per_month="1", download_gbps="1", usd_per_hour="0.5", provider="vast")
    assert sp.download_seconds > 300 and sp.break_even_runs > 1
    assert sp.recommendation == "keep the weights on a volume"
    assert any("5-minute bootstrap target" in r for r in sp.reasons)
    assert sp.usd_per_gb_month == 0.10 and "vastai" in sp.price_source


def test_default_box_is_the_cheapest_card_that_fits():
    from gpuops.planning import sizing as planner

    sp = storage_plan("llama-3-8b")
    fits = sorted((c for c in planner.plan("llama-3-8b").cards if c.fits), key=lambda c: c.usd_per_hour)
    assert (sp.card, sp.box_usd_per_hour) == (fits[0].card.name, fits[0].usd_per_hour)


@pytest.mark.parametrize(
    "kw,flag",
    [
        ({"runs_per_month": "0"}, "--runs-per-month"),
        ({"runs_per_month": "2.5"}, "--runs-per-month"),
        ({"download_gbps": "nan"}, "--download-gbps"),
        ({"provider": "local"}, "--provider"),
    ],
)
def test_bad_input(kw, flag):
    with pytest.raises(BadInput, match=flag):
        storage_plan("llama-3-8b", **kw)


def test_cli_plan_storage(cli_env):
    r = subprocess.run(
        gpuops_cmd(
            "plan",
            "storage",
            "--model",
            "llama-3-8b",
            "--runs-per-month",
            "40",
            "--download-gbps",
            "2",
            "--usd-per-hour",
            "2",
            "--json",
        ),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["recommendation"] == "keep the weights on a volume" and out["break_even_runs"] == pytest.approx(
        35.3, abs=0.05
    )
    r = subprocess.run(
        gpuops_cmd("plan", "storage", "--model", "llama-3-8b"), env=cli_env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "break-even" in r.stdout and "recommendation:" in r.stdout
    r = subprocess.run(
        gpuops_cmd("plan", "storage", "--model", "llama-3-8b", "--download-gbps", "-1"),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--download-gbps" in r.stderr
