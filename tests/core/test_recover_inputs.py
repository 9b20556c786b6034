"""`up --recover` input: refused in one line (exit 2) before anything is rented or booked."""

from __future__ import annotations

import json

import pytest

from gpuops.rental.runs import break_even_preemptions_per_hour, next_rental
from tests.support.emulators import emulator_env, runpod_emulator, vast_emulator  # noqa: F401  (fixtures)


@pytest.fixture
def job(tmp_path):
    p = tmp_path / "job.sh"
    p.write_text("echo hi\n")
    return p


def _nothing_booked(gpuops_home) -> bool:
    if not (gpuops_home / "ledger.db").exists():
        return True
    from ledger.store import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    return led.runs() == [] and led.rows_between(0, 2e10) == []


def test_spot_recover_on_runpod_is_refused_with_the_reason(cli, job, gpuops_home):
    got = cli(
        "up",
        "--provider",
        "runpod",
        "--spot",
        "--recover",
        "2",
        "--job",
        str(job),
        env={"RUNPOD_API_KEY": "rp_TESTKEY"},
    )
    assert got.returncode == 2, (got.stdout, got.stderr)
    lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert (
        len(lines) <= 2 and "runpod has no interruptible (spot) boxes" in got.stderr and "--provider vast" in got.stderr
    )
    assert _nothing_booked(gpuops_home)


@pytest.mark.parametrize(
    "args, words",
    [
        (("--recover", "-1"), "--recover must be a whole number"),
        (("--recover", "many"), "--recover must be a whole number"),
        (("--recover", "21"), "--recover must be a whole number of re-rentals from 0 to 20"),
        (("--recover", "2", "--recover-on", "job_failed"), "'job_failed' is not a reason a run re-rents on"),
        (("--recover", "2", "--recover-on", "preempted,ttl"), "'ttl' is not a reason a run re-rents on"),
    ],
)
def test_bad_recover_flags_are_one_line(cli, job, gpuops_home, args, words):
    got = cli("up", "--job", str(job), *args)
    assert got.returncode == 2 and words in got.stderr, got.stderr
    assert _nothing_booked(gpuops_home)


def test_recover_in_infra_toml_is_checked(cli, job, gpuops_home, tmp_path):
    cfg = tmp_path / "infra.toml"
    cfg.write_text('[job]\nrecover = 2\nrecover_on = ["preempted", "job_failed"]\n')
    got = cli("up", "--job", str(job), "--config", str(cfg), "--dry-run")
    assert got.returncode == 2 and "job_failed" in got.stderr, got.stderr


def test_the_next_rental_gets_what_the_run_has_left():
    n = next_rental(2.0, 1.0, 1800.0, 0.25, 0.5)  # 1.5 h left; $0.75 buys 1.5 h at $0.50/h
    assert (n.reason, n.hours, n.usd) == (None, pytest.approx(1.5, abs=1e-9), pytest.approx(0.75, abs=1e-9))
    n = next_rental(2.0, 0.5, 1800.0, 0.25, 0.5)  # $0.25 buys 0.5 h: the money is the tighter limit
    assert n.hours == pytest.approx(0.5, abs=1e-9)
    out = next_rental(1.0, None, 3590.0, 0.0, 0.5)
    assert out.reason == "ttl" and "10 s left" in out.detail
    out = next_rental(2.0, 0.26, 0.0, 0.255, 0.5)  # $0.005 buys 36 s, under the 60 s a rental needs
    assert out.reason == "session_cap" and "buys 36 s" in out.detail


def test_break_even_preemption_rate():
    # spot $0.20/h vs on-demand $0.50/h, 0.1 h lost per preemption: (0.5/0.2 - 1) / 0.1 = 15 per hour
    assert break_even_preemptions_per_hour(0.20, 0.50, 0.1) == pytest.approx(15.0, abs=1e-9)
    assert break_even_preemptions_per_hour(0.50, 0.50, 0.1) is None  # spot not cheaper: no rate pays
    assert break_even_preemptions_per_hour(float("nan"), 0.50, 0.1) is None


def test_plan_spot_from_the_two_prices(cli):
    got = cli(
        "plan",
        "spot",
        "--spot-usd-per-hour",
        "0.2",
        "--on-demand-usd-per-hour",
        "0.5",
        "--lost-minutes",
        "6",
        "--format",
        "json",
    )
    assert got.returncode == 0, got.stderr
    rep = json.loads(got.stdout)
    assert rep["break_even_per_hour"] == pytest.approx(15.0, abs=1e-9) and rep[
        "saving_if_never_preempted"
    ] == pytest.approx(0.6, abs=1e-9)
    bad = cli("plan", "spot", "--spot-usd-per-hour", "nan", "--on-demand-usd-per-hour", "0.5")
    assert bad.returncode == 2 and "--spot-usd-per-hour must be a positive number" in bad.stderr


def test_plan_spot_without_spot_offers_refuses(cli):
    """Seen: with no key (local offers only, none of them spot) `plan spot` printed `spot $0.3400/h
    against on-demand $0.3400/h ... not cheaper`: the on-demand price compared with itself."""
    got = cli("plan", "spot", "--card", "rtx-4090", env={"RUNPOD_API_KEY": None, "VAST_API_KEY": None})
    assert got.returncode == 2, got
    assert got.stdout == "" and "no interruptible (spot) offer for rtx-4090" in got.stderr, got
    assert "Vast.ai" in got.stderr and "--spot-usd-per-hour" in got.stderr, got.stderr


def test_plan_spot_reads_the_live_offers(cli, emulator_env):
    from gpuops.providers.base import OfferQuery
    from gpuops.providers.vast.compute import VastProvider
    from tests.support.emulators import Credential

    vast = emulator_env["vast"]
    p = VastProvider(Credential(vast.market.api_key, "test"), vast.url)
    q = dict(cards=("rtx-4090",), gpu_count=1)
    spot = min(o.price for o in p.offers(OfferQuery(**q, spot=True)))  # rented at its minimum bid plus storage
    od = min(o.price for o in p.offers(OfferQuery(**q, spot=False)))
    got = cli("plan", "spot", "--card", "rtx-4090", "--provider", "vast", "--format", "json")
    assert got.returncode == 0, got.stderr
    rep = json.loads(got.stdout)
    assert (rep["spot_usd_per_hour"], rep["on_demand_usd_per_hour"]) == (
        pytest.approx(spot, abs=1e-9),
        pytest.approx(od, abs=1e-9),
    )
    assert rep["break_even_per_hour"] == pytest.approx((od / spot - 1) / (10 / 60), abs=1e-3)
