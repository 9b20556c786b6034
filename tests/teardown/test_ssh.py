"""Over real SSH (the test sshd) with the emulated Vast.ai: `gpuops up` is SIGKILLed during the
job, the agent on the box destroys the instance with its per-instance key after job end + grace,
and `gpuops watchdog --once` books it; an interactive SSH session opened after the agent started
keeps the box from going idle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import paramiko
import pytest

from gpuops.box.ssh import ensure_ssh_key
from gpuops.config import load_settings
from gpuops.emulators import nvidia_smi as fake_nvidia_smi
from gpuops.emulators.sshd import SshServer
from gpuops.teardown.reconcile import Context
from gpuops.teardown.watchdog import run
from ledger.store import Ledger
from onbox.jobwrap import descendants
from tests.conftest import gpuops_cmd
from tests.teardown.conftest import wait_for
from tests.teardown.scoped import ScopedVastEmulator, vast_instance_key


@pytest.fixture
def world(gpuops_home, tmp_path, monkeypatch, cli_env):
    smi = tmp_path / "smi-bin"
    fake_nvidia_smi.install(
        smi, {**fake_nvidia_smi.DEFAULT_STATE, "gpus": [{**fake_nvidia_smi.H100, "utilization_gpu": 80}]}
    )
    sshd = SshServer(tmp_path / "sshd", extra_path=[smi])
    sshd.authorize(ensure_ssh_key(gpuops_home)[1])
    sshd.start()
    emu = ScopedVastEmulator().start()
    emu.market.ssh_endpoint = (sshd.host, sshd.port)
    environ = tmp_path / "pid1-environ"  # the container's PID 1 environment, where Vast puts the key
    environ.write_bytes(b"CONTAINER_ID=1\0CONTAINER_API_KEY=" + vast_instance_key("1").encode() + b"\0")
    env = dict(
        cli_env,
        VAST_API_KEY=emu.market.api_key,
        VAST_URL=emu.url,
        GPUOPS_AGENT_ENVIRON_FILE=str(environ),
        GPUOPS_TEARDOWN_SAMPLE_SECONDS="0.3",
        GPUOPS_TEARDOWN_KILL_GRACE_SECONDS="0.5",
        GPUOPS_UP_READY_TIMEOUT_SECONDS="20",
    )
    env.pop("GPUOPS_AGENT_SSH_USERS", None)
    try:
        yield {"sshd": sshd, "emu": emu, "env": env, "smi": smi, "home": gpuops_home}
    finally:
        emu.stop()
        sshd.stop()
        sshd.end_box_processes()


def test_up_killed_over_ssh_agent_destroys_vast_instance(world, tmp_path, monkeypatch):
    sshd, emu, env = world["sshd"], world["emu"], dict(world["env"], GPUOPS_TEARDOWN_JOB_END_GRACE_SECONDS="4")
    job = tmp_path / "job.sh"
    job.write_text("sleep 1.5\n")
    up = subprocess.Popen(
        gpuops_cmd("up", "--job", str(job), "--provider", "vast", "--card", "rtx-4090"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    led = Ledger(load_settings().ledger_url())
    try:
        row = wait_for(lambda: (rows := led.rows_between(0, 2e10)) and rows[0].instance_id and rows[0], 30)
        box = sshd.home / "gpuops" / row.label
        wait_for(lambda: (box / ".gpuops" / "run" / "job.pid").exists(), 30)
    finally:
        up.kill()  # the laptop is gone mid-job
        up.wait()
    assert json.loads((box / ".gpuops" / "agent.json").read_text())["destroy"] == {"kind": "vast", "url": emu.url}
    # Hold the box in the state "job over, agent not yet destroying": the agent destroys 4 s after
    # the job's end, and a watchdog that starts later under load finds the box gone, its end
    # unseen (then booked preempted). The agent is paused once its status shows the job's end; a
    # watchdog pass whose clock reads 1 s after that end (inside the grace) reads the box over SSH.
    status = box / ".gpuops" / "agent-status.json"
    st = wait_for(
        lambda: status.exists() and (d := json.loads(status.read_text())).get("job", {}).get("ended_at") and d, 20
    )
    ended, agent_pid = st["job"]["ended_at"], st["pid"]  # the worker (agent.pid is its supervisor)
    os.kill(agent_pid, signal.SIGSTOP)
    try:
        assert emu.market.find(row.instance_id) is not None, "the agent destroyed the box before it could be paused"
        for k, v in env.items():
            if k.startswith(("GPUOPS_", "VAST_")):
                monkeypatch.setenv(k, v)
        settings = load_settings()
        acts = run(settings, once=True, emit=lambda a: None, ctx=Context(settings, clock=lambda: float(ended) + 1.0))
        assert not [a for a in acts if a.kind in ("destroyed", "closed", "error")], acts
    finally:
        os.kill(agent_pid, signal.SIGCONT)
    beat = led.get(row.id).last_heartbeat_at  # the watchdog read the agent: heartbeat and the job's end are booked
    assert beat is not None and "job_exited" in [e.kind for e in led.events(row.id)]
    wait_for(lambda: emu.market.find(row.instance_id) is None, 15)  # the agent, 4 s after the job's end
    st = wait_for(lambda: (d := json.loads(status.read_text())).get("destroy", {}).get("done_at") and d, 10)
    assert st["destroy"]["reason"] == "job_end" and st["destroy"]["result"] == f"destroyed instance {row.instance_id}"
    scoped = [r for r in emu.market.requests if r["auth"] == f"Bearer {vast_instance_key(row.instance_id)}"]
    assert [(r["method"], r["path"]) for r in scoped] == [("DELETE", f"/api/v0/instances/{row.instance_id}/")]
    out = subprocess.run(
        gpuops_cmd("watchdog", "--once", "--json"), env=env, capture_output=True, text=True, timeout=60
    )
    assert [json.loads(x)["kind"] for x in out.stdout.splitlines()] == ["closed"], out.stdout + out.stderr
    row = led.get(row.id)
    assert (row.status, row.end_reason, row.end_source) == ("closed", "job_end", "heartbeat")
    assert row.ended_at == beat  # the last time anyone saw the box, not the time we looked again


def test_interactive_ssh_session_opened_after_agent_start_is_seen(world, tmp_path):
    from gpuops.agent.agentctl import agent_config, arm, read_status
    from gpuops.box.ssh import HostKeyPins, SSHBox
    from gpuops.config import TeardownSettings
    from gpuops.providers.base import CreateSpec, OfferQuery
    from gpuops.providers.keys import Credential
    from gpuops.providers.vast.compute import VastProvider
    from tests.support.emulators import FAST_RETRY

    sshd, emu, home = world["sshd"], world["emu"], world["home"]
    fake_nvidia_smi.set_state(world["smi"], fake_nvidia_smi.DEFAULT_STATE)  # GPU at 0 %
    p = VastProvider(Credential(emu.market.api_key, "test"), emu.url, retry=FAST_RETRY, timeout_s=10)
    o = min(p.offers(OfferQuery(cards=("rtx-4090",), spot=False)), key=lambda o: o.usd_per_hour)
    inst = p.create(o, CreateSpec(label="gpuops-ssh1", image="img", disk_gb=40, ssh_public_key=ensure_ssh_key(home)[1]))
    key = ensure_ssh_key(home)[0]
    box = SSHBox(
        sshd.host,
        sshd.port,
        sshd.user,
        key_path=key,
        pins=HostKeyPins(home / "known_hosts"),
        pin_name="t/1",
        root="gpuops/ssh1",
    ).connect(time.monotonic() + 10)
    os.environ["GPUOPS_AGENT_ENVIRON_FILE"] = world["env"]["GPUOPS_AGENT_ENVIRON_FILE"]
    try:
        cfg = agent_config(
            session_id="ssh1",
            provider="vast",
            instance_id=inst.id,
            root=box.root,
            teardown=TeardownSettings(sample_seconds=0.3, idle_minutes=2 / 60),
            started_at=time.time(),
            usd_per_hour=inst.usd_per_hour,
            extra={"destroy": {"kind": "vast", "url": emu.url}, "status_heartbeat_seconds": 0.3},
        )
        arm(box, cfg)
        wait_for(lambda: read_status(box), 10)
        c = paramiko.SSHClient()
        c.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        c.connect(
            sshd.host, sshd.port, username=sshd.user, key_filename=str(key), look_for_keys=False, allow_agent=False
        )
        shell = c.invoke_shell()  # a person at a terminal on the box: sshd titles it "sshd: user@pts/N"
        try:
            seen = wait_for(
                lambda: (s := read_status(box)) and (s.get("samples") or [{}])[-1].get("ssh", 0) >= 1 and s, 10
            )
            since = seen["samples"][-1]["t"]  # the agent's first sample with the session open
            # the agent's own word, once its samples with the session open span more than the idle
            # window at 0 % GPU (2 s): it decided to keep the box, for that reason
            st = wait_for(lambda: (s := read_status(box)) and s["heartbeat"] > since + 2.0 + 0.3 and s, 20)
            assert st["destroy"] is None and st["decision"]["action"] == "keep"
            assert "SSH session(s) open" in st["decision"]["explanation"]
            assert emu.market.find(inst.id) is not None
        finally:
            shell.close()
            c.close()
        closed = time.time()
        wait_for(lambda: emu.market.find(inst.id) is None, 10)
        st = wait_for(lambda: (d := read_status(box)) and d["destroy"] and d["destroy"]["done_at"] and d, 10)
        assert st["destroy"]["reason"] == "idle" and st["decision"]["idle_since"] >= closed - 0.7
    finally:
        os.environ.pop("GPUOPS_AGENT_ENVIRON_FILE", None)
        pid = sshd.home / "gpuops" / "ssh1" / ".gpuops" / "agent.pid"
        if pid.exists() and emu.market.find(inst.id) is not None:
            os.kill(int(pid.read_text()), signal.SIGTERM)
        box.close()


class HostGoes:
    """Once the emulator has destroyed the instance, its box goes as a reclaimed host does: every
    SSH connection cut and new ones refused (the sshd and its sessions killed), its processes with it."""

    def __init__(self, emu, sshd):
        import threading

        self.emu, self.sshd, self.at = emu, sshd, None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)

    def _run(self) -> None:
        while not self.stop.is_set():
            with self.emu.market.lock:
                gone = any(i.state == "destroyed" for i in self.emu.market.instances.values())
            if gone:
                self.at = time.time()
                if self.sshd.proc is not None:
                    for pid in descendants(self.sshd.proc.pid):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                self.sshd.stop()
                self.sshd.end_box_processes()
                return
            time.sleep(0.05)


@pytest.mark.parametrize("ender", ["ttl", "idle"])
def test_a_quiet_job_ended_by_its_agent_while_up_watches_is_booked_as_billed(world, tmp_path, ender):
    """`up` watches a job that prints one line and is then quiet; the box's own agent ends it (its
    TTL, or the idle layer). The row books the instance's billed time within 5 % or 1 s and its
    cost within 5 % of the provider's bill: not the moment of the job's one line of output."""
    emu, env = world["emu"], dict(world["env"])
    job = tmp_path / "job.sh"
    job.write_text("echo started\nsleep 600\n")
    args: list[str] = []
    if ender == "ttl":
        env["GPUOPS_TEARDOWN_IDLE_MINUTES"] = "off"
        args = ["--max-hours", "0.006"]  # 21.6 s from create
    else:
        fake_nvidia_smi.set_state(world["smi"], fake_nvidia_smi.DEFAULT_STATE)  # GPU at 0 %
        env["GPUOPS_TEARDOWN_IDLE_MINUTES"] = "0.35"  # 21 s
    with HostGoes(emu, world["sshd"]):
        t0 = time.monotonic()
        out = subprocess.run(
            gpuops_cmd("up", "--job", str(job), "--provider", "vast", "--card", "rtx-4090", "--json", *args),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        took = time.monotonic() - t0
    summ = json.loads(out.stdout)
    row = Ledger(load_settings().ledger_url()).get(summ["session"])
    # the TTL: `up`'s own deadline or the agent's, whichever came first; the idle layer: the agent's,
    # whose reason went with the box (nobody could read it: agent_ended)
    want = ("ttl", "agent_ended") if ender == "ttl" else ("agent_ended",)
    assert row.status == "closed" and row.end_reason in want, (summ, out.stderr[-2000:])
    assert took < 21.6 + 60.0, took  # noticed in seconds: no SSH reconnect waited out (120 s each)
    assert emu.market.find(row.instance_id) is None
    inst = emu.market.instances[row.instance_id]
    billed_s = inst.billed_s()  # the emulator's bill, in its documented increment
    print(
        f"{ender}: billed {billed_s:.2f} s ${inst.billed_usd:.6f}; booked {row.billed_seconds:.2f} s ${row.cost_usd:.6f}"
    )
    assert abs(row.billed_seconds - billed_s) <= max(0.05 * billed_s, 1.0), (
        row.billed_seconds,
        billed_s,
        row.end_source,
    )
    assert row.cost_usd == pytest.approx(inst.billed_usd, abs=0.05 * inst.billed_usd), (row.cost_usd, inst.billed_usd)
