"""What a running box has cost so far, and the last status the ledger holds for it.

``up`` (while it follows the job) and ``gpuops watchdog`` (each tick) book the box's status as a
``live`` event: the tokens the job has written to ``$GPUOPS_METRICS`` and how long the GPUs have
been idle (the current streak of ``onbox.policy.decide``'s ``idle_since``, in seconds of the
clock that judged it, so a box clock that is off does not matter). ``gpuops ps`` and the dashboard read
the newest one from the ledger and never open a connection to the box. Money here is estimated
from the row: the price booked at create (USD/h, whole box) times the seconds since the
instance was created; real and simulated figures are kept apart by the row's ``simulated``.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from onbox.vocabulary import EventKind

if TYPE_CHECKING:
    from ledger.books import Books

# How often `up` books the box's status while the job runs (seconds of this machine's clock).
LIVE_EVERY_S = 10.0


def record_live(
    ledger: Books,
    session_id: str,
    *,
    tokens: int | None,
    idle_seconds: float | None,
    by: str,
    now: float | None = None,
) -> None:
    """Book the box's status as seen now (``now``: this machine's epoch s).

    ``tokens`` so far (None: unread), ``idle_seconds`` the current idle streak (0: busy; None:
    unknown). Best effort: a ledger that refuses it is spooled by the ledger; nothing here may stop
    a run."""
    try:
        ledger.event(
            session_id,
            EventKind.LIVE,
            {"tokens": tokens, "idle_seconds": idle_seconds, "by": by},
            at=time.time() if now is None else now,
        )
    except Exception:  # noqa: BLE001  a live figure is never worth a failed run
        pass


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def live_figures(row: dict, last: tuple[float, Any] | None, now: float | None = None) -> dict:
    """The running cost of an open session ``row`` (``sessions.row_json``) at ``now``.

    ``accrued_usd`` (price booked x seconds since create, USD; None before create),
    ``usd_per_hour`` (whole box), ``simulated``, ``ttl_left_seconds`` (to ``max_hours`` from
    create, never below 0; None without a TTL), ``idle_seconds`` (the current idle streak at
    ``now``: the booked streak plus the time since; 0 when the last status said busy, None when
    no status was booked),
    ``tokens`` (the most of the row's and the last status's), ``usd_per_mtoken`` (accrued /
    tokens x 1e6), ``status_at`` (epoch s of that status) and ``status_age_seconds``.
    ``last``: ``Ledger.last_event(id, "live")``."""
    now = time.time() if now is None else now
    started = _finite(row.get("instance_created_at"))
    price = _finite(row.get("usd_per_hour"))
    accrued = round(max(0.0, now - started) / 3600.0 * price, 6) if started is not None and price is not None else None
    max_hours = _finite(row.get("max_hours"))
    ttl_left = max(0.0, started + max_hours * 3600.0 - now) if started is not None and max_hours else None
    detail = last[1] if last is not None and isinstance(last[1], dict) else {}
    status_at = last[0] if last is not None else None
    streak = _finite(detail.get("idle_seconds"))
    idle = None if status_at is None or streak is None else (streak + max(0.0, now - status_at) if streak > 0 else 0.0)
    seen = _finite(detail.get("tokens"))
    tokens = max(int(row.get("tokens") or 0), int(seen) if seen is not None and seen >= 0 else 0)
    return {
        "accrued_usd": accrued,
        "usd_per_hour": price,
        "simulated": bool(row.get("simulated")),
        "ttl_left_seconds": round(ttl_left, 1) if ttl_left is not None else None,
        "idle_seconds": round(idle, 1) if idle is not None else None,
        "tokens": tokens,
        "usd_per_mtoken": round(accrued / tokens * 1e6, 6) if accrued is not None and tokens else None,
        "status_at": status_at,
        "status_age_seconds": round(max(0.0, now - status_at), 1) if status_at is not None else None,
    }


def totals(rows: list[dict]) -> dict:
    """Open boxes' burn and accrual, real and simulated apart.

    ``{"real": {"usd_per_hour", "accrued_usd", "boxes"}, "simulated": {...}}`` over rows that carry
    ``live_figures``."""
    out = {k: {"usd_per_hour": 0.0, "accrued_usd": 0.0, "boxes": 0} for k in ("real", "simulated")}
    for r in rows:
        t = out["simulated" if r.get("simulated") else "real"]
        t["boxes"] += 1
        t["usd_per_hour"] = round(t["usd_per_hour"] + (r.get("usd_per_hour") or 0.0), 6)
        t["accrued_usd"] = round(t["accrued_usd"] + (r.get("accrued_usd") or 0.0), 6)
    return out
