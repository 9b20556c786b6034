"""Sending `[notify]`'s messages: once per event, under a deadline, never in a destroy's way.

* ``use(settings)`` arms this process's ``Notifier`` (a command that acts: up, down, reconcile,
  the watchdog, ps, check); ``post(event, key, text)`` hands it one message and returns at once.
* Each message runs in a daemon thread: first its claim in the ledger (``claim``: a row of
  ``session_leases`` keyed ``notify:<key>``, whose primary key lets exactly one process take it,
  so a second watchdog sends nothing), then one apprise send per target, each retried by the
  project's retry policy (``providers/retry.py``) inside the message's ``deadline_seconds``, then
  ``settle``: kept when a target took it (the record that it was sent), given back when none did
  (the next pass that sees the event tries again); a sender that died leaves a claim that lapses.
  The claim and the sends share the deadline, less ``SETTLE_RESERVE_S`` kept for the settle: a
  message that ran out of time (a loaded machine, a hanging receiver) has given its claim back
  by its deadline, when ``drain`` lets the process exit.
  Callers post after ``end_rental`` returned: the destroy and the booking are done before a send
  starts, whatever a receiver does.
* ``drain()`` (``cli.app``'s exit) waits for the messages at most until their deadlines; a
  receiver that hangs is left behind with its daemon thread.
* The URLs carry tokens: they are never printed, logged or booked. ``Target.shown`` is the
  redacted form (``config.redact_url``), ``Target.id`` a fingerprint (8 hex digits of SHA-256);
  apprise's own logger is silenced (its debug lines name the URL). The last delivery per target is
  kept on this machine with the last ``RECENT_KEPT`` messages (``deliveries_path``: ``<data
  dir>/notify-deliveries.json``, 0600, ids, redacted forms and the lines only) for `gpuops check`
  and the dashboard.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.config import redact_url
from gpuops.providers.retry import RetryPolicy, call_with_retries

if TYPE_CHECKING:
    from gpuops.config import Settings

log = logging.getLogger("gpuops.notify")

CLAIM_PREFIX = "notify:"
# A delivered message's claim is kept longer than any event it names can recur (a month's cap key
# names its month): the retention of the ledger's record that it was sent, after which the claim
# lapses and the next claim's write prunes it (``ledger.limits.prune_lapsed_leases``); a claim in
# flight lapses this long after its message's deadline (its sender died)
CLAIM_KEEP_S = 400 * 86400.0
CLAIM_SLACK_S = 30.0
# The end of a message's deadline kept for its settle (seconds, at most this and a quarter of the
# deadline): the sends stop this much before it, so a message that was not delivered gives its
# claim back before ``drain`` stops waiting -- else the process exits holding it and the next pass
# (another watchdog) skips the event until the claim lapses
SETTLE_RESERVE_S = 3.0
# One attempt's connect and read timeouts, seconds (apprise's own default is 4 s each)
ATTEMPT_TIMEOUT_S = 4.0
# Tries per target inside the message's deadline: 1 s, then 2 s between them
SEND_RETRY = RetryPolicy(attempts=3, wait_s=1.0, max_wait_s=2.0, budget_s=None)
TITLE = "gpuops"
DELIVERIES_FILE = "notify-deliveries.json"
RECENT_KEPT = 20  # messages the deliveries file keeps for the dashboard
_FILE_LOCK = threading.Lock()  # one writer of the deliveries file per process


@dataclass(frozen=True)
class Target:
    """One apprise URL; ``url`` is a secret (hidden from ``repr``)."""

    url: str = field(repr=False)

    @property
    def id(self) -> str:
        """8 hex digits of the URL's SHA-256: tells targets apart, reveals no token."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:8]

    @property
    def shown(self) -> str:
        """The URL as it may be printed (``config.redact_url``), with its id."""
        return f"{redact_url(self.url)} ({self.id})"


@dataclass(frozen=True)
class Delivery:
    """One message to one target: ``ok`` when the receiver took it; ``at`` epoch s."""

    target: Target
    ok: bool
    at: float
    why: str = ""  # why not, in words that name no URL


class _NotDelivered(Exception):
    """apprise answered False (a refused or failed send): retried."""


def _quiet_apprise() -> None:
    """Silence apprise's logger: its lines name the URL (and so its token)."""
    lg = logging.getLogger("apprise")
    lg.handlers[:] = [logging.NullHandler()]
    lg.propagate = False
    lg.setLevel(logging.CRITICAL + 1)


def send_one(target: Target, text: str, deadline: float) -> Delivery:
    """Send ``text`` to ``target`` through apprise, retried until ``deadline`` (``time.monotonic``).

    Each attempt's connect and read timeouts are ``ATTEMPT_TIMEOUT_S`` or what is left of the deadline."""
    import apprise  # the one import of apprise: only when a message is sent

    _quiet_apprise()

    def once() -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        sender = apprise.Apprise()
        if not sender.add(target.url):
            raise ValueError("apprise does not know this URL's scheme")
        for plugin in sender:
            plugin.socket_connect_timeout = min(ATTEMPT_TIMEOUT_S, left)
            plugin.socket_read_timeout = min(ATTEMPT_TIMEOUT_S, left)
        if not sender.notify(body=text, title=TITLE):
            raise _NotDelivered("the receiver did not take it")

    try:
        call_with_retries(once, SEND_RETRY, retry_on=lambda e: isinstance(e, _NotDelivered), deadline=deadline)
    except (_NotDelivered, ValueError, TimeoutError) as e:
        return Delivery(target, False, time.time(), str(e))
    except Exception as e:  # noqa: BLE001  a receiver's failure is never the caller's: named by type only
        return Delivery(target, False, time.time(), type(e).__name__)
    return Delivery(target, True, time.time())


class Notifier:
    """The targets of one process and the messages it has in flight.

    ``urls``: apprise URLs; ``events``: the events sent; ``deadline_s``: each message's whole
    time, seconds; ``ledger_url``: where claims are made; ``deliveries_path``: the local record of
    the last delivery per target (None: not kept)."""

    def __init__(
        self,
        urls: list[str],
        events: list[str],
        deadline_s: float,
        ledger_url: str | None,
        deliveries_path: Path | None,
    ) -> None:
        self.targets = [Target(u) for u in urls]
        self.events = set(events)
        self.deadline_s = deadline_s
        self.ledger_url = ledger_url
        self.deliveries_path = deliveries_path
        self._flights: list[tuple[threading.Thread, float]] = []
        self.settings: Any = None  # the Settings it was armed from (``use``)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Notifier(targets={[t.shown for t in self.targets]!r})"

    def wants(self, event: str) -> bool:
        """True when ``event`` is on and there is a target to send it to."""
        return bool(self.targets) and event in self.events

    def post(self, event: str, key: str | None, text: str) -> bool:
        """Send ``text`` to every target in the background, once per ``key`` across every process.

        Returns at once: True when a message was started (``event`` is on). ``key`` None: no claim
        (`notify test`)."""
        if not self.wants(event):
            return False
        deadline = time.monotonic() + self.deadline_s
        t = threading.Thread(target=self._deliver, args=(event, key, text, deadline), name="gpuops-notify", daemon=True)
        with self._lock:
            self._flights.append((t, deadline))
        t.start()
        return True

    def ping(self, url: str) -> None:
        """GET ``url`` (the dead-man URL) in the background, within the deadline; its answer is not read."""
        deadline = time.monotonic() + self.deadline_s

        def get() -> None:
            import urllib.request

            try:
                with urllib.request.urlopen(url, timeout=min(ATTEMPT_TIMEOUT_S, self.deadline_s)):  # noqa: S310  http(s) only (config)
                    pass
            except Exception as e:  # noqa: BLE001  an outside service's hiccup: said by type, never the URL
                log.warning("dead-man ping not delivered: %s", type(e).__name__)

        t = threading.Thread(target=get, name="gpuops-deadman", daemon=True)
        with self._lock:
            self._flights.append((t, deadline))
        t.start()

    def _deliver(self, event: str, key: str | None, text: str, deadline: float) -> None:
        me = uuid.uuid4().hex
        if key is not None and not self.claim(key, me, self.deadline_s + CLAIM_SLACK_S):
            return  # another process (a second watchdog) sends it, or has sent it
        # The sends end early enough for the settle to give the claim back by the deadline.
        reserve = min(SETTLE_RESERVE_S, self.deadline_s / 4) if key is not None else 0.0
        done = self.send_all(text, deadline - reserve)
        if key is not None:
            self.settle(key, me, any(d.ok for d in done))
        self._record(event, done, text)

    def claim(self, key: str, owner: str, seconds: float) -> bool:
        """Take ``notify:<key>`` in the ledger for ``seconds``; True for the one process that holds it.

        A ledger that does not answer sends anyway (a lost "destroy failed" costs more than a repeat)."""
        if not self.ledger_url:
            return True
        try:
            from ledger import Ledger
            from ledger.limits import acquire_lease, prune_lapsed_leases

            books = Ledger(self.ledger_url)
            try:
                took = acquire_lease(books, CLAIM_PREFIX + key, owner, seconds)
                try:
                    prune_lapsed_leases(books, CLAIM_PREFIX)  # claims past CLAIM_KEEP_S (or whose sender died)
                except Exception as e:  # noqa: BLE001  the next claim prunes them
                    log.warning("notify: lapsed claims not pruned (%s)", type(e).__name__)
                return took
            finally:
                books.engine.dispose()  # one short-lived engine per message: a long watchdog keeps none
        except Exception as e:  # noqa: BLE001
            log.warning("notify: the ledger did not take the claim of %s (%s); sent anyway", key, type(e).__name__)
            return True

    def settle(self, key: str, owner: str, sent: bool) -> None:
        """After the send: keep the claim when a target took the message, else give it back.

        Kept ``CLAIM_KEEP_S``: the ledger's record that it was sent; given back: the next pass that
        sees the event tries again. A process that dies mid-send leaves a claim that lapses ``CLAIM_SLACK_S`` after its deadline."""
        if not self.ledger_url:
            return
        try:
            from ledger import Ledger
            from ledger.limits import acquire_lease, release_lease

            books = Ledger(self.ledger_url)
            try:
                if sent:
                    acquire_lease(books, CLAIM_PREFIX + key, owner, CLAIM_KEEP_S)  # the holder renews
                else:
                    release_lease(books, CLAIM_PREFIX + key, owner)
            finally:
                books.engine.dispose()
        except Exception as e:  # noqa: BLE001  the claim lapses on its own
            log.warning("notify: the claim of %s was not settled (%s)", key, type(e).__name__)

    def send_all(self, text: str, deadline: float) -> list[Delivery]:
        """One message to every target at once, each within ``deadline`` (``time.monotonic``).

        A target that has not answered by the deadline is a failed delivery."""
        out: dict[int, Delivery] = {}

        def one(i: int, t: Target) -> None:
            out[i] = send_one(t, text, deadline)

        threads = [
            threading.Thread(target=one, args=(i, t), name="gpuops-notify-target", daemon=True)
            for i, t in enumerate(self.targets)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        now = time.time()
        return [out.get(i) or Delivery(t, False, now, "no answer by the deadline") for i, t in enumerate(self.targets)]

    def _record(self, event: str, done: list[Delivery], text: str) -> None:
        for d in done:
            if not d.ok:
                log.warning("notify: %s not delivered to %s: %s", event, d.target.shown, d.why)
        if self.deliveries_path is None:
            return
        with _FILE_LOCK:
            try:
                kept = _read(self.deliveries_path)
                targets = kept["targets"]
                for d in done:
                    targets[d.target.id] = {
                        "shown": d.target.shown,
                        "ok": d.ok,
                        "at": d.at,
                        "event": event,
                        "why": d.why,
                    }
                at = max((d.at for d in done), default=time.time())
                sent = {"at": at, "event": event, "text": text, "delivered": sum(d.ok for d in done), "of": len(done)}
                kept["recent"] = (kept["recent"] + [sent])[-RECENT_KEPT:]
                write_private(self.deliveries_path, json.dumps(kept, sort_keys=True))
            except OSError as e:
                log.warning("notify: deliveries not kept: %s", type(e).__name__)

    def drain(self) -> None:
        """Wait for the messages in flight, each at most until its deadline."""
        with self._lock:
            flights = list(self._flights)
        for t, deadline in flights:
            t.join(max(0.0, deadline - time.monotonic()))


def _read(path: Path) -> dict[str, Any]:
    """The file at ``path`` as ``{"targets": {id: last delivery}, "recent": [message, ...]}`` (empty when unreadable)."""
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        got = None
    got = got if isinstance(got, dict) else {}
    targets, recent = got.get("targets"), got.get("recent")
    return {
        "targets": targets if isinstance(targets, dict) else {},
        "recent": [r for r in recent if isinstance(r, dict)] if isinstance(recent, list) else [],
    }


def read_deliveries(path: Path) -> dict[str, dict[str, Any]]:
    """The last delivery per target id kept at ``path``.

    ``{id: {"shown","ok","at" (epoch s),"event","why"}}``; {} when none or unreadable."""
    return dict(_read(path)["targets"])


def recent_messages(path: Path) -> list[dict[str, Any]]:
    """The last ``RECENT_KEPT`` messages sent from this machine, newest first.

    Each ``{"at" (epoch s),"event","text","delivered" (targets that took it),"of" (targets)}``."""
    return list(reversed(_read(path)["recent"]))


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (0600, replaced whole)."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


_active: Notifier | None = None
_left: list[tuple[threading.Thread, float]] = []  # messages in flight of a notifier disarmed since


def use(settings: Settings) -> Notifier | None:
    """Arm this process's notifier from ``settings.notify`` (None and nothing armed: no target)."""
    global _active
    n = settings.notify
    if _active is not None and _active.settings is settings:
        return _active  # `up`'s own reconcile arms it again: one notifier, its messages in flight kept
    before = _active
    if not n.urls and not n.deadman_url:
        _active = None  # other settings, no target: nothing is sent from here on
        if before is not None:
            _left.extend(before._flights)  # still drained at exit
        return None
    _active = Notifier(
        list(n.urls),
        list(n.events),
        n.deadline_seconds,
        settings.ledger_url(),
        settings.private_data_path() / DELIVERIES_FILE,
    )
    _active.settings = settings
    from ledger.store import CLOSE_REPLAYED

    if _tell_replayed_close not in CLOSE_REPLAYED:
        CLOSE_REPLAYED.append(_tell_replayed_close)  # a replay of this process tells the closes it books
    if before is not None:
        _active._flights.extend(before._flights)  # drained at exit all the same
    return _active


def _tell_replayed_close(row: Any) -> None:
    """Tell a close that was spooled and is booked now by a replay (``ledger.store.CLOSE_REPLAYED``).

    Told as ``end_rental`` would have told it, under the same key (``<session>:ended``), so its
    claim makes it once, whoever replays it."""
    from gpuops.notify import texts

    if _active is not None and getattr(row, "status", None) == "closed":
        post(texts.rental_ended(row, "replay"))


def active() -> Notifier | None:
    """This process's notifier (None: not armed)."""
    return _active


def post(notice: tuple[str, str, str]) -> bool:
    """Hand ``(event, key, text)`` (``texts``) to this process's notifier; False when none or off."""
    return _active.post(*notice) if _active is not None else False


def drain() -> None:
    """Wait for this process's messages in flight, each at most until its deadline."""
    if _active is not None:
        _active.drain()
    for t, deadline in list(_left):
        t.join(max(0.0, deadline - time.monotonic()))


def try_targets(settings: Settings, text: str = "gpuops: test message from `gpuops notify test`") -> list[Delivery]:
    """Send ``text`` to every ``[notify]`` target now, each within ``deadline_seconds``; one Delivery per target.

    No claim (a test is not an event); every delivery is kept for `gpuops check`. [] when there is
    no target."""
    told = Notifier(
        list(settings.notify.urls),
        [],
        settings.notify.deadline_seconds,
        None,
        settings.private_data_path() / DELIVERIES_FILE,
    )
    done = told.send_all(text, time.monotonic() + told.deadline_s)
    told._record("test", done, text)
    return done
