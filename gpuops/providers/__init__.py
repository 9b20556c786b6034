"""The provider registry: the ONE table of providers gpuops knows on the laptop side.

Everything that names providers derives from ``REGISTRY``: the CLI's ``--provider`` choices and
help strings (``NAMES``, ``choices``), the config's ``[up] provider`` type and its
``[providers.<name>]`` tables (each folder's ``settings.py``, built into ``Settings`` by
``gpuops.config``), where account keys come from (``ProviderEntry.keys``, read by ``keys.py``), the
agent's destroy kind, which providers have spot, volumes and billing, the documented billing unit,
the SDK `gpuops check` looks for, and the catalog column of each provider's GPU names. What cannot
import it is checked against it by ``tests/providers/test_registry.py``: the ``onbox/``
vocabulary (it runs on the box, standard library only), ``infra.example.toml``'s sections and the
pyproject extras. Adding a provider: docs/adding-a-provider.md. Provider classes, SDKs and settings
models import lazily (``build``, ``load``, ``settings``): this module is read at CLI start-up for
the help strings, and by ``gpuops.config`` (the floor above, pyproject ``[tool.importlinter]``), so
at module level it imports nothing but the ground floor. A provider is built from a
``SettingsView`` (``entry.py``), the shape of ``config.Settings``: nothing here imports ``config``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpuops.errors import BadInput
from gpuops.providers import local, runpod, vast  # one folder each; adding one: docs/adding-a-provider.md
from gpuops.providers.entry import ProviderEntry, SettingsView
from onbox.vocabulary import ProviderName

if TYPE_CHECKING:
    from gpuops.providers.base import Provider

# The registrations, in the order help strings list them (local first: the default).
_ENTRIES: tuple[ProviderEntry, ...] = (local.ENTRY, runpod.ENTRY, vast.ENTRY)

REGISTRY: dict[str, ProviderEntry] = {e.name.value: e for e in _ENTRIES}
NAMES = tuple(REGISTRY)
MARKETPLACES = tuple(n for n, e in REGISTRY.items() if e.needs_key)
ACCOUNTLESS = tuple(n for n, e in REGISTRY.items() if not e.needs_key)  # local: this machine, no account
SPOT = tuple(n for n, e in REGISTRY.items() if e.spot)
WITH_VOLUMES = tuple(n for n, e in REGISTRY.items() if e.volumes is not None)
WITH_BILLING = tuple(n for n, e in REGISTRY.items() if e.billing)
# `up --provider any` / `[up] provider = "any"`: every marketplace with a key takes part (``configured``).
ANY = "any"
UP_CHOICES = (*NAMES, ANY)


def choices(names: Iterable[str] = NAMES, sep: str = " | ") -> str:
    """``names`` as a help string lists them: ``local | runpod | vast``."""
    return sep.join(names)


def flags(names: Iterable[str]) -> str:
    """``names`` as the flags a fix suggests: ``--provider runpod or --provider vast``."""
    return " or ".join(f"--provider {n}" for n in names)


def titles(names: Iterable[str], sep: str = " or ") -> str:
    """``names`` as prose names them: ``RunPod or Vast.ai``."""
    return sep.join(REGISTRY[n].title for n in names)


def entry(name: str) -> ProviderEntry:
    """The registry entry of ``name``; BadInput for an unknown name."""
    e = REGISTRY.get(name)
    if e is None:
        raise BadInput(f"unknown provider {name!r}", f"use one of: {', '.join(NAMES)}")
    return e


def get_provider(name: str, settings: SettingsView) -> Provider:
    """The provider called ``name``; BadInput for an unknown name.

    In `gpuops demo`'s data directory (``settings.simulated()``) every offer the provider makes is
    simulated (``Provider.simulated``: booked apart, never counted as money spent), so a
    marketplace's API must be on this machine (the demo's emulator): BadInput otherwise, before
    anything is asked."""
    e = entry(name)
    provider = e.build(settings)
    if settings.simulated():
        if e.needs_key:
            from urllib.parse import urlsplit

            from gpuops.providers.keys import resolve_url

            url = resolve_url(e.key_source, getattr(settings.providers, e.section).url)
            if urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
                raise BadInput(
                    f"the data directory {settings.data_path()} is gpuops demo's (simulated), but {name}'s API is {url}",
                    'run `eval "$(gpuops demo env)"` to use the demo, or point GPUOPS_DATA_DIR at your own data',
                )
        provider.simulated = True
    return provider


def agent_destroy_kind(name: str) -> str:
    """The on-box agent's destroy kind for a box of provider ``name``.

    ``local`` for an unknown name: the agent then ends the local box's processes only."""
    e = REGISTRY.get(name)
    return e.agent_destroy_kind if e is not None else ProviderName.LOCAL.value


def billing_increment(name: str) -> float | None:
    """The billing unit ``name``'s documentation states (seconds), None for an unknown name."""
    e = REGISTRY.get(name)
    return e.billing_increment_s if e is not None else None


def configured(settings: SettingsView) -> list[str]:
    """Marketplace providers with an API key somewhere, in NAMES order.

    Somewhere: its variable, infra.toml or the provider's own file; ``local`` is not included (it
    needs no account)."""
    from gpuops.providers.keys import resolve_key

    out = []
    for name in MARKETPLACES:
        cfg = getattr(settings.providers, REGISTRY[name].section)
        if resolve_key(REGISTRY[name].key_source, cfg.api_key, settings.source) is not None:
            out.append(name)
    return out
