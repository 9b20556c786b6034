"""``[providers.vast]``: Vast.ai's settings model.

Pure data: ``gpuops.config`` reads it through the registry, so it imports nothing of gpuops but
the settings base.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gpuops.settings_base import Section


class VastSettings(Section):
    """``[providers.vast]``: the REST base, the account key and the billing unit."""

    url: str = ""  # REST base; empty: the SDK default (or VAST_URL)
    api_key: str = ""
    billing_increment_seconds: Annotated[float, Meta(gt=0)] = 1.0  # "every second" (docs.vast.ai/billing-help)
