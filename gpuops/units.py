"""How gpuops writes a quantity in a line of text, on the ground floor.

The views print it and a service's one-line messages (reconcile's actions) carry it."""

from __future__ import annotations


def money(usd: float | None, simulated: bool = False) -> str:
    """USD as ``$1,234.5678`` (4 decimals), marked when simulated; ``"-"`` for None.

    A figure never charged (the local provider's catalog price) is followed by ``" (simulated)"``."""
    if usd is None:
        return "-"
    return f"${usd:,.4f}" + (" (simulated)" if simulated else "")
