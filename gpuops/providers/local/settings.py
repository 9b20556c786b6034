"""``[providers.local]``: the local provider's settings model.

Pure data: ``gpuops.config`` reads it through the registry, so it imports nothing of gpuops but
the settings base.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gpuops.settings_base import Section


class LocalProviderSettings(Section):
    """``[providers.local]``: what a local box costs, how long a destroyed one is kept, whether its job is contained."""

    price_per_hour: Annotated[float, Meta(ge=0)] | None = None  # USD/h; unset: catalog reference, simulated
    keep_box_days: Annotated[float, Meta(ge=0)] = 7.0  # a destroyed box keeps only its logs after this many days
    contain: bool = True  # where the platform allows it, the job cannot see the data dir or its parents' /proc
