"""lifecycle.end_rental's end-time rule, one test per branch, and its own ownership guard, in
process (a provider stand-in and an SQLite ledger; fixed epochs, an injected clock):

* the provider's own record of when billing stopped (``destroyed_at``, or the instance's
  ``ended_at``), even for a box we had just seen and destroyed ourselves;
* else, for a box we had just seen alive, the moment our destroy was confirmed (the clock read
  AFTER the destroy returned);
* else, for a box already gone, the last proof of life (heartbeat, else the last ledger event
  before this end began, else the create time), clamped to [create, now];
* a row of another provider account is not touched at all, whoever calls;
* and what end_rental books on the way: its events and their details, the retries, orphans.

Times are compared exactly: every expected value is the very float the rule must copy."""

from __future__ import annotations

import json

import pytest

from gpuops.providers.base import Instance, InstanceStatus, Provider, ProviderError, ProviderErrorKind
from gpuops.teardown.lifecycle import end_rental
from ledger.store import Ledger
from onbox.vocabulary import EndReason, EventKind

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
        if not self.alive or instance_id != "pod-1":
            return None
        return Instance(
            id=instance_id,
            label="gpuops-s1",
            status=InstanceStatus.RUNNING,
            usd_per_hour=3.6,
            created_at=CREATED,
            extra=dict(self.extra),
        )

    def destroy(self, instance_id):
        if instance_id != "pod-1":
            raise ProviderError(ProviderErrorKind.BAD_REQUEST, f"no instance {instance_id!r}")
        self.destroys.append(self.clock() if self.clock else 0.0)
        self.alive = False

    # The rest of the contract (Provider is an ABC): an end never rents, lists or reads a balance.
    def offers(self, query):
        raise AssertionError("an end asks for no offers")

    def create(self, offer, spec):
        raise AssertionError("an end rents nothing")

    def list(self, label_prefix="gpuops-"):
        raise AssertionError("an end lists nothing")

    def balance(self):
        raise AssertionError("an end reads no balance")

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


def rented(
    led, *, account=ACCOUNT, heartbeat=None, instance_created_at=CREATED, instance_id="pod-1", spot=False
) -> None:
    led.add_session(
        dict(
            id="s1",
            provider="runpod",
            card="h100-sxm",
            label="gpuops-s1",
            instance_id=instance_id,
            instance_created_at=instance_created_at,
            usd_per_hour=3.6,
            status="running",
            created_at=CREATED - 30.0,
            account=account,
            spot=spot,
        )
    )
    if heartbeat is not None:
        led.heartbeat("s1", heartbeat)


def end(led, provider, clock=None, **kw):
    return end_rental(
        led, provider, "s1", EndReason.IDLE, by="watchdog:test", clock=clock or Clock(NOW), sleep=lambda s: None, **kw
    )


# -- the provider's record -------------------------------------------------------------------------
def test_the_providers_record_wins_even_over_our_own_confirmed_destroy(led):
    rented(led)
    p = Box(record=CREATED + 1234.5)
    got = end(led, p)
    assert (got.ended_at, got.end_source, got.destroyed, got.already_gone) == (
        CREATED + 1234.5,
        "provider",
        True,
        False,
    )
    row = led.get("s1")
    assert (row.ended_at, row.end_source, row.billed_seconds) == (
        CREATED + 1234.5,
        "provider",
        1235.0,
    )  # per second, up


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
    clock = Clock(NOW + 5.0, NOW + 6.0)  # as the destroy returned; after its read-back showed it gone
    p = Box(clock=lambda: -1.0)
    got = end(led, p, clock=clock)
    assert p.destroys == [-1.0] and p.gets == 2 and clock.reads == 2  # the read before, the read-back after
    assert (got.ended_at, got.end_source, got.already_gone) == (NOW + 5.0, "destroy", False)
    assert led.get("s1").ended_at == NOW + 5.0


def test_a_destroy_answered_but_not_done_ends_at_the_answer_of_the_one_that_took(led):
    """A destroy the provider acknowledged and dropped (the read-back still shows the box) proves no
    end; the next destroy, read back gone, does: its answer is the end, not the first one's."""
    rented(led)

    class Dropping(Box):
        def destroy(self, instance_id):
            if not self.destroys:
                self.destroys.append(0.0)  # answered, dropped: still alive
                return
            super().destroy(instance_id)

    clock = Clock(NOW + 1.0, NOW + 3.0, NOW + 4.0)  # first answer; second answer; after the read-back
    got = end(led, Dropping(), clock=clock)
    assert (got.ended_at, got.end_source) == (NOW + 3.0, "destroy")


def test_a_read_back_that_failed_once_leaves_the_end_to_the_clock_after_it(led):
    """The read right after the destroy's answer failed: the read that later showed it gone
    confirms no answer, so the end is the clock after that read (later: never under the bill)."""
    rented(led)

    class Blinking(Box):
        def get(self, instance_id):
            if self.destroys and self.gets == 1:
                self.gets += 1
                raise ProviderError(ProviderErrorKind.SERVER, "timeout")
            return super().get(instance_id)

    clock = Clock(NOW + 1.0, NOW + 2.0)  # the destroy's answer; after the read that showed it gone
    got = end(led, Blinking(), clock=clock)
    assert (got.ended_at, got.end_source) == (NOW + 2.0, "destroy")


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
    rented(led)  # the intent event (30 s before create) is the only trace: the laptop's, not the box's
    got = end(led, Box(alive=False))
    assert (got.ended_at, got.end_source) == (CREATED, "create")
    row = led.get("s1")
    assert (row.billed_seconds, row.cost_usd) == (0.0, 0.0)


def test_gone_box_with_no_event_at_all_ends_at_its_create_time(led):
    import sqlalchemy as sa

    rented(led)
    with led.engine.begin() as conn:  # a row with no events (imported, or its events lost)
        conn.execute(sa.text("DELETE FROM events"))
    got = end(led, Box(alive=False))
    assert (got.ended_at, got.end_source) == (CREATED, "create")


# -- every proof of life compared: the newest wins, whatever kind it is ------------------------------
# The kinds of event that prove the box answered, written here by hand (not read from the code).
LIFE = [
    "ready",
    "armed",
    "bootstrapped",
    "job_started",
    "job_exited",
    "wrapper_lost",
    "live",
    "resume",
    "results_copied",
]
# What an end, a closer or the laptop's own clock writes: never the moment a box was last alive.
NOT_LIFE = [
    "intent",
    "create",
    "created",
    "ttl",
    "log_kept",
    "end_requested",
    "destroy_failed",
    "destroy_gave_up",
    "destroyed",
    "destroy_refused",
    "closed",
    "taken_back",
    "stage_failed",
    "note",
    "tokens",
    "unknown",
]


@pytest.mark.parametrize("kind", LIFE)
def test_gone_box_a_proof_of_life_event_newer_than_the_heartbeat_and_the_callers_read_wins(led, kind):
    """`up` saw one line of output at +3 s and its agent's heartbeat at +5 s; the box went on
    answering (`live` every 10 s) until +70 s: billing ran to +70 s, not +5 s."""
    rented(led, heartbeat=CREATED + 5.0)
    led.event("s1", kind, {}, at=CREATED + 70.0)
    got = end(led, Box(alive=False), last_seen_at=CREATED + 3.0)
    assert (got.ended_at, got.end_source) == (CREATED + 70.0, "ledger_event")
    assert led.get("s1").billed_seconds == 70.0


@pytest.mark.parametrize("kind", NOT_LIFE)
def test_gone_box_an_event_a_closer_or_the_laptop_writes_is_no_proof_of_life(led, kind):
    rented(led)
    led.event("s1", EventKind.LIVE, {}, at=CREATED + 8.0)
    led.event("s1", kind, {}, at=CREATED + 33.0)  # e.g. the closer's own log_kept, just before it closes
    got = end(led, Box(alive=False), clock=Clock(NOW))
    assert (got.ended_at, got.end_source) == (CREATED + 8.0, "ledger_event")


def test_gone_box_the_callers_read_newer_than_every_event_wins(led):
    rented(led, heartbeat=CREATED + 5.0)
    led.event("s1", EventKind.LIVE, {}, at=CREATED + 60.0)
    got = end(led, Box(alive=False), last_seen_at=CREATED + 72.0)  # `up`'s last answered poll
    assert (got.ended_at, got.end_source) == (CREATED + 72.0, "heartbeat")


class Stopped(Box):
    """The provider shows the instance stopped (outbid; or an on-demand box its key could only stop)."""

    def get(self, instance_id):
        inst = super().get(instance_id)
        return None if inst is None else Instance(**{**inst.__dict__, "status": InstanceStatus.STOPPED})


@pytest.mark.parametrize("spot", [True, False])
def test_a_stopped_box_ends_at_its_newest_proof_of_life_not_at_our_destroy(led, spot):
    rented(led, heartbeat=CREATED + 3.0, spot=spot)
    led.event("s1", EventKind.LIVE, {}, at=CREATED + 9.0)  # `up` read the box at +9 s; outbid just after
    led.event("s1", EventKind.LOG_KEPT, {}, at=CREATED + 12.0)  # the closer's own, before it ends the box
    p = Stopped()
    got = end(led, p, clock=Clock(NOW))
    assert (got.ended_at, got.end_source, got.destroyed) == (CREATED + 9.0, "ledger_event", True)
    assert got.reason == ("preempted" if spot else "idle")
    assert p.destroys == [0.0]  # what is left (a stopped box bills its disk) is destroyed


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


def test_an_end_time_from_the_caller_without_a_source_says_caller(led):
    rented(led)
    assert end(led, Box(), ended_at=CREATED + 5.0).end_source == "caller"


def test_a_spooled_request_still_closes_with_the_reason(led):
    class HalfSpooling:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def request_end(self, *a, **k):
            return None  # that write was spooled; the close goes through

    rented(led)
    got = end_rental(HalfSpooling(led), Box(), "s1", EndReason.IDLE, by="w", clock=Clock(NOW), sleep=lambda s: None)
    assert (got.closed, got.reason, led.get("s1").end_reason) == (True, "idle", "idle")


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


# -- what end_rental books: the Ended it returns, every event, retries, orphans --------------------
def books(led, sid="s1"):
    """[(kind, detail)] of the row's events after the intent, details parsed where JSON."""
    out = []
    for e in led.events(sid)[1:]:
        try:
            out.append((e.kind, json.loads(e.detail)))
        except ValueError:
            out.append((e.kind, e.detail))
    return out


def ended(got):
    """Ended as a dict, the row by its id and status."""
    d = {
        k: getattr(got, k)
        for k in (
            "session_id",
            "instance_id",
            "destroyed",
            "closed",
            "reason",
            "ended_at",
            "end_source",
            "already_gone",
            "error",
            "not_ours",
            "unknown",
        )
    }
    d["row"] = (got.row.id, got.row.status) if got.row is not None else None
    return d


def test_a_normal_end_books_request_destroy_close_in_that_order(led):
    rented(led)
    got = end(led, Box(), detail="no GPU above 5% for 15 min")
    assert ended(got) == dict(
        session_id="s1",
        instance_id="pod-1",
        destroyed=True,
        closed=True,
        reason="idle",
        ended_at=NOW,
        end_source="destroy",
        already_gone=False,
        error="",
        not_ours=False,
        unknown=False,
        row=("s1", "closed"),
    )
    assert books(led) == [
        ("end_requested", {"by": "watchdog:test", "detail": "no GPU above 5% for 15 min", "reason": "idle"}),
        ("destroyed", {"already_gone": False, "by": "watchdog:test", "end_source": "destroy", "instance": "pod-1"}),
        ("closed", "idle"),
    ]
    row = led.get("s1")
    assert (row.end_reason, row.exit_code, row.tokens, row.billed_seconds) == ("idle", None, 0, 3600.0)


def test_the_reason_requested_first_wins_and_the_seen_exit_code_and_tokens_are_booked(led):
    rented(led)
    led.request_end("s1", "manual", by="down:test")
    led.event("s1", EventKind.JOB_EXITED, {"exit_code": 3})
    got = end(led, Box(), tokens=1234)
    assert (got.reason, got.closed) == ("manual", True)
    row = led.get("s1")
    assert (row.end_reason, row.exit_code, row.tokens) == ("manual", 3, 1234)
    assert [k for k, _ in books(led)] == ["end_requested", "job_exited", "destroyed", "closed"]  # one request only
    rented_again = end(led, Box(), exit_code=0)  # ending an ended rental books nothing new
    assert (rented_again.closed, rented_again.reason, rented_again.ended_at, rented_again.end_source) == (
        True,
        "manual",
        NOW,
        "destroy",
    )


def test_an_explicit_exit_code_wins_over_the_seen_one(led):
    rented(led)
    led.event("s1", EventKind.JOB_EXITED, {"exit_code": 3})
    end(led, Box(), exit_code=0)
    assert led.get("s1").exit_code == 0


def test_a_destroy_that_fails_is_retried_with_backoff_then_given_up(led):
    rented(led)

    class Failing(Box):
        def destroy(self, instance_id):
            self.destroys.append(0.0)
            raise ProviderError(ProviderErrorKind.SERVER, "502 from the API")

    p, waits = Failing(), []
    got = end_rental(led, p, "s1", EndReason.TTL, by="agent:test", attempts=6, clock=Clock(NOW), sleep=waits.append)
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0] and len(p.destroys) == 6  # doubling from 1 s, capped at 10 s
    assert ended(got) == dict(
        session_id="s1",
        instance_id="pod-1",
        destroyed=False,
        closed=False,
        reason="ttl",
        ended_at=None,
        end_source=None,
        already_gone=False,
        error="502 from the API",
        not_ours=False,
        unknown=False,
        row=("s1", "running"),
    )
    assert books(led) == [("end_requested", {"by": "agent:test", "detail": "", "reason": "ttl"})] + [
        ("destroy_failed", {"attempt": i, "by": "agent:test", "kind": "server"}) for i in range(1, 7)
    ] + [("destroy_gave_up", {"by": "agent:test", "error": "502 from the API", "instance": "pod-1"})]
    assert led.get("s1").status == "running"  # left for reconcile


def test_one_failed_destroy_then_success(led):
    rented(led)

    class Flaky(Box):
        def destroy(self, instance_id):
            if not self.destroys:
                self.destroys.append(-1.0)
                raise ProviderError(ProviderErrorKind.RATE_LIMIT, "429")
            super().destroy(instance_id)

    waits = []
    got = end_rental(led, Flaky(), "s1", EndReason.IDLE, by="w", clock=Clock(NOW), sleep=waits.append)
    assert (got.destroyed, got.closed, waits) == (True, True, [1.0])
    assert [k for k, _ in books(led)] == ["end_requested", "destroy_failed", "destroyed", "closed"]


def test_at_least_one_destroy_attempt(led):
    rented(led)
    p = Box()
    assert end(led, p, attempts=0).destroyed and len(p.destroys) == 1


def test_an_instance_that_cannot_be_read_is_not_destroyed_and_the_row_stays_open(led):
    rented(led)

    class Blind(Box):
        def get(self, instance_id):
            raise ProviderError(ProviderErrorKind.SERVER, "timeout")

        def list(self, label_prefix="gpuops-"):
            raise ProviderError(ProviderErrorKind.SERVER, "timeout")

    p = Blind()
    got = end(led, p)  # doubt is not ours: neither the id nor the label could be read
    assert (got.destroyed, got.closed, len(p.destroys), led.get("s1").status) == (False, False, 0, "running")
    assert got.refused == "the look-up of instance pod-1 failed (timeout): cannot tell it is ours"
    assert [k for k, _ in books(led)][-3:] == ["destroy_refused", "end_requested", "destroy_gave_up"]


def test_an_instance_that_cannot_be_read_by_id_is_destroyed_when_its_label_answers(led):
    rented(led)

    class Half(Box):
        def get(self, instance_id):
            if self.destroys:
                return None  # the read-back after the destroy answers
            raise ProviderError(ProviderErrorKind.SERVER, "timeout")

        def list(self, label_prefix="gpuops-"):
            return [Instance(id="pod-1", label="gpuops-s1", status=InstanceStatus.RUNNING)]

    p = Half()
    got = end(led, p)
    assert (got.destroyed, got.closed, len(p.destroys)) == (True, True, 1)


def test_the_instance_the_caller_read_is_used_as_is(led):
    rented(led)
    p = Box()
    gone = Instance(id="pod-1", label="gpuops-s1", status=InstanceStatus.GONE)
    got = end(led, p, instance=gone, last_seen_at=CREATED + 50.0)
    # not read again before the destroy; read once after it (the confirmation)
    assert (p.gets, got.already_gone, got.ended_at, got.end_source) == (1, True, CREATED + 50.0, "heartbeat")
    assert books(led)[1] == (
        "destroyed",
        {"already_gone": True, "by": "watchdog:test", "end_source": "heartbeat", "instance": "pod-1"},
    )


def test_a_closed_rows_live_instance_is_destroyed_as_an_orphan_and_nothing_rebooked(led):
    rented(led)
    end(led, Box(alive=False))  # closed at its create time (the intent is its only trace)
    before = led.get("s1")
    p = Box()  # ... yet the instance is alive
    got = end(led, p)
    assert ended(got) == dict(
        session_id="s1",
        instance_id="pod-1",
        destroyed=True,
        closed=True,
        reason=before.end_reason,
        ended_at=before.ended_at,
        end_source=before.end_source,
        already_gone=False,
        error="",
        not_ours=False,
        unknown=False,
        row=("s1", "closed"),
    )
    assert books(led)[-1] == ("orphan_destroyed", {"by": "watchdog:test", "instance": "pod-1", "label": "gpuops-s1"})
    assert len(p.destroys) == 1 and led.get("s1").ended_at == before.ended_at
    again = Box(alive=False)
    assert end(led, again).already_gone  # gone already: destroyed (idempotent), no orphan event
    assert [k for k, _ in books(led)].count("orphan_destroyed") == 1 and len(again.destroys) == 1


def test_an_instance_with_no_row_is_destroyed_and_nothing_booked(led):
    p = Box()
    listed = Instance(id="pod-1", label="gpuops-s1", status=InstanceStatus.RUNNING)
    got = end_rental(
        led,
        p,
        None,
        EndReason.INTERRUPTED,
        by="reconcile:test",
        instance_id="pod-1",
        instance=listed,
        sleep=lambda s: None,
    )
    assert ended(got) == dict(
        session_id=None,
        instance_id="pod-1",
        destroyed=True,
        closed=False,
        reason="interrupted",
        ended_at=None,
        end_source=None,
        already_gone=False,
        error="",
        not_ours=False,
        unknown=False,
        row=None,
    )
    assert len(p.destroys) == 1


def test_an_instance_with_no_row_and_no_label_is_not_destroyed(led):
    p = Box()
    got = end_rental(
        led, p, None, EndReason.INTERRUPTED, by="reconcile:test", instance_id="pod-1", sleep=lambda s: None
    )
    assert (got.destroyed, got.closed, len(p.destroys)) == (False, False, 0)
    assert got.refused == "the row has no label to check instance pod-1 against"


def test_an_unknown_session_is_a_key_error(led):
    with pytest.raises(KeyError) as e:
        end_rental(led, Box(), "nope", EndReason.IDLE, by="w")
    assert e.value.args == ("nope",)


def test_no_row_and_no_instance_ends_nothing(led):
    p = Box()
    got = end_rental(led, p, None, EndReason.INTERRUPTED, by="reconcile:test")
    assert (got.session_id, got.instance_id, got.destroyed, got.closed, got.reason, p.gets, p.destroys) == (
        None,
        None,
        False,
        False,
        "interrupted",
        0,
        [],
    )


def test_a_refused_row_reports_the_reason_it_already_carries(led):
    rented(led, account="runpod:ffff0000")
    led.request_end("s1", "manual", by="down:bob")
    assert end(led, Box()).reason == "manual"
    rented_legacy = "s2"
    led.add_session(
        dict(
            id=rented_legacy,
            provider="runpod",
            card="h100-sxm",
            label="gpuops-s2",
            instance_id="pod-2",
            instance_created_at=CREATED,
            usd_per_hour=3.6,
            status="running",
            created_at=CREATED,
            account=None,
        )
    )
    led.request_end("s2", "ttl", by="agent")
    got = end_rental(led, Box(), "s2", EndReason.IDLE, by="w", sleep=lambda s: None)  # pod-2 is not visible to this key
    assert (got.unknown, got.reason) == (True, "ttl")


def test_a_destroy_that_gives_up_reports_the_reason_requested_first(led):
    rented(led)
    led.request_end("s1", "manual", by="down:test")

    class Failing(Box):
        def destroy(self, instance_id):
            raise ProviderError(ProviderErrorKind.SERVER, "502")

    got = end_rental(led, Failing(), "s1", EndReason.TTL, by="agent:test", attempts=1, sleep=lambda s: None)
    assert (got.closed, got.reason) == (False, "manual")
    assert [k for k, _ in books(led)].count("destroy_failed") == 1  # attempts=1: one try


def test_a_ledger_that_spools_still_ends_the_box_and_says_what_it_will_book(led):
    class Spooling:
        """The ledger refused the writes (a lock, a full disk): request_end and close are spooled."""

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def request_end(self, *a, **k):
            return None

        def close(self, *a, **k):
            return None

    rented(led)
    p = Box()
    got = end_rental(Spooling(led), p, "s1", EndReason.IDLE, by="w", clock=Clock(NOW), sleep=lambda s: None)
    assert ended(got) == dict(
        session_id="s1",
        instance_id="pod-1",
        destroyed=True,
        closed=False,
        reason="idle",
        ended_at=NOW,
        end_source="destroy",
        already_gone=False,
        error="ledger write spooled",
        not_ours=False,
        unknown=False,
        row=("s1", "running"),
    )  # the row as last held: its close waits in the spool
    assert len(p.destroys) == 1


def test_an_orphan_whose_instance_cannot_be_read_is_not_destroyed(led):
    rented(led)
    end(led, Box(alive=False))

    class Blind(Box):
        def get(self, instance_id):
            raise ProviderError(ProviderErrorKind.SERVER, "timeout")

        def list(self, label_prefix="gpuops-"):
            raise ProviderError(ProviderErrorKind.SERVER, "timeout")

    p = Blind()
    end(led, p)
    assert p.destroys == [] and [k for k, _ in books(led)][-2:] == ["destroy_refused", "destroy_gave_up"]


def test_no_provider_closes_the_row_without_a_destroy(led):
    rented(led)
    got = end_rental(led, None, "s1", EndReason.PROVISION_FAILED, by="up:test", clock=Clock(NOW))
    assert (got.destroyed, got.closed, got.ended_at, got.end_source) == (False, True, NOW, "destroy")


def test_the_other_accounts_row_and_the_invisible_legacy_row_return_what_they_found(led):
    rented(led, account="runpod:ffff0000")
    got = end(led, Box())
    assert ended(got) == dict(
        session_id="s1",
        instance_id="pod-1",
        destroyed=False,
        closed=False,
        reason=None,
        ended_at=None,
        end_source=None,
        already_gone=False,
        not_ours=True,
        unknown=False,
        row=("s1", "running"),
        error="row of account runpod:ffff0000 (None): not ours to end",
    )


def test_a_legacy_row_whose_instance_cannot_be_read_is_left_open(led):
    rented(led, account=None)

    class Blind(Box):
        def get(self, instance_id):
            raise ProviderError(ProviderErrorKind.SERVER, "timeout")

        def list(self, label_prefix="gpuops-"):
            raise ProviderError(ProviderErrorKind.SERVER, "timeout")

    got = end(led, Blind())  # cannot tell: doubt is not ours, nothing destroyed
    assert (got.destroyed, got.closed, got.unknown) == (False, False, False)
    assert "cannot tell it is ours" in got.refused


def test_a_legacy_invisible_row_books_the_unknown_event(led):
    rented(led, account=None)
    got = end(led, Box(alive=False))
    assert ended(got) == dict(
        session_id="s1",
        instance_id="pod-1",
        destroyed=False,
        closed=False,
        reason=None,
        ended_at=None,
        end_source=None,
        already_gone=False,
        not_ours=False,
        unknown=True,
        row=("s1", "running"),
        error="instance not visible to the key held here",
    )
    assert books(led) == [("unknown", {"by": "watchdog:test", "instance": "pod-1", "reason": "idle"})]


# -- the reason and the exit code as last seen -----------------------------------------------------
def test_requested_reason_reads_the_newest_request_or_job_end(led):
    from gpuops.teardown.lifecycle import requested_reason

    rented(led)
    assert requested_reason(led, "s1") is None
    led.event("s1", EventKind.END_REQUESTED, "ttl because")  # an older row: the bare reason
    assert requested_reason(led, "s1") == EndReason.TTL
    led.event("s1", EventKind.END_REQUESTED, {"reason": "manual", "by": "down"})
    assert requested_reason(led, "s1") == EndReason.MANUAL
    led.event("s1", EventKind.END_REQUESTED, {"reason": "no such reason"})
    assert requested_reason(led, "s1") == EndReason.MANUAL  # unknown words are skipped
    led.event("s1", EventKind.END_REQUESTED, ["not", "a", "dict"])
    led.event("s1", EventKind.END_REQUESTED, "")
    assert requested_reason(led, "s1") == EndReason.MANUAL
    led.event("s1", EventKind.JOB_EXITED, {"exit_code": 0})
    assert requested_reason(led, "s1") == EndReason.JOB_END
    led.event("s1", EventKind.JOB_EXITED, {"exit_code": 2})
    assert requested_reason(led, "s1") == EndReason.JOB_FAILED
    led.event("s1", EventKind.JOB_EXITED, "garbage")
    assert requested_reason(led, "s1") == EndReason.JOB_FAILED  # no code it can read: not a success
    led.event("s1", EventKind.JOB_EXITED, ["x"])
    assert requested_reason(led, "s1") == EndReason.JOB_FAILED


def test_seen_exit_code_is_the_newest_integer_one(led):
    from gpuops.teardown.lifecycle import seen_exit_code

    rented(led)
    assert seen_exit_code(led, "s1") is None
    led.event("s1", EventKind.JOB_EXITED, {"exit_code": 0})
    led.event("s1", EventKind.JOB_STARTED, {})
    assert seen_exit_code(led, "s1") == 0
    led.event("s1", EventKind.JOB_EXITED, {"exit_code": 137})
    assert seen_exit_code(led, "s1") == 137
    for bad in ({"exit_code": True}, {"exit_code": "1"}, {"exit_code": 1.5}, {}, "garbage", ["x"]):
        led.event("s1", EventKind.JOB_EXITED, bad)
        assert seen_exit_code(led, "s1") is None, bad


def test_end_time_without_a_provider_or_a_row():
    from gpuops.teardown.lifecycle import end_time

    assert end_time(None, "pod-1", None, True, None, None, NOW) == (
        NOW,
        "create",
    )  # no row: nothing older than now is known
    assert end_time(None, "pod-1", None, False, None, None, NOW) == (NOW, "destroy")
    assert end_time(None, "pod-1", None, True, None, CREATED + 5.0, NOW, last_seen_at=CREATED + 9.0) == (
        NOW,
        "heartbeat",
    )


def test_the_provider_is_asked_about_this_instance():
    from gpuops.teardown.lifecycle import end_time

    class Records(Box):
        def destroyed_at(self, instance_id):
            return {"pod-1": CREATED + 7.0}.get(instance_id)

    assert end_time(Records(), "pod-1", None, True, None, None, NOW) == (CREATED + 7.0, "provider")
    assert end_time(Records(), "pod-2", None, False, None, None, NOW) == (NOW, "destroy")
    assert end_time(Records(), "", None, False, None, None, NOW) == (NOW, "destroy")  # no id: nothing to ask


def test_what_a_failure_in_each_stage_books():
    from gpuops.errors import GpuopsError
    from gpuops.teardown.lifecycle import failure_reason

    server = ProviderError(ProviderErrorKind.SERVER, "x")
    assert failure_reason("arm", server, None) == EndReason.PROVIDER_ERROR
    assert failure_reason("arm", GpuopsError("ssh"), None) == EndReason.BOOTSTRAP_FAILED
    assert failure_reason("bootstrap", server, None) == EndReason.PROVIDER_ERROR
    assert failure_reason("job", server, EndReason.JOB_END) == EndReason.PROVIDER_ERROR
    assert failure_reason("teardown", server, None) == EndReason.PROVIDER_ERROR  # a stage outside the table
    assert failure_reason("teardown", GpuopsError("x"), None) == EndReason.ERROR
    assert failure_reason("collect", server, None) == EndReason.ERROR  # nothing decided yet: an error
    assert failure_reason("collect", server, EndReason.TTL) == EndReason.TTL
    assert failure_reason("teardown", GpuopsError("x"), EndReason.TTL) == EndReason.ERROR  # outside the table: an error


def test_a_spooled_close_of_a_gone_box_says_it_was_gone(led):
    class Spooling:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def close(self, *a, **k):
            return None

    rented(led, heartbeat=CREATED + 60.0)
    got = end_rental(
        Spooling(led), Box(alive=False), "s1", EndReason.IDLE, by="w", clock=Clock(NOW), sleep=lambda s: None
    )
    assert (got.closed, got.already_gone, got.ended_at, got.end_source) == (False, True, CREATED + 60.0, "heartbeat")
