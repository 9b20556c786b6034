"""Vast.ai's own billing, parsed into ``ledger.billing.ChargeLine`` records.

Pure: no HTTP (``VastProvider.billing`` reads the pages).

Per Vast's spec a charges entry is one contract (``source`` ``instance-<id>``, ``metadata.label``)
whose ``items`` are typed ``gpu`` (compute), ``disk`` (storage, running or stopped), ``bwd``/``bwu``
(download/upload: network), each with integer unix ``start``/``end``. Whether an entry is cut to
the asked window is undocumented, so each item is attributed by time: the part of it inside
[since, until) (its amount x the share of its period there, the one rule of
ledger/attribution.py), so a month's books come out the same either way. Volume entries are
account-level storage. Billing unit: per second (docs.vast.ai/billing-help; the registry's
``billing_increment_s``).

A ``gpu`` item bills only while the instance runs, but its period runs from the contract's start to
its end, stopped stretches included (an outbid interruptible instance stops, billing only its disk,
until it is destroyed). Split linearly over that period, a GPU item across a month boundary would
put hours the instance never ran into the next month. So a GPU item is booked by its running time:
the hours its description states (the spec's example, ``96.000 hours at $0.389/hour``), run from the
item's start, since gpuops never starts a stopped Vast instance again (a stop ends its running time;
the stopped stretch follows, until the destroy). An item whose description states no hours is taken
as running over its whole period. ``disk`` and network items bill over their whole period."""

from __future__ import annotations

import math
import re
from typing import Any

from gpuops.providers.vast.client import NAME
from ledger.attribution import fraction
from ledger.billing import ChargeLine

KINDS = {"gpu": "gpu", "disk": "storage", "bwd": "network", "bwu": "network"}
# The hours a gpu item's description states (the spec's example: "96.000 hours at $0.389/hour").
HOURS = re.compile(r"\s*(\d+(?:\.\d+)?)\s+hours?\b")


def running_end(start: float, end: float, description: Any) -> float:
    """Where a gpu item's running time ends (epoch s): ``start`` + the hours ``description`` states.

    Capped at ``end``; ``end`` when the description states no hours (the whole period ran)."""
    m = HOURS.match(description) if isinstance(description, str) else None
    if m is None:
        return end
    return min(end, start + float(m.group(1)) * 3600.0)


def num(v: Any) -> float | None:
    """``v`` as a finite float, or None."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def charge_lines(results: list[Any], since: float, until: float) -> list[ChargeLine]:
    """One page's ``results`` as charge lines.

    One per item with a positive amount (USD), cut to its share of [``since``, ``until``) epoch s;
    an item wholly outside is dropped. ``kind``: gpu, storage (disks, volumes), network or other."""
    out = []
    for r in results:
        if not isinstance(r, dict):
            continue
        typ = str(r.get("type") or "")
        source = str(r.get("source") or "")
        iid = source.split("-", 1)[1] if source.startswith("instance-") and typ != "volume" else None
        label = str((r.get("metadata") or {}).get("label") or "") if isinstance(r.get("metadata"), dict) else ""
        for it in r.get("items") or [r]:
            if not isinstance(it, dict):
                continue
            usd = num(it.get("amount"))
            start, end = num(it.get("start", r.get("start"))), num(it.get("end", r.get("end")))
            if usd is None or usd <= 0:
                continue
            kind = "storage" if typ == "volume" else KINDS.get(str(it.get("type") or "").lower(), "other")
            if kind == "gpu" and start is not None and end is not None and end > start:
                end = running_end(start, end, it.get("description"))  # stopped stretches bill no GPU
            if start is not None and end is not None and end > start:
                share = fraction(start, end, since, until)
                if share <= 0:
                    continue
                usd, start, end = usd * share, max(start, since), min(end, until)
            out.append(
                ChargeLine(
                    NAME,
                    iid,
                    usd,
                    start,
                    end,
                    label=label,
                    kind=kind,
                    description=f"{it.get('type') or typ} {source}".strip(),
                )
            )
    return out
