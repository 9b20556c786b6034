"""`gpuops plan spot`: what a run on spot costs against one on-demand box, from the two prices.

The arithmetic is ``gpuops.rental.runs.break_even_preemptions_per_hour``: a spot run pays its
price for the job's hours plus the time each preemption loses (re-rent, bootstrap, the work since
the last checkpoint); it is cheaper than one on-demand box while it is preempted less often than
the break-even rate.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from gpuops.rental.offers import Waiting


def _price(text: str | float | None, flag: str) -> float | None:
    if text is None:
        return None
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (0 < v < math.inf):
        raise BadInput(f"{flag} must be a positive number of USD per hour, got {text!r}", f"e.g. {flag} 0.35")
    return v


def spot_plan(
    settings,
    card: str | None = None,
    provider: str | None = None,
    gpu_count: int = 1,
    lost_minutes: str | float = "10",
    spot_usd_per_hour: str | float | None = None,
    on_demand_usd_per_hour: str | float | None = None,
    waiting: Waiting | None = None,
) -> dict:
    """Spot against on-demand for ``card`` on ``provider``: the break-even preemption rate.

    The two prices (given, else the cheapest live offer of each kind for ``card`` on ``provider``:
    ``Offer.price``, what it is rented at: a spot offer's minimum bid plus storage), the hours a
    preemption loses (``lost_minutes`` / 60), and the break-even preemption rate (per job-hour; None
    when spot is not cheaper). Returns ``{"card", "provider", "spot_usd_per_hour",
    "on_demand_usd_per_hour", "lost_minutes", "break_even_per_hour", "saving_if_never_preempted"}``.
    BadInput for bad numbers or when a price cannot be found."""
    try:
        lost = float(lost_minutes)
    except ValueError:
        lost = math.nan
    if not (0 < lost < math.inf):
        raise BadInput(
            f"--lost-minutes must be a positive number of minutes, got {lost_minutes!r}",
            "the minutes one preemption costs: re-rent + bootstrap + work since the last checkpoint, e.g. --lost-minutes 10",
        )
    spot, od = (
        _price(spot_usd_per_hour, "--spot-usd-per-hour"),
        _price(on_demand_usd_per_hour, "--on-demand-usd-per-hour"),
    )
    if spot is None or od is None:
        from gpuops.rental.offers import find_offers

        for kind in (True, False):
            if (spot if kind else od) is not None:
                continue
            got = find_offers(
                settings, card=card, gpu_count=gpu_count, provider=provider, spot=kind, limit=50, waiting=waiting
            ).offers
            # Only offers of the kind asked: the ranking falls back to on-demand when there is no spot
            # (right for `up`), which here compared the on-demand price with itself.
            got = [o for o in got if o.spot == kind]
            if not got:
                from gpuops.providers import REGISTRY, SPOT

                what = "interruptible (spot)" if kind else "on-demand"
                where = (
                    f" (spot is rented on {', '.join(REGISTRY[n].title for n in SPOT)}, with its API key)"
                    if kind
                    else ""
                )
                raise BadInput(
                    f"no {what} offer for {card or 'any card'} on {provider or 'any provider'} to take its price from"
                    + where,
                    f"pass --{'spot' if kind else 'on-demand'}-usd-per-hour, or another --card / --provider",
                )
            if (
                kind
            ):  # an interruptible box is rented at its minimum bid plus storage (Offer.price), not the listed total
                spot = min(o.price for o in got)
            else:
                od = min(o.price for o in got)
    from gpuops.rental.runs import break_even_preemptions_per_hour

    assert spot is not None and od is not None  # given, else taken from an offer above (else BadInput)
    rate = break_even_preemptions_per_hour(spot, od, lost / 60.0)
    return {
        "card": card,
        "provider": provider,
        "spot_usd_per_hour": spot,
        "on_demand_usd_per_hour": od,
        "lost_minutes": lost,
        "break_even_per_hour": None if rate is None else round(rate, 4),
        "saving_if_never_preempted": round(1.0 - spot / od, 4),
    }
