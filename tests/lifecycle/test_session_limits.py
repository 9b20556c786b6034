"""A session's limits live on its row (m004): reconcile and the watchdog apply the ROW's
ready_timeout_seconds and max_hours, not their own settings; rows from before m004 fall back to the
acting process's settings. `up` writes them with the intent."""

from __future__ import annotations

import time
from pathlib import Path

from gpuops.teardown.reconcile import Context, reconcile
from gpuops.teardown.watchdog import tick
from tests.teardown.conftest import wait_for


def _kinds(acts, sid):
    return [a.kind for a in acts if a.session == sid]


def test_reconcile_uses_the_rows_ready_timeout_not_its_own(rig, fake_smi):
    patient = rig({}, up={"ready_timeout_seconds": 0.05})  # the reconciling process: 0.05 s
    patient.intent()
    patient.create()
    patient.ledger.update(patient.sid, ready_timeout_seconds=900.0)  # what `up --ready 900` wrote
    legacy = rig({}, up={"ready_timeout_seconds": 0.05})
    legacy.intent()
    legacy.create()  # a pre-m004 row: no limits stored, the process's 0.05 s applies
    time.sleep(0.2)  # both are past 0.05 s (+ 0 s margin) without a heartbeat
    ctx = Context(patient.settings, ledger=patient.ledger, arm_margin_s=0.0)
    acts = reconcile(ctx)
    assert _kinds(acts, patient.sid) == [] and patient.ledger.get(patient.sid).status != "closed"
    assert _kinds(acts, legacy.sid) == ["destroyed"]
    assert legacy.ledger.get(legacy.sid).end_reason == "interrupted"


def test_watchdog_applies_the_rows_max_hours(rig, fake_smi):
    fake_smi.util(90)
    r = rig({"max_hours": 4.0, "sample_seconds": 0.3})  # the watchdog's own TTL: 4 h
    r.intent()
    r.create()
    r.ledger.update(r.sid, max_hours=1 / 3600, ready_timeout_seconds=900.0)  # this session: 1 s
    wait_for(lambda: time.time() > r.inst.created_at + 1.1, 5)
    acts = tick(Context(r.settings, ledger=r.ledger))
    assert "destroyed" in _kinds(acts, r.sid)
    assert r.ledger.get(r.sid).end_reason == "ttl" and r.gone()


def test_up_stores_its_limits_on_the_row(gpuops_home, fake_smi, tmp_path):
    from gpuops.config import load_settings
    from gpuops.rental.launcher import Reporter, UpRequest, run_up
    from ledger.store import Ledger

    settings = load_settings(
        None, {"teardown": {"idle_minutes": 7.5, "max_hours": 2.0}, "up": {"ready_timeout_seconds": 321}}
    )
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    summ = run_up(UpRequest(job=job, max_hours=2.0), settings, Reporter())
    row = Ledger(settings.ledger_url()).get(summ["session"])
    assert (row.max_hours, row.ready_timeout_seconds, row.idle_minutes) == (2.0, 321.0, 7.5)


def test_silent_agent_the_watchdog_reads_the_jobs_exit_marker(rig, fake_smi):
    """No agent heartbeat (stopped or dead) and the laptop gone: the job's exit marker on the box
    still ends the rental (job_end after the grace, counted from when the watchdog saw it)."""
    from gpuops.agent.bootstrap_config import RUNNER_DIR, RUNNER_SOURCE

    fake_smi.util(90)
    r = rig({"job_end_grace_seconds": 0.5, "sample_seconds": 0.3, "max_hours": 4.0})
    r.intent()
    r.create()  # no agent: its heartbeat is "none yet", i.e. stale
    r.box.put(RUNNER_SOURCE, RUNNER_DIR)  # the job wrapper
    r.job("true")
    wait_for(lambda: (Path(r.box.root) / ".gpuops" / "run" / "exit_marker").exists(), 10)
    ctx = Context(r.settings, ledger=r.ledger)
    first = tick(ctx)
    assert "stale_heartbeat" in _kinds(first, r.sid) and "destroyed" not in _kinds(first, r.sid)
    seen = [e for e in r.ledger.events(r.sid) if e.kind == "job_exited"]
    assert len(seen) == 1 and '"from": "exit_marker"' in seen[0].detail
    wait_for(lambda: time.time() > seen[0].at + 0.6, 5)
    assert "destroyed" in _kinds(tick(ctx), r.sid)
    row = r.ledger.get(r.sid)
    assert (row.end_reason, row.exit_code) == ("job_end", 0) and r.gone()


def test_box_clock_skew_cannot_bend_an_unseen_end(rig, fake_smi):
    """A box clock 5 h ahead (or behind) writes heartbeats the laptop cannot trust: the row books
    the laptop's time of each fresh read, so an end nobody saw bills minutes, not 0 h or 6 h."""
    import json
    import shutil

    for skew in (5 * 3600, -5 * 3600):
        r = rig({"sample_seconds": 5})
        r.intent()
        r.create()
        status = {
            "heartbeat": time.time() + skew,
            "sample_seconds": 5,
            "samples": [],
            "job": {},
            "destroy": None,
            "teardown": {"max_hours": 4, "idle_minutes": "off"},
        }
        (Path(r.box.root) / ".gpuops").mkdir(exist_ok=True)
        (Path(r.box.root) / ".gpuops" / "agent-status.json").write_text(json.dumps(status))
        seen_at = time.time()
        tick(Context(r.settings, ledger=r.ledger))
        read_by = time.time()  # the fresh read happened in between
        r.provider.destroy(r.inst.id)
        shutil.rmtree(r.box.root)  # gone, and the provider keeps no end time
        tick(Context(r.settings, ledger=r.ledger))
        row = r.ledger.get(r.sid)
        # ahead: fresh by the box's clock, booked at the laptop's read; behind: stale, no proof of
        # life at all (the rig's `created` is the laptop's own event): the create time
        assert (row.status, row.end_source) == ("closed", "heartbeat" if skew > 0 else "create")
        assert r.inst.created_at <= row.ended_at <= time.time() and row.billed_seconds < 60, (skew, row)
        if skew > 0:  # fresh by the box's clock: booked at the laptop's read, not 5 h ahead
            assert seen_at <= row.ended_at <= read_by
