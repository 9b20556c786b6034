"""`up --provider any` on both emulators at once, every box on the test sshd: the cheaper offer
wins across providers, a create that fails for the offer's reason moves to the next offer on the
other provider, one that fails for the account's reason skips its provider with one line, a 5xx
on create that made the pod anyway leaves no second box, and a spot run taken back on Vast
finishes on RunPod with its checkpoint.

Prices are set by the test (RunPod: its catalog's per-GPU price per cloud; Vast: ``dph_base`` with
no storage cost, so ``dph_total`` = ``dph_base``), so which offer wins is arithmetic written here;
what was rented and billed is judged by each emulator's own instance list and bill."""

from __future__ import annotations

import json

import pytest

from gpuops.config import load_settings
from gpuops.errors import BadInput
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger.store import Ledger
from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401  (fixtures)
from tests.lifecycle.test_spot_recover import JOB, STEPS, TakeBack, _expected_digest
from tests.support.emulators import runpod_emulator, runpod_provider, vast_emulator, vast_provider  # noqa: F401

CENT = 0.01
RTX4090 = "NVIDIA GeForce RTX 4090"
VAST_OFFER = 2001


class Lines(Reporter):
    """Keeps every stage and warning line `up` showed."""

    def __init__(self):
        self.stages: list[tuple[str, str]] = []
        self.warnings: list[str] = []

    def stage(self, name, detail=""):
        self.stages.append((name, detail))

    def warn(self, text):
        self.warnings.append(text)


@pytest.fixture
def both(gpuops_home, sshd, runpod_emulator, vast_emulator, runpod_provider, vast_provider, monkeypatch):
    """Both emulators' boxes on the test sshd; RunPod offers the RTX 4090 only (community 0.55,
    secure 0.90 USD/h); Vast one RTX 4090 at 0.45 USD/h on-demand, 0.20 USD/h minimum bid."""
    import gpuops.rental.launcher as launcher
    from gpuops.box.ssh import ensure_ssh_key

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    monkeypatch.setattr(launcher, "TAKEN_BACK_POLL_S", 0.2)
    for emu in (runpod_emulator, vast_emulator):
        emu.market.ssh_endpoint = (sshd.host, sshd.port)
        emu.faults.boot_s = 0.0
    for gid, g in runpod_emulator.gpus.items():
        if gid != RTX4090:
            g["stock"] = 0
    set_runpod(runpod_emulator, community=0.55, secure=0.90)
    vast_emulator.offers.clear()
    vast_emulator.add_offer(VAST_OFFER, "RTX 4090", 1, 24564, 0.45, 0.20, 0.99, "Norway, NO", storage_cost=0.0)
    sshd.authorize(ensure_ssh_key(gpuops_home)[1])
    return {"runpod": runpod_provider, "vast": vast_provider}


def set_runpod(emu, community: float, secure: float) -> None:
    emu.gpus[RTX4090]["price"] = {"community": community, "secure": secure}


def settings():
    return load_settings(None, {"teardown": {"kill_grace_seconds": 0.5, "idle_minutes": "off"}})


def job(tmp_path):
    j = tmp_path / "job.sh"
    j.write_text("echo hello-from-box\n")
    return j


def on_demand(tmp_path, **kw) -> UpRequest:
    return UpRequest(job=job(tmp_path), provider="any", card="rtx-4090", spot=False, spot_explicit=True, **kw)


def events(s, session: str, kind: str) -> list[dict]:
    return [json.loads(e.detail) for e in Ledger(s.ledger_url()).events(session) if e.kind == kind]


def test_the_cheaper_offer_wins_across_providers(both, runpod_emulator, vast_emulator, tmp_path):
    s = settings()
    plan = run_up(on_demand(tmp_path, dry_run=True), s, Lines(), provider=both)
    # Vast 0.45 < RunPod community 0.55 < RunPod secure 0.90
    assert [(r["provider"], r["price_usd_per_hour"]) for r in plan["ranked"]] == [
        ("vast", 0.45),
        ("runpod", 0.55),
        ("runpod", 0.90),
    ]
    assert plan["provider"] == "vast" and "cheapest" in plan["ranked"][0]["why"]
    assert "$0.1000/h above #1" in plan["ranked"][1]["why"]

    set_runpod(runpod_emulator, community=0.35, secure=0.90)  # now RunPod's community cloud is cheaper than 0.45
    summ = run_up(on_demand(tmp_path), s, Lines(), provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "runpod", summ
    row = Ledger(s.ledger_url()).get(summ["session"])
    assert (row.provider, row.usd_per_hour) == ("runpod", 0.35)
    assert vast_emulator.market.instances == {} and runpod_emulator.live() == []
    (inst,) = runpod_emulator.market.instances.values()
    assert abs(row.cost_usd - inst.billed_usd) <= CENT


def test_first_provider_out_of_stock_and_the_second_rents(both, runpod_emulator, vast_emulator, tmp_path):
    s = settings()
    set_runpod(runpod_emulator, community=0.30, secure=0.90)  # RunPod 0.30 first, Vast 0.45 next
    runpod_emulator.faults.vanish_on_create = True  # its stock is gone by the create
    rep = Lines()
    summ = run_up(on_demand(tmp_path), s, rep, provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "vast", summ
    row = Ledger(s.ledger_url()).get(summ["session"])
    assert (row.provider, row.usd_per_hour) == ("vast", 0.45)
    tries = events(s, row.id, "create")
    assert [(t["provider"], t["try"]) for t in tries] == [("runpod", 1), ("vast", 2)]
    assert [(e["provider"], e["kind"]) for e in events(s, row.id, "offer_skipped")] == [("runpod", "no_capacity")]
    assert runpod_emulator.market.instances == {} and vast_emulator.live() == []
    (inst,) = vast_emulator.market.instances.values()
    assert abs(row.cost_usd - inst.billed_usd) <= CENT


def test_spot_preferred_ranks_by_the_price_booked_spot_first_only_at_the_same_price(
    both, runpod_emulator, vast_emulator, tmp_path
):
    """[up] spot = true (no --spot typed) on Vast alone: a dearer spot offer never ranks before a
    cheaper on-demand one; at the same price the spot one goes first. --spot rents spot only."""
    s = settings()
    vast = {"vast": both["vast"]}
    # a second RTX 4090 whose minimum bid (0.50) is above the first offer's on-demand price (0.45)
    vast_emulator.add_offer(2002, "RTX 4090", 1, 24564, 0.60, 0.50, 0.99, "Sweden, SE", storage_cost=0.0)
    preferred = UpRequest(job=job(tmp_path), provider="vast", card="rtx-4090", spot=True, dry_run=True)
    plan = run_up(preferred, s, Lines(), provider=vast)
    assert [(r["offer_id"], r["spot"], r["price_usd_per_hour"]) for r in plan["ranked"]] == [
        (str(VAST_OFFER), True, 0.20),
        (str(VAST_OFFER), False, 0.45),
        ("2002", True, 0.50),
        ("2002", False, 0.60),
    ]
    # the same price (0.45 bid against 0.45 on-demand): spot first, said why
    vast_emulator.offers[2002].update(min_bid=0.45)
    plan = run_up(preferred, s, Lines(), provider=vast)
    assert [(r["offer_id"], r["spot"], r["price_usd_per_hour"]) for r in plan["ranked"]][1:3] == [
        ("2002", True, 0.45),
        (str(VAST_OFFER), False, 0.45),
    ]
    assert "on-demand after spot" in plan["ranked"][2]["why"]
    explicit = UpRequest(**{**preferred.__dict__, "spot_explicit": True})
    plan = run_up(explicit, s, Lines(), provider=vast)
    assert [(r["spot"], r["price_usd_per_hour"]) for r in plan["ranked"]] == [(True, 0.20), (True, 0.45)]


def test_a_runs_rental_failing_over_to_a_dearer_offer_gets_the_hours_its_money_buys_there(
    both, runpod_emulator, vast_emulator, tmp_path, sshd
):
    """A run with $1.00 for its money: at Vast's 0.20 bid that buys 5 h, but the bid is refused (the
    minimum rose) and the rental fails over to RunPod at 0.40, where $1.00 buys 2.5 h: the row, the
    agent and the laptop's TTL say 2.5 h, so the worst case at the rented box's own rate (the
    emulator's) stays within the money; the bill is the emulator's."""
    s = load_settings(
        None, {"teardown": {"kill_grace_seconds": 0.5, "idle_minutes": "off", "max_session_usd": 1.0, "max_hours": 10}}
    )
    set_runpod(runpod_emulator, community=0.40, secure=0.90)
    vast_emulator.min_bid_rises_to = 0.30
    req = UpRequest(job=job(tmp_path), provider="any", card="rtx-4090", spot=True, recover=1, max_hours=10)
    summ = run_up(req, s, Lines(), provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "runpod", summ
    led = Ledger(s.ledger_url())
    (row,) = led.run_rentals(summ["run"]["id"])
    used = runpod_emulator.market.instances[row.instance_id]
    assert used.usd_per_hour == pytest.approx(0.40, abs=1e-9)  # the rate the emulator bills it at
    assert row.max_hours == pytest.approx(1.0 / 0.40, abs=1e-9)  # 2.5 h, not the 5 h $1.00 buys at 0.20
    assert row.max_hours * used.usd_per_hour <= 1.0 + 1e-9  # the worst case, at the emulator's own rate
    tries = [t for t in events(s, row.id, "create")]
    assert [(t["provider"], t["max_hours"]) for t in tries] == [("vast", 5.0), ("runpod", 2.5)]
    agent = json.loads((sshd.home / "gpuops" / row.label / ".gpuops" / "agent.json").read_text())["teardown"]
    assert (agent["max_hours"], agent["max_session_usd"]) == pytest.approx((2.5, 1.0), abs=1e-9)
    assert abs(row.cost_usd - used.billed_usd) <= CENT


def test_a_failover_offer_the_runs_money_buys_under_a_minute_of_is_not_tried(
    both, runpod_emulator, vast_emulator, tmp_path
):
    """A run with $0.006: Vast's 0.20 bid (108 s for the money) is refused; every failover offer,
    RunPod's 0.40 and 0.90 and Vast's on-demand 0.45, buys under the 60 s a rental needs (54 s,
    24 s, 48 s), so none is tried: each is booked as skipped, and no box is made anywhere."""
    s = load_settings(
        None,
        {"teardown": {"kill_grace_seconds": 0.5, "idle_minutes": "off", "max_session_usd": 0.006, "max_hours": 10}},
    )
    set_runpod(runpod_emulator, community=0.40, secure=0.90)
    vast_emulator.min_bid_rises_to = 0.30
    req = UpRequest(job=job(tmp_path), provider="any", card="rtx-4090", spot=True, recover=1, max_hours=10)
    summ = run_up(req, s, Lines(), provider=both)
    assert summ["end_reason"] != "job_end", summ
    led = Ledger(s.ledger_url())
    (row,) = led.run_rentals(summ["run"]["id"])
    skipped = sorted((e["provider"], e["kind"]) for e in events(s, row.id, "offer_skipped"))
    assert skipped == [
        ("runpod", "money_left"),
        ("runpod", "money_left"),
        ("vast", "bid_too_low"),
        ("vast", "money_left"),
    ], skipped
    assert runpod_emulator.market.instances == {} and vast_emulator.live() == []


def test_a_5xx_on_create_that_made_the_pod_leaves_no_second_box(both, runpod_emulator, vast_emulator, tmp_path):
    """RunPod answers 502 after making the pod: found by its label and used, never a second create."""
    s = settings()
    set_runpod(runpod_emulator, community=0.30, secure=0.90)
    runpod_emulator.faults.create_fails_but_creates = 1
    summ = run_up(on_demand(tmp_path), s, Lines(), provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "runpod", summ
    row = Ledger(s.ledger_url()).get(summ["session"])
    (inst,) = runpod_emulator.market.instances.values()  # one pod, the one the 502 made
    assert row.instance_id == inst.id and inst.state == "destroyed"
    assert vast_emulator.market.instances == {} and runpod_emulator.live() == []
    assert abs(row.cost_usd - inst.billed_usd) <= CENT


def test_a_failed_create_that_made_an_instance_is_destroyed_before_the_next_try(
    both, runpod_emulator, vast_emulator, tmp_path
):
    """Spot preferred: Vast's bid (0.20) first; its minimum rose to 0.30 by the create, which refuses
    the bid and leaves a stopped, disk-billing instance: found by label and destroyed before the
    try on RunPod's on-demand offer (0.40, cheaper than Vast's on-demand 0.45); no box left on either."""
    s = settings()
    set_runpod(runpod_emulator, community=0.40, secure=0.90)
    vast_emulator.min_bid_rises_to = 0.30
    vast_emulator.low_bid_leaves_instance = True
    req = UpRequest(job=job(tmp_path), provider="any", card="rtx-4090", spot=True)
    plan = run_up(UpRequest(**{**req.__dict__, "dry_run": True}), s, Lines(), provider=both)
    # spot preferred ranks both kinds by the price booked: 0.20 (bid) < 0.40 < 0.45 < 0.90
    assert [(r["provider"], r["spot"], r["price_usd_per_hour"]) for r in plan["ranked"]] == [
        ("vast", True, 0.20),
        ("runpod", False, 0.40),
        ("vast", False, 0.45),
        ("runpod", False, 0.90),
    ]
    summ = run_up(req, s, Lines(), provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "runpod", summ
    row = Ledger(s.ledger_url()).get(summ["session"])
    (left,) = vast_emulator.market.instances.values()
    (used,) = runpod_emulator.market.instances.values()
    assert left.label == row.label and left.state == "destroyed"
    assert left.ended_t <= used.created_t  # destroyed before the next try
    assert vast_emulator.live() == [] and runpod_emulator.live() == []
    assert [e["instance"] for e in events(s, row.id, "create_left_instance")] == [left.id]
    assert [(e["provider"], e["kind"]) for e in events(s, row.id, "offer_skipped")] == [("vast", "bid_too_low")]
    assert row.instance_id == used.id and abs(row.cost_usd - used.billed_usd) <= CENT


def test_a_5xx_that_made_nothing_is_looked_up_and_the_next_offer_rents(both, runpod_emulator, vast_emulator, tmp_path):
    """Every RunPod create answers 500 before it makes anything: after the create's own retries the
    label is looked up (nothing), and the next offer, Vast's, rents."""
    s = settings()
    set_runpod(runpod_emulator, community=0.30, secure=0.90)
    runpod_emulator.faults.inject["create"] = [500] * 50
    summ = run_up(on_demand(tmp_path), s, Lines(), provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "vast", summ
    row = Ledger(s.ledger_url()).get(summ["session"])
    assert [t["provider"] for t in events(s, row.id, "create")][-1] == "vast"
    assert {e["kind"] for e in events(s, row.id, "offer_skipped")} == {"server"}
    assert runpod_emulator.market.instances == {} and vast_emulator.live() == []


def test_an_auth_failure_at_create_skips_its_provider_with_one_line(both, runpod_emulator, vast_emulator, tmp_path):
    s = settings()
    set_runpod(runpod_emulator, community=0.30, secure=0.40)  # both RunPod offers ahead of Vast's 0.45
    runpod_emulator.faults.inject["create"] = [401]  # the key is refused at the create: the account's reason
    rep = Lines()
    summ = run_up(on_demand(tmp_path), s, rep, provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "vast", summ
    said = [w for w in rep.warnings if "runpod" in w]
    assert len(said) == 1 and "skipping runpod for this up" in said[0], rep.warnings
    row = Ledger(s.ledger_url()).get(summ["session"])
    assert [t["provider"] for t in events(s, row.id, "create")] == ["runpod", "vast"]  # secure never tried
    assert runpod_emulator.market.instances == {} and vast_emulator.live() == []


def test_an_account_without_credit_is_left_out_before_renting_with_one_line(
    both, runpod_emulator, vast_emulator, tmp_path
):
    s = settings()
    set_runpod(runpod_emulator, community=0.30, secure=0.40)
    runpod_emulator.market.initial_balance = 0.0  # the money check before renting refuses RunPod only
    rep = Lines()
    summ = run_up(on_demand(tmp_path), s, rep, provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "vast", summ
    said = [w for w in rep.warnings if "runpod" in w]
    assert len(said) == 1 and said[0].startswith("runpod: left out of this up"), rep.warnings
    assert runpod_emulator.market.instances == {} and vast_emulator.live() == []


def test_a_rejected_key_at_the_search_leaves_that_provider_out_with_one_line(
    both, runpod_emulator, vast_emulator, tmp_path
):
    s = settings()
    vast_emulator.faults.inject["search"] = [
        401
    ] * 10  # the key refused (an injected fault: the spec lists no 401 there)
    rep = Lines()
    summ = run_up(on_demand(tmp_path), s, rep, provider=both)
    assert summ["end_reason"] == "job_end" and summ["provider"] == "runpod", summ
    said = [w for w in rep.warnings if w.startswith("vast:")]
    assert len(said) == 1 and "left out of this up" in said[0], rep.warnings
    assert vast_emulator.market.instances == {} and runpod_emulator.live() == []


@pytest.mark.parametrize("allowed", [True, False])
def test_a_spot_run_taken_back_on_vast_finishes_on_runpod_with_its_checkpoint(
    both, sshd, gpuops_home, runpod_emulator, vast_emulator, monkeypatch, allowed
):
    monkeypatch.setenv("STEPS", str(STEPS))
    monkeypatch.setenv("STEP_SECONDS", "1.0")
    s = load_settings(
        None,
        {
            "teardown": {"kill_grace_seconds": 0.5, "idle_minutes": "off", "sample_seconds": 0.3},
            "job": {"checkpoint_sync_seconds": 0.3, "env": ["STEPS", "STEP_SECONDS"]},
        },
    )
    req = UpRequest(
        job=JOB, provider="any", card="rtx-4090", spot=True, spot_explicit=True, recover=1, recover_on_demand=allowed
    )

    def vast_sold_out() -> None:
        vast_emulator.take_offer(VAST_OFFER)  # Vast's only spot offer is gone: the next rental must look elsewhere

    with TakeBack(vast_emulator, sshd, gpuops_home, at_step=[3], modes=["outbid"], then=vast_sold_out) as tb:
        summ = run_up(req, s, Lines(), provider=both)
    assert tb.error is None, tb.error
    assert vast_emulator.live() == [] and runpod_emulator.live() == []
    led = Ledger(s.ledger_url())
    rows = led.run_rentals(summ["run"]["id"])
    if not allowed:  # spot was asked: no on-demand box without --recover-on-demand
        assert summ["end_reason"] == "no_offer" and "--recover-on-demand" in summ["run"]["detail"], summ
        assert [(r.provider, r.spot) for r in rows] == [("vast", True)]
        assert runpod_emulator.market.instances == {}
        return
    assert summ["end_reason"] == "job_end", summ
    assert [(r.provider, r.spot, r.end_reason) for r in rows] == [
        ("vast", True, "preempted"),
        ("runpod", False, "job_end"),
    ]
    result = json.loads((gpuops_home / "results" / rows[1].id / "result.json").read_text())
    assert result == {"steps": STEPS, "digest": _expected_digest(STEPS), "attempts": [1, 2]}
    resumed = [json.loads(e.detail) for e in led.events(rows[1].id) if e.kind == "resume"]
    assert [d["from"] for d in resumed] == [rows[0].id]
    bills = [vast_emulator.market.instances[rows[0].instance_id], runpod_emulator.market.instances[rows[1].instance_id]]
    for row, inst in zip(rows, bills):
        assert abs(row.cost_usd - inst.billed_usd) <= CENT


def test_the_dry_run_shows_the_first_five_with_provider_and_why(cli, emulator_env, tmp_path):
    """`gpuops up --provider any --dry-run` as typed, both keys in the environment: the order the
    offers would be tried in, each with its provider and why, nothing rented."""
    rp, va = emulator_env["runpod"], emulator_env["vast"]
    for gid, g in rp.gpus.items():
        if gid != RTX4090:
            g["stock"] = 0
    set_runpod(rp, community=0.55, secure=0.90)
    va.offers.clear()
    va.add_offer(VAST_OFFER, "RTX 4090", 1, 24564, 0.45, 0.20, 0.99, "Norway, NO", storage_cost=0.0)
    va.add_offer(VAST_OFFER + 1, "RTX 4090", 1, 24564, 0.45, 0.20, 0.80, "Norway, NO", storage_cost=0.0)
    r = cli("up", "--provider", "any", "--on-demand", "--card", "rtx-4090", "--dry-run", "--job", str(job(tmp_path)))
    assert r.returncode == 0, r
    lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip().startswith("#")]
    assert [ln.split()[:2] for ln in lines] == [["#1", "vast"], ["#2", "vast"], ["#3", "runpod"], ["#4", "runpod"]]
    assert "the cheapest fitting offer in stock" in lines[0]
    assert "same price as #1, reliability 0.800 against 0.990" in lines[1]
    assert "$0.5500/h booked" in lines[2] and "$0.1000/h above #2" in lines[2]  # 0.55 - 0.45
    assert "$0.9000/h booked" in lines[3] and "$0.3500/h above #3" in lines[3]  # 0.90 - 0.55
    assert "on vast at $0.4500/h" in r.stdout  # Vast's 0.45 is what would be rented
    assert rp.market.instances == {} and va.market.instances == {}
    bad = cli("up", "--provider", "every", "--dry-run", "--job", str(job(tmp_path)))
    assert bad.returncode == 2 and "any" in bad.stderr


def test_recover_on_demand_leaves_a_spot_runs_first_rental_spot_only(both, runpod_emulator, vast_emulator, tmp_path):
    # --spot --recover 1 --recover-on-demand: only a re-rent may land on an on-demand box; the first
    # rental is spot as asked, so with Vast's spot offer gone nothing is rented (RunPod has no spot)
    vast_emulator.take_offer(VAST_OFFER)
    req = UpRequest(
        job=job(tmp_path), provider="any", card="rtx-4090", spot=True, spot_explicit=True, recover=1,
        recover_on_demand=True, dry_run=True,
    )  # fmt: skip
    with pytest.raises(BadInput):
        run_up(req, settings(), Lines(), provider=both)
    assert runpod_emulator.market.instances == {} and vast_emulator.market.instances == {}


def test_recover_on_demand_without_recover_is_refused_before_renting(cli, tmp_path):
    r = cli("up", "--job", str(job(tmp_path)), "--spot", "--recover-on-demand", "--dry-run")
    assert r.returncode == 2
    assert r.stderr.startswith("error: --recover-on-demand widens a run's re-rentals, and this up has none ("), r.stderr
