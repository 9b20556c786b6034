"""The on-box agent on the local provider: job end with the laptop stopped, idle, bootstrap and SSH
sessions are not idle, TTL, unknown nvidia-smi output, restart after a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lifecycle.upproc import tag, tagged
from tests.teardown.conftest import LOADED_SLACK_S, STAGE_TIMEOUT_S, gate, wait_for

REPO = Path(__file__).resolve().parents[2]


def laptop(
    sid: str, teardown: dict, job: str, pause_after: str = "", bootstrap_seconds: float = 0.2, up: dict | None = None
):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.teardown.laptop",
            "--sid",
            sid,
            "--teardown",
            json.dumps(teardown),
            "--up",
            json.dumps(up or {}),
            "--job",
            job,
            "--pause-after",
            pause_after,
            "--bootstrap-seconds",
            str(bootstrap_seconds),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(REPO),
        text=True,
    )


def read_until(proc, word: str, timeout: float = STAGE_TIMEOUT_S) -> list[str]:
    lines = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.strip() == word:
            return lines
    raise AssertionError(f"{word!r} not seen; got {lines}")


FAST = {"sample_seconds": 0.5, "idle_minutes": "off", "job_end_grace_seconds": 1.5, "kill_grace_seconds": 1.0}


def test_agent_destroys_after_job_end_plus_grace_with_laptop_stopped(rig, fake_smi, tmp_path):
    fake_smi.util(97)
    r = rig(FAST)
    go = tmp_path / "job-may-end"
    p = laptop(r.sid, FAST, job="echo started; " + gate(go))  # the job ends once the laptop is stopped
    try:
        read_until(p, "STAGE job")
        os.kill(p.pid, signal.SIGSTOP)  # the laptop sleeps from here on
        go.touch()
        r.inst = r.provider.get("gpuops-" + r.sid)
        r.box = r.provider.box(r.inst)
        wait_for(r.gone, STAGE_TIMEOUT_S)
        exit_code = (Path(r.box.root) / ".gpuops" / "run" / "exit_code").read_text().split()
        job_end = float(exit_code[2])
        st = r.status()
        assert st["destroy"]["reason"] == "job_end"
        assert st["job"]["exit_code"] == 0
        # The grace on the agent's own timeline (the laptop's arm time + the box's monotonic clock,
        # behind the box's wall clock by the arm's latency), bounded above by the wrapper's own time.
        grace = st["destroy"]["requested_at"] - st["job"]["ended_at"]
        assert 1.5 - 0.01 <= grace < 1.5 + LOADED_SLACK_S, grace  # 0.01: ms rounding
        delay = r.destroyed_at() - job_end
        assert delay < 1.5 + LOADED_SLACK_S, delay  # the grace, then the marker poll and the kill
        assert json.loads((Path(r.box.root) / "destroyed.json").read_text())["by"] == "agent"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()


def test_idle_job_at_zero_percent_destroyed_within_window_plus_one_sample(rig, fake_smi):
    fake_smi.util(0, 0)
    t = {"sample_seconds": 0.5, "idle_minutes": 3 / 60, "job_end_grace_seconds": 30}
    r = rig(t)
    r.intent()
    r.create()
    r.arm()
    r.job("sleep 600")  # holds the box, never touches the GPU
    st = wait_for(r.status, STAGE_TIMEOUT_S)
    t0 = st["samples"][0]["t"]
    wait_for(r.gone, STAGE_TIMEOUT_S)
    st = r.status()
    assert st["destroy"]["reason"] == "idle"
    idle_since = st["decision"]["idle_since"]
    assert idle_since == pytest.approx(t0, abs=0.01)  # the same recorded time, no clock in it
    delay = st["destroy"]["requested_at"] - (idle_since + 3.0)
    assert 0 <= delay < LOADED_SLACK_S, delay  # never before the window's end; then its wake-up
    assert "idle: no GPU above 5%" in st["destroy"]["explanation"]


def test_long_bootstrap_at_zero_percent_is_not_idle_then_idle_after(rig, fake_smi, tmp_path):
    fake_smi.util(0)
    t = {"sample_seconds": 0.3, "idle_minutes": 1 / 60, "job_end_grace_seconds": 30}
    r = rig(t)
    r.intent()
    r.create()
    r.arm()
    go = tmp_path / "bootstrap-may-end"
    r.bootstrap(gate(go))  # runs until the test ends it, GPU at 0%

    def boot_span():  # seconds of bootstrap samples the agent has seen, from the first to the newest
        st = r.status() or {}
        boot = [s for s in st.get("samples") or [] if s.get("bootstrap")]
        return boot and boot[-1].get("t_last", boot[-1]["t"]) - boot[0]["t"]

    wait_for(lambda: (boot_span() or 0) >= 2.5, STAGE_TIMEOUT_S)  # over two idle windows of it
    st = r.status()
    assert not r.gone()
    assert st["samples"][-1]["bootstrap"] is True
    assert "bootstrap step running" in st["decision"]["explanation"]
    go.touch()
    wait_for(r.gone, STAGE_TIMEOUT_S)
    st = r.status()
    assert st["destroy"]["reason"] == "idle"
    last_busy = max(s["t"] for s in st["samples"] if s["bootstrap"])
    assert st["decision"]["idle_since"] > last_busy
    assert 1.0 <= st["destroy"]["requested_at"] - st["decision"]["idle_since"] < 1.0 + LOADED_SLACK_S


def test_ssh_session_opened_after_start_is_seen(rig, fake_smi):
    fake_smi.util(0)
    t = {"sample_seconds": 0.3, "idle_minutes": 1.5 / 60}
    r = rig(t)
    r.intent()
    r.create()
    r.arm()
    wait_for(r.status, STAGE_TIMEOUT_S)
    user = os.environ["GPUOPS_AGENT_SSH_USERS"]
    # What sshd's per-session process looks like in ps; a container PID 1 on a tty is not one.
    sess = subprocess.Popen(["bash", "-c", f'exec -a "sshd: {user}@pts/7" sleep 4'])
    notty = subprocess.Popen(["bash", "-c", f'exec -a "sshd: {user}@notty" sleep 30'])
    try:
        wait_for(lambda: (r.status() or {}).get("samples", [{}])[-1].get("ssh") == 1, STAGE_TIMEOUT_S)
        st = r.status()
        assert "1 SSH session(s) open" in st["decision"]["explanation"]
        t_open = time.time()
        sess.wait()
        wait_for(r.gone, STAGE_TIMEOUT_S)
        st = r.status()
        assert st["destroy"]["reason"] == "idle"
        last_ssh = max(s.get("t_last", s["t"]) for s in st["samples"] if s.get("ssh"))  # the agent's own timeline
        assert st["decision"]["idle_since"] > last_ssh
        assert st["destroy"]["requested_at"] >= t_open + 1.5
    finally:
        for proc in (sess, notty):
            proc.kill()
            proc.wait()


def test_ttl_with_a_job_that_never_ends(rig, fake_smi):
    fake_smi.util(99)
    t = {"sample_seconds": 0.5, "max_hours": 2.5 / 3600, "idle_minutes": 1 / 60}
    r = rig(t)
    r.intent()
    r.create()
    r.arm()
    r.job("while true; do sleep 1; done")
    wait_for(r.gone, STAGE_TIMEOUT_S)
    st = r.status()
    assert st["destroy"]["reason"] == "ttl"
    assert 2.5 - 0.01 <= st["destroy"]["requested_at"] - r.inst.created_at < 2.5 + LOADED_SLACK_S  # 0.01: ms rounding
    assert all(g["util"] == 99 for s in st["samples"] for g in s["gpus"])


@pytest.mark.parametrize("limit", ["ttl", "session_cap"])
def test_ttl_counts_from_the_create_when_the_agent_is_armed_late(rig, fake_smi, limit):
    """On a real provider the box boots between create and arm, and that time is billed: the agent
    armed 6 s after the create with a 10 s TTL (or a max_session_usd of 10 s at $2/h) ends the box
    10 s after the create (the provider's record), not 10 s after it started (16 s). It is armed
    with what is LEFT (about 4 s, $0.0022), counted on the box's monotonic clock."""
    fake_smi.util(99)
    gap_s, limit_s, price = 6.0, 10.0, 2.0  # the rig's local offer: $2/h
    td = {"sample_seconds": 0.3, "idle_minutes": "off"}
    td.update(
        {"max_hours": limit_s / 3600}
        if limit == "ttl"
        else {"max_hours": 1.0, "max_session_usd": limit_s / 3600 * price}
    )
    r = rig(td)
    r.intent()
    r.create()
    wait_for(lambda: time.time() >= r.inst.created_at + gap_s, gap_s + STAGE_TIMEOUT_S)  # booting: billed, no agent
    r.arm()
    shipped = json.loads(Path(r.box.root, ".gpuops", "agent.json").read_text())
    waited = shipped["armed_at"] - r.inst.created_at  # >= the 6 s gap
    if limit == "ttl":
        assert shipped["ttl_seconds_left"] == pytest.approx(limit_s - waited, abs=1e-6)
    else:
        assert shipped["session_usd_left"] == pytest.approx((limit_s - waited) / 3600 * price, abs=1e-9)
        assert shipped["ttl_seconds_left"] == pytest.approx(3600 - waited, abs=1e-6)
    r.job("while true; do sleep 1; done")
    wait_for(r.gone, STAGE_TIMEOUT_S)
    assert r.status()["destroy"]["reason"] == limit
    billed = r.destroyed_at() - r.inst.created_at
    assert limit_s - 0.01 <= billed < limit_s + LOADED_SLACK_S, billed  # 0.01: ms rounding; + 5 s < the 16 s from arm


@pytest.mark.parametrize(
    "out,rc",
    [
        ("0, [N/A], 1, 81559\n", 0),
        ("0, [Not Supported], [Not Supported], 81559\n", 0),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
            "NVIDIA driver is installed and running.\n",
            9,
        ),
        ("No devices were found\n", 6),
    ],
)
def test_unknown_nvidia_smi_output_is_not_idle_and_ttl_still_applies(rig, fake_smi, out, rc):
    fake_smi.set(out, rc)
    t = {"sample_seconds": 0.3, "idle_minutes": 0.5 / 60, "max_hours": 2.5 / 3600}
    r = rig(t)
    r.intent()
    r.create()
    r.arm()
    r.job("sleep 600")
    wait_for(r.gone, STAGE_TIMEOUT_S)
    st = r.status()
    assert st["destroy"]["reason"] == "ttl"  # the 0.5 s idle window never fired
    assert st["decision"]["idle_since"] is None
    if rc:
        assert st["errors"] and st["errors"][-1]["msg"].startswith(f"nvidia-smi exited {rc}")


def test_supervisor_restarts_a_killed_worker_and_keeps_the_streak(rig, fake_smi):
    fake_smi.util(50)
    t = {"sample_seconds": 0.3, "idle_minutes": 2 / 60}
    r = rig(t)
    r.intent()
    r.create()
    r.arm()
    st = wait_for(r.status, STAGE_TIMEOUT_S)
    first = st["pid"]
    os.kill(first, signal.SIGKILL)
    st = wait_for(lambda: (s := r.status()) and s["pid"] != first and s, STAGE_TIMEOUT_S)
    assert st["restarts"] == 1
    assert st["samples"][0]["t"] < st["agent_started_at"] + 1  # samples carried over
    arm_again_pid = Path(r.box.root, ".gpuops", "agent.pid").read_text()
    log = Path(r.box.root, ".gpuops", "agent.log")
    declined_before = log.read_text().count("supervisor already running")
    r.arm()  # a second arm does not start a second agent
    # Wait for the second supervisor's own decision (it logs that it found the lock held and exits
    # 0): only then is "no second agent" a fact and not a race lost by a loaded machine.
    wait_for(lambda: log.read_text().count("supervisor already running") > declined_before, STAGE_TIMEOUT_S)
    assert Path(r.box.root, ".gpuops", "agent.pid").read_text() == arm_again_pid
    fake_smi.util(0)
    wait_for(r.gone, STAGE_TIMEOUT_S)
    assert r.status()["destroy"]["reason"] == "idle"


def test_agent_also_ends_box_processes_that_left_their_group(rig, fake_smi):
    fake_smi.util(0)
    r = rig({"sample_seconds": 0.3, "idle_minutes": 1 / 60, "kill_grace_seconds": 0.5})
    r.intent()
    r.create()
    r.arm()
    name = tag()  # followed by name: in its own PID namespace the job's $! is not this machine's pid
    r.job(f"setsid bash -c 'exec -a {name} sleep 600' & sleep 600")  # a daemon in its own session
    try:
        wait_for(lambda: tagged(name), STAGE_TIMEOUT_S)
        wait_for(r.gone, STAGE_TIMEOUT_S)
        assert r.status()["destroy"]["reason"] == "idle"
        wait_for(lambda: not tagged(name), STAGE_TIMEOUT_S)
    finally:
        for pid in tagged(name):
            os.kill(pid, signal.SIGKILL)


def test_an_activity_lease_counts_as_a_session_and_idle_fires_after_it_ends(rig, fake_smi):
    """`gpuops ssh` / `exec` / `-L` hold an activity lease (agentctl.hold_activity); the agent counts it
    like an SSH session with a terminal: an idle GPU under it is not idle, and the window starts at its end."""
    from gpuops.agent.agentctl import hold_activity

    fake_smi.util(0)
    t = {"sample_seconds": 0.3, "idle_minutes": 1.5 / 60}
    r = rig(t)
    r.intent()
    r.create()
    r.arm(interactive=True)
    wait_for(r.status, STAGE_TIMEOUT_S)
    with hold_activity(r.box, hold_seconds=2.0, refresh_seconds=0.3):
        wait_for(lambda: (r.status() or {}).get("samples", [{}])[-1].get("ssh") == 1, STAGE_TIMEOUT_S)
        t_seen = time.monotonic()
        wait_for(lambda: time.monotonic() - t_seen >= 3.0, STAGE_TIMEOUT_S)  # two idle windows held
        assert not r.gone()
        assert "1 SSH session(s) open" in r.status()["decision"]["explanation"]
    wait_for(r.gone, STAGE_TIMEOUT_S)
    st = r.status()
    assert st["destroy"]["reason"] == "idle"  # interactive: no no_job; idle ended it
    last_ssh = max(s.get("t_last", s["t"]) for s in st["samples"] if s.get("ssh"))
    assert st["decision"]["idle_since"] > last_ssh
