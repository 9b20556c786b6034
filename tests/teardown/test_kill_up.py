"""SIGKILL the `up` process (here the stand-in tests/teardown/laptop.py) at each stage: the box
still goes away (the agent, or reconcile/watchdog) and the ledger ends consistent."""

from __future__ import annotations

import math
import os
import secrets
import time
from pathlib import Path

import pytest

from gpuops.config import load_settings
from gpuops.providers import get_provider
from gpuops.providers.base import InstanceStatus
from gpuops.teardown.reconcile import Context
from gpuops.teardown.watchdog import run
from ledger.store import Ledger
from tests.teardown.conftest import wait_for
from tests.teardown.test_agent_local import laptop, read_until

T = {"sample_seconds": 0.3, "idle_minutes": 1 / 60, "job_end_grace_seconds": 0.5, "kill_grace_seconds": 0.5}
UP = {"ready_timeout_seconds": 1.0}

# stage to kill after -> (end reason, did it get an instance)
CASES = {
    "intent": ("provision_failed", False),
    "create": ("interrupted", True),  # created, the row never learned the id: reconcile adopts, then destroys
    "commit": ("interrupted", True),  # no agent yet: destroyed once the ready deadline passed
    "arm": ("idle", True),  # agent up, nothing runs: idle
    "bootstrap-running": ("idle", True),  # the bootstrap runs attached to `up` and ends with it, then idle
    "job": ("job_end", True),
    "wait": ("job_end", True),  # job exited, `up` died before destroying
    "destroy": ("job_end", True),  # destroyed, died before closing the row
}


def _groups_alive(root) -> list[int]:
    try:
        pgids = [int(x) for x in open(os.path.join(root, ".gpuops", "pgids")).read().split()]
    except FileNotFoundError:
        return []
    alive = []
    for g in set(pgids):
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    st = open(f"/proc/{pid}/stat").read()
                except OSError:
                    continue
                rest = st[st.rfind(")") + 2 :].split()
                if int(rest[2]) == g and rest[0] != "Z":
                    alive.append(g)
                    break
    return alive


@pytest.mark.parametrize("stage", list(CASES))
def test_sigkill_up_at_each_stage(gpuops_home, fake_smi, stage):
    reason, rented = CASES[stage]
    fake_smi.util(60 if reason == "job_end" else 0)  # a job that uses the GPU is not idle
    sid = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    pause = "arm" if stage == "bootstrap-running" else stage
    settings = load_settings(overrides={"teardown": T, "up": UP, "providers": {"local": {"price_per_hour": 2.0}}})
    provider = get_provider("local", settings)
    running = stage == "bootstrap-running"
    p = laptop(sid, T, job="sleep 0.5", pause_after="" if running else pause, bootstrap_seconds=1.5, up=UP)
    try:
        read_until(p, f"STAGE {pause}")
        if running:  # killed inside the bootstrap: its pid file (bootstrap_config.bootstrap_command) is written
            wait_for(lambda: list(Path(provider.boxes_dir).glob("*/.gpuops/bootstrap.pid")), 30, step=0.02)
    finally:
        p.kill()
        p.wait()
    ledger = Ledger(settings.ledger_url())
    deadline = time.monotonic() + 20
    while True:
        run(
            settings, once=True, emit=lambda a: None, ctx=Context(settings, ledger=ledger, arm_margin_s=2.0)
        )  # an agent gets 1 s ready + 2 s to heartbeat
        row = ledger.get(sid)
        inst = provider.get("gpuops-" + sid)
        if row.status == "closed" and (inst is None or inst.status == InstanceStatus.GONE):
            break
        assert time.monotonic() < deadline, (row, inst)
        time.sleep(0.3)
    assert row.end_reason == reason
    assert ledger.open_sessions() == []
    if not rented:
        assert inst is None and row.instance_id is None
        assert (row.billed_seconds, row.cost_usd, row.ended_at) == (0.0, 0.0, row.created_at)
        return
    assert row.instance_id == inst.id and row.instance_created_at == pytest.approx(inst.created_at, abs=1e-6)
    assert row.ended_at == pytest.approx(
        provider.destroyed_at(inst.id), abs=1e-6
    )  # the provider's record itself, not "now"
    assert row.billed_seconds == math.ceil(provider.destroyed_at(inst.id) - inst.created_at)  # the record's, rounded up
    assert row.cost_usd == pytest.approx(row.billed_seconds / 3600 * 2.0, abs=1e-6)
    # The agent that destroyed the box exits right after writing its status: give it a moment.
    gone_by = time.monotonic() + 5
    while _groups_alive(inst.extra["local_root"]) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert _groups_alive(inst.extra["local_root"]) == []
    kinds = [e.kind for e in ledger.events(sid)]
    assert kinds[0] == "intent" and kinds[-1] == "closed" and kinds.count("closed") == 1
    if stage == "create":
        assert "adopted" in kinds
    if reason == "job_end":
        assert row.exit_code == 0 or stage == "destroy"
