"""lifecycle.end_rental's end-time rule, one test per branch, and its own ownership guard, in
process (a provider stand-in and an SQLite ledger; fixed epochs, an injected clock):

* the provider's own record of when billing stopped (``destroyed_at``, or the instance's
  ``ended_at``), even for a box we had just seen and destroyed ourselves;
* else, for a box we had just seen alive, the moment our destroy was confirmed (the clock read
  AFTER the destroy returned);
* else, for a box already gone, the last proof of life (heartbeat, else the last ledger event
  before this end began, else the create time), clamped to [create, now];
* a row of another provider account is not touched at all, whoever calls.

Times are compared exactly: every expected value is the very float the rule must copy."""

from __future__ import annotations

import pytest

from bootstrap.vocabulary import EndReason, EventKind
from gpuops.lifecycle import end_rental
from gpuops.providers.base import Instance, InstanceStatus, Provider, ProviderError, ProviderErrorKind
from ledger.models import Session
from ledger.store import Ledger

CREATED = 1_800_000_000.0  # the instance's create time (billing starts), epoch s
NOW = CREATED + 3600.0  # the clock when the end is booked
ACCOUNT = "runpod:0123abcd"


class Box(Provider):
    """A provider stand-in: one instance, its destroy recorded with the clock of that moment."""

    name = "runpod"
    http_calls = False  # no SDK, no HTTP: the guard has nothing to watch

    def __init__(self, *, alive=True, record=None, record_error=False, extra=None, account=ACCOUNT, clock=None):
        self.account = account
        self.alive, self.record, self.record_error, self.extra = alive, record, record_error, extra or {}
        self.clock = clock
        self.destroys: list[float] = []
        self.gets = 0

    def get(self, instance_id):
        self.gets += 1
        if not self.alive:
            return None
        return Instance(id=instance_id, label="gpuops-s1", status=InstanceStatus.RUNNING, usd_per_hour=3.6,
                        created_at=CREATED, extra=dict(self.extra))

    def destroy(self, instance_id):
        self.destroys.append(self.clock() if self.clock else 0.0)
        self.alive = False

    def destroyed_at(self, instance_id):
        if self.record_error:
            raise ProviderError(ProviderErrorKind.SERVER, "billing records unavailable")
        return self.record


class Clock:
    """Each read returns the next value: the rule must take the read that follows the destroy."""

    def __init__(self, *values: float):
        self.values, self.reads = list(values), 0

    def __call__(self) -> float:
        self.reads += 1
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


@pytest.fixture
def led(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield ledger
    ledger.engine.dispose()


def rented(led, *, account=ACCOUNT, heartbeat=None, instance_created_at=CREATED, instance_id="pod-1") -> None:
    led.add_session(Session(id="s1", provider="runpod", card="h100-sxm", label="gpuops-s1", instance_id=instance_id,
                            instance_created_at=instance_created_at, usd_per_hour=3.6, status="running",
                            created_at=CREATED - 30.0, account=account))
    if heartbeat is not None:
        led.heartbeat("s1", heartbeat)


def end(led, provider, clock=None, **kw):
    return end_rental(led, provider, "s1", EndReason.IDLE, by="watchdog:test", clock=clock or Clock(NOW),
                      sleep=lambda s: None, **kw)


# -- the provider's record -------------------------------------------------------------------------
def test_the_providers_record_wins_even_over_our_own_confirmed_destroy(led):
    rented(led)
    p = Box(record=CREATED + 1234.5)
    got = end(led, p)
    assert (got.ended_at, got.end_source, got.destroyed, got.already_gone) == (CREATED + 1234.5, "provider", True, False)
    row = led.get("s1")
    assert (row.ended_at, row.end_source, row.billed_seconds) == (CREATED + 1234.5, "provider", 1235.0)  # per second, up


def test_the_instances_own_end_time_is_the_providers_record(led):
    rented(led)
    got = end(led, Box(extra={"ended_at": CREATED + 99.25}))
    assert (got.ended_at, got.end_source) == (CREATED + 99.25, "provider")


def test_a_record_that_cannot_be_read_falls_through_to_the_next_branch(led):
    rented(led)
    got = end(led, Box(record_error=True), clock=Clock(NOW))
    assert (got.ended_at, got.end_source) == (NOW, "destroy")


# -- our confirmed destroy of a box just seen ------------------------------------------------------
def test_a_box_just_seen_alive_ends_when_our_destroy_is_confirmed(led):
    rented(led, heartbeat=CREATED + 10.0)  # an old heartbeat: not the end of a box we saw alive now
    clock = Clock(NOW + 5.0)
    p = Box(clock=lambda: -1.0)
    got = end(led, p, clock=clock)
    assert p.destroys == [-1.0] and clock.reads == 1  # the clock is read once, after the destroy returned
    assert (got.ended_at, got.end_source, got.already_gone) == (NOW + 5.0, "destroy", False)
    assert led.get("s1").ended_at == NOW + 5.0


# -- a box already gone: its last proof of life, clamped to [create, now] --------------------------
def test_gone_box_ends_at_its_last_heartbeat_not_now(led):
    rented(led, heartbeat=CREATED + 600.0)
    p = Box(alive=False)
    got = end(led, p, last_seen_at=CREATED + 500.0)  # the newer of the two proofs wins
    assert (got.ended_at, got.end_source, got.already_gone) == (CREATED + 600.0, "heartbeat", True)
    assert p.destroys == [0.0]  # destroyed anyway: idempotent, in case "gone" was wrong
    row = led.get("s1")
    assert (row.ended_at, row.billed_seconds) == (CREATED + 600.0, 600.0)


def test_gone_box_the_callers_fresh_read_is_a_proof_of_life(led):
    rented(led, heartbeat=CREATED + 100.0)
    got = end(led, Box(alive=False), last_seen_at=CREATED + 700.0)
    assert (got.ended_at, got.end_source) == (CREATED + 700.0, "heartbeat")


def test_gone_box_a_heartbeat_ahead_of_now_is_clamped_to_now(led):
    rented(led, heartbeat=NOW + 5 * 3600.0)  # a box clock 5 h ahead
    got = end(led, Box(alive=False))
    assert (got.ended_at, got.end_source) == (NOW, "heartbeat")


def test_gone_box_a_heartbeat_before_create_is_clamped_to_create(led):
    rented(led, heartbeat=CREATED - 5 * 3600.0)  # a box clock 5 h behind
    got = end(led, Box(alive=False))
    assert (got.ended_at, got.end_source) == (CREATED, "heartbeat")
    assert led.get("s1").billed_seconds == 0.0


def test_gone_box_without_heartbeat_ends_at_the_last_event_before_this_end(led):
    rented(led)
    led.event("s1", EventKind.JOB_STARTED, {}, at=CREATED + 42.0)
    led.event("s1", EventKind.DESTROY_FAILED, {"attempt": 1}, at=CREATED + 900.0)  # an end's own trace: not life
    got = end(led, Box(alive=False), clock=Clock(NOW))
    assert (got.ended_at, got.end_source) == (CREATED + 42.0, "ledger_event")  # not this end's end_requested (now)


def test_gone_box_an_event_after_now_is_clamped_to_now(led):
    rented(led)
    led.event("s1", EventKind.JOB_STARTED, {}, at=NOW + 60.0)
    got = end(led, Box(alive=False))
    assert (got.ended_at, got.end_source) == (NOW, "ledger_event")


def test_gone_box_with_no_proof_of_life_but_its_intent_ends_at_its_create_time(led):
    rented(led)  # the intent event (30 s before create) is the only trace: clamped up to create
    got = end(led, Box(alive=False))
    assert (got.ended_at, got.end_source) == (CREATED, "ledger_event")
    row = led.get("s1")
    assert (row.billed_seconds, row.cost_usd) == (0.0, 0.0)


def test_gone_box_with_no_event_at_all_ends_at_its_create_time(led):
    import sqlalchemy as sa

    rented(led)
    with led.engine.begin() as conn:  # a row with no events (imported, or its events lost)
        conn.execute(sa.text("DELETE FROM events"))
    got = end(led, Box(alive=False))
    assert (got.ended_at, got.end_source) == (CREATED, "create")


def test_gone_box_with_no_instance_create_time_counts_from_the_intent(led):
    rented(led, instance_created_at=None, heartbeat=CREATED - 600.0)  # before the intent: clamped to it
    got = end(led, Box(alive=False))
    assert (got.ended_at, got.end_source) == (CREATED - 30.0, "heartbeat")


def test_a_row_that_never_got_an_instance_ends_at_its_intent(led):
    rented(led, instance_id=None, instance_created_at=None)
    p = Box()
    got = end(led, p)
    assert (got.ended_at, got.end_source, p.destroys, p.gets) == (CREATED - 30.0, "create", [], 0)


def test_an_end_time_the_caller_knows_better_is_booked_as_given(led):
    rented(led)
    got = end(led, Box(record=CREATED + 1.0), ended_at=CREATED + 77.0, end_source="heartbeat")
    assert (got.ended_at, got.end_source) == (CREATED + 77.0, "heartbeat")


# -- end_rental's own ownership guard --------------------------------------------------------------
def test_a_row_of_another_account_is_not_touched_even_when_the_caller_asks(led):
    """The callers (reconcile, watchdog, down) check ownership first; end_rental refuses on its own
    too: no end requested, no get, no destroy, no close, no event."""
    rented(led, account="runpod:ffff0000")
    p = Box(record=CREATED + 5.0)
    got = end(led, p)
    assert got.not_ours and not got.destroyed and not got.closed and "not ours" in got.error
    assert (p.gets, p.destroys) == (0, [])
    row = led.get("s1")
    assert (row.status, row.end_reason, row.ended_at) == ("running", None, None)
    assert [e.kind for e in led.events("s1")] == ["intent"]


def test_a_row_with_no_account_whose_instance_the_key_cannot_see_stays_open(led):
    rented(led, account=None)
    p = Box(alive=False)
    got = end(led, p)
    assert got.unknown and not got.destroyed and not got.closed and p.destroys == []
    assert led.get("s1").status == "running" and [e.kind for e in led.events("s1")] == ["intent", "unknown"]


def test_a_row_with_no_account_whose_instance_the_key_sees_is_ended(led):
    rented(led, account=None)
    p = Box(record=CREATED + 8.0)
    got = end(led, p)
    assert (got.closed, got.ended_at, got.end_source, len(p.destroys)) == (True, CREATED + 8.0, "provider", 1)
