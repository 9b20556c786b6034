"""``[providers.runpod]``: RunPod's settings model.

Pure data: ``gpuops.config`` reads it through the registry, so it imports nothing of gpuops but
the settings base.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gpuops.settings_base import Section


class RunpodSettings(Section):
    """``[providers.runpod]``: the API base, the account key and the billing unit."""

    url: str = ""  # GraphQL base; empty: the SDK default (or RUNPOD_API_BASE_URL)
    api_key: str = ""
    # "billed by the second" (docs.runpod.io/pods/pricing)
    billing_increment_seconds: Annotated[float, Meta(gt=0)] = 1.0
