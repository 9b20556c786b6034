"""The provider registry: the ONE table of providers gpuops knows.

Provider names (``NAMES``, the CLI's ``--provider`` choices), their ``[providers.<name>]`` config
sections, whether they need an account key, and the destroy kind the on-box agent uses for them
(``bootstrap/agent.py``: the same ``ProviderName`` values) all derive from ``REGISTRY``. SDK-backed
providers import lazily, inside ``get_provider``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from bootstrap.vocabulary import ProviderName
from gpuops.errors import BadInput

if TYPE_CHECKING:
    from gpuops.config import Settings
    from gpuops.providers.base import Provider


def _local(settings: "Settings") -> "Provider":
    from gpuops.providers.local import LocalProvider

    return LocalProvider(
        settings.data_path() / "boxes",
        price_per_hour=settings.providers.local.price_per_hour,
        kill_grace_seconds=settings.teardown.kill_grace_seconds,
        keep_box_days=settings.providers.local.keep_box_days,
    )


def _runpod(settings: "Settings") -> "Provider":
    from gpuops.providers.keys import resolve_key, resolve_url
    from gpuops.providers.runpod import RunPodProvider

    cfg = settings.providers.runpod
    return RunPodProvider(resolve_key("runpod", cfg.api_key, settings.source), resolve_url("runpod", cfg.url))


def _vast(settings: "Settings") -> "Provider":
    from gpuops.providers.keys import resolve_key, resolve_url
    from gpuops.providers.vast import VastProvider

    cfg = settings.providers.vast
    return VastProvider(resolve_key("vast", cfg.api_key, settings.source), resolve_url("vast", cfg.url), storage_gb=settings.up.disk_gb,
                        data_dir=settings.data_path())


@dataclass(frozen=True)
class ProviderEntry:
    """One provider: its name, how it is built from Settings, its config section
    (``settings.providers.<section>``), whether it needs an account key, and the agent's destroy
    kind for its boxes (``destroy.kind`` in the agent config); ``agent_credential``: what the
    on-box agent destroys with (``bootstrap/agent.py``), ``agent_refused``: what it does when that
    credential is refused (shown by `gpuops check`)."""

    name: ProviderName
    build: Callable[["Settings"], "Provider"]
    section: str
    needs_key: bool
    agent_destroy_kind: str
    agent_credential: str = ""
    agent_refused: str = ""


REGISTRY: dict[str, ProviderEntry] = {
    e.name.value: e
    for e in (
        ProviderEntry(ProviderName.LOCAL, _local, "local", needs_key=False, agent_destroy_kind=ProviderName.LOCAL.value,
                      agent_credential="no key: it ends the box's own processes (TERM, then KILL)",
                      agent_refused=""),
        ProviderEntry(ProviderName.RUNPOD, _runpod, "runpod", needs_key=True, agent_destroy_kind=ProviderName.RUNPOD.value,
                      agent_credential="the pod-scoped RUNPOD_API_KEY from the pod's PID 1 environment (DELETE /v2/pods/{id}); "
                                       "the account key never goes to the box",
                      agent_refused="the agent stops the pod instead (POST /v2/pods/{id}/action stop: GPU billing ends), else keeps "
                                    "trying; the watchdog and reconcile terminate it with the account key"),
        ProviderEntry(ProviderName.VAST, _vast, "vast", needs_key=True, agent_destroy_kind=ProviderName.VAST.value,
                      agent_credential="the per-instance CONTAINER_API_KEY from the instance's PID 1 environment "
                                       "(DELETE /api/v0/instances/{id}/); the account key never goes to the box",
                      agent_refused="the agent keeps trying (backing off to 30 s); the watchdog and reconcile destroy it with the account key"),
    )
}
NAMES = tuple(REGISTRY)
MARKETPLACES = tuple(n for n, e in REGISTRY.items() if e.needs_key)


def get_provider(name: str, settings: "Settings") -> "Provider":
    """The provider called ``name``; BadInput for an unknown name."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise BadInput(f"unknown provider {name!r}", f"use one of: {', '.join(NAMES)}")
    return entry.build(settings)


def agent_destroy_kind(name: str) -> str:
    """The on-box agent's destroy kind for a box of provider ``name`` (``local`` for unknown names:
    the agent then ends the local box's processes only)."""
    entry = REGISTRY.get(name)
    return entry.agent_destroy_kind if entry is not None else ProviderName.LOCAL.value


def configured(settings: "Settings") -> list[str]:
    """Marketplace providers with an API key somewhere (variable, infra.toml or the provider's own
    file), in NAMES order; ``local`` is not included (it needs no account)."""
    from gpuops.providers.keys import resolve_key

    out = []
    for name in MARKETPLACES:
        cfg = getattr(settings.providers, REGISTRY[name].section)
        if resolve_key(name, cfg.api_key, settings.source) is not None:
            out.append(name)
    return out
