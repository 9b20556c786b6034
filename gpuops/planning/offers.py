"""Offer selection: VRAM first, then price, then reliability.

The checks that keep a provider's word from being taken blindly (``screen`` before ranking,
``check_delivered`` after create).

Pure functions over ``Offer`` lists; providers fetch, this module decides.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from gpuops.providers.base import VRAM_TOLERANCE, Instance, Offer

# A delivered instance may be charged this much above the offer's price before it is a mismatch:
# providers round prices to 3-4 decimals (Vast dph_total, RunPod costPerHr), 1% covers it.
PRICE_TOLERANCE = 0.01
PRICE_SLACK_USD_H = 0.001


def _finite_positive(v, allow_zero: bool = False) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    return v >= 0 if allow_zero else v > 0


def offer_problem(offer: Offer) -> str | None:
    """Why ``offer`` cannot be trusted, or None.

    Its price (USD/h), per-GPU VRAM (bytes) and GPU count must be finite positive numbers (the GPU
    count a whole number), an interruptible offer's minimum bid too, and its reliability a number in
    [0, 1]. The local provider may price at 0 (a user's own workstation, from infra.toml)."""
    if not _finite_positive(offer.usd_per_hour, allow_zero=offer.provider == "local"):
        return f"price {offer.usd_per_hour!r} USD/h is not a finite positive number"
    if not _finite_positive(offer.vram_bytes):
        return f"VRAM {offer.vram_bytes!r} bytes per GPU is not a finite positive number"
    if not _finite_positive(offer.gpu_count) or int(offer.gpu_count) != offer.gpu_count:
        return f"GPU count {offer.gpu_count!r} is not a whole number >= 1"
    if offer.spot and offer.min_bid is not None and not _finite_positive(offer.min_bid):
        return f"minimum bid {offer.min_bid!r} USD/h is not a finite positive number"
    if not (isinstance(offer.reliability, (int, float)) and 0.0 <= offer.reliability <= 1.0):
        return f"reliability {offer.reliability!r} is not in [0, 1]"
    return None


def screen(offers: list[Offer], gpu_count: int | None = None) -> tuple[list[Offer], list[str]]:
    """(offers worth ranking, one note per dropped offer).

    Dropped: ``offer_problem``, and with ``gpu_count`` any offer of another GPU count (``--gpu-count
    4`` ranks 4-GPU boxes only)."""
    kept: list[Offer] = []
    notes: list[str] = []
    for o in offers:
        why = offer_problem(o)
        if why is None and gpu_count is not None and o.gpu_count != gpu_count:
            why = f"it has {o.gpu_count} GPU(s), {gpu_count} asked"
        if why is None:
            kept.append(o)
        else:
            notes.append(f"{o.provider} offer {o.offer_id} ({o.card}) dropped: {why}")
    return kept, notes


def fits(offer: Offer, need_bytes_per_gpu: int) -> bool:
    """True when the offer's per-GPU VRAM covers ``need_bytes_per_gpu`` within the tolerance."""
    return offer.vram_bytes >= need_bytes_per_gpu * (1.0 - VRAM_TOLERANCE)


def rank(
    offers: list[Offer],
    need_bytes_per_gpu: int = 0,
    max_usd_per_hour: float | None = None,
    spot: bool | None = None,
    gpu_count: int | None = None,
    prefer_spot: bool = False,
) -> list[Offer]:
    """Offers that pass ``screen``, fit and are within budget, cheapest first.

    ``screen``: a finite positive price, VRAM and GPU count (``gpu_count`` GPUs when given).
    Reliability breaks ties; ``prefer_spot`` (``[up] spot = true``) puts an interruptible offer
    before an on-demand one of the same price, before reliability.

    ``spot``: True keeps interruptible offers (falling back to on-demand when none), False only
    on-demand, None both. The effective price of an interruptible offer is its minimum bid.
    """
    pool = [o for o in screen(offers, gpu_count)[0] if fits(o, need_bytes_per_gpu)]
    if spot is False:
        pool = [o for o in pool if not o.spot]
    elif spot is True and any(o.spot for o in pool):
        pool = [o for o in pool if o.spot]
    if max_usd_per_hour is not None:
        pool = [o for o in pool if effective_price(o) <= max_usd_per_hour]
    return sorted(
        pool,
        key=lambda o: (
            round(effective_price(o), 6),
            prefer_spot and not o.spot,
            -o.reliability,
            o.provider,
            o.offer_id,
        ),
    )


def effective_price(offer: Offer) -> float:
    """USD/h we expect to pay: the minimum bid for interruptible offers, else the listed price (``Offer.price``)."""
    return offer.price


# -- the delivered box ---------------------------------------------------------------------------
def _norm(name: str) -> str:
    n = re.sub(r"[^a-z0-9]", "", (name or "").lower())
    for noise in ("nvidia", "geforce", "tesla"):
        n = n.replace(noise, "")
    return n


def _names_of(card) -> set[str]:
    """Every name a provider may report for ``card``, normalized.

    Its display name and catalog name, and each provider's own name for it (the registry's
    ``catalog_field``)."""
    from gpuops.providers import REGISTRY

    fields = [e.catalog_field for e in REGISTRY.values() if e.catalog_field]
    return {_norm(x) for x in (card.display, card.name, *(getattr(card, f) for f in fields)) if x}


def card_of_gpu_name(gpu_name: str):
    """The catalog card a provider's GPU name means, or None when no card has that name.

    The name is RunPod's ``gpuDisplayName``/``gpuTypeId`` or Vast's ``gpu_name``. Among cards
    sharing a name (A100 SXM4 40/80 GB), the first in catalog order."""
    from gpuops.catalog import cards

    want = _norm(gpu_name)
    if not want:
        return None
    for c in cards():
        if want in _names_of(c):
            return c
    return None


def delivered(order: Offer, instance: Instance) -> dict:
    """What the instance says it is: ``{"gpu_name", "card", "gpu_count", "usd_per_hour"}`` (USD/h, whole box).

    A field the provider does not report is None (RunPod: ``extra["gpu"]``, ``extra["gpu_count"]``;
    Vast: ``extra["gpu_name"]``, ``extra["num_gpus"]``; the local provider reports none, it is the
    order)."""
    extra = instance.extra or {}
    gpu_name = extra.get("gpu_name") or extra.get("gpu")
    count = extra.get("num_gpus", extra.get("gpu_count"))
    card = card_of_gpu_name(str(gpu_name)) if gpu_name else None
    return {
        "gpu_name": str(gpu_name) if gpu_name else None,
        "card": card.name if card else None,
        "gpu_count": count,
        "usd_per_hour": instance.usd_per_hour,
    }


def check_delivered(order: Offer, instance: Instance, max_usd_per_hour: float | None = None) -> str | None:
    """None when the instance is what was ordered, else one line saying how it differs.

    Checked where the provider reports it: the card (its GPU name must name ``order.card``; a
    family sharing a name, e.g. A100 SXM4 40/80 GB, counts as the same card), the GPU count, and
    the price really charged (USD/h, whole box): finite, >= 0, at most the offer's price (the
    listed price, or the bid for interruptible offers, whichever is higher) plus
    ``PRICE_TOLERANCE`` and ``PRICE_SLACK_USD_H``, and at most ``max_usd_per_hour`` (--max-price)
    with the same tolerance."""
    from gpuops.catalog import cards

    got = delivered(order, instance)
    problems = []
    if got["gpu_name"] is not None:
        ordered = next((c for c in cards() if c.name == order.card), None)
        names = _names_of(ordered) if ordered else {_norm(order.card)}
        if _norm(got["gpu_name"]) not in names:
            problems.append(f"card {got['gpu_name']!r} instead of {order.card}")
    count = got["gpu_count"]
    if count is not None:
        try:
            ok = float(count) == order.gpu_count
        except (TypeError, ValueError):
            ok = False
        if not ok:
            problems.append(f"{count!r} GPU(s) instead of {order.gpu_count}")
    price = got["usd_per_hour"]
    if price is not None:
        if not _finite_positive(price, allow_zero=True):
            problems.append(f"price {price!r} USD/h is not a price")
        else:
            ceiling = max(order.usd_per_hour, effective_price(order)) * (1 + PRICE_TOLERANCE) + PRICE_SLACK_USD_H
            if price > ceiling:
                problems.append(
                    f"charged ${price:.4f}/h against the offer's ${max(order.usd_per_hour, effective_price(order)):.4f}/h"
                )
            elif max_usd_per_hour is not None and price > max_usd_per_hour * (1 + PRICE_TOLERANCE) + PRICE_SLACK_USD_H:
                problems.append(f"charged ${price:.4f}/h above --max-price ${max_usd_per_hour:.4f}/h")
    return "; ".join(problems) or None


@dataclass
class OffersResult:
    """Ranked offers, and one-line notes (a provider skipped or failing) for stderr."""

    offers: list[Offer]
    notes: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)
