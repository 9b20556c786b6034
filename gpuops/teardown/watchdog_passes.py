"""Who looked last: the watchdog passes booked in the ledger, as data for every view.

Who looked last: the watchdog passes booked in the ledger (``ledger/passes.py``), as data for every
view (`ps`, `ledger month`, the dashboard, `gpuops check`) and for `up`'s one warning.

Light on purpose: `ps` imports it at start-up, so it imports nothing of the watchdog itself.
"""

from __future__ import annotations

import time

STALE_INTERVALS = 3  # a watchdog whose newest pass is older than this many of its intervals is gone


def last_passes(books, now: float | None = None) -> list[dict]:
    """The newest pass of each watchdog on ``books``, newest first, as JSON-ready dicts.

    The newest pass of each watchdog on the ledger ``books`` (a ``Ledger`` or ``LedgerReader``),
    newest first, as JSON-ready dicts: ``host``, ``owner``, ``last_pass_at`` and ``stale_at`` (epoch
    s UTC: ``last_pass_at`` + ``STALE_INTERVALS`` x its interval), ``age_seconds`` (at ``now``),
    ``stale`` (bool), ``interval_seconds``, ``seconds`` (the pass took), ``checked``, ``ended``,
    ``errors``, ``actions`` and ``summary`` (words). [] for a ledger no watchdog has passed over."""
    from ledger.passes import latest_passes
    from ledger.reads import pass_summary

    now = time.time() if now is None else now
    out = []
    for p in latest_passes(books):
        stale_at = p.at + STALE_INTERVALS * p.interval_seconds
        out.append(
            {
                "host": p.host,
                "owner": p.owner,
                "last_pass_at": p.at,
                "stale_at": stale_at,
                "age_seconds": round(max(0.0, now - p.at), 3),
                "stale": now > stale_at,
                "interval_seconds": p.interval_seconds,
                "seconds": round(p.seconds, 3),
                "checked": p.checked,
                "ended": p.ended,
                "errors": p.errors,
                "actions": p.actions,
                "summary": pass_summary(p),
            }
        )
    return out


def ago(seconds: float) -> str:
    """A duration in the largest whole unit that fits: ``12 s``, ``4 min``, ``3 h``, ``2 d``."""
    s = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{int(s // size)} {unit}"
    return f"{int(s)} s"


NOT_ENFORCED = "the balance floor and the monthly cap are not enforced while your laptop is away"
INSTALL_HINT = "`gpuops watchdog --install` keeps one running"


def health_lines(passes: list[dict]) -> list[tuple[str, bool]]:
    """What the views say about the watchdogs (``last_passes``' dicts), as (line, warn) pairs.

    One line per watchdog, then, when none has passed within three of its intervals, the warning
    that the money layer is off. ``warn`` lines are shown in the warning colour."""
    from gpuops.textsafe import safe

    if not passes:
        return [(f"no watchdog pass in this ledger: {NOT_ENFORCED}; {INSTALL_HINT}", True)]
    lines = [
        (
            f"watchdog: last pass {ago(p['age_seconds'])} ago on {safe(p['host'])} by {safe(p['owner'])}"
            + (" (stopped?)" if p["stale"] else f" ({p['summary']})"),
            p["stale"],
        )
        for p in passes
    ]
    if all(p["stale"] for p in passes):
        newest = min(p["age_seconds"] for p in passes)
        lines.append((f"no watchdog pass for {ago(newest)}: {NOT_ENFORCED}; {INSTALL_HINT}", True))
    return lines


def guarded_recently(books, now: float | None = None) -> bool:
    """True when some watchdog passed over ``books`` recently enough (`up` warns otherwise).

    True when some watchdog passed over ``books`` within ``STALE_INTERVALS`` of its own interval
    before ``now`` (`up` warns otherwise). A ledger that cannot say (unreachable) counts as no pass."""
    try:
        return any(not p["stale"] for p in last_passes(books, now))
    except Exception:  # noqa: BLE001  nothing known, so no watchdog known
        return False


def tell_if_silent(settings, books, now: float | None = None) -> bool:
    """Notify (event ``watchdog_silent``) when the newest watchdog pass is older than the set time.

    The set time: ``[notify] watchdog_silent_minutes``; True when a message was started. Run by the next `up`, `ps` or `check` that sees the silence (a dead watchdog cannot say so), once
    per silence (the key names the newest pass). A ledger no watchdog ever passed over says nothing:
    nobody ran one to fall silent. Reads nothing when no target is configured."""
    n = settings.notify
    if not n.urls or "watchdog_silent" not in n.events:
        return False
    from gpuops.notify import notifier, texts

    now = time.time() if now is None else now
    try:
        passes = last_passes(books, now)
    except Exception:  # noqa: BLE001  an unreachable ledger: the views say so; nothing known to tell
        return False
    if not passes:
        return False
    newest = max(p["last_pass_at"] for p in passes)
    if now - newest <= n.watchdog_silent_minutes * 60.0:
        return False
    if notifier.active() is None:
        notifier.use(settings)
    return notifier.post(texts.watchdog_silent(newest, now - newest, n.watchdog_silent_minutes))
