"""The local provider: this machine, no account (``compute.LocalProvider``; ``boxes.py`` prunes destroyed boxes).

``ENTRY`` is its registry entry (``gpuops.providers.REGISTRY``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bootstrap.vocabulary import ProviderName
from gpuops.providers.entry import ProviderEntry, SettingsView

if TYPE_CHECKING:
    from gpuops.providers.base import Provider
    from gpuops.settings_base import Section


def build(settings: SettingsView) -> Provider:
    """The local provider from ``settings`` (its boxes under ``<data dir>/boxes``)."""
    from gpuops.providers.local.compute import LocalProvider

    return LocalProvider(
        settings.data_path() / "boxes",
        price_per_hour=settings.providers.local.price_per_hour,
        kill_grace_seconds=settings.teardown.kill_grace_seconds,
        keep_box_days=settings.providers.local.keep_box_days,
    )


def load() -> type[Provider]:
    """``LocalProvider``, imported on call."""
    from gpuops.providers.local.compute import LocalProvider

    return LocalProvider


def settings_model() -> type[Section]:
    """``LocalProviderSettings``, its ``[providers.local]`` table, imported on call (the help strings need no msgspec)."""
    from gpuops.providers.local.settings import LocalProviderSettings

    return LocalProviderSettings


ENTRY = ProviderEntry(
    ProviderName.LOCAL,
    "this machine",
    build,
    load,
    settings_model,
    agent_credential="no key: it ends the box's own processes (TERM, then KILL)",
)
