"""How money reads in a table or a line, at a glance (JSON keeps full precision).

- a total (a month's, a day's, an experiment's, a card's or a provider's) in cents: ``25.84``;
  a total above zero that rounds to no cent is ``<0.01`` (never ``0.00`` for money spent);
- a single rental in cents from $1 up, to 4 places under $1 (``0.0067``: cents would say 0.01);
- a rate (USD/h, $/Mtoken) to 4 places: ``0.3400``.

A figure that rounds to zero is never ``-0``. ``None`` is ``-``.
"""

from __future__ import annotations


def rate(x: float | None) -> str:
    """A rate (USD/h, $/Mtoken) or any amount read to 4 places: ``1,234.5678``."""
    if x is None:
        return "-"
    return f"{0.0 if round(x, 4) == 0 else x:,.4f}"


def total(x: float | None) -> str:
    """A total in cents: ``25.84``; more than 0 but under half a cent: ``<0.01``."""
    if x is None:
        return "-"
    if 0 < x < 0.005:
        return "<0.01"
    return f"{0.0 if round(x, 2) == 0 else x:,.2f}"


def rental(x: float | None) -> str:
    """One rental's cost: to 4 places under $1, in cents from $1."""
    if x is None:
        return "-"
    return rate(x) if abs(x) < 1 else total(x)
