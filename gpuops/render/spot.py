"""`gpuops plan spot`: the plan (``gpuops.rental.spot.spot_plan``) in a few lines."""

from __future__ import annotations


def render(rep: dict) -> None:
    """The plan as a few lines: the two prices, the break-even rate and what it means."""
    from rich.console import Console

    c = Console(highlight=False, soft_wrap=True, markup=False)
    c.print(
        f"spot ${rep['spot_usd_per_hour']:.4f}/h against on-demand ${rep['on_demand_usd_per_hour']:.4f}/h"
        f" ({rep['card'] or 'any card'}, {rep['provider'] or 'every provider'}); a preemption loses {rep['lost_minutes']:g} min"
    )
    rate = rep["break_even_per_hour"]
    if rate is None:
        c.print("spot is not cheaper here: a run on spot never costs less than one on-demand box")
        return
    c.print(
        f"break-even: {rate:.2f} preemptions per job-hour (one every {60.0 / rate:.1f} min of job). "
        f"Preempted less often, `up --spot --recover N` costs less than one on-demand box; never preempted, "
        f"{rep['saving_if_never_preempted']:.0%} less."
    )
