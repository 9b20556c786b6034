"""Teardown on the emulated providers (their real wire protocols, through the real SDKs for the
laptop side): the agent destroys with the box's narrow key from PID 1's environment; the watchdog
books preemption (`preempted`, cost up to the agent's last heartbeat), the balance floor per
provider, and reconcile closes a pod deleted in the console."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuops.config import load_settings
from gpuops.providers.base import CreateSpec, OfferQuery
from gpuops.providers.keys import Credential
from gpuops.teardown.reconcile import Context
from gpuops.teardown.watchdog import run
from ledger.store import Ledger
from tests.support.emulators import FAST_RETRY
from tests.teardown.conftest import LOADED_SLACK_S, wait_for
from tests.teardown.scoped import ScopedRunPodEmulator, ScopedVastEmulator, runpod_pod_key, vast_instance_key

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def rp():
    emu = ScopedRunPodEmulator().start()
    from gpuops.providers.runpod.compute import RunPodProvider

    yield emu, RunPodProvider(Credential(emu.market.api_key, "test"), emu.url, retry=FAST_RETRY)
    emu.stop()


@pytest.fixture
def vast():
    emu = ScopedVastEmulator().start()
    from gpuops.providers.vast.compute import VastProvider

    yield emu, VastProvider(Credential(emu.market.api_key, "test"), emu.url, retry=FAST_RETRY, timeout_s=10)
    emu.stop()


def create(p, label: str, spot: bool = False):
    offers = [o for o in p.offers(OfferQuery(cards=("rtx-4090",), spot=spot or None)) if o.spot == spot]
    o = min(offers, key=lambda o: o.usd_per_hour)
    return p.create(
        o,
        CreateSpec(
            label=label,
            image="img",
            disk_gb=40,
            ssh_public_key="ssh-ed25519 AAAA test",
            bid_usd_per_hour=o.min_bid if spot else None,
        ),
    )


def run_agent(tmp_path: Path, kind: str, url: str, instance_id: str, environ: dict[str, str]) -> subprocess.Popen:
    """The agent as it runs on a box: config from the laptop, keys only in PID 1's environment
    (here a file standing in for /proc/1/environ); its own environment has no key at all."""
    root = tmp_path / "box"
    (root / ".gpuops" / "run").mkdir(parents=True)
    env_file = tmp_path / "environ"
    env_file.write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in environ.items()))
    cfg = {
        "session": "s1",
        "provider": kind,
        "instance_id": instance_id,
        "root": str(root),
        "started_at": time.time(),
        "usd_per_hour": 0.5,
        "teardown": {"sample_seconds": 0.3, "idle_minutes": "off", "job_end_grace_seconds": 0.3},
        "destroy": {"kind": kind, "url": url},
        "environ_file": str(env_file),
        "nvidia_smi": ["false"],
        "ssh_users": ["nobody-here"],
    }
    (root / ".gpuops" / "agent.json").write_text(json.dumps(cfg))
    clean = {k: v for k, v in os.environ.items() if not any(s in k for s in ("API_KEY", "RUNPOD", "VAST", "CONTAINER"))}
    p = subprocess.Popen(
        [sys.executable, str(REPO / "onbox" / "agent.py"), "--config", str(root / ".gpuops" / "agent.json")],
        env=clean,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "agent.log", "w"),
        start_new_session=True,
    )
    # the job exits: the agent destroys after the 0.3 s grace
    (root / ".gpuops" / "run" / "exit_code").write_text(f"0\n{time.time() - 5:.3f}\n{time.time():.3f}\n")
    (root / ".gpuops" / "run" / "exit_marker").write_text("")
    return p


def status_of(tmp_path: Path) -> dict:
    try:
        return json.loads((tmp_path / "box" / ".gpuops" / "agent-status.json").read_text())
    except FileNotFoundError:
        return {}


def stop(a: subprocess.Popen) -> None:
    """End the agent's whole group (supervisor and worker)."""
    try:
        os.killpg(a.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    a.wait()


def test_agent_terminates_runpod_pod_with_its_pod_scoped_key(tmp_path, rp):
    """The pod key may terminate (the first of its three possible answers)."""
    emu, p = rp
    inst = create(p, "gpuops-rp1")
    other = create(p, "gpuops-rp2")
    emu.market.faults.inject["terminate"] = [502]  # a gateway hiccup: the agent retries
    a = run_agent(
        tmp_path,
        "runpod",
        emu.url,
        "ignored-config-id",
        {"RUNPOD_POD_ID": inst.id, "RUNPOD_API_KEY": runpod_pod_key(inst.id), "PATH": "/usr/bin"},
    )
    try:
        assert a.wait(timeout=20) == 0
    finally:
        stop(a)
    assert emu.market.find(inst.id) is None and emu.market.find(other.id) is not None
    calls = [r for r in emu.market.requests if r["auth"] != f"Bearer {emu.market.api_key}"]
    assert [(c["method"], c["path"], c["auth"]) for c in calls] == [
        ("DELETE", f"/v2/pods/{inst.id}", f"Bearer {runpod_pod_key(inst.id)}")
    ] * 2
    st = status_of(tmp_path)
    assert st["destroy"]["reason"] == "job_end" and st["destroy"]["attempts"] == 2
    assert st["destroy"]["result"] == f"terminated pod {inst.id}"
    assert "rp_TESTKEY" not in (tmp_path / "box" / ".gpuops" / "agent.json").read_text()
    p.destroy(other.id)


class _BoxCtx(Context):
    """A reconcile/watchdog context that reads the agent's status from the agent's own directory
    (as it would over SSH), for boxes that are this test's agents."""

    def __init__(self, *a, box_root: Path, **kw):
        super().__init__(*a, **kw)
        self.box_root = box_root

    def box(self, provider, inst):
        from gpuops.box.local import LocalBox

        return LocalBox(self.box_root) if inst.status.value == "running" else None


@pytest.mark.parametrize("refusal", [403, 401])
def test_pod_key_that_may_only_stop_stops_it_and_the_watchdog_terminates_it(gpuops_home, tmp_path, rp, refusal):
    """The pod key may not terminate (401/403) but may stop: the agent stops the pod (GPU billing
    ends, the pod shows EXITED); the next laptop-side pass terminates it with the account key and
    books the compute's end at the agent's last heartbeat."""
    emu, p = rp
    emu.pod_key_may, emu.pod_key_refusal = {"stop"}, refusal
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    inst = create(p, "gpuops-k1")
    book(led, "k1", "runpod", inst, spot=False, account=p.account)
    beat = time.time()
    led.heartbeat("k1", beat)  # the last status the laptop read before the pod stopped
    a = run_agent(
        tmp_path, "runpod", emu.url, inst.id, {"RUNPOD_POD_ID": inst.id, "RUNPOD_API_KEY": runpod_pod_key(inst.id)}
    )
    try:
        assert a.wait(timeout=20) == 0
    finally:
        stop(a)
    st = status_of(tmp_path)
    assert st["destroy"]["result"].startswith(f"stopped pod {inst.id} (its key may not terminate it: HTTP {refusal})")
    assert emu.market.instances[inst.id].state == "stopped" and p.get(inst.id).raw_status == "EXITED"
    pod_calls = [
        (r["method"], r["path"], r["body"])
        for r in emu.market.requests
        if r["auth"] == f"Bearer {runpod_pod_key(inst.id)}"
    ]
    assert pod_calls == [
        ("DELETE", f"/v2/pods/{inst.id}", None),
        ("POST", f"/v2/pods/{inst.id}/action", {"action": "stop"}),
    ]
    acts = run(settings, once=True, emit=lambda a: None, ctx=ctx(led, settings, runpod=p))
    assert [("k1", "destroyed")] == [(x.session, x.kind) for x in acts if x.kind == "destroyed"], acts
    row = led.get("k1")
    assert (row.status, row.ended_at, row.end_source) == ("closed", beat, "heartbeat")
    assert emu.market.find(inst.id) is None  # terminated with the account key: the disk bills no more


def test_a_stop_answered_409_on_a_running_pod_is_not_taken_as_stopped(tmp_path, rp):
    """A 409 on ``/action`` means "not valid for its status": the agent reads the pod, and one
    still RUNNING is tried again (never "already stopped" on doubt)."""
    emu, p = rp
    emu.pod_key_may, emu.action_conflict = {"stop"}, 1
    inst = create(p, "gpuops-k9")
    wait_for(lambda: p.get(inst.id).ssh is not None, 10)
    a = run_agent(
        tmp_path, "runpod", emu.url, inst.id, {"RUNPOD_POD_ID": inst.id, "RUNPOD_API_KEY": runpod_pod_key(inst.id)}
    )
    try:
        assert a.wait(timeout=20) == 0
    finally:
        stop(a)
    st = status_of(tmp_path)
    assert st["destroy"]["result"].startswith(f"stopped pod {inst.id} (its key may not terminate it: HTTP 403)")
    assert st["destroy"]["attempts"] == 2 and "HTTP 409 while the pod reads RUNNING" in st["errors"][-1]["msg"]
    assert emu.market.instances[inst.id].state == "stopped"
    p.destroy(inst.id)
    assert emu.live() == []


def test_pod_key_refused_both_ways_keeps_trying_and_the_laptop_terminates(gpuops_home, tmp_path, rp):
    """The pod key may neither terminate nor stop: the agent keeps trying, its status readable and
    saying why; the watchdog, reading that the agent asked for the end, terminates the pod with the
    account key and books the agent's reason at the confirmed destroy."""
    emu, p = rp
    emu.pod_key_may = set()
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    inst = create(p, "gpuops-k2")
    wait_for(lambda: p.get(inst.id).ssh is not None, 10)
    book(led, "k2", "runpod", inst, spot=False, account=p.account)
    a = run_agent(
        tmp_path, "runpod", emu.url, inst.id, {"RUNPOD_POD_ID": inst.id, "RUNPOD_API_KEY": runpod_pod_key(inst.id)}
    )
    try:
        wait_for(lambda: (st := status_of(tmp_path)).get("destroy") and st["destroy"]["attempts"] >= 2, 15)
        st = status_of(tmp_path)
        assert st["destroy"]["done_at"] is None and st["destroy"]["reason"] == "job_end"
        assert "refused (HTTP 403), and stop: HTTP 403" in st["errors"][-1]["msg"]
        assert emu.market.find(inst.id) is not None and emu.market.instances[inst.id].state == "running"
        c = _BoxCtx(
            settings,
            ledger=led,
            providers={"runpod": p},
            arm_margin_s=1e6,
            ssh_connect_s=0.5,
            box_root=tmp_path / "box",
        )
        acts = run(settings, once=True, emit=lambda a: None, ctx=c)
    finally:
        stop(a)
    assert [("k2", "destroyed")] == [(x.session, x.kind) for x in acts if x.kind == "destroyed"], acts
    row = led.get("k2")
    assert (row.status, row.end_reason, row.end_source) == ("closed", "job_end", "destroy")
    assert abs(row.ended_at - emu.market.instances[inst.id].ended_t) <= 2.0
    deletes = [r["auth"] for r in emu.market.requests if (r["method"], r["path"]) == ("DELETE", f"/v2/pods/{inst.id}")]
    assert deletes[-1] == f"Bearer {emu.market.api_key}" and set(deletes[:-1]) == {f"Bearer {runpod_pod_key(inst.id)}"}


def test_agent_destroys_vast_instance_with_container_api_key(tmp_path, vast):
    emu, p = vast
    inst = create(p, "gpuops-v1")
    a = run_agent(
        tmp_path, "vast", emu.url, "0", {"CONTAINER_ID": inst.id, "CONTAINER_API_KEY": vast_instance_key(inst.id)}
    )
    try:
        assert a.wait(timeout=20) == 0
    finally:
        stop(a)
    assert emu.market.find(inst.id) is None
    calls = [r for r in emu.market.requests if r["auth"] != f"Bearer {emu.market.api_key}"]
    assert [(c["method"], c["path"], c["auth"]) for c in calls] == [
        ("DELETE", f"/api/v0/instances/{inst.id}/", f"Bearer {vast_instance_key(inst.id)}")
    ]
    assert status_of(tmp_path)["destroy"]["result"] == f"destroyed instance {inst.id}"


def test_agent_without_a_key_keeps_trying_and_says_why(tmp_path, vast):
    emu, p = vast
    inst = create(p, "gpuops-v2")
    a = run_agent(tmp_path, "vast", emu.url, inst.id, {"PATH": "/usr/bin"})  # no CONTAINER_API_KEY in PID 1
    try:
        wait_for(lambda: (st := status_of(tmp_path)).get("destroy") and st["destroy"]["attempts"] >= 2, 10)
    finally:
        stop(a)
    st = status_of(tmp_path)
    assert st["destroy"]["done_at"] is None
    assert "CONTAINER_API_KEY / CONTAINER_ID not in PID 1's environment" in st["errors"][-1]["msg"]
    assert emu.market.find(inst.id) is not None
    p.destroy(inst.id)


def book(led: Ledger, sid: str, provider: str, inst, spot: bool, account: str | None = None) -> None:
    """A row as `up` books it: ``account`` is the renting provider's (gpuops.ownership)."""
    led.add_session(
        dict(
            id=sid,
            experiment="e",
            job="j",
            provider=provider,
            card="rtx-4090",
            gpu_count=1,
            spot=spot,
            label=f"gpuops-{sid}",
            simulated=False,
            status="provisioning",
            created_at=time.time(),
            account=account,
        )
    )
    led.update(
        sid, instance_id=inst.id, instance_created_at=inst.created_at, usd_per_hour=inst.usd_per_hour, status="running"
    )


def ctx(led, settings, **providers):
    return Context(settings, ledger=led, providers=providers, arm_margin_s=1e6, ssh_connect_s=0.5)


@pytest.mark.parametrize("which", ["vast", "runpod"])
def test_preempted_spot_instance_closed_preempted_with_cost_to_last_heartbeat(gpuops_home, which, request):
    emu, p = request.getfixturevalue("vast" if which == "vast" else "rp")
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    inst = create(p, "gpuops-s-pre", spot=(which == "vast"))
    if which == "runpod":  # RunPod spot is going away (research); mark the emulated pod interruptible
        emu.market.instances[inst.id].spot = True
    book(led, "s-pre", which, inst, spot=True, account=p.account)
    time.sleep(1.2)  # the box bills for a while: what is under test is the time itself
    beat = time.time()
    led.heartbeat("s-pre", beat)  # the agent's last heartbeat before the box lost its GPU
    emu.preempt(inst.id)
    gpu_cost = emu.market.instances[inst.id].billed_usd  # what the GPU cost up to the preemption
    acts = run(settings, once=True, emit=lambda a: None, ctx=ctx(led, settings, **{which: p}))
    assert [("s-pre", "destroyed")] == [(a.session, a.kind) for a in acts if a.kind == "destroyed"], acts
    row = led.get("s-pre")
    assert (row.status, row.end_reason, row.ended_at, row.end_source) == ("closed", "preempted", beat, "heartbeat")
    assert emu.market.find(inst.id) is None  # the stopped box would have billed its disk
    rate = inst.usd_per_hour
    assert row.cost_usd == pytest.approx(gpu_cost, abs=rate * 2.0 / 3600)  # within 2 s of billing (whole-second stamps)
    assert row.billed_seconds == math.ceil(beat - inst.created_at)  # to the heartbeat, not to "now"


def test_balance_floor_destroys_only_that_providers_boxes(gpuops_home, rp, vast):
    (remu, rprov), (vemu, vprov) = rp, vast
    settings = load_settings(overrides={"teardown": {"balance_floor_usd": 5.0}})
    led = Ledger(settings.ledger_url())
    ri, vi = create(rprov, "gpuops-b-rp"), create(vprov, "gpuops-b-v")
    book(led, "b-rp", "runpod", ri, spot=False, account=rp[1].account)
    book(led, "b-v", "vast", vi, spot=False, account=vast[1].account)
    vemu.market.initial_balance = 4.5  # Vast's credit falls below the floor during the run
    acts = run(settings, once=True, emit=lambda a: None, ctx=ctx(led, settings, runpod=rprov, vast=vprov))
    assert ("", "refused") in [(a.session, a.kind) for a in acts]
    assert led.get("b-v").end_reason == "balance_floor" and vemu.market.find(vi.id) is None
    assert led.get("b-rp").status == "running" and remu.market.find(ri.id) is not None
    from gpuops.errors import BadInput
    from gpuops.teardown.budget import assert_not_refused

    assert_not_refused(led, "runpod")
    with pytest.raises(BadInput, match=r"vast balance \$4\.\d\d is below the floor \$5\.00"):
        assert_not_refused(led, "vast", vprov.account)
    rprov.destroy(ri.id)


def test_reconcile_closes_pod_deleted_in_console_at_last_heartbeat(gpuops_home, rp):
    emu, p = rp
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    inst = create(p, "gpuops-c1")
    book(led, "c1", "runpod", inst, spot=False, account=p.account)
    orphan = create(p, "gpuops-c2")  # its row was closed: an orphan
    led.add_session(
        dict(
            id="c2",
            experiment="e",
            job="j",
            provider="runpod",
            card="rtx-4090",
            gpu_count=1,
            spot=False,
            label="gpuops-c2",
            simulated=False,
            status="provisioning",
            created_at=time.time(),
        )
    )
    led.close("c2", time.time(), "provision_failed")
    beat = time.time()
    led.heartbeat("c1", beat)
    emu.delete_from_console(inst.id)
    time.sleep(0.3)
    from gpuops.teardown.reconcile import reconcile

    acts = reconcile(ctx(led, settings, runpod=p))
    assert sorted((a.session, a.kind) for a in acts) == [("c1", "closed"), ("c2", "orphan_destroyed")]
    row = led.get("c1")
    # Armed (it heartbeated) and gone with nothing that kept why: booked honestly as agent_ended
    # ("ended while its agent was armed, reason unknown"), never a guessed interrupted/preempted.
    assert (row.end_reason, row.ended_at, row.end_source) == ("agent_ended", beat, "heartbeat")
    assert emu.market.find(orphan.id) is None


def test_a_row_whose_end_was_requested_has_its_pod_terminated_by_the_next_pass(gpuops_home, rp):
    """A destroy that gave up (every attempt refused) leaves the row open with its end requested;
    the next watchdog pass terminates the pod, running or stopped, and books the requested reason."""
    from gpuops.teardown.lifecycle import end_rental

    emu, p = rp
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    inst = create(p, "gpuops-q1")
    book(led, "q1", "runpod", inst, spot=False, account=p.account)
    emu.market.faults.inject["terminate"] = [502] * 100
    got = end_rental(led, p, "q1", "idle", by="watchdog:test", attempts=1, sleep=lambda s: None)
    assert not got.closed and emu.market.find(inst.id) is not None
    emu.market.faults.inject.clear()
    acts = run(settings, once=True, emit=lambda a: None, ctx=ctx(led, settings, runpod=p))
    assert [("q1", "destroyed")] == [(x.session, x.kind) for x in acts if x.kind == "destroyed"], acts
    row = led.get("q1")
    assert (row.status, row.end_reason) == ("closed", "idle") and emu.market.find(inst.id) is None


# -- the books against the provider's own bill: a box whose end nobody saw --------------------------
def _billed(emu, iid: str, kind: str | None = None) -> tuple[float, float]:
    """(seconds, USD) the emulator billed instance ``iid`` (of segment ``kind`` only, when given), in its increment."""
    i = emu.market.instances[iid]
    return i.billed_s(kind), i.billed_cost(kind)


def _within(booked: float, billed: float, rel: float = 0.05, abs_: float = 1.0) -> bool:
    """The bar for seconds: within 5 % or 1 s of the provider's figure."""
    return abs(booked - billed) <= max(rel * billed, abs_)


# How long these boxes bill: long enough that the ledger's whole-second rounding (up) stays under
# the 5 % the cost is judged by (1 s in 21 s).
BILLS_S = 21.0


def _live_until(led, sid: str, seconds: float) -> float:
    """Book the box's status as `up` does while it watches (gpuops.teardown.live) for ``seconds``;
    returns the time of the last one."""
    from gpuops.teardown.live import record_live

    end = time.monotonic() + seconds
    while True:
        at = time.time()
        record_live(led, sid, tokens=0, idle_seconds=0.0, by="up:test", now=at)
        if time.monotonic() >= end:
            return at
        time.sleep(0.25)


def test_watchdog_closing_a_pod_already_gone_books_its_last_proof_of_life_not_its_own_log_kept(gpuops_home, rp):
    """`up` watched the job (its `live` events) until the box was deleted; the watchdog that closes
    the row afterwards keeps the job log first (`log_kept`): that event is its own work, not the box's
    life. Booked within 5 % or 1 s of the pod's billed time, the cost within 5 % of its bill."""
    emu, p = rp
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    inst = create(p, "gpuops-g1")
    book(led, "g1", "runpod", inst, spot=False, account=p.account)
    log = gpuops_home / "g1.log"
    log.write_text("step 1\n")
    led.update("g1", log_path=str(log))
    led.event("g1", "job_started", {})
    _live_until(led, "g1", BILLS_S)
    emu.delete_from_console(inst.id)  # right after `up`'s last read: the box is gone
    secs, usd = _billed(emu, inst.id)
    time.sleep(2.0)  # the watchdog comes by later: what is under test is that its clock is not the end
    acts = run(settings, once=True, emit=lambda a: None, ctx=ctx(led, settings, runpod=p))
    assert [("g1", "closed")] == [(a.session, a.kind) for a in acts if a.session == "g1"], acts
    assert "log_kept" in [e.kind for e in led.events("g1")]
    row = led.get("g1")
    assert row.end_source == "ledger_event"
    print(
        f"pod gone, watchdog closes: billed {secs:.2f} s ${usd:.6f}; booked {row.billed_seconds:.2f} s ${row.cost_usd:.6f}"
    )
    assert _within(row.billed_seconds, secs), (row.billed_seconds, secs)
    assert row.cost_usd == pytest.approx(usd, abs=0.05 * usd), (row.cost_usd, usd)  # within 5 %


def test_a_vast_spot_box_outbid_while_up_watched_books_its_gpu_time(gpuops_home, vast):
    """The agent's heartbeat was read early; `up` went on reading the box (`live`) until the market
    took it back (stopped: its disk still bills); the watchdog destroys what is left. Booked to the
    newest proof of life: the GPU time the provider billed within 5 % or 1 s, the cost (GPU and
    disk) within 5 %."""
    emu, p = vast
    settings = load_settings()
    led = Ledger(settings.ledger_url())
    inst = create(p, "gpuops-o1", spot=True)
    book(led, "o1", "vast", inst, spot=True, account=p.account)
    led.heartbeat("o1", time.time())  # a watchdog read the agent once, at the start
    _live_until(led, "o1", BILLS_S)
    emu.preempt(inst.id)  # outbid: stopped, its disk billing on
    time.sleep(1.0)
    acts = run(settings, once=True, emit=lambda a: None, ctx=ctx(led, settings, vast=p))
    assert [("o1", "destroyed")] == [(a.session, a.kind) for a in acts if a.session == "o1"], acts
    assert emu.market.find(inst.id) is None
    row = led.get("o1")
    assert (row.end_reason, row.end_source) == ("preempted", "ledger_event")
    gpu_s, _ = _billed(emu, inst.id, "gpu")
    disk_s, _ = _billed(emu, inst.id, "storage")
    _, usd = _billed(emu, inst.id)  # GPU and the stopped box's disk
    print(
        f"vast outbid: billed {gpu_s:.2f} s GPU + {disk_s:.2f} s disk ${usd:.6f}; "
        f"booked {row.billed_seconds:.2f} s ${row.cost_usd:.6f}"
    )
    assert _within(row.billed_seconds, gpu_s), (row.billed_seconds, gpu_s)
    assert row.cost_usd == pytest.approx(usd, abs=0.05 * usd), (row.cost_usd, usd)  # within 5 %


SKEW = "import time as _t\n_real = _t.time\n_t.time = lambda: _real() + {skew!r}\n"


@pytest.mark.parametrize("skew_s", [30.0, 5 * 3600.0, -5 * 3600.0], ids=["30s-ahead", "5h-ahead", "5h-behind"])
def test_agent_armed_late_on_a_box_whose_clock_is_off_ends_the_pod_at_create_plus_ttl(
    gpuops_home, tmp_path, monkeypatch, rp, skew_s
):
    """The agent is armed with the seconds LEFT (the laptop's count from the pod's create, the
    provider's), counted on the box's monotonic clock: armed 3 s after the create, on a box whose
    wall clock is 30 s or 5 h off, it ends the pod 8 s after its create by the emulator's own
    instance times. (30 s ahead was believed before: the agent anchored its clock on a box clock
    within 60 s after the laptop's arm time, and ended the pod at once.)"""
    from gpuops.agent.agentctl import agent_config, armed_config

    emu, p = rp
    inst = create(p, "gpuops-skew")
    gap_s, ttl_s, sample_s = 3.0, 8.0, 0.3
    wait_for(lambda: time.time() >= inst.created_at + gap_s, gap_s + 60)  # booting: billed, no agent yet
    root = tmp_path / "box"
    (root / ".gpuops" / "run").mkdir(parents=True)
    env_file = tmp_path / "environ"
    env = {"RUNPOD_POD_ID": inst.id, "RUNPOD_API_KEY": runpod_pod_key(inst.id), "PATH": "/usr/bin"}
    env_file.write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    teardown = load_settings(
        overrides={"teardown": {"sample_seconds": sample_s, "idle_minutes": "off", "max_hours": ttl_s / 3600}}
    ).teardown
    cfg = agent_config(
        session_id="s1",
        provider="runpod",
        instance_id=inst.id,
        root=str(root),
        teardown=teardown,
        started_at=inst.created_at,
        usd_per_hour=inst.usd_per_hour,
        extra={
            "destroy": {"kind": "runpod", "url": emu.url},
            "environ_file": str(env_file),
            "nvidia_smi": ["false"],  # unknown readings: never idle
            "ssh_users": ["nobody-here"],
        },
    )
    (root / ".gpuops" / "agent.json").write_text(json.dumps(armed_config(cfg, time.time())))  # what arm ships
    skew = tmp_path / "skew"
    skew.mkdir()
    (skew / "sitecustomize.py").write_text(SKEW.format(skew=skew_s))
    clean = {k: v for k, v in os.environ.items() if not any(s in k for s in ("API_KEY", "RUNPOD", "VAST", "CONTAINER"))}
    a = subprocess.Popen(
        [sys.executable, str(REPO / "onbox" / "agent.py"), "--config", str(root / ".gpuops" / "agent.json")],
        env=dict(clean, PYTHONPATH=str(skew)),
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "agent.log", "w"),
        start_new_session=True,
    )
    try:
        assert a.wait(timeout=60) == 0
    finally:
        stop(a)
    st = status_of(tmp_path)
    assert st["destroy"]["reason"] == "ttl", st["destroy"]
    assert abs(st["heartbeat"] - time.time()) < 60  # the laptop's timeline, not the box's clock
    pod = emu.market.instances[inst.id]
    lived = pod.ended_t - pod.created_t  # the emulator's own record
    print(f"skew {skew_s:+.0f} s: pod lived {lived:.3f} s (TTL {ttl_s} s, armed {gap_s} s after create)")
    assert ttl_s - 0.01 <= lived < ttl_s + sample_s + LOADED_SLACK_S, lived  # 0.01: ms rounding
