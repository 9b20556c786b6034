"""Two accounts on one ledger: every command of one user -- reconcile, watchdog --once,
down --all, up's quick reconcile, refusals -- leaves the other's sessions, instances and refusals
untouched; "not visible under my key" is unknown, never gone."""

from __future__ import annotations

import pytest

from gpuops.errors import BadInput
from gpuops.rental.launcher import Reporter, _quick_reconcile
from gpuops.rental.sessions import down, list_open
from gpuops.teardown.budget import assert_not_refused, budget_for_up
from gpuops.teardown.reconcile import Context, reconcile
from gpuops.teardown.watchdog import run as watchdog_run
from ledger.limits import active_refusals
from tests.team.conftest import snapshot


def live_ids(emu, account):
    return {i.id for i in emu.live(account)}


class Warnings(Reporter):
    def __init__(self):
        self.lines: list[str] = []

    def warn(self, text):
        self.lines.append(text)


def test_rows_book_owner_and_a_non_secret_account(team, markets):
    users = team()
    a = users["alice"].rent("runpod", "a-rp")
    b = users["bob"].rent("runpod", "b-rp")
    assert (a.owner, b.owner) == ("alice", "bob")
    assert a.account.startswith("runpod:") and len(a.account) == len("runpod:") + 8 and a.account != b.account
    assert "ALICE" not in a.account and "rp_" not in a.account  # a fingerprint, not the key
    la = users["alice"].rent("local", "a-loc")
    lb = users["bob"].rent("local", "b-loc")
    assert la.account.startswith("local:") and la.account != lb.account  # same login and machine, other data dir


def test_bobs_commands_leave_alices_sessions_and_instances_alone(team, markets):
    users = team()
    alice, bob = users["alice"], users["bob"]
    rp, vast = markets["runpod"], markets["vast"]
    mine = [alice.rent("runpod", "a-rp"), alice.rent("vast", "a-vast"), alice.rent("local", "a-loc")]
    theirs = [bob.rent("runpod", "b-rp"), bob.rent("local", "b-loc")]
    before = {r.id: snapshot(alice.ledger, r.id) for r in mine}
    a_rp, a_vast = live_ids(rp, "acct-1"), live_ids(vast, "acct-1")
    assert len(a_rp) == len(a_vast) == 1

    # B's reconcile (the bug was: closed A's running session as "interrupted: instance gone")
    acts = reconcile(Context(bob.settings, arm_margin_s=1e6, ssh_connect_s=0.5))
    assert not [a for a in acts if a.session.startswith("a-")]
    assert any(a.kind == "left_to_owner" and "alice" in a.detail for a in acts)
    # B's watchdog --once
    watchdog_run(
        bob.settings, once=True, emit=lambda a: None, ctx=Context(bob.settings, arm_margin_s=1e6, ssh_connect_s=0.5)
    )
    # B's `up` quick reconcile, for each provider B would rent on
    for name in ("runpod", "vast", "local"):
        _quick_reconcile(bob.settings, bob.ledger, bob.provider(name), Warnings())
    assert {r.id: snapshot(alice.ledger, r.id) for r in mine} == before

    # B's `down --all` (the bug was: printed "destroyed pod1 (manual)" with B's key and booked A's row)
    out = down(bob.settings, bob.ledger, None, True)
    assert sorted(o["session"] for o in out) == ["b-loc", "b-rp"]
    assert all(bob.ledger.get(r.id).end_reason == "manual" for r in theirs)
    assert live_ids(rp, "acct-2") == set()
    # ... and B naming A's session is refused before any provider call
    with pytest.raises(BadInput, match=r"rented by alice under runpod account runpod:[0-9a-f]{8}"):
        down(bob.settings, bob.ledger, "a-rp", False)

    assert {r.id: snapshot(alice.ledger, r.id) for r in mine} == before
    assert live_ids(rp, "acct-1") == a_rp and live_ids(vast, "acct-1") == a_vast
    assert alice.provider("local").get("gpuops-a-loc").status.value == "running"

    # A's own reconcile next: A's live local box is not an orphan (the bug was: A's reconcile killed it)
    acts = reconcile(Context(alice.settings, arm_margin_s=1e6, ssh_connect_s=0.5))
    assert [a for a in acts if a.kind in ("orphan_destroyed", "closed", "destroyed")] == []
    assert alice.provider("local").get("gpuops-a-loc").status.value == "running"
    # ps: alice sees hers by default, everyone's with --all, with the owner
    assert {r["session"] for r in list_open(alice.ledger, owner="alice")} == {"a-rp", "a-vast", "a-loc"}
    assert {r["owner"] for r in list_open(alice.ledger)} == {"alice"}  # bob's are closed now

    # A ends her own: everything closed, nothing left billing
    out = down(alice.settings, alice.ledger, None, True)
    assert sorted(o["session"] for o in out) == ["a-loc", "a-rp", "a-vast"]
    assert live_ids(rp, "acct-1") == set() and live_ids(vast, "acct-1") == set()


def test_instance_gone_under_its_own_account_is_closed_by_its_owner(team, markets):
    users = team()
    alice, bob = users["alice"], users["bob"]
    row = alice.rent("runpod", "a-rp")
    alice.ledger.heartbeat(row.id, row.instance_created_at + 1.0)
    markets["runpod"].delete_from_console(row.instance_id)
    reconcile(Context(bob.settings, arm_margin_s=1e6))  # bob's key cannot tell: nothing happens
    assert alice.ledger.get(row.id).status == "running"
    acts = reconcile(Context(alice.settings, arm_margin_s=1e6))  # alice's key sees it gone: closed
    assert ("a-rp", "closed") in [(a.session, a.kind) for a in acts]
    assert alice.ledger.get(row.id).end_source == "heartbeat"


def test_row_without_an_account_is_unknown_when_not_visible(team, markets):
    """A row from before ownership was booked (account NULL) whose instance our key cannot see:
    unknown, left open, never booked destroyed."""
    users = team()
    alice, bob = users["alice"], users["bob"]
    row = alice.rent("runpod", "legacy-1")
    alice.ledger.update(row.id, account=None, owner=None)
    acts = reconcile(Context(bob.settings, arm_margin_s=1e6))
    assert ("legacy-1", "unknown") in [(a.session, a.kind) for a in acts]
    out = down(bob.settings, bob.ledger, "legacy-1", False)
    assert out == [
        {
            "session": "legacy-1",
            "instance_id": row.instance_id,
            "destroyed": False,
            "closed": False,
            "end_reason": "unknown",
            "error": "instance not visible to the key held here",
        }
    ]
    assert bob.ledger.get(row.id).status == "running" and markets["runpod"].market.find(row.instance_id) is not None


def test_balance_floor_refuses_only_the_fallen_account(team, markets):
    users = team({"balance_floor_usd": 5.0})
    alice, bob = users["alice"], users["bob"]
    markets["runpod"].market.initial_balances["acct-2"] = 4.0  # bob's credit below the floor; alice has $500
    a = alice.rent("runpod", "a-rp")
    bob.rent("runpod", "b-rp")
    before = snapshot(alice.ledger, a.id)
    acts = watchdog_run(
        bob.settings, once=True, emit=lambda x: None, ctx=Context(bob.settings, arm_margin_s=1e6, ssh_connect_s=0.5)
    )
    kinds = [(x.session, x.kind) for x in acts]
    assert ("", "refused") in kinds and ("b-rp", "destroyed") in kinds
    assert bob.ledger.get("b-rp").end_reason == "balance_floor"
    assert snapshot(alice.ledger, a.id) == before and live_ids(markets["runpod"], "acct-1") == {a.instance_id}
    (ref,) = active_refusals(bob.ledger)
    assert (ref.scope, ref.reason, ref.account) == ("runpod", "balance_floor", bob.provider("runpod").account)
    with pytest.raises(BadInput, match="balance_floor"):
        budget_for_up(bob.ledger, bob.settings, bob.provider("runpod"), 0.5)
    assert budget_for_up(alice.ledger, alice.settings, alice.provider("runpod"), 0.5) == 2.0  # $0.5/h x 4 h
    # alice's watchdog neither lifts bob's refusal nor touches anything of his
    watchdog_run(
        alice.settings, once=True, emit=lambda x: None, ctx=Context(alice.settings, arm_margin_s=1e6, ssh_connect_s=0.5)
    )
    assert [r.id for r in active_refusals(alice.ledger)] == [ref.id]
    down(alice.settings, alice.ledger, None, True)


def test_team_scope_refuses_everyone(team, markets):
    users = team({"balance_floor_usd": 5.0, "limits_scope": "team"})
    alice, bob = users["alice"], users["bob"]
    markets["runpod"].market.initial_balances["acct-2"] = 4.0
    a = alice.rent("runpod", "a-rp")
    watchdog_run(
        bob.settings, once=True, emit=lambda x: None, ctx=Context(bob.settings, arm_margin_s=1e6, ssh_connect_s=0.5)
    )
    assert [(r.scope, r.account) for r in active_refusals(alice.ledger)] == [("runpod", None)]
    with pytest.raises(BadInput, match="balance_floor"):
        assert_not_refused(alice.ledger, "runpod", alice.provider("runpod").account, "alice")
    assert alice.ledger.get(a.id).status == "running"  # refused, but bob holds no key to end it
    down(alice.settings, alice.ledger, None, True)


def test_monthly_cap_counts_and_refuses_one_user(team, markets):
    users = team({"monthly_cap_usd": 1.0})
    alice, bob = users["alice"], users["bob"]
    a = alice.rent("local", "a-loc")
    b = bob.rent("local", "b-loc")
    bob.ledger.update(b.id, instance_created_at=b.instance_created_at - 3600.0)  # bob's box has run an hour at $2/h
    acts = watchdog_run(
        bob.settings, once=True, emit=lambda x: None, ctx=Context(bob.settings, arm_margin_s=1e6, ssh_connect_s=0.5)
    )
    assert ("b-loc", "destroyed") in [(x.session, x.kind) for x in acts]
    (ref,) = active_refusals(bob.ledger)
    assert (ref.scope, ref.reason, ref.account) == ("*", "monthly_cap", "bob")
    assert alice.ledger.get(a.id).status == "running"
    assert_not_refused(alice.ledger, "local", alice.provider("local").account, "alice")
    with pytest.raises(BadInput, match="monthly_cap"):
        assert_not_refused(bob.ledger, "vast", bob.provider("vast").account, "bob")
    # alice's own watchdog: her spend ($0.00...) is under the cap; bob's refusal stays
    watchdog_run(
        alice.settings, once=True, emit=lambda x: None, ctx=Context(alice.settings, arm_margin_s=1e6, ssh_connect_s=0.5)
    )
    assert alice.ledger.get(a.id).status == "running" and len(active_refusals(alice.ledger)) == 1
