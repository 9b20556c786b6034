"""`gpuops reconcile`: orphans destroyed, unknown instances left alone, rows adopted or closed."""

from __future__ import annotations

import time

import pytest

from gpuops.providers.base import CreateSpec
from gpuops.teardown.reconcile import Context, reconcile


def kinds(actions):
    return [(a.session, a.kind) for a in actions]


def ctx_of(r, **kw):
    kw.setdefault("arm_margin_s", 0.0)
    return Context(r.settings, ledger=r.ledger, **kw)


def test_orphan_of_a_closed_row_is_destroyed(rig, fake_smi):
    r = rig({})
    r.intent()
    r.ledger.close(r.sid, r.ledger.get(r.sid).created_at, "provision_failed")  # `up` gave up ...
    r.create(commit=False)  # ... but the create had gone through
    acts = reconcile(ctx_of(r))
    assert (r.sid, "orphan_destroyed") in kinds(acts)
    assert r.gone()
    assert [e.kind for e in r.ledger.events(r.sid)][-1] == "orphan_destroyed"


def test_instance_with_no_row_is_reported_not_destroyed(rig, fake_smi):
    r = rig({})
    r.intent()
    stranger = r.provider.create(r.offer, CreateSpec(label="gpuops-20990101-0000-beef"))
    acts = reconcile(ctx_of(r))
    assert ("", "unknown_instance") in kinds(acts)
    assert r.provider.get(stranger.id).status.value == "running"
    acts = reconcile(ctx_of(r, destroy_unknown=True))
    assert ("", "orphan_destroyed") in kinds(acts)
    assert r.provider.get(stranger.id).status.value == "gone"


def test_non_gpuops_labels_are_ignored(rig, fake_smi):
    # our intent row stays young for the whole test (a create can take seconds under load): the
    # foreign instance is the only thing the reconcile could act on
    r = rig({}, up={"ready_timeout_seconds": 600.0})
    r.intent()
    other = r.provider.create(r.offer, CreateSpec(label="mybox-1"))
    assert reconcile(ctx_of(r)) == []
    assert r.provider.get(other.id).status.value == "running"
    r.provider.destroy(other.id)


def test_row_adopts_its_instance_and_waits_for_the_deadline(rig, fake_smi):
    r = rig({}, up={"ready_timeout_seconds": 30.0})
    r.intent()
    r.create(commit=False)
    acts = reconcile(ctx_of(r))
    assert kinds(acts) == [(r.sid, "adopted")]
    row = r.ledger.get(r.sid)
    assert row.instance_id == r.inst.id and row.instance_created_at == pytest.approx(r.inst.created_at, abs=1e-6)
    assert row.usd_per_hour == 2.0 and row.status == "provisioning"
    assert not r.gone()  # `up` may still be waiting for SSH: within the deadline nothing happens
    assert reconcile(ctx_of(r)) == []


def test_stale_intent_is_closed_at_its_intent_time(rig, fake_smi):
    r = rig({}, up={"ready_timeout_seconds": 0.2})
    r.intent()
    assert reconcile(ctx_of(r, arm_margin_s=60.0)) == []  # young: `up` may be creating right now
    time.sleep(0.3)
    acts = reconcile(ctx_of(r))
    assert (r.sid, "closed") in kinds(acts)
    row = r.ledger.get(r.sid)
    assert (row.end_reason, row.ended_at, row.cost_usd) == ("provision_failed", row.created_at, 0.0)


def test_leased_row_is_left_to_its_holder(rig, fake_smi):
    from ledger.limits import acquire_lease

    r = rig({}, up={"ready_timeout_seconds": 0.01})
    r.intent()
    time.sleep(0.05)
    assert acquire_lease(r.ledger, r.sid, "someone-else", 60)
    acts = reconcile(ctx_of(r))
    assert kinds(acts) == [(r.sid, "skipped_leased")]
    assert r.ledger.get(r.sid).status == "provisioning"
