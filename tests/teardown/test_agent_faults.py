"""The on-box agent under faults injected at the real boundary (the box side): the laptop
killed after arm, a stopped or killed agent, results copy-back against the agent, a full disk
(RLIMIT_FSIZE), a box clock 5 h ahead, a forged status, a recycled process group, POSIX TZ."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuops.agent.agentctl import read_status, session_teardown
from gpuops.teardown.reconcile import Context
from gpuops.teardown.watchdog import run as watchdog_run
from tests.teardown.conftest import LOADED_SLACK_S, STAGE_TIMEOUT_S, wait_for

REPO = Path(__file__).resolve().parents[2]
FAST = {"sample_seconds": 0.3, "idle_minutes": "off", "job_end_grace_seconds": 1.0, "kill_grace_seconds": 0.5}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def agent_pids(r) -> tuple[int, int]:
    """(supervisor, worker) of the rig's box."""
    st = wait_for(r.status, STAGE_TIMEOUT_S)
    return int(Path(r.box.root, ".gpuops", "agent.pid").read_text()), int(st["pid"])


def kill_quietly(*pids: int) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def watchdog_once(r):
    ctx = Context(r.settings, ledger=r.ledger, arm_margin_s=0.0)
    return watchdog_run(r.settings, once=True, emit=lambda a: None, ctx=ctx)


# -- 1. the laptop dies after arm, before the job ---------------------------------------------------
LAPTOP = textwrap.dedent("""
    import json, sys, time
    from tests.teardown.rig import Rig
    r = Rig(json.loads(sys.argv[1]))
    r.sid, r.label = sys.argv[2], "gpuops-" + sys.argv[2]
    r.intent(); r.create(); r.arm(no_job_seconds=float(sys.argv[3]))
    print("ARMED", flush=True)
    time.sleep(3600)
""")


def test_laptop_killed_after_arm_the_agent_destroys_for_no_job(rig, fake_smi):
    fake_smi.util(0)
    r = rig(FAST)
    p = subprocess.Popen(
        [sys.executable, "-c", LAPTOP, json.dumps(FAST), r.sid, "2.0"],
        cwd=str(REPO),
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "ARMED"  # a blocking read, ended by the laptop's exit at worst
        p.kill()  # the laptop is gone; no job will ever come
        p.wait()
        r.inst = r.provider.get("gpuops-" + r.sid)
        r.box = r.provider.box(r.inst)
        st = wait_for(r.status, STAGE_TIMEOUT_S)
        assert not r.gone()
        wait_for(r.gone, STAGE_TIMEOUT_S)
        st = r.status()
        assert st["destroy"]["reason"] == "no_job"
        assert "armed with no job, no bootstrap and no laptop" in st["destroy"]["explanation"]
        waited = st["destroy"]["requested_at"] - st["agent_started_at"]
        assert 2.0 <= waited < 2.0 + LOADED_SLACK_S, waited
        watchdog_once(r)  # the laptop's side books what the agent did
        row = r.ledger.get(r.sid)
        assert row.status == "closed" and row.end_reason == "no_job"
    finally:
        p.kill()
        p.wait()


def test_the_sessions_own_max_hours_is_the_agents_ttl(rig, fake_smi):
    fake_smi.util(99)
    r = rig(dict(FAST, max_hours=4.0))  # the settings' default; the session asked for 2 s
    r.intent()
    r.create()
    from gpuops.agent.agentctl import agent_config, arm

    cfg = agent_config(
        session_id=r.sid,
        provider="local",
        instance_id=r.inst.id,
        root=r.box.root,
        teardown=r.settings.teardown,
        started_at=r.inst.created_at,
        usd_per_hour=2.0,
        max_hours=2.0 / 3600,
    )
    arm(r.box, cfg)
    wait_for(r.gone, STAGE_TIMEOUT_S)
    st = r.status()
    assert st["destroy"]["reason"] == "ttl" and st["teardown"]["max_hours"] == pytest.approx(2.0 / 3600, abs=1e-9)
    assert 2.0 - 0.01 <= st["destroy"]["requested_at"] - r.inst.created_at < 2.0 + LOADED_SLACK_S  # 0.01: ms rounding


# -- 2. a stopped or dead agent ----------------------------------------------------------------------
def test_stopped_worker_is_killed_and_restarted_by_the_supervisor(rig, fake_smi):
    fake_smi.util(60)
    r = rig({"sample_seconds": 0.3, "idle_minutes": 1 / 60})
    r.intent()
    r.create()
    r.arm(worker_stale_seconds=1.5)
    sup, first = agent_pids(r)
    try:
        os.kill(first, signal.SIGSTOP)
        t0 = time.monotonic()
        st = wait_for(lambda: (s := r.status()) and s["pid"] != first and s, STAGE_TIMEOUT_S)
        assert time.monotonic() - t0 >= 1.5
        assert st["restarts"] == 1
        wait_for(lambda: not alive(first), STAGE_TIMEOUT_S)  # SIGKILLed and reaped, not left stopped
        assert alive(sup)
        fake_smi.util(0)
        wait_for(r.gone, STAGE_TIMEOUT_S)
        assert r.status()["destroy"]["reason"] == "idle"
    finally:
        kill_quietly(first)


def test_dead_agent_the_watchdog_honours_the_jobs_exit_marker(rig, fake_smi):
    fake_smi.util(90)
    r = rig(dict(FAST, max_hours=1.0))
    r.intent()
    r.create()
    r.arm()
    sup, worker = agent_pids(r)
    kill_quietly(sup, worker)  # the agent is gone, and so is the laptop's `up`
    wait_for(lambda: not alive(worker) and not alive(sup), STAGE_TIMEOUT_S)
    r.job("sleep 0.3; exit 3")
    marker = Path(r.box.root, ".gpuops", "run", "exit_marker")
    wait_for(marker.exists, STAGE_TIMEOUT_S)
    st = read_status(r.box)
    assert st["job"] == {"ended_at": pytest.approx(time.time(), abs=3), "exit_code": 3, "source": "exit_marker"}
    time.sleep(1.2)  # the job-end grace passes (no state to wait for: nothing runs on the box)
    # The heartbeat is not yet stale (3 samples + 15 s), so also check the stale path: age it.
    status_path = Path(r.box.root, ".gpuops", "agent-status.json")
    doc = json.loads(status_path.read_text())
    doc["heartbeat"] -= 60
    status_path.write_text(json.dumps(doc))
    # The first pass books the job's end at the time IT saw the marker (the laptop's clock, so a box
    # clock behind cannot shorten the grace); a pass after job_end_grace_seconds destroys and closes.
    acts = watchdog_once(r)
    assert any(e.kind == "job_exited" for e in r.ledger.events(r.sid)), [str(a) for a in acts]
    wait_for(lambda: watchdog_once(r) is not None and r.ledger.get(r.sid).status == "closed", STAGE_TIMEOUT_S)
    row = r.ledger.get(r.sid)
    assert row.end_reason == "job_failed" and row.exit_code == 3
    assert r.provider.get(r.inst.id).status.value == "gone"


# -- 3. the agent against results copy-back ----------------------------------------------------------
HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from gpuops.agent.agentctl import hold_presence
    from gpuops.box.local import LocalBox
    box = LocalBox(Path(sys.argv[1]))
    with hold_presence(box, hold_seconds=float(sys.argv[2]), refresh_seconds=0.2):
        print("HOLDING", flush=True)
        time.sleep(float(sys.argv[3]))
        releasing = time.time()
    print("RELEASED", releasing, flush=True)
    time.sleep(3600)
""")


def holder(r, hold: float, work: float):
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, r.box.root, str(hold), str(work)],
        cwd=str(REPO),
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "HOLDING"
    return p


def test_copy_back_holds_the_job_end_destroy_until_released(rig, fake_smi):
    r = rig(FAST)
    r.intent()
    r.create()
    r.arm()
    wait_for(r.status, STAGE_TIMEOUT_S)
    # The laptop copies results for 4 s under a 30 s lease: a destroy within LOADED_SLACK_S of the
    # release is the release, not the lease lapsing.
    p = holder(r, hold=30.0, work=4.0)
    try:
        r.job("sleep 0.2")
        wait_for(lambda: ((r.status() or {}).get("job") or {}).get("ended_at"), STAGE_TIMEOUT_S)
        st = wait_for(
            lambda: (
                (s := r.status()) and "laptop present" in ((s.get("decision") or {}).get("explanation") or "") and s
            ),
            STAGE_TIMEOUT_S,
        )
        assert st["presence"]["until"] > st["heartbeat"]
        word, releasing = p.stdout.readline().split()
        assert word == "RELEASED"
        wait_for(r.gone, STAGE_TIMEOUT_S)
        held = r.destroyed_at() - float(releasing)
        # held until released; then no wait for the lease to lapse. destroyed_at is on the agent's
        # timeline, behind this machine's clock by the arm's latency (under 1 s): the lower tolerance
        assert -1.0 <= held < LOADED_SLACK_S, held
        assert r.status()["destroy"]["reason"] == "job_end"
    finally:
        p.kill()
        p.wait()


def test_presence_of_a_laptop_that_died_lapses_and_a_stuck_one_has_a_hard_deadline(rig, fake_smi):
    r = rig(FAST)
    r.intent()
    r.create()
    r.arm(presence_max_seconds=3.0)
    wait_for(r.status, STAGE_TIMEOUT_S)
    p = holder(r, hold=1.5, work=3600)  # holds forever
    try:
        r.job("sleep 0.2")
        end = float(
            wait_for(
                lambda: (
                    Path(r.box.root, ".gpuops", "run", "exit_code").exists()
                    and Path(r.box.root, ".gpuops", "run", "exit_code").read_text().split()[2]
                ),
                STAGE_TIMEOUT_S,
            )
        )
        wait_for(r.gone, STAGE_TIMEOUT_S)
        # grace, then at most presence_max_seconds: the lower bound on the agent's own timeline (the
        # laptop's arm time + the box's monotonic clock, behind the box's wall clock by the arm's
        # latency), the upper bound against the wrapper's wall-clock exit time
        st = r.status()
        on_agent = st["destroy"]["requested_at"] - st["job"]["ended_at"]
        assert 1.0 + 3.0 - 0.01 <= on_agent < 1.0 + 3.0 + LOADED_SLACK_S, on_agent  # 0.01: ms rounding
        held = r.destroyed_at() - end
        assert held < 1.0 + 3.0 + LOADED_SLACK_S, held
    finally:
        p.kill()
        p.wait()
    r2 = rig(FAST)
    r2.intent()
    r2.create()
    r2.arm()
    wait_for(r2.status, STAGE_TIMEOUT_S)
    p = holder(r2, hold=1.5, work=3600)
    try:
        r2.job("sleep 0.2")
        wait_for(lambda: ((r2.status() or {}).get("job") or {}).get("ended_at"), STAGE_TIMEOUT_S)
        p.kill()  # the laptop dies mid copy-back
        p.wait()
        died = time.time()
        wait_for(r2.gone, STAGE_TIMEOUT_S)
        assert r2.destroyed_at() - died < 1.5 + LOADED_SLACK_S  # the lease (held for ever) lapses after its hold
    finally:
        p.kill()
        p.wait()


def test_a_stuck_copy_back_holds_the_job_end_no_longer_than_grace_plus_the_fetch_deadline(rig, fake_smi):
    # What must come home has one deadline from the job's exit ([teardown] fetch_deadline_seconds):
    # a laptop stuck in its copy-back, holding the presence lease for ever, gets that and no more
    # (presence_max_seconds, an hour here, is not what ends it).
    r = rig(dict(FAST, fetch_deadline_seconds=2.0))
    r.intent()
    r.create()
    r.arm(presence_max_seconds=3600.0)
    wait_for(r.status, STAGE_TIMEOUT_S)
    p = holder(r, hold=1.5, work=3600)  # holds forever
    try:
        r.job("sleep 0.2")
        wait_for(r.gone, STAGE_TIMEOUT_S)
        st = r.status()
        on_agent = st["destroy"]["requested_at"] - st["job"]["ended_at"]  # one timeline: the agent's
        assert st["destroy"]["reason"] == "job_end"
        assert 1.0 + 2.0 - 0.01 <= on_agent < 1.0 + 2.0 + LOADED_SLACK_S, on_agent  # 0.01: ms rounding
    finally:
        p.kill()
        p.wait()


# -- 4. a full disk ----------------------------------------------------------------------------------
def test_status_writes_failing_with_efbig_do_not_stop_the_destroy_or_restart_the_agent(rig, fake_smi):
    fake_smi.util(80)
    r = rig({"sample_seconds": 0.3, "idle_minutes": 2 / 60, "kill_grace_seconds": 0.5})
    r.intent()
    r.create()
    r.arm()
    sup, worker = agent_pids(r)
    frozen = r.status()
    for pid in (sup, worker):  # every write past 100 bytes now fails (EFBIG; SIGXFSZ ignored)
        resource.prlimit(
            pid, resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY)
        )  # soft limit: liftable without privilege
    fake_smi.util(0)

    def gone_with_same_worker():
        assert alive(worker) or r.gone(), "the worker died before the destroy"
        return r.gone()

    wait_for(gone_with_same_worker, STAGE_TIMEOUT_S)
    assert json.loads(Path(r.box.root, "destroyed.json").read_text())["by"] == "agent"
    assert r.status()["heartbeat"] == frozen["heartbeat"] or r.status()["pid"] == worker  # no new worker wrote
    wait_for(lambda: not alive(sup) and not alive(worker), STAGE_TIMEOUT_S)


def test_write_failures_are_counted_and_the_idle_streak_survives(rig, fake_smi):
    fake_smi.util(0)
    r = rig({"sample_seconds": 0.3, "idle_minutes": 6 / 60})
    r.intent()
    r.create()
    r.arm(status_heartbeat_seconds=0.3)
    sup, worker = agent_pids(r)
    first = wait_for(lambda: (s := r.status()) and s["samples"] and s, STAGE_TIMEOUT_S)
    for pid in (sup, worker):
        resource.prlimit(
            pid, resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY)
        )  # soft limit: liftable without privilege
    limited_at = time.time()
    # Hold the limit until the worker has certainly tried to write under it: its samples run the
    # fake nvidia-smi, a child that inherits the limit, whose call log (emptied here) can take one
    # partial line and no more. Four samples begun under the limit mean three loops done, the third
    # at least two sample periods after the last write that can have landed: the status was due
    # (heartbeat 0.3 s) and its write failed.
    calls = fake_smi.bindir / "nvidia-smi.calls"
    for _ in range(4):
        calls.write_text("")
        wait_for(lambda: calls.stat().st_size > 0, STAGE_TIMEOUT_S)
    # A write begun before the limit may still land, with a heartbeat from before it (the agent's
    # clock, the arm's wall time plus its monotonic clock since, runs behind this one); none after.
    assert r.status()["heartbeat"] <= limited_at + 0.001  # 0.001: the status rounds to ms
    for pid in (sup, worker):
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    st = wait_for(lambda: (s := r.status()) and s["write_failures"] > 0 and s, STAGE_TIMEOUT_S)
    assert st["pid"] == worker and st["restarts"] == 0
    assert st["decision"]["idle_since"] == pytest.approx(first["samples"][0]["t"], abs=0.01)
    wait_for(r.gone, STAGE_TIMEOUT_S)
    assert r.status()["destroy"]["reason"] == "idle"


# -- 7. a box clock 5 h ahead ------------------------------------------------------------------------
SKEW = "import time as _t\n_real = _t.time\n_t.time = lambda: _real() + 5 * 3600\n"


@pytest.fixture
def box_clock_ahead(tmp_path, monkeypatch):
    """Every Python process started on the local box from now on sees its wall clock 5 h ahead."""
    d = tmp_path / "skew"
    d.mkdir()
    (d / "sitecustomize.py").write_text(SKEW)
    monkeypatch.setenv("PYTHONPATH", f"{d}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return d


def test_box_clock_5h_ahead_neither_fires_the_ttl_early_nor_shifts_the_job_end(rig, fake_smi, box_clock_ahead):
    fake_smi.util(99)
    r = rig(dict(FAST, max_hours=3.0 / 3600))
    r.intent()
    r.create()
    r.arm()
    st = wait_for(r.status, STAGE_TIMEOUT_S)
    assert abs(st["heartbeat"] - time.time()) < 60  # the ledger's timeline, not the box's clock (5 h = 18,000 s off)
    wait_for(r.gone, STAGE_TIMEOUT_S)
    st = r.status()
    assert st["destroy"]["reason"] == "ttl"
    assert 3.0 - 0.01 <= r.destroyed_at() - r.inst.created_at < 3.0 + LOADED_SLACK_S  # 0.01: ms rounding

    r2 = rig(FAST)
    r2.intent()
    r2.create()
    r2.arm()
    wait_for(r2.status, STAGE_TIMEOUT_S)
    r2.job("sleep 0.5")
    t_end = wait_for(lambda: ((r2.status() or {}).get("job") or {}).get("ended_at"), STAGE_TIMEOUT_S)
    assert abs(t_end - time.time()) < 60  # not 5 h off
    wait_for(r2.gone, STAGE_TIMEOUT_S)
    st = r2.status()
    assert st["destroy"]["reason"] == "job_end"
    # The 1 s grace, both ends on the agent's own timeline (anchored at the laptop's armed_at: the
    # box clock is 5 h off). Not ``t_end``: read before the agent saw the end, that is the exit
    # marker's time clamped to the moment of reading, which a loaded machine makes late.
    assert st["job"].get("source") != "exit_marker"
    assert (
        1.0 - 0.01 <= st["destroy"]["requested_at"] - st["job"]["ended_at"] < 1.0 + LOADED_SLACK_S
    )  # 0.01: ms rounding
    assert abs(r2.destroyed_at() - t_end) < 1.0 + LOADED_SLACK_S


# -- 10. a forged status -----------------------------------------------------------------------------
def test_forged_status_cannot_extend_the_ttl_or_the_bill(rig, fake_smi):
    r = rig(dict(FAST, max_hours=1.5 / 3600))
    r.intent()
    r.create()
    future = time.time() + 86400
    forged = {
        "version": 2,
        "session": r.sid,
        "heartbeat": future,
        "sample_seconds": 0.3,
        "samples": [],
        "teardown": {"max_hours": 1000, "idle_minutes": "off"},
        "job": {"ended_at": None, "exit_code": None},
        "destroy": None,
    }
    Path(r.box.root, ".gpuops", "agent-status.json").write_text(json.dumps(forged))
    st = read_status(r.box)
    now = time.time()
    assert st["heartbeat"] <= now
    assert session_teardown(st, r.settings.teardown)["max_hours"] == pytest.approx(1.5 / 3600, abs=1e-9)
    assert session_teardown(st, {"max_hours": 2.0})["max_hours"] == 2.0
    assert (
        session_teardown({"teardown": {"max_hours": 0.5}}, {"max_hours": 2.0})["max_hours"] == 0.5
    )  # tightening is fine
    junk = session_teardown(
        {"teardown": {"max_hours": "nan", "sample_seconds": "x", "idle_minutes": -1, "max_session_usd": True}},
        {"max_hours": 2.0, "sample_seconds": 10.0, "idle_minutes": 15.0, "max_session_usd": None},
    )
    assert junk == {"max_hours": 2.0, "sample_seconds": 10.0, "idle_minutes": 15.0, "max_session_usd": None}
    wait_for(lambda: time.time() > r.inst.created_at + 1.6, STAGE_TIMEOUT_S)
    before = time.time()
    watchdog_once(r)
    after = time.time()
    row = r.ledger.get(r.sid)
    assert row.status == "closed" and row.end_reason == "ttl"
    # The forged heartbeat (a day ahead) reads as "now" at most: the proof of life booked is the
    # laptop's clock during this watchdog pass, never the box's claim.
    assert row.last_heartbeat_at is not None and before <= row.last_heartbeat_at <= after
    assert row.ended_at - r.inst.created_at < 60  # the bill is the box's life, not 86,405 s


# -- 9. local destroy checks the box marker ------------------------------------------------------------
def test_local_destroy_spares_a_process_group_without_the_box_marker(rig, fake_smi):
    r = rig(FAST)
    r.intent()
    r.create()
    stranger = subprocess.Popen(["sleep", "600"], start_new_session=True)  # not of the box: no marker
    try:
        r.box.run_detached("sleep 600")
        with open(Path(r.box.root, ".gpuops", "pgids"), "a") as f:
            f.write(f"{stranger.pid}\n")  # a recycled pgid, or one the job wrote
        pgids = [int(x) for x in Path(r.box.root, ".gpuops", "pgids").read_text().split()]
        ours = [g for g in pgids if g != stranger.pid]
        r.provider.destroy(r.inst.id)
        assert stranger.poll() is None and alive(stranger.pid)
        assert all(not alive(g) for g in ours)
    finally:
        stranger.kill()
        stranger.wait()


# -- 6. POSIX TZ ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("tz", ["UTC0", "CET-1CEST"])
def test_watchdog_daemon_ticks_under_a_posix_tz(rig, cli_env, tmp_path, tz):
    from tests.conftest import gpuops_cmd

    cfg = tmp_path / "infra.toml"
    cfg.write_text("[teardown]\nmax_hours = 0.001\n")  # 3.6 s: a later tick of the daemon must destroy it
    r = rig({"max_hours": 0.001})
    r.intent()
    r.create()
    env = dict(cli_env, TZ=tz)
    p = subprocess.Popen(
        gpuops_cmd("watchdog", "--interval", "0.5", "--config", str(cfg)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: p.poll() is not None or r.ledger.get(r.sid).status == "closed", STAGE_TIMEOUT_S)
        assert p.poll() is None, p.stderr.read()
        assert r.ledger.get(r.sid).end_reason == "ttl"
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    err = p.stderr.read()
    assert "tzlocal" not in err and "Traceback" not in err, err


# -- 5. nvidia-smi exits 14 with valid rows ----------------------------------------------------------
def test_nvidia_smi_exit_14_with_valid_rows_is_a_reading_not_unknown(rig, tmp_path):
    from gpuops.emulators import nvidia_smi as fake_nvidia_smi
    from onbox.agent import sample_gpus

    smi = fake_nvidia_smi.install(tmp_path / "real-smi", dict(fake_nvidia_smi.DEFAULT_STATE, **fake_nvidia_smi.INFOROM))
    r = sample_gpus([smi], timeout=20)
    assert r["error"] is None and r["gpus"] == [
        {"index": 0, "util": 0.0, "mem_used_mib": 0.0, "mem_total_mib": 81559.0}
    ]
    assert r["warning"] == "nvidia-smi exited 14: WARNING: infoROM is corrupted at gpu 0000:18:00.0"
    box = rig({"sample_seconds": 0.3, "idle_minutes": 1 / 60})
    box.intent()
    box.create()
    box.arm(nvidia_smi=[smi], gpu_source="nvidia-smi")
    wait_for(box.gone, STAGE_TIMEOUT_S)
    st = box.status()
    assert st["destroy"]["reason"] == "idle" and st["errors"] == []
    assert st["samples"][-1]["warning"].startswith("nvidia-smi exited 14")


def test_supervisor_exits_when_the_box_directory_is_removed_under_a_crashing_worker(rig, fake_smi):
    import shutil

    r = rig(dict(FAST, sample_seconds=0.3))
    r.intent()
    r.create()
    r.arm()
    sup, worker = agent_pids(r)
    (Path(r.box.root) / ".gpuops" / "agent.json").write_text("{not json")  # the next worker cannot start
    os.kill(worker, signal.SIGKILL)
    shutil.rmtree(r.box.root)  # and then the box is gone altogether
    wait_for(lambda: not alive(sup), STAGE_TIMEOUT_S)
