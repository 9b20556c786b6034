"""`gpuops watchdog --once`: closing rows of gone boxes (end time never "now"), the laptop-side
policy, balance floor, monthly cap, refusals that `up` checks, and two watchdogs on one ledger."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuops.agent.bootstrap_config import RUNNER_DIR, RUNNER_SOURCE
from gpuops.errors import BadInput
from gpuops.providers.base import Balance
from gpuops.providers.local.compute import LocalProvider
from gpuops.teardown.budget import assert_not_refused
from gpuops.teardown.reconcile import Context
from gpuops.teardown.watchdog import run
from ledger.limits import active_refusals, lease_holder
from tests.teardown.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]


class Funded(LocalProvider):
    """The local provider with an account balance the test sets (USD)."""

    usd = 100.0

    def balance(self) -> Balance:
        return Balance(usd=self.usd)


def once(r, providers=None, **kw):
    ctx = Context(r.settings, ledger=r.ledger, providers=providers, arm_margin_s=0.0, **kw)
    return run(r.settings, once=True, emit=lambda a: None, ctx=ctx)


def kinds(actions):
    return [(a.session, a.kind) for a in actions]


def test_once_closes_row_of_box_the_agent_destroyed(rig, fake_smi):
    fake_smi.util(0)
    r = rig({"sample_seconds": 0.3, "idle_minutes": 1 / 60}, price=3.6)
    r.intent()
    r.create()
    r.arm()
    r.job("sleep 600")
    wait_for(r.gone, 10)  # the agent destroyed it: the close that follows books that record, not its own "now"
    acts = once(r)
    assert (r.sid, "closed") in kinds(acts)
    row = r.ledger.get(r.sid)
    assert row.status == "closed" and row.end_reason == "idle"
    assert row.end_source == "provider" and row.ended_at == pytest.approx(
        r.destroyed_at(), abs=1e-6
    )  # the record itself
    assert row.billed_seconds == math.ceil(r.destroyed_at() - r.inst.created_at)  # the record's seconds, rounded up
    assert row.cost_usd == pytest.approx(row.billed_seconds / 3600 * 3.6, abs=1e-6)
    evs = r.ledger.events(r.sid)
    assert [e.kind for e in evs][-2:] == ["destroyed", "closed"]  # lifecycle.end_rental's events
    assert '"already_gone": true' in evs[-2].detail
    assert once(r) == []  # nothing left to do


def test_gone_without_provider_record_uses_last_heartbeat(rig, fake_smi):
    fake_smi.util(80)
    r = rig({"sample_seconds": 0.3})
    r.intent()
    r.create()
    r.arm()
    wait_for(r.status, 10)
    once(r)  # sees the agent, books its heartbeat
    beat = r.ledger.get(r.sid).last_heartbeat_at
    assert beat is not None
    r.provider.destroy(r.inst.id)
    shutil.rmtree(r.box.root)  # the provider forgets the box entirely
    time.sleep(0.3)
    acts = once(r)
    assert (r.sid, "closed") in kinds(acts)
    row = r.ledger.get(r.sid)
    # armed (it heartbeated), gone, nothing kept why: agent_ended, at the last proof of life
    assert row.ended_at == beat and row.end_reason == "agent_ended"
    assert "end time from heartbeat" in [a.detail for a in acts if a.kind == "closed"][0]
    assert row.end_source == "heartbeat"
    r.inst = None


def test_watchdog_applies_policy_from_agent_status(rig, fake_smi):
    r = rig({"sample_seconds": 5, "idle_minutes": 1.0})
    r.intent()
    r.create()
    now = time.time()
    # An agent status as a (not running) agent would write it: two idle minutes of samples.
    samples = [
        {
            "t": now - 120 + 5 * i,
            "gpus": [{"index": 0, "util": 0.0, "mem_used_mib": 1.0, "mem_total_mib": 8.0}],
            "error": None,
            "bootstrap": False,
            "ssh": 0,
        }
        for i in range(25)
    ]
    status = {
        "heartbeat": now,
        "sample_seconds": 5,
        "samples": samples,
        "job": {"ended_at": None, "exit_code": None},
        "teardown": {
            "max_hours": 4,
            "idle_minutes": 1.0,
            "idle_util_percent": 5,
            "sample_seconds": 5,
            "job_end_grace_seconds": 30,
        },
        "destroy": None,
    }
    Path(r.box.root, ".gpuops", "agent-status.json").write_text(json.dumps(status))
    acts = once(r)
    row = r.ledger.get(r.sid)
    assert row.end_reason == "idle", acts
    assert r.gone()
    ev = [e for e in r.ledger.events(r.sid) if e.kind == "end_requested"]
    assert (
        json.loads(ev[0].detail)["reason"] == "idle" and "idle: no GPU above 5%" in json.loads(ev[0].detail)["detail"]
    )


def test_stale_heartbeat_is_reported_and_ttl_still_enforced(rig, fake_smi):
    # a TTL of 15 s: the first pass must come before it, also on a loaded machine (1.5 s did not)
    r = rig({"sample_seconds": 0.5, "max_hours": 15.0 / 3600}, up={"ready_timeout_seconds": 100.0})
    r.intent()
    r.create()  # never armed: no agent, no heartbeat (and within the ready deadline)
    acts = once(r)
    assert (r.sid, "stale_heartbeat") in kinds(acts)
    assert r.ledger.get(r.sid).status == "running"
    wait_for(lambda: time.time() > r.inst.created_at + 15.1, 60)
    acts = once(r)
    row = r.ledger.get(r.sid)
    assert row.status == "closed" and row.end_reason == "ttl" and r.gone()


def test_box_never_armed_is_destroyed_after_the_ready_deadline(rig, fake_smi):
    r = rig({"sample_seconds": 0.5}, up={"ready_timeout_seconds": 1.0})
    r.intent()
    r.create()
    assert once(r) and r.ledger.get(r.sid).status == "running"
    wait_for(lambda: time.time() > r.inst.created_at + 1.1, 5)
    acts = once(r)
    assert (r.sid, "destroyed") in kinds(acts)
    row = r.ledger.get(r.sid)
    assert row.end_reason == "interrupted" and r.gone()
    assert row.end_source == "provider" and row.ended_at == pytest.approx(r.destroyed_at(), abs=1e-6)


def test_ttl_from_the_watchdog_while_agent_heartbeats(rig, fake_smi):
    fake_smi.util(90)
    # The agent's own TTL is long; the watchdog's settings are the session's (from the status).
    r = rig({"sample_seconds": 0.3, "max_hours": 1.0})
    r.intent()
    r.create()
    r.arm()
    st = wait_for(r.status, 10)
    assert st["teardown"]["max_hours"] == 1.0
    acts = once(r)
    assert r.ledger.get(r.sid).status == "running" and not any(a.kind == "destroyed" for a in acts)


def test_balance_floor_destroys_refuses_and_lifts(rig, fake_smi, gpuops_home):
    fake_smi.util(90)
    r = rig({"sample_seconds": 0.3, "balance_floor_usd": 5.0})
    funded = Funded(r.provider.boxes_dir, price_per_hour=2.0, kill_grace_seconds=1.0)
    r.provider = funded
    r.intent()
    r.create()
    r.arm()
    r.job("sleep 600")
    wait_for(r.status, 10)
    funded.usd = 4.2  # a balance below the floor during the run
    acts = once(r, providers={"local": funded})
    assert ("", "refused") in kinds(acts) and (r.sid, "destroyed") in kinds(acts)
    row = r.ledger.get(r.sid)
    assert row.end_reason == "balance_floor" and r.gone()
    assert row.end_source == "provider" and row.ended_at == pytest.approx(r.destroyed_at(), abs=1e-6)
    with pytest.raises(BadInput, match=r"refused \(balance_floor.*local balance \$4.20 is below the floor \$5.00"):
        assert_not_refused(r.ledger, "local", r.provider.account, r.settings.owner())
    assert len(active_refusals(r.ledger)) == 1
    once(r, providers={"local": funded})  # still below: no second refusal
    assert len(active_refusals(r.ledger)) == 1
    funded.usd = 50.0
    acts = once(r, providers={"local": funded})
    assert ("", "lifted") in kinds(acts)
    assert_not_refused(r.ledger, "local", r.provider.account, r.settings.owner())


def test_monthly_cap_destroys_every_box_and_refuses(rig, fake_smi):
    fake_smi.util(90)
    t = {"sample_seconds": 0.3, "monthly_cap_usd": 1.0}
    a = rig(t, price=3600.0)  # $1 per second
    b = rig(t, price=3600.0)
    for r in (a, b):
        r.intent()
        r.create()
        r.arm()
    # Both agents up (first status written): with ready_timeout_seconds = 1, a box with no heartbeat
    # yet is, to reconcile, one that `up` abandoned before arming (destroyed as interrupted).
    for r in (a, b):
        wait_for(r.status, 20)
    wait_for(lambda: time.time() > a.inst.created_at + 1.2, 5)
    acts = once(a)
    assert {a.sid, b.sid} <= {s for s, k in kinds(acts) if k == "destroyed"}
    for r in (a, b):
        row = r.ledger.get(r.sid)
        assert row.end_reason == "monthly_cap" and r.gone()
        assert row.cost_usd == pytest.approx(row.billed_seconds, abs=1e-3)
    with pytest.raises(BadInput, match="monthly_cap"):
        assert_not_refused(a.ledger, "vast", None, a.settings.owner())  # the cap covers every provider


WATCHDOG = """
import json, os, sys, time
from gpuops.config import load_settings
from gpuops.providers.local.compute import LocalProvider
from gpuops.teardown.reconcile import Context
from gpuops.teardown.watchdog import run
hold = sys.argv[3] if len(sys.argv) > 3 else None  # held in its destroy: "<name>.held" written, "<name>.go-on" awaited
if hold:
    destroy = LocalProvider.destroy
    def held_destroy(self, instance_id):
        open(hold + ".held", "w").close()
        end = time.monotonic() + 120
        while not os.path.exists(hold + ".go-on") and time.monotonic() < end:
            time.sleep(0.01)
        return destroy(self, instance_id)
    LocalProvider.destroy = held_destroy
print("ready", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:  # the test says when
    time.sleep(0.01)
s = load_settings(overrides={"teardown": {"max_hours": 0.0003, "kill_grace_seconds": 1.5}})
acts = run(s, once=True, emit=lambda a: None, ctx=Context(s, arm_margin_s=1e6, owner=sys.argv[1]))
print(json.dumps([a.as_json() for a in acts]))
"""


def test_two_watchdogs_on_one_ledger_do_not_fight(rig, fake_smi, tmp_path):
    fake_smi.util(90)
    r = rig({"sample_seconds": 0.3, "kill_grace_seconds": 1.5})
    r.intent()
    r.create()  # no agent: the watchdogs apply their own 0.0003 h TTL
    r.box.put(RUNNER_SOURCE, RUNNER_DIR)  # jobwrap
    r.job("trap '' TERM; while true; do sleep 0.1; done")  # ignores TERM: destroy takes the grace
    wait_for(lambda: time.time() > r.inst.created_at + 1.2, 5)  # past the 0.0003 h TTL of the watchdogs
    env = dict(os.environ, PYTHONPATH=str(REPO))
    go = [tmp_path / "go-wd1", tmp_path / "go-wd2"]
    hold = tmp_path / "wd1-destroy"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WATCHDOG, f"wd{i}", str(go[i - 1]), *([str(hold)] if i == 1 else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for i in (1, 2)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    # Overlap them for certain (under load two processes started together may not overlap at all):
    # wd1 goes first and is held in its destroy, the session's lease its own and no transaction
    # open; then wd2 makes its whole pass; then wd1 goes on.
    go[0].touch()
    try:
        wait_for(lambda: Path(f"{hold}.held").exists() or procs[0].poll() is not None, 60, step=0.01)
        assert lease_holder(r.ledger, r.sid) == "wd1", procs[0].poll()
        go[1].touch()
        second, second_err = procs[1].communicate(timeout=120)
    finally:
        Path(f"{hold}.go-on").touch()
    first, first_err = procs[0].communicate(timeout=120)
    assert first.strip() and second.strip(), (first, first_err[-3000:], second, second_err[-3000:])
    outs = [json.loads(out.strip().splitlines()[-1]) for out in (first, second)]
    did = [[a["kind"] for a in o if a["session"] == r.sid] for o in outs]
    assert sorted("destroyed" in d for d in did) == [False, True], did
    assert any(d and set(d) == {"skipped_leased"} for d in did), did  # the other saw the lease during the destroy
    evs = [e.kind for e in r.ledger.events(r.sid)]
    assert evs.count("end_requested") == 1 and evs.count("destroyed") == 1 and evs.count("closed") == 1
    row = r.ledger.get(r.sid)
    assert row.end_reason == "ttl" and lease_holder(r.ledger, r.sid) is None


def test_watchdog_destroying_for_job_end_books_the_exit_code(rig, fake_smi):
    """The watchdog can act on a job's end before the agent does (a loaded box, a paused agent):
    its close books the exit code the agent reported, as the agent's own destroy would."""
    fake_smi.util(90)
    r = rig({"sample_seconds": 0.3, "idle_minutes": "off", "job_end_grace_seconds": 3.0})
    r.intent()
    r.create()
    r.arm()
    r.box.put(RUNNER_SOURCE, RUNNER_DIR)  # jobwrap
    r.job("exit 3")
    raw = Path(r.box.root, ".gpuops", "agent-status.json")  # the agent's own document (pid: its worker)
    st = wait_for(lambda: raw.exists() and (s := json.loads(raw.read_text())).get("job", {}).get("ended_at") and s, 20)
    os.kill(st["pid"], signal.SIGSTOP)  # the agent's worker falls behind
    try:
        wait_for(lambda: time.time() > st["job"]["ended_at"] + 3.1, 10)  # the grace after the job's end is over
        acts = once(r)
        assert (r.sid, "destroyed") in kinds(acts), acts
        (done,) = [a for a in acts if a.kind == "destroyed"]
        assert (
            done.detail.startswith("job_failed: job exited (code 3)") and "job_failed: job_failed" not in done.detail
        ), done.detail
    finally:
        try:
            os.kill(st["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass  # the destroy ended it (a local box's processes go with it)
    row = r.ledger.get(r.sid)
    assert (row.status, row.end_reason, row.exit_code) == ("closed", "job_failed", 3)


def test_a_box_whose_agent_is_mid_destroy_books_the_exit_code_its_status_gives(rig, fake_smi):
    """`up` was killed while the job ran (no ``job_exited`` event); the job ended and the agent
    asked for the end, and is still destroying (a loaded box: its TERM grace not over) when the
    watchdog looks. The watchdog finishes the destroy for the agent's reason and books the exit
    code the agent's status gives -- the box's own record -- not None."""
    fake_smi.util(90)
    r = rig({"sample_seconds": 0.3, "idle_minutes": "off"})
    r.intent()
    r.create()
    now = time.time()
    doc = {  # what onbox/agent.py do_destroy writes before it destroys: the job's end, the reason asked
        "version": 1,
        "session": r.sid,
        "heartbeat": now,
        "sample_seconds": 0.3,
        "samples": [],
        "job": {"ended_at": now - 1.0, "exit_code": 3, "started": True},
        "destroy": {
            "reason": "job_failed",
            "explanation": "job exited (code 3)",
            "requested_at": now - 0.5,
            "done_at": None,
            "attempts": 1,
            "result": None,
        },
    }
    raw = Path(r.box.root, ".gpuops", "agent-status.json")
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(doc))
    assert "job_exited" not in [e.kind for e in r.ledger.events(r.sid)]  # nobody booked the job's end
    acts = once(r)
    assert (r.sid, "destroyed") in kinds(acts), acts
    row = r.ledger.get(r.sid)
    assert (row.status, row.end_reason, row.exit_code) == ("closed", "job_failed", 3)


def test_a_tick_books_what_ps_shows_of_a_busy_box(rig, fake_smi):
    # `ps` opens no connection: the watchdog books the box's tokens and idle streak as it sees them.
    from gpuops.rental.sessions import list_open

    fake_smi.util(80)
    r = rig({"sample_seconds": 0.3})
    r.intent()
    r.create()
    r.arm()
    wait_for(r.status, 10)
    Path(r.box.root, ".gpuops", "metrics.jsonl").write_text('{"tokens": 700}\n{"tokens": 42}\n')
    once(r)
    at, detail = r.ledger.last_event(r.sid, "live")
    assert detail["tokens"] == 742 and detail["idle_seconds"] == 0.0 and detail["by"].startswith("watchdog:")
    (row,) = [x for x in list_open(r.ledger) if x["session"] == r.sid]
    assert row["tokens"] == 742 and row["idle_seconds"] == 0.0 and row["status_at"] == at
