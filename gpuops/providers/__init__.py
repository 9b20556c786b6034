"""The provider registry: the ONE table of providers gpuops knows on the laptop side.

Everything that names providers derives from ``REGISTRY``: the CLI's ``--provider`` choices and
help strings (``NAMES``, ``choices``), the ``[providers.<name>]`` config sections, where account
keys come from (``ProviderEntry.keys``, read by ``keys.py``), the agent's destroy kind, which
providers have spot, volumes and billing, the documented billing unit, the SDK `gpuops check`
looks for, and the catalog column of each provider's GPU names. What cannot import it is checked
against it by ``tests/providers/test_registry.py``: the config's ``provider`` type, the
``bootstrap/`` vocabulary (it runs on the box, standard library only), the settings snapshot's
sections, ``infra.example.toml``'s sections and the pyproject extras. Adding a provider:
docs/adding-a-provider.md. Provider classes and SDKs import lazily (``build``, ``load``): this
module is read at CLI start-up for the help strings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from bootstrap.vocabulary import ProviderName
from gpuops.errors import BadInput
from gpuops.providers.entry import KeySource, ProviderEntry
from gpuops.providers.keys import read_runpod_key_file, runpod_key_files, vast_key_files

if TYPE_CHECKING:
    from gpuops.config import Settings
    from gpuops.providers.base import Provider
    from gpuops.providers.volumes import VolumeService


def _local(settings: "Settings") -> "Provider":
    from gpuops.providers.local import LocalProvider

    return LocalProvider(
        settings.data_path() / "boxes",
        price_per_hour=settings.providers.local.price_per_hour,
        kill_grace_seconds=settings.teardown.kill_grace_seconds,
        keep_box_days=settings.providers.local.keep_box_days,
    )


def _local_class() -> "type[Provider]":
    from gpuops.providers.local import LocalProvider

    return LocalProvider


def _runpod(settings: "Settings") -> "Provider":
    from gpuops.providers.keys import resolve_key, resolve_url
    from gpuops.providers.runpod import RunPodProvider

    cfg = settings.providers.runpod
    return RunPodProvider(resolve_key("runpod", cfg.api_key, settings.source), resolve_url("runpod", cfg.url))


def _runpod_class() -> "type[Provider]":
    from gpuops.providers.runpod import RunPodProvider

    return RunPodProvider


def _vast(settings: "Settings") -> "Provider":
    from gpuops.providers.keys import resolve_key, resolve_url
    from gpuops.providers.vast import VastProvider

    cfg = settings.providers.vast
    return VastProvider(resolve_key("vast", cfg.api_key, settings.source), resolve_url("vast", cfg.url), storage_gb=settings.up.disk_gb,
                        data_dir=settings.data_path())


def _vast_class() -> "type[Provider]":
    from gpuops.providers.vast import VastProvider

    return VastProvider


def _runpod_volumes() -> "type[VolumeService]":
    from gpuops.providers.volumes import RunPodVolumes

    return RunPodVolumes


def _vast_volumes() -> "type[VolumeService]":
    from gpuops.providers.volumes import VastVolumes

    return VastVolumes


_ENTRIES = (
    ProviderEntry(
        ProviderName.LOCAL, "this machine", _local, _local_class,
        agent_credential="no key: it ends the box's own processes (TERM, then KILL)",
    ),
    ProviderEntry(
        ProviderName.RUNPOD, "RunPod", _runpod, _runpod_class,
        keys=KeySource(env_var="RUNPOD_API_KEY", url_var="RUNPOD_API_BASE_URL", default_url="https://api.runpod.io",
                       files=runpod_key_files, read_file=read_runpod_key_file, url_tails=("/graphql", "/v2"),
                       console="runpod.io > Settings > API Keys"),
        volumes=_runpod_volumes, volume_region="datacenter (e.g. EU-RO-1, required)", billing=True,
        # "All Pods are billed by the second for compute and storage" (docs.runpod.io/pods/pricing);
        # network volumes bill hourly on size (docs.runpod.io/get-started/billing-information).
        billing_increment_s=1.0,
        sdk="runpod", catalog_field="runpod_id", catalog_heading="RunPod gpuTypeId",
        agent_credential="the pod-scoped RUNPOD_API_KEY from the pod's PID 1 environment (DELETE /v2/pods/{id}); "
                         "the account key never goes to the box",
        agent_refused="the agent stops the pod instead (POST /v2/pods/{id}/action stop: GPU billing ends), else keeps "
                      "trying; the watchdog and reconcile terminate it with the account key",
    ),
    ProviderEntry(
        ProviderName.VAST, "Vast.ai", _vast, _vast_class,
        keys=KeySource(env_var="VAST_API_KEY", url_var="VAST_URL", default_url="https://console.vast.ai", files=vast_key_files,
                       console="cloud.vast.ai > Account > API Keys"),
        spot=True, volumes=_vast_volumes, volume_region="country code or machine:<id>", billing=True,
        # "You are charged the base active rental cost for every second your instance is in the
        # active/connected state ... the storage cost ... for every second your instance exists"
        # (docs.vast.ai/billing-help); a stopped instance still bills storage.
        billing_increment_s=1.0,
        sdk="vastai", catalog_field="vast_name", catalog_heading="Vast gpu_name",
        agent_credential="the per-instance CONTAINER_API_KEY from the instance's PID 1 environment "
                         "(DELETE /api/v0/instances/{id}/); the account key never goes to the box",
        agent_refused="the agent keeps trying (backing off to 30 s); the watchdog and reconcile destroy it with the account key",
    ),
)

REGISTRY: dict[str, ProviderEntry] = {e.name.value: e for e in _ENTRIES}
NAMES = tuple(REGISTRY)
MARKETPLACES = tuple(n for n, e in REGISTRY.items() if e.needs_key)
ACCOUNTLESS = tuple(n for n, e in REGISTRY.items() if not e.needs_key)  # local: this machine, no account
SPOT = tuple(n for n, e in REGISTRY.items() if e.spot)
WITH_VOLUMES = tuple(n for n, e in REGISTRY.items() if e.volumes is not None)
WITH_BILLING = tuple(n for n, e in REGISTRY.items() if e.billing)


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


def get_provider(name: str, settings: "Settings") -> "Provider":
    """The provider called ``name``; BadInput for an unknown name."""
    return entry(name).build(settings)


def agent_destroy_kind(name: str) -> str:
    """The on-box agent's destroy kind for a box of provider ``name`` (``local`` for unknown names:
    the agent then ends the local box's processes only)."""
    e = REGISTRY.get(name)
    return e.agent_destroy_kind if e is not None else ProviderName.LOCAL.value


def billing_increment(name: str) -> float | None:
    """The billing unit ``name``'s documentation states (seconds), None for an unknown name."""
    e = REGISTRY.get(name)
    return e.billing_increment_s if e is not None else None


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
