"""The local provider: this machine, no account (``compute.LocalProvider``; ``boxes.py`` prunes destroyed boxes).

``ENTRY`` is its registry entry (``gpuops.providers.REGISTRY``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuops.providers.entry import ProviderEntry, SettingsView
from onbox.vocabulary import ProviderName

if TYPE_CHECKING:
    from gpuops.providers.base import Provider
    from gpuops.settings_base import Section


def build(settings: SettingsView) -> Provider:
    """The local provider from ``settings`` (its boxes under ``<data dir>/boxes``).

    What its job must not see: the data dir (ledger, keys, boxes but its own), the config file and
    the user config folder, the SSH key named in ``[up] ssh_key``, the ledger's spool folders."""
    import platformdirs

    from gpuops.providers.local.compute import LocalProvider
    from ledger.store import default_spool_path, fallback_spool_path

    url = settings.ledger_url()
    hide = [settings.data_path(), Path(platformdirs.user_config_dir("gpuops", appauthor=False))]
    if settings.source:
        hide.append(Path(settings.source))
    if settings.up.ssh_key:
        key = Path(settings.up.ssh_key).expanduser()
        hide += [key, key.with_name(key.name + ".pub")]
    return LocalProvider(
        settings.data_path() / "boxes",
        price_per_hour=settings.providers.local.price_per_hour,
        kill_grace_seconds=settings.teardown.kill_grace_seconds,
        keep_box_days=settings.providers.local.keep_box_days,
        hide=hide,
        spool_dirs=[default_spool_path(url).parent, fallback_spool_path(url).parent],
        contain=settings.providers.local.contain,
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
