"""A rental's life in one place: `up`'s stages, what a failure in each books, the ONE way to end a rental.

    validate -> plan -> intent -> create -> ready -> arm -> bootstrap -> job -> collect -> teardown

* ``STAGES`` is the order; ``FAILURE_BOOKS`` says which end reason an error escaping a stage books
  (``gpuops.rental.launcher.run_up`` walks the stages and looks failures up here; nothing pre-sets a
  reason before a stage). Ctrl-C/SIGTERM/SIGHUP in any stage book ``interrupted``; a bug (any
  exception that is not a ``GpuopsError``) books ``error``.
* ``end_rental`` is how every actor ends a rental -- `up`'s teardown, `gpuops down`, reconcile
  (a gone box, an abandoned one, an orphan) and the watchdog (idle, ttl, money): request the end
  (the reason is on the row before any destroy), destroy idempotently with retries, take the end
  time by one rule (``end_time``), close the row.
* The end time rule (``end_time``): the provider's own record of when billing stopped (its billing
  lines are not read: none carries a per-instance end that can be read cheaply, see ``end_time``); else, when we
  destroyed a box we had just seen alive, the moment our destroy was confirmed; else (the box was
  already gone, or the provider shows it stopped: nobody saw its end) the NEWEST proof of life
  (``last_proof_of_life``: every kind in ``PROOF_OF_LIFE`` compared, the caller's fresh read, the
  row's heartbeat and the ledger's events alike), else the create time, clamped to [create, now].
  Never "now" for a box that was already gone, never an event a closer writes about its own work.

The vocabulary (end reasons, event kinds, row status) is ``onbox/vocabulary.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from gpuops.providers.base import Instance, InstanceStatus, Provider
from gpuops.providers.provider_errors import ProviderError
from gpuops.providers.retry import RetryPolicy, call_with_retries
from onbox.vocabulary import END_REASONS, EndReason, EventKind, RowStatus  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from tenacity import RetryCallState

    from ledger.books import Books

# `up`'s stages, in order. validate and plan rent nothing; intent writes the row before create.
STAGES = ("validate", "plan", "intent", "create", "ready", "arm", "bootstrap", "job", "collect", "teardown")


@dataclass(frozen=True)
class FailureBooks:
    """What an error escaping a stage books.

    ``gpuops_error`` for a GpuopsError that is not a
    provider's (bad state, timeout, SSH), ``provider_error`` for a ProviderError. None: keep the
    outcome an earlier stage decided (collect after the job: the job's end stands)."""

    gpuops_error: EndReason | None
    provider_error: EndReason | None


# One table. Interrupts book INTERRUPTED and bugs ERROR in every stage (not repeated here), except
# where both entries are None: there any failure keeps the outcome already decided.
FAILURE_BOOKS: dict[str, FailureBooks] = {
    "create": FailureBooks(EndReason.PROVISION_FAILED, EndReason.PROVISION_FAILED),
    "ready": FailureBooks(EndReason.SSH_NEVER_READY, EndReason.SSH_NEVER_READY),
    "arm": FailureBooks(EndReason.BOOTSTRAP_FAILED, EndReason.PROVIDER_ERROR),
    "bootstrap": FailureBooks(EndReason.BOOTSTRAP_FAILED, EndReason.PROVIDER_ERROR),
    "job": FailureBooks(EndReason.JOB_FAILED, EndReason.PROVIDER_ERROR),
    "collect": FailureBooks(None, None),
}


def failure_reason(stage: str, error: BaseException, decided: EndReason | None) -> EndReason:
    """The end reason an error escaping ``stage`` books (see ``FAILURE_BOOKS``).

    ``decided``: the outcome an earlier stage already set (kept where the table says None). KeyboardInterrupt and
    ``launcher.Interrupted`` (any BaseException that is not an Exception) -> INTERRUPTED."""
    from gpuops.errors import GpuopsError

    if not isinstance(error, Exception):
        return EndReason.INTERRUPTED
    books = FAILURE_BOOKS.get(stage, FailureBooks(EndReason.ERROR, EndReason.PROVIDER_ERROR))
    if books.gpuops_error is None and books.provider_error is None:
        return decided or EndReason.ERROR  # whatever failed, the outcome already decided stands
    if not isinstance(error, GpuopsError):
        return EndReason.ERROR
    got = books.provider_error if isinstance(error, ProviderError) else books.gpuops_error
    return got or decided or EndReason.ERROR


# Destroy retries: a provider hiccup must not leave a box billing. Backoff 1, 2, 4, 8 s (cap 10 s);
# every ProviderError is retried (not only rate limits and 5xx), bounded by the attempts and each
# destroy call's own deadline (Provider.call_deadline_s), so no budget_s.
DESTROY_ATTEMPTS = 5
DESTROY_BACKOFF_S = 1.0
DESTROY_BACKOFF_CAP_S = 10.0
DESTROY_RETRY = RetryPolicy(
    attempts=DESTROY_ATTEMPTS, wait_s=DESTROY_BACKOFF_S, max_wait_s=DESTROY_BACKOFF_CAP_S, budget_s=None
)


@dataclass
class Ended:
    """What ``end_rental`` did.

    ``closed``: the row is closed (False: the destroy gave up and the
    row stays open for reconcile, or the ledger refused the close and spooled it). ``reason``: the
    reason the row carries (a reason requested earlier wins). ``end_source``: provider | destroy |
    heartbeat | ledger_event | create | caller."""

    session_id: str | None
    instance_id: str | None
    destroyed: bool
    closed: bool
    reason: str | None
    ended_at: float | None = None
    end_source: str | None = None
    already_gone: bool = False
    error: str = ""
    row: Any = None  # the session row (an SQLAlchemy Row, or the copy Books.held keeps), None when not read
    # Ownership (gpuops/ownership.py): ``not_ours`` -- the row belongs to a provider account whose
    # key this process does not hold: nothing was touched; ``unknown`` -- the row records no
    # account and the held key cannot see its instance: nothing was destroyed or booked.
    not_ours: bool = False
    unknown: bool = False
    # Why the instance under the row's id was not touched ("" when it was ours or gone): the row
    # still closes when ours is found gone by its label; with any doubt left it stays open (``error``).
    refused: str = ""


# What proves a box was alive (billing) at a moment: the ONE table the end-time rule reads. Each
# source is written when the box or the provider answered, by the clock of the machine that asked
# (the box's own clock is never booked). Not here, on purpose: what an ending writes about its own
# work (end_requested, destroy_failed, destroyed, log_kept, closed, ...), what the laptop writes by
# its own clock alone (intent, create, ttl, stage_failed, note), and taken_back (a proof of death).
PROOF_OF_LIFE: dict[str, str] = {
    "seen": "the caller's own fresh read: the box answered `up`'s last log/exit read, a status a closer just read",
    "heartbeat": "the row's last_heartbeat_at: the agent's status read fresh by `up` or a watchdog",
    EventKind.READY: "the box answered SSH (or the local box exists)",
    EventKind.ARMED: "the agent was started on the box",
    EventKind.BOOTSTRAPPED: "the bootstrap's steps came back from the box",
    EventKind.JOB_STARTED: "the job was started on the box",
    EventKind.JOB_EXITED: "the job's exit was read from the box",
    EventKind.WRAPPER_LOST: "the box answered; the job's wrapper on it had stopped",
    EventKind.LIVE: "the box's status (tokens, idle streak) as `up` or a watchdog read it",
    EventKind.RESUME: "the previous rental's results were put on the box",
    EventKind.RESULTS_COPIED: "the job's results came home from the box, verified",
}
# Which proof's name ``end_time`` books as ``end_source``.
_SOURCE_OF = {"seen": "heartbeat", "heartbeat": "heartbeat"}


def _last_event_at(ledger: Books, session_id: str) -> float | None:
    """The newest event of the session whose kind is in ``PROOF_OF_LIFE``, epoch s (None: none).

    An event dated after now (a teammate's clock ahead) is kept: ``end_time`` clamps it to now,
    where dropping it would book the box from its create time only."""
    return max((e.at for e in ledger.events(session_id) if e.kind in PROOF_OF_LIFE), default=None)


def last_proof_of_life(
    row: Any, last_event_at: float | None, last_seen_at: float | None = None
) -> tuple[float, str] | None:
    """The newest proof that the box was alive, as (epoch s, end source); None when there is none.

    Compares every ``PROOF_OF_LIFE`` source: ``last_seen_at`` (the caller's fresh read),
    ``row.last_heartbeat_at`` and ``last_event_at`` (``_last_event_at``: the newest proof-of-life
    event). Sources: ``heartbeat`` (a read of the box or its agent), ``ledger_event``. Unclamped:
    ``end_time`` clamps it to [create, now]."""
    proofs = [
        (last_seen_at, "seen"),
        (getattr(row, "last_heartbeat_at", None) if row is not None else None, "heartbeat"),
        (last_event_at, "event"),
    ]
    got = [(float(t), k) for t, k in proofs if t]
    if not got:
        return None
    t, kind = max(got, key=lambda p: p[0])  # the first of equal ones: a read before an event
    return t, _SOURCE_OF.get(kind, "ledger_event")


def end_time(
    provider: Provider | None,
    instance_id: str | None,
    inst: Instance | None,
    already_gone: bool,
    row: Any,
    last_event_at: float | None,
    now: float,
    last_seen_at: float | None = None,
    destroy_answered_at: float | None = None,
) -> tuple[float, str]:
    """When billing stopped (epoch s) and where that came from -- the module's one rule.

    ``inst``: the instance as read before the destroy (None: not found); ``already_gone``: it was
    gone before we destroyed it, or the provider shows it stopped (its compute ended unseen);
    ``row``: the session row (create time, heartbeat); ``last_event_at``: the newest
    ``PROOF_OF_LIFE`` event (``_last_event_at``); ``now``: the clock after the destroy was
    confirmed; ``last_seen_at``: a proof of life the caller holds (e.g. a heartbeat it just read);
    ``destroy_answered_at``: our clock (epoch s) when the provider answered the destroy that the
    read right after it showed done (``_destroy_confirmed``), None when no answer is known so.
    Returns (epoch s, source): provider | destroy | heartbeat | ledger_event | create.

    Ranks: the provider's record (``Provider.destroyed_at``, the instance's ``ended_at``); then the
    confirmed destroy: the moment the provider answered it (``destroy_answered_at``), else ``now``.
    Billing stopped while that request was with the provider, between its send and its answer; a
    provider that records no stop time (Vast) leaves the answer as the nearest instant we hold
    that billing cannot have outlasted, late by the answer's trip back (booked seconds may then
    exceed the bill by one billing increment); never the read-back after it, one more round trip
    later. Then the newest proof of life; then the create. The providers' billing
    lines rank below the provider's record and are NOT read here: RunPod's pod records are hourly
    buckets (start/end are the bucket's; no per-pod end, no per-pod filter), Vast's charges carry a
    contract's integer start/end only in a listing of every contract over a day range, whether cut
    to the window undocumented. ``ledger sync`` compares the books with them after the fact."""
    if provider is not None and instance_id:
        try:
            t = provider.destroyed_at(instance_id)
        except ProviderError:
            t = None
        if t:
            return float(t), "provider"
    if inst is not None and inst.extra.get("ended_at"):
        return float(inst.extra["ended_at"]), "provider"
    if not already_gone:
        return (now if destroy_answered_at is None else min(float(destroy_answered_at), now)), "destroy"
    start = float((row.instance_created_at or row.created_at) if row is not None else now)
    t, src = last_proof_of_life(row, last_event_at, last_seen_at) or (start, "create")
    return min(max(float(t), start), now), src  # a box clock ahead or behind cannot bill outside [create, now]


def _bounded(ledger: Books) -> AbstractContextManager[Any]:
    """``ledger.bounded()`` (a real Ledger), else a no-op context (a test's stand-in)."""
    from contextlib import nullcontext

    b = getattr(ledger, "bounded", None)
    return b() if b is not None else nullcontext()


def _quick(ledger: Books, fn: Callable[[], Any], default: Any = None) -> Any:
    """A ledger read bounded like the writes around a destroy: ``default`` when it fails."""
    q = getattr(ledger, "quick", None)
    if q is not None:
        return q(fn, default)
    try:
        return fn()
    except Exception:  # noqa: BLE001  a stand-in ledger that fails: the end goes on
        return default


def _failure(state: RetryCallState) -> ProviderError:
    """The ProviderError of a failed destroy try (the retry retries nothing else)."""
    return cast(ProviderError, state.outcome.exception() if state.outcome is not None else None)


def _row_for(ledger: Books, session_id: str) -> Any:
    """The row as this process holds it in memory (written or read earlier: no wait), else read."""
    held = getattr(ledger, "held", None)
    row = held(session_id) if held is not None else None
    return row if row is not None else ledger.get(session_id)


def _not_our_instance(want: str, inst: Instance | None, looked_up: str = "") -> str:
    """Why ``inst`` (read by the row's instance id) is not certainly the row's box; "" when it is ours or gone.

    ``want``: the row's label. ``looked_up``: the error of a look-up that failed ("" when it
    answered). Ours only when the provider answers the id with ``want``; a failed look-up, an
    answer with no label or another label, or a row with no label is doubt, and doubt is not ours.
    Gone (None, or the provider's terminal state) is not a refusal: there is nothing to destroy."""
    if looked_up:
        return f"the look-up of instance {inst.id if inst else '?'} failed ({looked_up}): cannot tell it is ours"
    if inst is None or inst.status == InstanceStatus.GONE:
        return ""
    if not want:
        return f"the row has no label to check instance {inst.id} against"
    if not inst.label:
        return f"instance {inst.id} answers with no label, not {want!r}"
    if inst.label != want:
        return f"instance {inst.id} is labelled {inst.label!r}, not {want!r}"
    return ""


def _destroy_confirmed(
    provider: Provider,
    iid: str,
    want: str,
    policy: RetryPolicy,
    after: Callable[[RetryCallState], None],
    sleep: Callable[[float], None],
    clock: Callable[[], float] = time.time,
) -> float | None:
    """Destroy ``iid`` and read it back until the provider shows it gone, under ``policy``.

    Returns ``clock()`` (epoch s) read as the destroy that took returned: the read right after it
    showed the instance gone. None when the read that showed it gone followed no such answer (a
    failed read in between, a destroy that raised, a label-less answer read again): the caller
    then takes its own clock after this returns.

    Gone: the read answers nothing, the provider's terminal state, or another (non-empty) label
    (ours was deleted and the id handed on). A read still answering ``want`` destroys again on
    the next try; an answer with no label is doubt: never destroyed, only read again. Raises the
    last ProviderError when ``policy`` runs out (kind SERVER when the provider never showed it gone)."""
    from gpuops.providers.base import ProviderErrorKind

    again = [True]
    answered: list[float | None] = [None]  # the clock as the latest destroy returned, until a read follows it

    def once() -> float | None:
        if again[0]:
            answered[0] = None
            provider.destroy(iid)
            answered[0] = clock()
            again[0] = False
        at, answered[0] = answered[0], None  # only the read right after the answer confirms it
        back = provider.get(iid)
        if back is None or back.status == InstanceStatus.GONE or (back.label and back.label != want):
            return at
        again[0] = back.label == want
        raise ProviderError(
            ProviderErrorKind.SERVER,
            f"{provider.name} still shows instance {iid} {back.raw_status or back.status.value!s}"
            f"{'' if back.label else ' with no label'} after the destroy",
        )

    return call_with_retries(
        once, policy, retry_on=lambda e: isinstance(e, ProviderError), retry_after=False, after=after, sleep=sleep
    )


def end_rental(
    ledger: Books,
    provider: Provider | None,
    session_id: str | None,
    reason: EndReason | str,
    *,
    by: str,
    instance_id: str | None = None,
    instance: Instance | None = None,
    detail: str = "",
    exit_code: int | None = None,
    tokens: int | None = None,
    ended_at: float | None = None,
    end_source: str | None = None,
    last_seen_at: float | None = None,
    attempts: int = DESTROY_ATTEMPTS,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Ended:
    """End one rental: request the end, destroy, close. The one way every actor does it.

    ``ledger``: a ``ledger.Ledger``. ``provider``: the provider of the instance (None when the row
    never got one). ``session_id``: the row (None: an instance with no row, e.g. reconcile's
    ``--destroy-unknown``). ``reason``: an ``EndReason``; a reason requested earlier on the row
    (``gpuops down`` from another terminal, a watchdog) wins and is what ``Ended.reason`` says.
    ``by``: who ends it (an ``Actor`` value, optionally ``actor:host:pid``), stored in the events.
    ``instance_id``: default the row's. ``instance``: the instance as the caller just read it
    (saves a ``get``; None and not given: read here). ``exit_code``/``tokens``: booked on close
    when given. ``ended_at``/``end_source``: an end time the caller knows better (a preempted spot
    box stopped billing at its last heartbeat); else ``end_time``'s rule. ``last_seen_at``: a proof
    of life the caller just read (the agent's heartbeat, the last job output `up` saw).
    ``attempts``: destroy tries, backoff 1 s doubling to 10 s.

    Nothing between the call and the provider's destroy waits on the ledger: the row comes from
    memory (``Ledger.held``: `up` wrote it; other actors read it before deciding to end it), and
    every ledger read and write here runs under ``Ledger.bounded()`` (a short deadline, then the
    spool). Before the destroy the provider is asked for the instance: it is ours only when the
    provider answers the id with the row's label. Any doubt -- another label, no label, a failed
    look-up -- is not ours and is never destroyed (event ``destroy_refused``, ``Ended.refused``
    the reason); the row's own box is then looked up by its label and destroyed if it is there,
    the row closes as gone when the provider lists nothing labelled ours, and stays open (event
    ``destroy_gave_up``, ``Ended.error``) when that look-up fails too. A destroy counts only once
    the provider reads the instance back gone (not found, its terminal state, or the id now
    another's), under ``DESTROY_RETRY``; until then the row stays open and says why. An
    interruptible box the provider shows stopped or exited is booked ``preempted`` (the provider's
    word, never a guess), ending at the last proof of life before it stopped.

    A row already closed is not changed; its instance is still destroyed (an orphan) and the event
    ``orphan_destroyed`` written.

    Ownership (gpuops/ownership.py): only the account that rented an instance can end it or confirm
    it gone. A row of another provider account than ``provider``'s is not touched at all
    (``Ended.not_ours``: no request, no destroy, no close); a row with no recorded account whose
    instance ``provider``'s key cannot see is left open (``Ended.unknown``, event ``unknown``). Idempotent: ending an ended rental destroys nothing new and books
    nothing new. Never raises ProviderError: a destroy that fails ``attempts`` times returns
    ``Ended(destroyed=False, closed=False, error=...)`` with event ``destroy_gave_up`` and the row
    open (reconcile and the watchdog retry); so does a destroy the provider never shows done.
    Raises KeyError for an unknown ``session_id``.
    """
    row = _row_for(ledger, session_id) if session_id else None
    if session_id and row is None:
        raise KeyError(session_id)
    with _bounded(ledger):
        ended = _end(
            ledger,
            provider,
            session_id,
            row,
            reason,
            by=by,
            instance_id=instance_id,
            instance=instance,
            detail=detail,
            exit_code=exit_code,
            tokens=tokens,
            ended_at=ended_at,
            end_source=end_source,
            last_seen_at=last_seen_at,
            attempts=attempts,
            clock=clock,
            sleep=sleep,
        )
    _tell(row, ended, by)  # after the destroy and the booking: a send never holds either
    return ended


def _tell(before: Any, ended: Ended, by: str) -> None:
    """Post the notification this ending calls for (gpuops/notify/): the rental's end, or a failed destroy.

    Only an ending that closed an open row tells (an idempotent second end says nothing), and only
    a destroy that gave up on an open row says "destroy failed". Returns at once: the send runs in
    the notifier's thread."""
    from gpuops.notify import notifier, texts

    if notifier.active() is None or before is None or before.status == RowStatus.CLOSED:
        return
    if ended.closed and ended.row is not None:
        notifier.post(texts.rental_ended(ended.row, by))
    elif ended.error and ended.error != "ledger write spooled" and not ended.not_ours and not ended.unknown:
        notifier.post(texts.destroy_failed(before, ended.error))


def _end(
    ledger: Books,
    provider: Provider | None,
    session_id: str | None,
    row: Any,
    reason: EndReason | str,
    *,
    by: str,
    instance_id: str | None,
    instance: Instance | None,
    detail: str,
    exit_code: int | None,
    tokens: int | None,
    ended_at: float | None,
    end_source: str | None,
    last_seen_at: float | None,
    attempts: int,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> Ended:
    iid = instance_id or (row.instance_id if row is not None else None)
    legacy_err = ""  # a look-up the ownership check made that failed
    if row is not None and provider is not None:
        from gpuops.ownership import LEGACY, OTHER, account_of, standing

        held = standing(row, account_of(provider))
        if held == OTHER:
            return Ended(
                session_id,
                iid,
                False,
                False,
                row.end_reason,
                error=f"row of account {row.account} ({row.owner}): not ours to end",
                row=row,
                not_ours=True,
            )
        if held == LEGACY and iid and row.status != RowStatus.CLOSED:
            assert session_id is not None  # a row was read for it (end_rental)
            if instance is None:
                try:
                    instance = provider.get(iid)
                except ProviderError as e:
                    instance, legacy_err = Instance(id=iid, label="", status=InstanceStatus.UNKNOWN), str(e)
            if instance is None:  # "not found" under a key that may not be the row's: proves nothing
                ledger.event(session_id, EventKind.UNKNOWN, {"instance": iid, "by": by, "reason": str(reason)})
                return Ended(
                    session_id,
                    iid,
                    False,
                    False,
                    row.end_reason,
                    error="instance not visible to the key held here",
                    row=row,
                    unknown=True,
                )
    is_open = row is not None and row.status != RowStatus.CLOSED
    destroyed = already_gone = False
    answered_at: float | None = None  # when the provider answered the destroy the next read confirmed
    inst = instance
    refused = doubt = ""
    stopped = False  # the provider shows the box stopped/exited: its compute ended unseen (end_time's rule)
    want = (getattr(row, "label", "") or "") if row is not None else (inst.label if inst is not None else "")
    if iid and provider is not None:
        looked_up = legacy_err
        if inst is None:
            try:
                inst = provider.get(iid)
            except ProviderError as e:
                inst, looked_up = Instance(id=iid, label="", status=InstanceStatus.UNKNOWN), str(e)
        refused = _not_our_instance(want, inst, looked_up)
        if refused:  # not certainly ours: never destroy it; find ours by its label
            if session_id:
                ledger.event(
                    session_id,
                    EventKind.DESTROY_REFUSED,
                    {
                        "instance": iid,
                        "expected_label": want,
                        "label": inst.label if inst is not None else "",
                        "account": getattr(row, "account", None),
                        "by": by,
                        "why": refused,
                    },
                )
            ours = None
            if not want:
                doubt = "no label to look ours up by"
            else:
                try:
                    ours = provider.find_by_label(want)
                except ProviderError as e:
                    doubt = f"the look-up of {want!r} failed ({e})"
            if ours is not None and ours.label == want:
                if ours.id != iid and session_id:
                    _quick(ledger, lambda: ledger.update(session_id, instance_id=ours.id))
                iid, inst = ours.id, ours
            else:
                inst = None  # ours is gone (the provider lists nothing labelled ours), or doubt
        stopped = (
            row is not None
            and is_open
            and inst is not None
            and inst.status in (InstanceStatus.STOPPED, InstanceStatus.EXITED)
            and ended_at is None
        )
        if stopped and getattr(row, "spot", False):
            reason = EndReason.PREEMPTED  # the provider's own state: the market took the box back
    booked: str = str(reason)
    if is_open:
        assert session_id is not None  # is_open: its row was read
        got = ledger.request_end(session_id, reason, by=by, detail=detail)
        booked = got or (getattr(row, "end_reason", None) or str(reason))
    if doubt:  # neither the id nor the label proves anything: the row stays open and says why
        error = f"{refused}; {doubt}: nothing destroyed"
        if session_id:
            ledger.event(session_id, EventKind.DESTROY_GAVE_UP, {"instance": iid, "by": by, "error": error})
        return Ended(session_id, iid, False, False, booked, error=error, row=row, refused=refused)
    if iid and provider is not None and not (refused and inst is None):
        already_gone = inst is None or inst.status == InstanceStatus.GONE

        def failed(state: RetryCallState) -> None:  # every failed try is booked, the last one too
            if session_id:
                ledger.event(
                    session_id,
                    EventKind.DESTROY_FAILED,
                    {"attempt": state.attempt_number, "kind": _failure(state).kind.value, "by": by},
                )

        try:  # keep trying: a box left running is the one unforgivable bug; closed only once confirmed gone
            answered_at = _destroy_confirmed(
                provider, iid, want, replace(DESTROY_RETRY, attempts=attempts), failed, sleep, clock
            )
        except ProviderError as e:
            error = str(e)
            if session_id:
                ledger.event(session_id, EventKind.DESTROY_GAVE_UP, {"instance": iid, "by": by, "error": error})
            return Ended(session_id, iid, False, False, booked, error=error, row=row, refused=refused)
        destroyed = True
    elif iid and provider is not None:
        already_gone = True  # not found, or the id answers for another's instance
    # Past the destroy: the writes that book it wait on the database alone, not on this process's
    # first import of the tables (seconds on a loaded machine; a write it made late was spooled).
    getattr(ledger, "prepare_writes", lambda: None)()
    if not is_open:
        if row is not None and session_id is not None and destroyed and not already_gone:  # a row: read by its id
            ledger.event(
                session_id, EventKind.ORPHAN_DESTROYED, {"instance": iid, "by": by, "label": inst.label if inst else ""}
            )
        return Ended(
            session_id,
            iid,
            destroyed,
            row is not None,
            row.end_reason if row is not None else booked,
            row.ended_at if row is not None else None,
            row.end_source if row is not None else None,
            already_gone,
            row=row,
            refused=refused,
        )
    assert session_id is not None  # is_open: its row was read
    now = clock()
    if ended_at is not None:
        t, source = float(ended_at), end_source or "caller"
    elif iid is None:
        t, source = float(row.created_at), "create"  # never rented: nothing billed
    else:
        unseen = already_gone or stopped  # a stopped box's compute ended unseen, like a gone one's
        last_event = _quick(ledger, lambda: _last_event_at(ledger, session_id)) if unseen else None
        asked = None if (refused and inst is None) else provider  # the reused id's record is not ours
        t, source = end_time(asked, iid, inst, unseen, row, last_event, now, last_seen_at, answered_at)
    if iid:
        ledger.event(
            session_id,
            EventKind.DESTROYED,
            {"instance": iid, "by": by, "already_gone": already_gone, "end_source": source},
        )
    if exit_code is None:
        exit_code = _quick(
            ledger, lambda: seen_exit_code(ledger, session_id)
        )  # the job's exit as `up` or a watchdog saw it
    fields = {} if tokens is None else {"tokens": int(tokens)}
    closed = ledger.close(session_id, t, booked, exit_code=exit_code, end_source=source, **fields)
    if closed is None:  # spooled: replayed by the next ledger write, or the next `ps`/watchdog/reconcile
        kept = getattr(ledger, "held", lambda _sid: None)(session_id)
        return Ended(
            session_id,
            iid,
            destroyed,
            False,
            (kept.end_reason if kept is not None else None) or booked,
            t,
            source,
            already_gone,
            error="ledger write spooled",
            row=kept,
        )
    return Ended(
        session_id,
        iid,
        destroyed,
        True,
        closed.end_reason,
        closed.ended_at,
        closed.end_source,
        already_gone,
        row=closed,
        refused=refused,
    )


def requested_reason(ledger: Books, session_id: str) -> EndReason | None:
    """The reason recorded for a session before its end was seen.

    An ``end_requested`` event (the
    newest), else the job's end as last seen (``job_exited``: job_end / job_failed). None when
    neither exists. Reads untrusted event text: unknown words are ignored."""
    for e in reversed(ledger.events(session_id)):
        if e.kind == EventKind.JOB_EXITED:
            try:
                code = json.loads(e.detail).get("exit_code")
            except (ValueError, AttributeError):
                code = None
            return EndReason.JOB_END if code == 0 else EndReason.JOB_FAILED
        if e.kind == EventKind.END_REQUESTED:
            try:
                d = json.loads(e.detail)
                r = d.get("reason") if isinstance(d, dict) else None
            except ValueError:
                r = e.detail.split()[0] if e.detail else None  # older rows stored the bare reason
            got = EndReason.parse(r)
            if got is not None:
                return got
    return None


def seen_exit_code(ledger: Books, session_id: str) -> int | None:
    """The job's exit code from the newest ``job_exited`` event (None when none was seen)."""
    for e in reversed(ledger.events(session_id)):
        if e.kind == EventKind.JOB_EXITED:
            try:
                code = json.loads(e.detail).get("exit_code")
            except (ValueError, AttributeError):
                return None
            return code if isinstance(code, int) and not isinstance(code, bool) else None
    return None
