"""Cost truth: billed seconds, and our books against the provider's billing.

Billed seconds the way a provider rounds them, and the comparison of our books with the provider's
own billing. When a rental ended is decided by one rule, ``gpuops.teardown.lifecycle.end_time``.

Pure functions only; the provider calls that fetch billing live in ``gpuops/providers/`` and hand
back ``ChargeLine`` lists (this package imports nothing of ``gpuops``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

# Per-second billing unless a provider's documentation says otherwise: each provider's stated unit
# is in its registry entry (gpuops.providers, ``billing_increment_s``, with the source), a setting
# may override it, and the one used is stored per session in ``sessions.billing_increment_seconds``.
DEFAULT_INCREMENT_S = 1.0
# Floating-point slack before rounding up: 3600.0000000001 s is 3600 s, not 3601 s.
_EPS = 1e-6

# Two money figures closer than this are the same charge (provider invoices show cents).
MATCH_TOLERANCE_USD = 0.01


def billed_seconds(started_at: float | None, ended_at: float | None, increment_s: float | None = None) -> float:
    """Seconds billed from create to the confirmed destroy, rounded up to the provider's increment.

    Seconds billed from create (``started_at``) to the confirmed destroy (``ended_at``), rounded up
    to the provider's billing increment (``increment_s`` seconds; None = per second).

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


@dataclass(frozen=True)
class ChargeLine:
    """One line of a provider's own billing, as ``Provider.billing(since, until)`` returns it.

    ``instance_id``: the provider's id for the box (RunPod pod id, Vast contract id) as our rows
    store it, or None for account-level lines (a network volume). ``usd``: what was charged (USD,
    >= 0; credits are not charge lines). ``start``/``end``: epoch seconds the line covers, when
    given (a RunPod record covers its whole bucket). ``label``: the instance label
    (``gpuops-<session>``) when the provider reports it. ``kind``: gpu (compute time, the price
    including the disk of a running box), storage (a stopped box's disk, volumes), network or
    other. ``seconds``: compute seconds billed, when the provider says (RunPod ``timeBilledMs``).
    ``account``: the provider account whose key read the line (``Provider.account``, as our rows
    store it), None when unknown: a charge is keyed by (provider, account, instance id).
    ``note``: where the provider's own figures disagree about this line (RunPod: a record's
    ``totalAmount`` against its parts), said by ``ledger sync`` as a flag; "" when they agree.
    """

    provider: str
    instance_id: str | None
    usd: float
    start: float | None = None
    end: float | None = None
    label: str = ""
    kind: str = "gpu"
    description: str = ""
    seconds: float | None = None
    account: str | None = None
    note: str = ""

    def as_json(self) -> dict:
        return asdict(self)


def _r(x: float) -> float:
    return round(x, 6)


def _share(c: ChargeLine, lo: float | None, hi: float | None) -> float:
    """The part of charge line ``c`` inside [lo, hi) (a line without a period counts whole)."""
    if lo is None or hi is None or c.start is None or c.end is None:
        return c.usd
    from ledger.attribution import fraction

    return c.usd * fraction(c.start, c.end, lo, hi)


def provider_end(s: Any, lines: Iterable[ChargeLine]) -> float | None:
    """The end of a session's billed compute time by the provider's own lines, for an end we never saw.

    ``instance_created_at`` + the compute seconds billed when the provider counts them
    (``ChargeLine.seconds``), else + the compute USD over the row's ``usd_per_hour`` (RunPod v2
    bills compute by the second at the pod's rate and reports amounts per hour bucket), never past
    the latest end of a compute (non-storage) line; else that latest end. None without lines."""
    gpu = [c for c in lines if c.kind != "storage"]
    if not gpu:
        return None
    ends = [c.end for c in gpu if c.end is not None]
    latest = max(ends) if ends else None
    if s.instance_created_at is not None and all(c.seconds is not None for c in gpu):
        return s.instance_created_at + sum(c.seconds or 0.0 for c in gpu)
    rate = getattr(s, "usd_per_hour", None)
    if s.instance_created_at is not None and isinstance(rate, (int, float)) and rate > 0:
        t = s.instance_created_at + sum(c.usd for c in gpu) / rate * 3600.0
        return min(t, latest) if latest is not None else t
    return latest


def compare_billing(
    sessions: Iterable[Any],
    charges: Iterable[ChargeLine],
    providers: Iterable[str],
    tolerance_usd: float = MATCH_TOLERANCE_USD,
    lo: float | None = None,
    hi: float | None = None,
    booked_storage: dict[str, float] | None = None,
    elsewhere: set[tuple[str, str]] | None = None,
) -> dict:
    """Our books against the providers' billing, per session and in total.

    ``sessions``: ledger rows (attributes ``id, provider, instance_id, instance_created_at, status,
    simulated, cost_usd``, optionally ``cost_source`` and ``account``); only real (not simulated) rentals of
    ``providers`` are compared. ``charges``: the providers' lines, fetched over a window that covers
    every compared session whole (a rental across a month boundary is compared whole). A line
    matches a session by (provider, account, instance_id), else by label ``gpuops-<session id>``; several
    lines of one instance (hours, days, storage) are summed. ``booked_storage``: {session id: USD of
    storage lines already booked}, part of "ours". ``elsewhere``: (provider, instance id) of ledger
    rows outside this comparison (a neighbouring month's rental): their lines are ignored, not
    foreign. [``lo``, ``hi``): the month, epoch s: foreign and account lines count their share of it.

    Shape: ``{"providers", "sessions": [{"session","provider","instance_id","ours_usd","theirs_usd",
    "theirs_gpu_usd","theirs_storage_usd","diff_usd","status","cost_source","provider_end"}],
    "unbooked": [{"provider","instance_id","label","usd","kind","description"}] (foreign instances:
    listed, never booked), "account": [{"provider","usd","kind","description"}] (account-level
    storage: network volumes), "by_provider": [{"name","ours_usd","theirs_usd","diff_usd"}],
    "ours_usd","theirs_usd","diff_usd","invoice_usd"}``. ``diff_usd`` is theirs minus ours.
    ``status``: ``match`` (within ``tolerance_usd``), ``differs``, ``not_billed`` (no line at the
    provider), ``open`` (we have no cost yet; ``provider_end`` is the end its billing shows).
    ``invoice_usd``: every line's share of [lo, hi) (what the provider bills for the month).
    """
    wanted = set(providers)
    booked_storage = booked_storage or {}
    elsewhere = elsewhere or set()
    rows = [
        s
        for s in sessions
        if s.provider in wanted and not s.simulated and (s.instance_id is not None or s.instance_created_at is not None)
    ]
    # A charge is keyed by (provider, account, instance id): an id is unique only within one
    # provider, and an account sees only its own instances. A row or line with no account recorded
    # (a row booked before accounts were, a caller's line) matches that provider's id when exactly
    # one row has it.
    by_instance: dict[tuple[str, str], list] = {}
    for s in rows:
        if s.instance_id is not None:
            by_instance.setdefault((s.provider, str(s.instance_id)), []).append(s)

    def row_of(c: ChargeLine):
        cands = by_instance.get((c.provider, str(c.instance_id)), []) if c.instance_id is not None else []
        if c.account is not None:
            same = [s for s in cands if getattr(s, "account", None) == c.account]
            if same:
                return same[0]
            cands = [s for s in cands if getattr(s, "account", None) is None]
        return cands[0] if len(cands) == 1 else None

    by_label = {f"gpuops-{s.id}": s for s in rows}
    mine: dict[str, list[ChargeLine]] = {}
    foreign: dict[tuple[str, str], dict] = {}
    account: dict[tuple[str, str], dict] = {}
    invoice: dict[str, float] = {p: 0.0 for p in wanted}
    for c in charges:
        if c.provider not in wanted:
            continue
        share = _share(c, lo, hi)
        invoice[c.provider] += share
        s = row_of(c)
        if s is None and c.label:
            s = by_label.get(c.label)
        if s is not None:
            mine.setdefault(s.id, []).append(c)
            continue
        if c.instance_id is not None and (c.provider, str(c.instance_id)) in elsewhere:
            continue
        if share <= 0:
            continue
        if c.instance_id is None and not c.label:
            a = account.setdefault(
                (c.provider, c.kind), {"provider": c.provider, "usd": 0.0, "kind": c.kind, "description": c.description}
            )
            a["usd"] += share
            continue
        u = foreign.setdefault(
            (c.provider, str(c.instance_id or c.label)),
            {
                "provider": c.provider,
                "instance_id": c.instance_id,
                "label": c.label,
                "usd": 0.0,
                "kind": c.kind,
                "description": c.description,
            },
        )
        u["usd"] += share
        if c.kind not in u["kind"].split("+"):
            u["kind"] += "+" + c.kind
    out_rows = []
    prov: dict[str, dict] = {
        p: {"name": p, "ours_usd": 0.0, "theirs_usd": 0.0, "diff_usd": 0.0} for p in sorted(wanted)
    }
    for s in sorted(rows, key=lambda r: (r.instance_created_at or 0.0, r.id)):
        lines = mine.get(s.id, [])
        closed = s.status == "closed"
        ours = (s.cost_usd or 0.0) + booked_storage.get(s.id, 0.0) if closed else None
        their = sum(c.usd for c in lines) if lines else None
        storage = sum(c.usd for c in lines if c.kind == "storage")
        if ours is None:
            status = "open"
        elif their is None:
            status = "not_billed"
        else:
            status = "match" if abs(their - ours) <= tolerance_usd else "differs"
        diff = (their or 0.0) - (ours or 0.0)
        out_rows.append(
            {
                "session": s.id,
                "provider": s.provider,
                "instance_id": s.instance_id,
                "ours_usd": None if ours is None else _r(ours),
                "theirs_usd": None if their is None else _r(their),
                "theirs_gpu_usd": None if their is None else _r(their - storage),
                "theirs_storage_usd": _r(storage),
                "diff_usd": _r(diff),
                "status": status,
                "cost_source": getattr(s, "cost_source", None) or "estimated",
                "provider_end": None if closed else provider_end(s, lines),
            }
        )
        p = prov[s.provider]
        p["ours_usd"] += ours or 0.0
        p["theirs_usd"] += their or 0.0
    unbooked = sorted(foreign.values(), key=lambda u: (u["provider"], str(u["instance_id"])))
    accounts = sorted(account.values(), key=lambda a: (a["provider"], a["kind"]))
    for u in unbooked + accounts:
        prov[u["provider"]]["theirs_usd"] += u["usd"]
        u["usd"] = _r(u["usd"])
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
        "account": accounts,
        "by_provider": list(prov.values()),
        "ours_usd": _r(ours_t),
        "theirs_usd": _r(theirs_t),
        "diff_usd": _r(theirs_t - ours_t),
        "invoice_usd": _r(sum(invoice.values())),
        "lines": mine,
    }
