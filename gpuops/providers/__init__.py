"""Provider registry: name -> provider built from Settings. SDK-backed providers import lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from gpuops.config import Settings
    from gpuops.providers.base import Provider

NAMES = ("local", "runpod", "vast")


def get_provider(name: str, settings: "Settings") -> "Provider":
    """The provider called ``name``; BadInput for an unknown name."""
    if name == "local":
        from gpuops.providers.local import LocalProvider

        return LocalProvider(
            settings.data_path() / "boxes",
            price_per_hour=settings.providers.local.price_per_hour,
            kill_grace_seconds=settings.teardown.kill_grace_seconds,
            keep_box_days=settings.providers.local.keep_box_days,
        )
    if name == "runpod":
        from gpuops.providers.keys import resolve_key, resolve_url
        from gpuops.providers.runpod import RunPodProvider

        cfg = settings.providers.runpod
        return RunPodProvider(resolve_key("runpod", cfg.api_key, settings.source), resolve_url("runpod", cfg.url))
    if name == "vast":
        from gpuops.providers.keys import resolve_key, resolve_url
        from gpuops.providers.vast import VastProvider

        cfg = settings.providers.vast
        return VastProvider(resolve_key("vast", cfg.api_key, settings.source), resolve_url("vast", cfg.url), storage_gb=settings.up.disk_gb)
    raise BadInput(f"unknown provider {name!r}", f"use one of: {', '.join(NAMES)}")


def configured(settings: "Settings") -> list[str]:
    """Marketplace providers with an API key somewhere (variable, infra.toml or the provider's own
    file), in NAMES order; ``local`` is not included (it needs no account)."""
    from gpuops.providers.keys import resolve_key

    out = []
    for name in ("runpod", "vast"):
        cfg = getattr(settings.providers, name)
        if resolve_key(name, cfg.api_key, settings.source) is not None:
            out.append(name)
    return out
