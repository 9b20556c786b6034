"""Cost truth: billed seconds the way a provider rounds them, end times we did not see, and the
comparison of our books with the provider's own billing.

Pure functions only; the provider calls that fetch billing live in ``gpuops/providers/`` and hand
back ``ChargeLine`` lists (this package imports nothing of ``gpuops``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable

# Per-second billing (RunPod pods and Vast instances bill by the second; a provider setting may say
# otherwise and is stored per session in ``sessions.billing_increment_seconds``).
DEFAULT_INCREMENT_S = 1.0
# Floating-point slack before rounding up: 3600.0000000001 s is 3600 s, not 3601 s.
_EPS = 1e-6

# Two money figures closer than this are the same charge (provider invoices show cents).
MATCH_TOLERANCE_USD = 0.01


class NoEndTime(ValueError):
    """Neither the provider nor the agent's heartbeat gives an end time; the row stays open."""


def billed_seconds(started_at: float | None, ended_at: float | None, increment_s: float | None = None) -> float:
    """Seconds billed from create (``started_at``) to the confirmed destroy (``ended_at``), rounded
    up to the provider's billing increment (``increment_s`` seconds; None = per second).

    A session that never got an instance (``started_at`` None) or has no end yet bills 0 s.
    Raises ValueError for an increment <= 0.
    """
    if started_at is None or ended_at is None:
        return 0.0
    inc = DEFAULT_INCREMENT_S if increment_s is None else float(increment_s)
    if inc <= 0:
        raise ValueError(f"billing increment must be > 0 seconds, got {increment_s!r}")
    raw = max(0.0, ended_at - started_at)
    return math.ceil(raw / inc - _EPS) * inc if raw > 0 else 0.0


def billed_cost(
    usd_per_hour: float | None, started_at: float | None, ended_at: float | None, increment_s: float | None = None
) -> tuple[float, float]:
    """(billed seconds, cost USD) = rounded seconds x ``usd_per_hour`` (whole box, USD/h) / 3600.

    Cost is rounded to 1e-6 USD. No instance or no end: (0.0, 0.0).
    """
    seconds = billed_seconds(started_at, ended_at, increment_s)
    return seconds, round(seconds / 3600.0 * (usd_per_hour or 0.0), 6)


def unseen_end(provider_ended_at: float | None, last_heartbeat_at: float | None) -> tuple[float, str]:
    """The end time of a box whose destroy the laptop never saw: the provider's own end time when it
    reports one, else the on-box agent's last heartbeat. Never "now" (a box that self-destroyed
    while the laptop slept must not bill until the laptop wakes; field-notes.md, SkyPilot #1301).

    Returns (epoch seconds, source) with source ``provider`` or ``heartbeat``.
    Raises NoEndTime when neither is known.
    """
    if provider_ended_at is not None:
        return float(provider_ended_at), "provider"
    if last_heartbeat_at is not None:
        return float(last_heartbeat_at), "heartbeat"
    raise NoEndTime("no end time from the provider and no agent heartbeat; leave the row open and sync later")


@dataclass(frozen=True)
class ChargeLine:
    """One line of a provider's own billing, as ``Provider.billing(since, until)`` returns it.

    ``instance_id``: the provider's id for the box (RunPod pod id, Vast contract id) as our rows
    store it, or None for account-level lines. ``usd``: what was charged (USD, >= 0; credits are not
    charge lines). ``start``/``end``: epoch seconds the line covers, when given. ``label``: the
    instance label (``gpuops-<session>``) when the provider reports it. ``kind``: gpu, storage,
    network or other.
    """

    provider: str
    instance_id: str | None
    usd: float
    start: float | None = None
    end: float | None = None
    label: str = ""
    kind: str = "gpu"
    description: str = ""

    def as_json(self) -> dict:
        return asdict(self)


def _r(x: float) -> float:
    return round(x, 6)


def compare_billing(
    sessions: Iterable[Any], charges: Iterable[ChargeLine], providers: Iterable[str], tolerance_usd: float = MATCH_TOLERANCE_USD
) -> dict:
    """Our books against the providers' billing, per session and in total.

    ``sessions``: ledger rows (attributes ``id, provider, instance_id, instance_created_at, status,
    simulated, cost_usd``); only real (not simulated) rentals of ``providers`` are compared.
    ``charges``: the providers' lines for the same window. A line matches a session by
    (provider, instance_id), else by label ``gpuops-<session id>``; several lines of one instance
    (per day, storage) are summed.

    Shape: ``{"providers", "sessions": [{"session","provider","instance_id","ours_usd","theirs_usd",
    "diff_usd","status"}], "unbooked": [ChargeLine json + nothing else], "by_provider": [{"name",
    "ours_usd","theirs_usd","diff_usd"}], "ours_usd","theirs_usd","diff_usd"}``. ``diff_usd`` is
    theirs minus ours (positive: the provider charged more than we booked). ``status``: ``match``
    (within ``tolerance_usd``), ``differs``, ``not_billed`` (no line at the provider), ``open``
    (we have no cost yet).
    """
    wanted = set(providers)
    rows = [
        s for s in sessions
        if s.provider in wanted and not s.simulated and (s.instance_id is not None or s.instance_created_at is not None)
    ]
    by_instance = {(s.provider, str(s.instance_id)): s for s in rows if s.instance_id is not None}
    by_label = {f"gpuops-{s.id}": s for s in rows}
    theirs: dict[str, float] = {}
    unbooked: list[dict] = []
    for c in charges:
        if c.provider not in wanted:
            continue
        s = by_instance.get((c.provider, str(c.instance_id))) if c.instance_id is not None else None
        if s is None and c.label:
            s = by_label.get(c.label)
        if s is None:
            unbooked.append(c.as_json())
            continue
        theirs[s.id] = theirs.get(s.id, 0.0) + c.usd
    out_rows = []
    prov: dict[str, dict] = {p: {"name": p, "ours_usd": 0.0, "theirs_usd": 0.0, "diff_usd": 0.0} for p in sorted(wanted)}
    for s in sorted(rows, key=lambda r: (r.instance_created_at or 0.0, r.id)):
        ours = s.cost_usd if s.status == "closed" else None
        their = theirs.get(s.id)
        if ours is None:
            status = "open"
        elif their is None:
            status = "not_billed"
        else:
            status = "match" if abs(their - ours) <= tolerance_usd else "differs"
        diff = (their or 0.0) - (ours or 0.0)
        out_rows.append({
            "session": s.id, "provider": s.provider, "instance_id": s.instance_id,
            "ours_usd": None if ours is None else _r(ours), "theirs_usd": None if their is None else _r(their),
            "diff_usd": _r(diff), "status": status,
        })
        p = prov[s.provider]
        p["ours_usd"] += ours or 0.0
        p["theirs_usd"] += their or 0.0
    for u in unbooked:
        prov[u["provider"]]["theirs_usd"] += u["usd"]
    for p in prov.values():
        p["diff_usd"] = p["theirs_usd"] - p["ours_usd"]
        for k in ("ours_usd", "theirs_usd", "diff_usd"):
            p[k] = _r(p[k])
    ours_t = sum(p["ours_usd"] for p in prov.values())
    theirs_t = sum(p["theirs_usd"] for p in prov.values())
    return {
        "providers": sorted(wanted),
        "sessions": out_rows,
        "unbooked": unbooked,
        "by_provider": list(prov.values()),
        "ours_usd": _r(ours_t),
        "theirs_usd": _r(theirs_t),
        "diff_usd": _r(theirs_t - ours_t),
    }
