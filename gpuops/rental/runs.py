"""A run: the user's job across rentals (`gpuops up --recover N`).

Pure arithmetic over plain numbers; ``gpuops.rental.launcher`` walks the rentals and asks here what
the next one may spend.

A run has one or more rentals (ledger rows with ``run_id``). Its money limits are the user's for
the whole job: ``max_hours`` counts the billed seconds of every rental (the time between two
rentals bills nothing), ``max_session_usd`` their cost. Each new rental gets what is left, as its
own ``max_hours`` (so the box's TTL and the worst case checked against the balance and the monthly
cap fit what is left) and its own ``max_session_usd`` (stored on its row: the agent and the
watchdog apply it). A rental that could not buy ``MIN_RENTAL_S`` of box time at the next offer's
price is not made: the run ends with the limit it ran out of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from onbox.vocabulary import EndReason

# The least box time a new rental must be able to buy (seconds): booting, bootstrapping and
# resuming a job takes about this long before it computes anything again.
MIN_RENTAL_S = 60.0


@dataclass(frozen=True)
class NextRental:
    """What the next rental of a run may spend, or why there is none.

    ``hours``: its max_hours (hours); ``usd``: its max_session_usd (USD, None: no money cap);
    ``reason``: None, or the end reason the run stops with (``ttl``: hours spent; ``session_cap``:
    money spent); ``detail``: one line saying so."""

    hours: float
    usd: float | None
    reason: EndReason | None = None
    detail: str = ""


def next_rental(
    max_hours: float, max_usd: float | None, spent_s: float, spent_usd: float, price_usd_h: float
) -> NextRental:
    """The limits of a run's next rental.

    ``max_hours``: the run's (hours); ``max_usd``: the run's max_session_usd (USD, None: none);
    ``spent_s``/``spent_usd``: the billed seconds and cost of its rentals so far; ``price_usd_h``:
    the next offer's price (USD/h, whole box)."""
    min_s = float(MIN_RENTAL_S)
    left_s = max_hours * 3600.0 - max(0.0, spent_s)
    if left_s < min_s:
        return NextRental(
            0.0,
            None,
            EndReason.TTL,
            f"max_hours {max_hours:g} h for the run: {spent_s:.0f} s billed, {max(0.0, left_s):.0f} s left, "
            f"under the {min_s:.0f} s a rental needs",
        )
    usd_left = None
    if max_usd is not None:
        usd_left = max_usd - max(0.0, spent_usd)
        buys_s = usd_left / price_usd_h * 3600.0 if price_usd_h > 0 else math.inf
        if usd_left <= 0 or buys_s < min_s:
            return NextRental(
                0.0,
                usd_left,
                EndReason.SESSION_CAP,
                f"max_session_usd ${max_usd:.4f} for the run: ${spent_usd:.4f} spent, ${max(0.0, usd_left):.4f} left "
                f"buys {max(0.0, buys_s):.0f} s at ${price_usd_h:.4f}/h, under the {min_s:.0f} s a rental needs",
            )
        left_s = min(left_s, buys_s)
    return NextRental(left_s / 3600.0, usd_left)


def break_even_preemptions_per_hour(spot_usd_h: float, on_demand_usd_h: float, lost_hours_each: float) -> float | None:
    """How many preemptions per hour of job make a spot run cost what one on-demand box costs.

    A run of H job-hours on spot at ``spot_usd_h`` pays for H hours plus ``lost_hours_each``
    (re-rent, bootstrap, work since the last checkpoint) per preemption: p_s x H x (1 + r x o) for
    r preemptions per hour; on-demand pays p_d x H. Equal at r = (p_d / p_s - 1) / o. None when
    spot is not cheaper (no rate makes it pay) or the inputs are not positive numbers."""
    vals = (spot_usd_h, on_demand_usd_h, lost_hours_each)
    if (
        not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in vals)
        or spot_usd_h >= on_demand_usd_h
    ):
        return None
    return (on_demand_usd_h / spot_usd_h - 1.0) / lost_hours_each


RUN_PREFIX = "run-"  # a run id's prefix: `ledger show` reads a reference with it as a run (a session name never has it)


def new_run_id(session_id: str) -> str:
    """A new run id, ``run-YYYYMMDD-HHMMSS-xxxx``: a session id's form, told apart at a glance."""
    return RUN_PREFIX + session_id
