"""lifecycle.end_rental's calls, in process, against stand-ins that record them: a ledger that keeps
every call (its ``bounded`` and ``quick`` too, or neither) and a provider whose ``get`` answers a
script. Every expected value is a literal written here: the calls made, their arguments, the
events' details, the ``Ended`` returned, the destroy retries (``_destroy_confirmed``) and the
bounded ledger reads (``_bounded``, ``_quick``). No server, no SQLite: the mutation lane's tests."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gpuops.providers.base import Instance, InstanceStatus, Provider, ProviderError, ProviderErrorKind
from gpuops.teardown.lifecycle import end_rental
from onbox.vocabulary import EndReason

CREATED = 1_700_000_000.0  # the instance's create time, epoch s
NOW = CREATED + 100.0  # the clock when the end is booked
ACCOUNT = "vast:42"


def row(**kw: Any) -> SimpleNamespace:
    base = dict(
        id="s1",
        status="running",
        end_reason=None,
        instance_id="i-1",
        label="gpuops-s1",
        account=ACCOUNT,
        owner="me",
        spot=False,
        instance_created_at=CREATED,
        created_at=CREATED - 10.0,
        last_heartbeat_at=None,
        ended_at=None,
        end_source=None,
    )
    base.update(kw)
    return SimpleNamespace(**base)


@dataclass
class Ev:
    kind: str
    at: float
    detail: str = ""


@dataclass
class Books:
    """A ledger stand-in: each call appended to ``calls`` as a tuple."""

    the_row: Any
    events_: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    requested: str | None = None  # what request_end answers (a reason requested before), None: this one
    closes: bool = True  # False: close spools (answers None)
    holds: bool = True  # held() answers the row (False: get() does)

    def held(self, sid):
        self.calls.append(("held", sid))
        return self.the_row if self.holds else None

    def get(self, sid):
        self.calls.append(("get", sid))
        return self.the_row

    def request_end(self, sid, reason, by, detail=""):
        self.calls.append(("request_end", sid, str(reason), by, detail))
        return self.requested

    def event(self, sid, kind, detail=None):
        self.calls.append(("event", sid, str(kind), detail))

    def events(self, sid):
        self.calls.append(("events", sid))
        return list(self.events_)

    def update(self, sid, **fields):
        self.calls.append(("update", sid, fields))

    def close(self, sid, t, reason, exit_code=None, end_source=None, **fields):
        self.calls.append(("close", sid, t, str(reason), exit_code, end_source, fields))
        if not self.closes:
            return None
        return SimpleNamespace(
            id=sid, status="closed", end_reason=str(reason), ended_at=t, end_source=end_source, label="gpuops-s1"
        )


class Bounded(Books):
    """A ledger stand-in with ``bounded()`` and ``quick()``, as the real Ledger has."""

    def bounded(self):
        @contextlib.contextmanager
        def cm():
            self.calls.append(("bounded", "enter"))
            yield
            self.calls.append(("bounded", "exit"))

        return cm()

    def quick(self, fn, default=None):
        self.calls.append(("quick", default))
        return fn()


class Script(Provider):
    """A provider stand-in: ``get`` answers ``gets`` in turn (the last one again and again)."""

    name = "vast"
    http_calls = False

    def __init__(self, *gets: Any, account: str | None = ACCOUNT, record: float | None = None, by_label=None):
        self.gets = list(gets)
        self.account = account
        self.record = record
        self.by_label = by_label
        self.calls: list = []

    def get(self, instance_id):
        self.calls.append(("get", instance_id))
        got = self.gets.pop(0) if len(self.gets) > 1 else self.gets[0]
        if isinstance(got, Exception):
            raise got
        return got

    def destroy(self, instance_id):
        self.calls.append(("destroy", instance_id))

    def destroyed_at(self, instance_id):
        self.calls.append(("destroyed_at", instance_id))
        return self.record

    def find_by_label(self, label):
        self.calls.append(("find_by_label", label))
        if isinstance(self.by_label, Exception):
            raise self.by_label
        return self.by_label

    def offers(self, query):
        raise AssertionError("an end asks for no offers")

    def create(self, offer, spec):
        raise AssertionError("an end rents nothing")

    def list(self, label_prefix="gpuops-"):
        raise AssertionError("an end lists nothing")

    def balance(self):
        raise AssertionError("an end reads no balance")


def inst(status=InstanceStatus.RUNNING, label="gpuops-s1", iid="i-1", raw="") -> Instance:
    return Instance(id=iid, label=label, status=status, raw_status=raw, created_at=CREATED)


def end(books, provider, **kw):
    waits: list = []
    got = end_rental(
        books,
        provider,
        kw.pop("sid", "s1"),
        kw.pop("reason", EndReason.IDLE),
        by="w:test",
        clock=lambda: NOW,
        sleep=waits.append,
        **kw,
    )
    return got, waits


def summary(got) -> tuple:
    return (
        got.session_id,
        got.instance_id,
        got.destroyed,
        got.closed,
        got.reason,
        got.ended_at,
        got.end_source,
        got.already_gone,
        got.error,
        got.refused,
        got.not_ours,
        got.unknown,
    )


# -- _bounded and _quick: every ledger call of an end runs bounded --------------------------------
def test_a_ledger_with_bounded_and_quick_has_the_whole_end_run_inside_bounded_and_its_reads_quick():
    b = Bounded(row())
    p = Script(inst(), None)  # ours, then gone after the destroy
    got, waits = end(b, p)
    assert summary(got) == ("s1", "i-1", True, True, "idle", NOW, "destroy", False, "", "", False, False)
    assert waits == []
    assert b.calls == [
        ("held", "s1"),
        ("bounded", "enter"),
        ("request_end", "s1", "idle", "w:test", ""),
        (
            "event",
            "s1",
            "destroyed",
            {"instance": "i-1", "by": "w:test", "already_gone": False, "end_source": "destroy"},
        ),
        ("quick", None),  # the seen exit code, bounded
        ("events", "s1"),
        ("close", "s1", NOW, "idle", None, "destroy", {}),
        ("bounded", "exit"),
    ]
    assert p.calls == [("get", "i-1"), ("destroy", "i-1"), ("get", "i-1"), ("destroyed_at", "i-1")]


def test_a_ledger_without_bounded_or_quick_still_ends_and_a_failing_read_gives_the_default():
    class Failing(Books):
        def events(self, sid):
            self.calls.append(("events", sid))
            raise RuntimeError("database is locked")

    b = Failing(row(), holds=False)
    got, _ = end(b, Script(inst(status=InstanceStatus.GONE)))  # gone: the proof of life is read, and fails
    assert summary(got) == ("s1", "i-1", True, True, "idle", CREATED, "create", True, "", "", False, False)
    # both bounded reads (the proof-of-life events, the seen exit code) failed: create time, no exit code
    kinds = [c[0] for c in b.calls]
    assert kinds == ["held", "get", "request_end", "events", "event", "events", "close"]
    assert b.calls[-1] == ("close", "s1", CREATED, "idle", None, "create", {})


def test_quick_is_given_no_default_for_the_proof_of_life_read_and_its_answer_is_used():
    b = Bounded(row(), events_=[Ev("live", CREATED + 40.0), Ev("log_kept", CREATED + 90.0)])
    got, _ = end(b, Script(None))  # not found: gone before we came (the idempotent destroy is still sent)
    assert (got.ended_at, got.end_source, got.already_gone, got.destroyed) == (
        CREATED + 40.0,
        "ledger_event",
        True,
        True,
    )
    assert [c for c in b.calls if c[0] == "quick"] == [("quick", None), ("quick", None)]


# -- _destroy_confirmed: destroy, read back, again only while it still answers our label ----------
def test_a_destroy_read_back_still_ours_is_destroyed_again_until_gone():
    b = Bounded(row())
    p = Script(inst(), inst(raw="running"), inst(raw="exiting"), None)
    got, waits = end(b, p)
    assert summary(got)[:4] == ("s1", "i-1", True, True)
    assert p.calls == [
        ("get", "i-1"),  # the look-up before: ours
        ("destroy", "i-1"),
        ("get", "i-1"),  # still ours: destroy again
        ("destroy", "i-1"),
        ("get", "i-1"),
        ("destroy", "i-1"),
        ("get", "i-1"),  # gone
        ("destroyed_at", "i-1"),
    ]
    assert waits == [1.0, 2.0]
    fails = [c for c in b.calls if c[0] == "event" and c[2] == "destroy_failed"]
    assert fails == [
        ("event", "s1", "destroy_failed", {"attempt": 1, "kind": "server", "by": "w:test"}),
        ("event", "s1", "destroy_failed", {"attempt": 2, "kind": "server", "by": "w:test"}),
    ]


def test_a_read_back_with_no_label_is_read_again_but_never_destroyed_again():
    b = Bounded(row())
    p = Script(inst(), inst(label=""), None)
    got, waits = end(b, p)
    assert (got.destroyed, got.closed, waits) == (True, True, [1.0])
    assert [c[0] for c in p.calls] == ["get", "destroy", "get", "get", "destroyed_at"]


def test_a_read_back_under_another_label_counts_as_gone():
    b = Bounded(row())
    p = Script(inst(), inst(label="gpuops-theirs"))
    got, waits = end(b, p)
    assert (got.destroyed, got.closed, got.ended_at, got.end_source, waits) == (True, True, NOW, "destroy", [])
    assert [c[0] for c in p.calls] == ["get", "destroy", "get", "destroyed_at"]


def test_a_read_back_in_the_terminal_state_counts_as_gone():
    b = Bounded(row())
    p = Script(inst(), inst(status=InstanceStatus.GONE))
    got, waits = end(b, p)
    assert (got.destroyed, got.closed, waits) == (True, True, [])


def test_a_box_never_shown_gone_gives_up_with_the_providers_words_and_the_row_open():
    b = Bounded(row())
    p = Script(inst(), inst(raw="running"))
    got, waits = end(b, p, attempts=3)
    assert summary(got) == (
        "s1",
        "i-1",
        False,
        False,
        "idle",
        None,
        None,
        False,
        "vast still shows instance i-1 running after the destroy",
        "",
        False,
        False,
    )
    assert waits == [1.0, 2.0]
    assert b.calls[-2] == (
        "event",
        "s1",
        "destroy_gave_up",
        {"instance": "i-1", "by": "w:test", "error": "vast still shows instance i-1 running after the destroy"},
    )
    assert [c for c in b.calls if c[0] == "close"] == []


def test_the_give_up_message_says_no_label_and_falls_back_to_the_status_word():
    b = Bounded(row())
    p = Script(inst(), inst(label="", raw=""))
    got, _ = end(b, p, attempts=2)
    assert got.error == "vast still shows instance i-1 running with no label after the destroy"


# -- _end: what it books and returns on each path --------------------------------------------------
def test_a_caller_known_end_time_is_booked_with_its_source_or_caller():
    b = Bounded(row())
    got, _ = end(b, Script(inst(), None), ended_at=CREATED + 7.5, end_source="heartbeat", exit_code=0, tokens=12)
    assert (got.ended_at, got.end_source) == (CREATED + 7.5, "heartbeat")
    assert b.calls[-2] == ("close", "s1", CREATED + 7.5, "idle", 0, "heartbeat", {"tokens": 12})
    assert ("quick", None) not in b.calls  # the exit code was given: not read
    b2 = Bounded(row())
    got2, _ = end(b2, Script(inst(), None), ended_at=CREATED + 7.5)
    assert (got2.ended_at, got2.end_source) == (CREATED + 7.5, "caller")


def test_the_reason_requested_earlier_is_the_one_booked():
    b = Bounded(row(), requested="manual")
    got, _ = end(b, Script(inst(), None), reason=EndReason.TTL)
    assert (got.reason, b.calls[2]) == ("manual", ("request_end", "s1", "ttl", "w:test", ""))
    assert [c for c in b.calls if c[0] == "close"][0][3] == "manual"


def test_a_spooled_close_says_so_with_what_it_will_book():
    b = Bounded(row(), closes=False)
    got, _ = end(b, Script(inst(), None))
    assert summary(got) == (
        "s1",
        "i-1",
        True,
        False,
        "idle",
        NOW,
        "destroy",
        False,
        "ledger write spooled",
        "",
        False,
        False,
    )


def test_a_row_of_another_account_is_left_as_it_is():
    b = Bounded(row(account="vast:7", end_reason="ttl"))
    p = Script(inst())
    got, _ = end(b, p)
    assert summary(got) == (
        "s1",
        "i-1",
        False,
        False,
        "ttl",
        None,
        None,
        False,
        "row of account vast:7 (me): not ours to end",
        "",
        True,
        False,
    )
    assert p.calls == [] and b.calls == [("held", "s1"), ("bounded", "enter"), ("bounded", "exit")]


def test_a_legacy_row_whose_instance_is_not_visible_books_unknown_and_stays_open():
    b = Bounded(row(account=None, end_reason=None))
    p = Script(None)
    got, _ = end(b, p, reason=EndReason.TTL)
    assert summary(got) == (
        "s1",
        "i-1",
        False,
        False,
        None,
        None,
        None,
        False,
        "instance not visible to the key held here",
        "",
        False,
        True,
    )
    assert b.calls[2] == ("event", "s1", "unknown", {"instance": "i-1", "by": "w:test", "reason": "ttl"})


def test_a_legacy_row_whose_look_up_fails_is_refused_then_found_by_its_label():
    b = Bounded(row(account=None))
    err = ProviderError(ProviderErrorKind.SERVER, "timeout")
    ours = inst(iid="i-9")
    p = Script(err, None, by_label=ours)  # the id's look-up fails; the label answers i-9; then gone
    got, _ = end(b, p)
    assert summary(got)[:4] == ("s1", "i-9", True, True)
    refused = [c for c in b.calls if c[0] == "event" and c[2] == "destroy_refused"]
    assert refused == [
        (
            "event",
            "s1",
            "destroy_refused",
            {
                "instance": "i-1",
                "expected_label": "gpuops-s1",
                "label": "",
                "account": None,
                "by": "w:test",
                "why": "the look-up of instance i-1 failed (timeout): cannot tell it is ours",
            },
        )
    ]
    assert ("update", "s1", {"instance_id": "i-9"}) in b.calls
    assert p.calls[:3] == [("get", "i-1"), ("find_by_label", "gpuops-s1"), ("destroy", "i-9")]


@pytest.mark.parametrize(
    "answer,why",
    [
        (inst(label="gpuops-theirs"), "instance i-1 is labelled 'gpuops-theirs', not 'gpuops-s1'"),
        (inst(label=""), "instance i-1 answers with no label, not 'gpuops-s1'"),
    ],
)
def test_an_id_answering_for_another_box_is_never_destroyed_and_ours_gone_closes_as_gone(answer, why):
    b = Bounded(row(last_heartbeat_at=CREATED + 30.0))
    p = Script(answer, by_label=None)
    got, _ = end(b, p)
    assert summary(got) == ("s1", "i-1", False, True, "idle", CREATED + 30.0, "heartbeat", True, "", why, False, False)
    assert ("destroy", "i-1") not in p.calls and ("destroyed_at", "i-1") not in p.calls  # not our record either
    assert b.calls[-5] == (
        "event",
        "s1",
        "destroyed",
        {"instance": "i-1", "by": "w:test", "already_gone": True, "end_source": "heartbeat"},
    )


def test_a_label_look_up_that_fails_leaves_the_row_open_with_both_reasons():
    b = Bounded(row())
    p = Script(inst(label="gpuops-theirs"), by_label=ProviderError(ProviderErrorKind.SERVER, "502"))
    got, _ = end(b, p)
    why = "instance i-1 is labelled 'gpuops-theirs', not 'gpuops-s1'"
    error = f"{why}; the look-up of 'gpuops-s1' failed (502): nothing destroyed"
    assert summary(got) == ("s1", "i-1", False, False, "idle", None, None, False, error, why, False, False)
    assert b.calls[-2] == ("event", "s1", "destroy_gave_up", {"instance": "i-1", "by": "w:test", "error": error})


def test_a_row_with_no_label_cannot_look_its_box_up_and_stays_open():
    b = Bounded(row(label=""))
    p = Script(inst())
    got, _ = end(b, p)
    why = "the row has no label to check instance i-1 against"
    assert (got.closed, got.destroyed, got.refused) == (False, False, why)
    assert got.error == f"{why}; no label to look ours up by: nothing destroyed"
    assert ("find_by_label", "") not in p.calls


@pytest.mark.parametrize("spot,reason", [(True, "preempted"), (False, "idle")])
def test_a_stopped_box_is_destroyed_and_booked_at_its_newest_proof_of_life(spot, reason):
    b = Bounded(row(spot=spot, last_heartbeat_at=CREATED + 20.0), events_=[Ev("live", CREATED + 25.0)])
    p = Script(inst(status=InstanceStatus.STOPPED), None)
    got, _ = end(b, p)
    assert summary(got) == (
        "s1",
        "i-1",
        True,
        True,
        reason,
        CREATED + 25.0,
        "ledger_event",
        False,
        "",
        "",
        False,
        False,
    )
    assert b.calls[2] == ("request_end", "s1", reason, "w:test", "")


def test_a_closed_rows_live_instance_is_destroyed_as_an_orphan_and_nothing_booked():
    closed = row(status="closed", end_reason="ttl", ended_at=CREATED + 50.0, end_source="destroy")
    b = Bounded(closed)
    p = Script(inst(), None)
    got, _ = end(b, p)
    assert summary(got) == ("s1", "i-1", True, True, "ttl", CREATED + 50.0, "destroy", False, "", "", False, False)
    assert b.calls == [
        ("held", "s1"),
        ("bounded", "enter"),
        ("event", "s1", "orphan_destroyed", {"instance": "i-1", "by": "w:test", "label": "gpuops-s1"}),
        ("bounded", "exit"),
    ]


def test_a_closed_rows_gone_instance_books_no_orphan():
    b = Bounded(row(status="closed", end_reason="ttl", ended_at=CREATED + 50.0, end_source="destroy"))
    got, _ = end(b, Script(None))
    assert (got.destroyed, got.closed, got.already_gone) == (True, True, True)  # the idempotent destroy sent
    assert [c[0] for c in b.calls] == ["held", "bounded", "bounded"]


def test_no_row_an_instance_with_our_label_is_destroyed_and_nothing_booked():
    b = Bounded(None)
    p = Script(None)
    got = end_rental(
        b,
        p,
        None,
        EndReason.MANUAL,
        by="reconcile",
        instance_id="i-1",
        instance=inst(),
        clock=lambda: NOW,
        sleep=lambda s: None,
    )
    assert summary(got) == (None, "i-1", True, False, "manual", None, None, False, "", "", False, False)
    assert b.calls == [("bounded", "enter"), ("bounded", "exit")]
    assert p.calls == [("destroy", "i-1"), ("get", "i-1")]


def test_a_row_that_never_got_an_instance_closes_at_its_intent():
    b = Bounded(row(instance_id=None))
    p = Script(None)
    got, _ = end(b, p)
    assert (got.ended_at, got.end_source, got.destroyed, got.closed) == (CREATED - 10.0, "create", False, True)
    assert p.calls == [] and not [c for c in b.calls if c[0] == "event"]


def test_an_unknown_session_is_a_key_error():
    b = Bounded(None)
    with pytest.raises(KeyError):
        end(b, Script(None))
