"""Vast.ai: a marketplace of single machines, on-demand and interruptible.

Through the ``vastai`` SDK (``compute.VastProvider``; the SDK calls in ``client.py``, volumes in ``volumes.py``, its charges
parsed in ``billing.py``). ``ENTRY`` is its registry entry (``gpuops.providers.REGISTRY``). Light:
the SDK is imported inside calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuops.providers.entry import ProviderEntry, SettingsView
from gpuops.providers.vast.account import KEYS
from onbox.vocabulary import ProviderName

if TYPE_CHECKING:
    from gpuops.providers.base import Provider
    from gpuops.providers.volumes import VolumeService
    from gpuops.settings_base import Section


def build(settings: SettingsView) -> Provider:
    """``VastProvider`` with the key and REST base ``settings`` and the environment give.

    With the disk ``[up] disk_gb`` priced into searches, the volume names under the data dir."""
    from gpuops.providers.keys import resolve_key, resolve_url
    from gpuops.providers.vast.compute import VastProvider

    cfg = settings.providers.vast
    return VastProvider(
        resolve_key(KEYS, cfg.api_key, settings.source),
        resolve_url(KEYS, cfg.url),
        storage_gb=settings.up.disk_gb,
        data_dir=settings.data_path(),
    )


def load() -> type[Provider]:
    """``VastProvider``, imported on call."""
    from gpuops.providers.vast.compute import VastProvider

    return VastProvider


def settings_model() -> type[Section]:
    """``VastSettings``, its ``[providers.vast]`` table, imported on call (the help strings need no msgspec)."""
    from gpuops.providers.vast.settings import VastSettings

    return VastSettings


def volume_service() -> type[VolumeService]:
    """``VastVolumes``, imported on call."""
    from gpuops.providers.vast.volumes import VastVolumes

    return VastVolumes


ENTRY = ProviderEntry(
    ProviderName.VAST,
    "Vast.ai",
    build,
    load,
    settings_model,
    keys=KEYS,
    spot=True,
    volumes=volume_service,
    volume_region="country code or machine:<id>",
    billing=True,
    # Whole seconds, a second begun billed whole, no minimum charge documented: "You are charged the
    # base active rental cost for every second your instance is in the active/connected state ...
    # the storage cost ... for every second your instance exists" (https://docs.vast.ai/billing-help);
    # a stopped instance still bills storage.
    billing_increment_s=1.0,
    sdk="vastai",
    catalog_field="vast_name",
    catalog_heading="Vast gpu_name",
    agent_credential="the per-instance CONTAINER_API_KEY from the instance's PID 1 environment "
    "(DELETE /api/v0/instances/{id}/); the account key never goes to the box",
    agent_refused="the agent keeps trying (backing off to 30 s); the watchdog and reconcile destroy it with the account key",
)
