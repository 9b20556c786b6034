"""`gpuops offers`: the ranked offers (``gpuops.rental.offers.find_offers``) as a table or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuops.planning.offers import OffersResult

GIB = 2**30


def to_json(result: OffersResult) -> str:
    """The offers as a JSON list of ``Offer.as_json()`` objects (``gpuops.render.emit``: indent 2)."""
    from gpuops.render.emit import json_text

    return json_text([o.as_json() for o in result.offers]).rstrip("\n")


# Columns `offers` leaves out, first to last, when the terminal is too narrow (provider, card, the
# price as rented and kind stay: what `up --provider --card` rents and what it will cost). The
# offer id goes before the on-demand price: RunPod's ("community:NVIDIA GeForce RTX 4090") alone
# takes 33 of 80 cells, and `up` does not take one. The on-demand column is there only when a row
# (a spot one) has an on-demand price that differs from its own.
# Moved to the continuation table (keyed by the offer id) first to last when the terminal is too
# narrow; nothing is left out (GPUs, VRAM and region tell RunPod's secure and community rows
# apart). The offer, its card and its prices stay in the first table.
OFFERS_DROP_ORDER = ("reliability", "region", "VRAM/GPU GiB", "GPUs", "provider", "kind")


def render(result: OffersResult, console=None) -> None:
    """Print the offers as a table (VRAM in GiB, prices in USD/h) through ``gpuops.render.tables``.

    Offer ids, card names and prices never cut; columns moved to a continuation table by ``OFFERS_DROP_ORDER``. ``USD/h``
    is what the row costs rented as shown (``Offer.price``: the bid on spot); the on-demand price
    stands beside it only where it differs."""
    from gpuops.render import money
    from gpuops.render.tables import ID, NAME, NUM, Col, console as table_console, print_table, ranked

    console = console or table_console()
    if not result.offers:
        console.print(f"no offers match (asked: {', '.join(result.providers)})")
        return
    cols = [
        Col("offer", ID),
        Col("provider", ID),
        Col("card", ID),
        Col("GPUs", NUM),
        Col("VRAM/GPU GiB", NUM),
        Col("USD/h", NUM),
        Col("kind", ID),
        Col("on-demand USD/h", NUM),
        Col("reliability", NUM),
        Col("region", NAME),
    ]
    rows = [
        [
            o.offer_id,
            o.provider,
            o.card,
            str(o.gpu_count),
            f"{o.vram_bytes / GIB:.1f}",
            money.rate(o.price),
            ("spot (simulated)" if o.simulated else "spot (bid)")
            if o.spot
            else ("simulated" if o.simulated else "on-demand"),
            money.rate(o.on_demand_usd_per_hour) if o.on_demand_usd_per_hour is not None else "",
            f"{o.reliability:.3f}",
            o.region,
        ]
        for o in result.offers
    ]
    if all(o.on_demand_usd_per_hour is None for o in result.offers):
        at = [c.header for c in cols].index("on-demand USD/h")
        cols.pop(at)
        rows = [r[:at] + r[at + 1 :] for r in rows]
    print_table(
        console,
        "offers: fit, then price (spot: the bid), then reliability",
        ranked(cols, OFFERS_DROP_ORDER),
        rows,
        fold=True,
    )
