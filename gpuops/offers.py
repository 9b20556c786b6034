"""Offer selection: VRAM first, then price, then reliability.

Pure functions over ``Offer`` lists; providers fetch, this module decides.
"""

from __future__ import annotations

from gpuops.providers.base import Offer

# Providers report usable memory a little under the nominal figure (ECC, driver reservations):
# an 80 GiB card shows ~79.2 GiB in nvidia-smi, Vast's gpu_ram is in MB. Accept offers whose
# reported VRAM is within this fraction of what the plan needs: the same 7 % gpuhunt applies
# (https://github.com/dstackai/gpuhunt, src/gpuhunt/_internal/constraints.py, correct_gpu_memory_gib).
VRAM_TOLERANCE = 0.07


def fits(offer: Offer, need_bytes_per_gpu: int) -> bool:
    """True when the offer's per-GPU VRAM covers ``need_bytes_per_gpu`` within the tolerance."""
    return offer.vram_bytes >= need_bytes_per_gpu * (1.0 - VRAM_TOLERANCE)


def rank(offers: list[Offer], need_bytes_per_gpu: int = 0, max_usd_per_hour: float | None = None, spot: bool | None = None) -> list[Offer]:
    """Offers that fit and are within budget, cheapest first; reliability breaks ties.

    ``spot``: True keeps interruptible offers (falling back to on-demand when none), False only
    on-demand, None both. The effective price of an interruptible offer is its minimum bid.
    """
    pool = [o for o in offers if fits(o, need_bytes_per_gpu)]
    if spot is False:
        pool = [o for o in pool if not o.spot]
    elif spot is True and any(o.spot for o in pool):
        pool = [o for o in pool if o.spot]
    if max_usd_per_hour is not None:
        pool = [o for o in pool if effective_price(o) <= max_usd_per_hour]
    return sorted(pool, key=lambda o: (effective_price(o), -o.reliability, o.provider, o.offer_id))


def effective_price(offer: Offer) -> float:
    """USD/h we expect to pay: the minimum bid for interruptible offers, else the listed price."""
    if offer.spot and offer.min_bid is not None:
        return offer.min_bid
    return offer.usd_per_hour
