"""The idle and TTL layers and the reconciler end a box, and a real receiver (apprise's JSON webhook
posts, tests/support/receivers.py) is told: one message per ending, its line with the booked figures
and what to do, sent after the destroy and the close; the next pass tells nothing again."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from gpuops.notify import notifier
from gpuops.teardown.reconcile import Context, reconcile
from gpuops.teardown.watchdog import run
from tests.support.receivers import JsonReceiver
from tests.teardown.conftest import wait_for

PRICE = 3.6  # USD/h, [providers.local] price_per_hour: a real (not simulated) price


@pytest.fixture
def hook(gpuops_home, monkeypatch):
    """A JSON webhook receiver, set as the one [notify] target (after gpuops_home set the environment up)."""
    with JsonReceiver() as rec:
        monkeypatch.setenv("GPUOPS_NOTIFY_URLS", rec.url())
        monkeypatch.setenv("GPUOPS_NOTIFY_DEADLINE_SECONDS", "20")
        yield rec
        if notifier.active() is not None:
            notifier.drain()
        notifier._active = None


def _watchdog_once(r) -> list:
    ctx = Context(r.settings, ledger=r.ledger, arm_margin_s=0.0)
    return run(r.settings, once=True, emit=lambda a: None, ctx=ctx)


def _reconcile(r) -> list:
    return reconcile(Context(r.settings, ledger=r.ledger, arm_margin_s=0.0))


def _told(hook, r, after_kind: str = "closed") -> str:
    """The one message about ``r``'s box, checked sent after the row's ``after_kind`` event; its line."""
    notifier.drain()
    (post,) = hook.wait_for(1, timeout=5.0)  # drained: it is there, or it was never sent
    closed_at = max(e.at for e in r.ledger.events(r.sid) if e.kind == after_kind)
    assert post["wall"] >= closed_at - 0.05  # the send started after the destroy and the close
    return post["body"]["message"]


def _figures(r) -> tuple[str, str]:
    """(duration, cost) of the closed row as the line words them: arithmetic on the booked times and price."""
    row = r.ledger.get(r.sid)
    seconds = round(row.ended_at - row.instance_created_at)
    took = f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
    inc = row.billing_increment_seconds or 1.0  # the provider bills whole increments
    cost = math.ceil((row.ended_at - row.instance_created_at) / inc - 1e-9) * inc / 3600 * PRICE
    return took, f"${cost:,.4f}"


def _idle_status(now: float) -> dict:
    """An agent status with two idle minutes of samples (as a stopped agent left it)."""
    return {
        "heartbeat": now,
        "sample_seconds": 5,
        "samples": [
            {
                "t": now - 120 + 5 * i,
                "gpus": [{"index": 0, "util": 0.0, "mem_used_mib": 1.0, "mem_total_mib": 8.0}],
                "error": None,
                "bootstrap": False,
                "ssh": 0,
            }
            for i in range(25)
        ],
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


def test_the_idle_layer_ending_a_box_is_told_once_after_its_destroy(hook, rig, fake_smi):
    r = rig({"sample_seconds": 5, "idle_minutes": 1.0}, price=PRICE)
    r.intent()
    r.create()
    Path(r.box.root, ".gpuops", "agent-status.json").write_text(json.dumps(_idle_status(time.time())))
    _watchdog_once(r)
    assert r.gone() and r.ledger.get(r.sid).end_reason == "idle"
    text = _told(hook, r)
    took, cost = _figures(r)
    assert text == (
        f"gpuops: {r.sid} (t, local): the idle layer ended the box: no exit code, {took}, {cost}; "
        "raise [teardown] idle_minutes if the job was still working"
    )
    _watchdog_once(r)  # the next pass: nothing new to tell
    notifier.drain()
    assert len(hook.posts) == 1


def test_the_ttl_layer_ending_a_box_is_told_once_after_its_destroy(hook, rig, fake_smi):
    r = rig({"sample_seconds": 0.5, "max_hours": 2.0 / 3600}, price=PRICE, up={"ready_timeout_seconds": 100.0})
    r.intent()
    r.create()
    wait_for(lambda: time.time() > r.inst.created_at + 2.1, 30)
    _watchdog_once(r)
    assert r.gone() and r.ledger.get(r.sid).end_reason == "ttl"
    text = _told(hook, r)
    took, cost = _figures(r)
    assert text == (
        f"gpuops: {r.sid} (t, local): the ttl layer ended the box: no exit code, {took}, {cost}; "
        "raise max_hours if the job needs longer"
    )
    _watchdog_once(r)
    notifier.drain()
    assert len(hook.posts) == 1


def test_the_reconciler_ending_a_box_never_armed_is_told_once_after_its_destroy(hook, rig, fake_smi):
    r = rig({"sample_seconds": 0.5}, price=PRICE, up={"ready_timeout_seconds": 1.0})
    r.intent()
    r.create()  # `up` died before arming: past the ready deadline the reconciler ends it
    wait_for(lambda: time.time() > r.inst.created_at + 1.1, 10)
    _reconcile(r)
    row = r.ledger.get(r.sid)
    assert r.gone() and (row.status, row.end_reason) == ("closed", "interrupted")
    text = _told(hook, r)
    took, cost = _figures(r)
    assert (
        text
        == f"gpuops: {r.sid} (t, local): reconcile found the box and ended it (interrupted): no exit code, {took}, {cost}"
    )
    _reconcile(r)
    notifier.drain()
    assert len(hook.posts) == 1


def test_a_box_the_agent_ended_for_idle_is_told_once_by_the_reconciler_that_books_it(hook, rig, fake_smi):
    fake_smi.util(0)
    r = rig({"sample_seconds": 0.3, "idle_minutes": 1 / 60}, price=PRICE)
    r.intent()
    r.create()
    r.arm()
    r.job("sleep 600")
    wait_for(r.gone, 10)  # the agent's idle rule destroyed it (the job TERMed: 128 + 15); it sends nothing
    assert hook.posts == []
    _reconcile(r)
    row = r.ledger.get(r.sid)
    assert (row.status, row.end_reason) == ("closed", "idle")
    text = _told(hook, r)
    took, cost = _figures(r)
    assert text == (
        f"gpuops: {r.sid} (t, local): reconcile found the box and ended it (idle): exit 143, {took}, {cost}; "
        "raise [teardown] idle_minutes if the job was still working"
    )
    _reconcile(r)
    notifier.drain()
    assert len(hook.posts) == 1
