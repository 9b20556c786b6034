"""The real CLI: `gpuops up` stopped or killed with the agent armed, `gpuops watchdog` (--once and
the APScheduler daemon), `gpuops reconcile`, and `up` refusing what the money does not cover."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpuops.config import load_settings
from ledger.store import Ledger
from tests.conftest import gpuops_cmd
from tests.teardown.conftest import LOADED_SLACK_S, STAGE_TIMEOUT_S, gate, wait_for

FAST_ENV = {
    "GPUOPS_TEARDOWN_SAMPLE_SECONDS": "0.3",
    "GPUOPS_TEARDOWN_JOB_END_GRACE_SECONDS": "1.0",
    "GPUOPS_TEARDOWN_KILL_GRACE_SECONDS": "0.5",
    "GPUOPS_TEARDOWN_IDLE_MINUTES": str(1 / 60),
    "GPUOPS_UP_READY_TIMEOUT_SECONDS": "2",
    "GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR": "1.5",
}


@pytest.fixture
def env(cli_env, fake_smi, monkeypatch):
    for k, v in FAST_ENV.items():
        monkeypatch.setenv(k, v)
    e = dict(os.environ)
    e["PYTHONPATH"] = cli_env["PYTHONPATH"]
    return e


def job_file(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "job.sh"
    p.write_text(body + "\n")
    return p


def start_up(tmp_path, env, body: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        gpuops_cmd("up", "--job", str(job_file(tmp_path, body)), *extra),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_stage(p: subprocess.Popen, stage: str, timeout: float = STAGE_TIMEOUT_S) -> None:
    """Read `up`'s stderr until its ``stage`` line; fail after ``timeout`` s even when `up` prints
    nothing more (the lines are read by a thread, which goes on draining stderr afterwards)."""
    lines: queue.Queue = queue.Queue()

    def drain() -> None:
        for line in iter(p.stderr.readline, ""):
            lines.put(line)
        lines.put(None)  # `up` closed stderr: it has ended

    threading.Thread(target=drain, daemon=True).start()
    end = time.monotonic() + timeout
    seen = []
    while True:
        try:
            line = lines.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line.rstrip())
        words = line.split()
        if len(words) >= 2 and words[1] == stage:
            return
    raise AssertionError(f"stage {stage} not reached within {timeout} s: {seen}")


def only_row(home: Path):
    led = Ledger(load_settings().ledger_url())
    rows = led.rows_between(0, 2e10)
    assert len(rows) == 1
    return led, rows[0]


def test_up_stopped_during_job_agent_destroys_after_grace(gpuops_home, tmp_path, env, fake_smi):
    fake_smi.util(85)
    go = tmp_path / "job-may-end"
    p = start_up(tmp_path, env, gate(go))  # the job ends when the test says, never before the stop
    try:
        wait_stage(p, "job")
        led, row = only_row(gpuops_home)
        box = gpuops_home / "boxes" / row.label
        wait_for(lambda: (box / ".gpuops" / "run" / "job.pid").exists(), STAGE_TIMEOUT_S)
        os.kill(p.pid, signal.SIGSTOP)  # the laptop lid closes while the job runs
        go.touch()
        wait_for(lambda: (box / "destroyed.json").exists(), STAGE_TIMEOUT_S)
        code = (box / ".gpuops" / "run" / "exit_code").read_text().split()
        destroyed = json.loads((box / "destroyed.json").read_text())
        assert destroyed["by"] == "agent"
        status = json.loads((box / ".gpuops" / "agent-status.json").read_text())
        assert status["destroy"]["reason"] == "job_end"
        # The 1 s grace on the agent's own timeline (the laptop's arm time + the box's monotonic
        # clock, behind the box's wall clock by the arm's latency); the wrapper's wall-clock exit
        # time bounds the whole delay from above only.
        grace = status["destroy"]["requested_at"] - status["job"]["ended_at"]
        assert 1.0 - 0.01 <= grace < 1.0 + LOADED_SLACK_S, grace  # 0.01: ms rounding
        delay = destroyed["destroyed_at"] - float(code[2])
        assert delay < 1.0 + LOADED_SLACK_S, delay  # the grace, then the poll and the kill
        os.kill(p.pid, signal.SIGCONT)  # the laptop wakes: its teardown is idempotent and books the row
        p.wait(timeout=STAGE_TIMEOUT_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    led, row = only_row(gpuops_home)
    assert row.status == "closed" and row.end_reason == "job_end" and row.exit_code == 0
    assert row.end_source == "provider"  # the agent's destroy as the box recorded it, not the wake-up
    assert row.ended_at == pytest.approx(destroyed["destroyed_at"], abs=1e-6)  # the record itself (a float, kept as is)


@pytest.mark.parametrize("stage,reason", [("arm", "idle"), ("bootstrap", "idle"), ("job", "job_end")])
def test_up_sigkilled_box_goes_and_watchdog_books_it(gpuops_home, tmp_path, env, fake_smi, stage, reason):
    fake_smi.util(60 if reason == "job_end" else 0)
    go = tmp_path / "job-may-end"
    p = start_up(tmp_path, env, gate(go))  # the job (if it starts) ends only when the test says
    try:
        wait_stage(p, stage)
        led, row = only_row(gpuops_home)
        box = gpuops_home / "boxes" / row.label
        if stage == "arm":  # the stage line comes before the agent starts: kill once it runs
            wait_for(lambda: (box / ".gpuops" / "agent-status.json").exists(), STAGE_TIMEOUT_S)
        if stage == "job":
            wait_for(lambda: (box / ".gpuops" / "run" / "job.pid").exists(), STAGE_TIMEOUT_S)
    finally:
        p.kill()
        p.wait()
    if stage == "job":
        go.touch()  # the job ends after `up` is gone: the agent's job_end
    wait_for(lambda: (box / "destroyed.json").exists(), STAGE_TIMEOUT_S)
    out = subprocess.run(
        gpuops_cmd("watchdog", "--once", "--json"), env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    acts = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(a["session"], a["kind"]) for a in acts] == [(row.id, "closed")]
    led, row = only_row(gpuops_home)
    assert row.status == "closed" and row.end_reason == reason and row.end_source == "provider"
    assert row.ended_at == pytest.approx(
        json.loads((box / "destroyed.json").read_text())["destroyed_at"], abs=1e-6
    )  # the record itself


def test_watchdog_daemon_ticks_until_interrupted(gpuops_home, tmp_path, env, fake_smi):
    from tests.teardown.rig import Rig

    r = Rig({"max_hours": 1 / 3600, "sample_seconds": 0.3}, up={"ready_timeout_seconds": 100})
    r.intent()
    r.create()  # no agent: the daemon's TTL has to do it
    env = dict(env, GPUOPS_TEARDOWN_MAX_HOURS=str(1 / 3600), GPUOPS_UP_READY_TIMEOUT_SECONDS="100")
    d = subprocess.Popen(
        gpuops_cmd("watchdog", "--interval", "0.5", "--json"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: r.ledger.get(r.sid).status == "closed", STAGE_TIMEOUT_S)
    finally:
        d.send_signal(signal.SIGINT)
        out, err = d.communicate(timeout=20)
    assert d.returncode == 0, err
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert "destroyed" in kinds and "stale_heartbeat" in kinds
    assert r.ledger.get(r.sid).end_reason == "ttl" and r.gone()


def test_reconcile_cli_destroys_orphan(gpuops_home, tmp_path, env, fake_smi):
    from tests.teardown.rig import Rig

    r = Rig({})
    r.intent()
    r.ledger.close(r.sid, r.ledger.get(r.sid).created_at, "provision_failed")
    r.create(commit=False)
    out = subprocess.run(gpuops_cmd("reconcile"), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["orphan_destroyed", r.sid]
    assert r.gone()
    out = subprocess.run(gpuops_cmd("reconcile"), env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "nothing to reconcile"


def test_up_refuses_when_max_hours_does_not_fit_the_monthly_cap(gpuops_home, tmp_path, env):
    env = dict(env, GPUOPS_TEARDOWN_MONTHLY_CAP_USD="0.5")
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job_file(tmp_path, "true")), "--max-hours", "4"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert (
        "$1.5000/h x 4 h = $6.00 does not fit in monthly cap $0.50 minus $0.00 spent this month = $0.50: short by $5.50"
    ) in out.stderr
    assert "--max-hours 0.33 or less" in out.stderr
    assert [line for line in out.stderr.splitlines() if line.startswith("error:")] == [
        out.stderr.strip().splitlines()[-1]
    ]
    assert Ledger(load_settings().ledger_url()).rows_between(0, 2e10) == []  # no half-written row
    assert not list((gpuops_home / "boxes").glob("gpuops-*"))


def test_refusal_set_by_watchdog_blocks_up_until_lifted(gpuops_home, tmp_path, env):
    from ledger.limits import lift_refusal, set_refusal

    led = Ledger(load_settings().ledger_url())
    set_refusal(led, "*", "monthly_cap", "month-to-date spend $51.00 reached the monthly cap $50.00")
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job_file(tmp_path, "true"))), env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "new boxes refused (monthly_cap" in out.stderr and "$51.00" in out.stderr
    lift_refusal(led, "*", "monthly_cap")
    # the idle layer off: under load the 1 s idle window of FAST_ENV can end the box before `true` is
    # run, and this test is about the refusal alone
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job_file(tmp_path, "true")), "--idle-minutes", "off"),
        env=env,
        capture_output=True,
        text=True,
        timeout=STAGE_TIMEOUT_S,
    )
    assert out.returncode == 0, out.stderr
