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
        )
    if name in ("runpod", "vast"):
        raise BadInput(f"provider {name!r} is not available in this build yet", "use --provider local")
    raise BadInput(f"unknown provider {name!r}", f"use one of: {', '.join(NAMES)}")
