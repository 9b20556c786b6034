"""What the dashboard shows, as one JSON-ready dict.

No aggregation happens here: the month's figures are ``gpuops.accounting.ledger_service.month`` (the
very function behind ``gpuops ledger month --json``), the session rows are
``ledger.history.session_row`` (behind ``gpuops ledger sessions``), so the page and the CLI agree by
construction.

Open boxes are read live: the ledger's open rows, and for each the on-box agent's status (its
teardown settings, last decision, heartbeat) through the provider, as the watchdog reads it. A
box that cannot be reached shows "unknown", never a guess.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.books import Books

StatusReader = Callable[[Any], "dict | None"]


def build(
    settings,
    month: str | None = None,
    tz: str | None = None,
    now: float | None = None,
    read_status: StatusReader | None = None,
) -> dict:
    """The dashboard's data for ``month`` in ``tz``.

    ``month``: ``YYYY-MM``, default this month; ``tz``: an IANA name, None for the machine's zone.

    Shape: ``{"month","tz","generated_at" (ISO 8601),"report" (books.month with "days": the
    ledger month --json document),"sessions" [session_row, newest first],"open_boxes" [box_row],
    "watchdog" [{"text","warn"}]: one line per watchdog's last pass, and the warning when none is fresh,
    "billing_now" (``live``'s totals), "budget" (``budget``), "trend" (``trend``: this month and the
    5 before it), "notifications" (``notifications``: the last messages sent from this machine),
    "sweeps", "sweeps_not_shown" (``sweeps``: every live sweep and the newest finished ones, progress and
    spend; how many older ones are left out and the command that lists them),
    "simulated" (the ledger is `gpuops demo`'s: every figure on the page simulated)}``.
    ``read_status(row) -> dict|None`` reads a box's agent status (default: through its provider).
    Raises BadInput for a bad month or zone (from books.month).
    """
    from gpuops.accounting import ledger_service as books
    from gpuops.teardown.watchdog_passes import health_lines, last_passes
    from ledger.history import recent_rows, session_rows
    from ledger.periods import utc_iso
    from ledger.reads import LedgerReader
    from ledger.reports import month_bounds

    now = time.time() if now is None else now
    reader = LedgerReader(settings.ledger_url())
    report = books.month(reader, month, tz, by="day", watchdogs=True)  # the same call as `ledger month --by day --json`
    start, end = month_bounds(report["month"], tz)
    boxes = open_boxes(settings, now, tz, read_status)
    return {
        "month": report["month"],
        "tz": report["tz"],
        "generated_at": utc_iso(now),
        "report": report,
        "sessions": session_rows(recent_rows(reader, start, end), tz),
        "open_boxes": boxes,
        "watchdog": [
            {"text": t, "warn": w} for t, w in health_lines(last_passes(reader, now))
        ],  # who enforces the money layer
        "billing_now": _totals(boxes),
        "budget": budget(settings, now),
        "trend": trend(reader, report["month"], tz),
        "notifications": notifications(settings, tz),
        **sweeps(reader),
        "simulated": settings.simulated(),
    }


# The finished sweeps the dashboard shows, newest first, below every live one (open, or a job
# claimed or running, which are always shown): a page's worth of history; `gpuops ledger sweeps`
# lists the rest.
FINISHED_SWEEPS_SHOWN = 10


def sweeps(reader) -> dict:
    """Every live sweep (open, or holding a claimed or running job), then the newest ``FINISHED_SWEEPS_SHOWN`` finished.

    From the queue's own read (``ledger.sweeps.live_and_finished``, the rows `gpuops ledger sweeps`
    lists): ``{"sweeps": [{"sweep","name","status","end_reason","jobs","done","running" (claimed
    ones too),"queued","failed","cancelled","max_usd","cost_usd" (what its rentals booked, USD; None
    before any cost),"spend_fraction" (cost_usd / max_usd; None without a max_usd)}],
    "sweeps_not_shown": None, or {"count": older finished sweeps left out, "command": the
    `gpuops ledger sweeps --limit N` that lists every sweep}}``."""
    from ledger import sweeps as queue

    rows, left_out = queue.live_and_finished(reader.engine, FINISHED_SWEEPS_SHOWN)
    out = []
    for r in rows:
        cap = r["max_usd"]
        out.append(
            {
                "sweep": r["id"],
                **{k: r[k] for k in ("name", "status", "end_reason", "jobs", "done", "queued", "failed", "cancelled")},
                "running": r["active"],
                "max_usd": cap,
                "cost_usd": r["cost_usd"],
                "spend_fraction": round((r["cost_usd"] or 0.0) / cap, 6) if cap else None,
            }
        )
    more = {"count": left_out, "command": f"gpuops ledger sweeps --limit {len(rows) + left_out}"} if left_out else None
    return {"sweeps": out, "sweeps_not_shown": more}


NOTIFICATIONS_SHOWN = 5  # the dashboard's last notifications


def notifications(settings, tz: str | None = None) -> list[dict]:
    """The last ``NOTIFICATIONS_SHOWN`` messages sent from this machine (gpuops/notify/), newest first.

    ``[{"at" (ISO 8601),"event","text","delivered","of"}]``; [] when none or no target is set."""
    from gpuops.notify.notifier import DELIVERIES_FILE, recent_messages
    from ledger.periods import utc_iso

    if not settings.notify.urls:
        return []
    got = recent_messages(settings.data_path() / DELIVERIES_FILE)[:NOTIFICATIONS_SHOWN]
    return [dict(m, at=utc_iso(float(m.get("at") or 0))) for m in got]


TREND_MONTHS = 6  # the shown month and the 5 before it


def earlier_months(month: str, count: int = TREND_MONTHS) -> list[str]:
    """``count`` months ending at ``month`` (``YYYY-MM``), oldest first.

    ``2026-02`` with 3 gives ``["2025-12", "2026-01", "2026-02"]``."""
    y, m = int(month[:4]), int(month[5:7])
    out = []
    for back in range(count - 1, -1, -1):
        n = y * 12 + (m - 1) - back
        out.append(f"{n // 12:04d}-{n % 12 + 1:02d}")
    return out


def trend(reader, month: str, tz: str | None = None) -> list[dict]:
    """The month against earlier months.

    For ``month`` and the 5 before it (oldest first), the figures of ``gpuops ledger month YYYY-MM
    --json`` (``gpuops.accounting.ledger_service.month``, one report per month, summed in SQL):
    ``[{"month","total_usd" (real USD),"simulated_usd" (never charged, kept
    apart),"sessions","open_sessions"}]``. Raises BadInput for a bad zone."""
    from gpuops.accounting import ledger_service as books

    keep = ("month", "total_usd", "simulated_usd", "sessions", "open_sessions")
    return [{k: rep[k] for k in keep} for rep in (books.month(reader, m, tz) for m in earlier_months(month))]


def _totals(boxes: list[dict]) -> dict:
    from gpuops.teardown.live import totals

    return totals(boxes)


def live(settings, now: float | None = None, tz: str | None = None) -> dict:
    """What the page polls (``/api/open.json``).

    The open boxes' running figures from the ledger alone, as `gpuops ps --all --json` computes them
    (``gpuops.rental.sessions.list_open``: no connection to any box):
    ``{"generated_at","open_boxes": [{"session","usd_per_hour",
    "accrued_usd","ttl_left_seconds","idle_seconds","tokens","simulated"}],"billing_now"}``."""
    from gpuops.rental.sessions import list_open, open_ledger
    from gpuops.teardown.live import totals
    from ledger.periods import utc_iso

    now = time.time() if now is None else now
    rows = list_open(open_ledger(settings), now=now)
    keep = ("session", "usd_per_hour", "accrued_usd", "ttl_left_seconds", "idle_seconds", "tokens", "simulated")
    return {
        "generated_at": utc_iso(now),
        "open_boxes": [{k: r.get(k) for k in keep} for r in rows],
        "billing_now": totals(rows),
    }


def budget(settings, now: float) -> dict:
    """This calendar month's real spend against ``monthly_cap_usd``, and the balances.

    This calendar month's real spend against ``monthly_cap_usd`` (the figure the watchdog compares,
    ``ledger.limits.month_spend``, everyone's or this user's by ``limits_scope``):
    ``{"monthly_cap_usd","spent_usd","cap_fraction" (None without a cap),"balance_floor_usd",
    "balances" (``balances``)}``."""
    from gpuops.rental.sessions import open_ledger
    from gpuops.teardown.budget import month_start_end
    from ledger.limits import month_spend

    t = settings.teardown
    cap = t.monthly_cap_usd
    out = {
        "monthly_cap_usd": cap,
        "spent_usd": None,
        "cap_fraction": None,
        "balance_floor_usd": t.balance_floor_usd,
        "balances": balances(settings),
    }
    if cap is None:
        return out
    spent = month_spend(
        open_ledger(settings),
        *month_start_end(now),
        now=now,
        owner=None if t.limits_scope == "team" else settings.owner(),
    )
    out["spent_usd"] = round(spent, 6)
    out["cap_fraction"] = round(spent / cap, 6) if cap > 0 else None
    return out


def open_boxes(settings, now: float, tz: str | None = None, read_status: StatusReader | None = None) -> list[dict]:
    """Every open session (any month: a box bills now whenever it was started) as ``box_row``."""
    from gpuops.rental.sessions import open_ledger

    ledger = open_ledger(settings)
    rows = ledger.open_sessions()
    if not rows:
        return []
    if read_status is None:
        read_status = _provider_status_reader(settings, ledger)
    out = []
    for r in rows:
        status = None
        if r.instance_id:
            try:
                status = read_status(r)
            except Exception:  # an unreachable provider or box: shown as unknown
                status = None
        out.append(box_row(r, status, now, settings.teardown, tz))
    return out


def _provider_status_reader(settings, ledger: Books) -> StatusReader:
    from gpuops.teardown.reconcile import Context, agent_status

    ctx = Context(settings, ledger=ledger, ssh_connect_s=5.0)

    def read(row) -> dict | None:
        p = ctx.provider(row.provider)
        inst = p.get(row.instance_id)
        return None if inst is None else agent_status(ctx, p, inst)

    return read


def box_row(row, status: dict | None, now: float, default_teardown, tz: str | None = None) -> dict:
    """One open box as the dashboard shows it.

    One open box: ``{"session","experiment","provider","card","simulated","usd_per_hour" (the burn
    rate, USD/h),"up_seconds","accrued_usd" (up_seconds x rate: not booked until it closes),
    "ttl_left_seconds","ttl_source" ("box agent" | "default setting"),"idle" (one line),
    "idle_minutes","heartbeat_age_seconds","started"}``. Seconds are wall-clock seconds."""
    from gpuops.agent.agentctl import heartbeat_stale
    from ledger.periods import utc_iso
    from ledger.reports import card_name

    started = row.instance_created_at or row.created_at
    up_s = max(0.0, now - started) if row.instance_created_at else 0.0
    rate = row.usd_per_hour or 0.0
    teardown = (status or {}).get("teardown") or {}
    max_hours = teardown.get("max_hours")
    source = "box agent"
    if not isinstance(max_hours, (int, float)) or isinstance(max_hours, bool) or max_hours <= 0:
        max_hours, source = default_teardown.max_hours, "default setting"
    idle_minutes = (
        teardown.get("idle_minutes", default_teardown.idle_minutes) if status else default_teardown.idle_minutes
    )
    hb = (status or {}).get("heartbeat")
    hb_age = round(now - float(hb), 1) if isinstance(hb, (int, float)) and not isinstance(hb, bool) else None
    return {
        "session": row.id,
        "experiment": row.experiment,
        "provider": row.provider,
        "card": card_name(row),
        "status": row.status,
        "simulated": bool(row.simulated),
        "usd_per_hour": rate,
        "started": utc_iso(started),
        "up_seconds": round(up_s, 1),
        "accrued_usd": round(up_s * rate / 3600.0, 6),
        "ttl_left_seconds": round(started + max_hours * 3600.0 - now, 1) if row.instance_created_at else None,
        "ttl_source": source,
        "idle_minutes": idle_minutes,
        "heartbeat_age_seconds": hb_age,
        "idle": idle_state(status, now, idle_minutes, stale=heartbeat_stale(status, now)),
    }


def idle_state(status: dict | None, now: float, idle_minutes: Any, stale: bool) -> str:
    """One line on the box's idle layer.

    "busy", "idle 3.0 of 15 min", "idle rule off", or "unknown (...)" when the agent's status is
    missing or stale."""
    if idle_minutes == "off":
        return "idle rule off"
    if not status:
        return "unknown (no agent status)"
    if stale:
        return "unknown (agent heartbeat stale)"
    decision = status.get("decision") or {}
    since = decision.get("idle_since")
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        return f"idle {max(0.0, now - since) / 60:.1f} of {float(idle_minutes):g} min"
    return "busy"


def balances(settings) -> list[dict]:
    """Each keyed provider's account credit as it reports it, or its one-line error.

    Each keyed provider's account credit as it reports it (``Provider.balance``: USD, and the spend
    rate in USD/h where given): ``[{"provider","usd","usd_per_hour","error","floor_note"}]``; a
    provider that fails is listed with its one-line error, never a guessed figure. ``floor_note``:
    with ``balance_floor_usd`` set and the balance unreadable, the line saying the floor cannot be
    enforced and what stands in (``gpuops.teardown.budget.floor_unenforced``), else None."""
    from gpuops.errors import GpuopsError
    from gpuops.providers import configured, get_provider
    from gpuops.teardown.budget import floor_unenforced, read_balance

    t = settings.teardown
    out = []
    for name in configured(settings):
        try:
            b = read_balance(get_provider(name, settings))
            note = (
                floor_unenforced(name, t.balance_floor_usd, t.monthly_cap_usd, b.note)
                if b.unreadable and t.balance_floor_usd is not None
                else None
            )
            row = {"provider": name, "usd": b.usd, "usd_per_hour": b.spend_usd_per_hour, "error": None}
            out.append({**row, "floor_note": note})
        except GpuopsError as e:
            err = str(e).splitlines()[0]
            out.append({"provider": name, "usd": None, "usd_per_hour": None, "error": err, "floor_note": None})
    return out
