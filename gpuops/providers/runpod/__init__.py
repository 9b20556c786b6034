"""RunPod: on-demand pods over its REST API v2.

The provider (``compute.RunPodProvider``; the wire in ``client.py``, network
volumes in ``volumes.py``, its billing records parsed in ``billing.py``). ``ENTRY`` is its registry
entry (``gpuops.providers.REGISTRY``). Light: no SDK, no requests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuops.providers.entry import ProviderEntry, SettingsView
from gpuops.providers.runpod.account import KEYS
from onbox.vocabulary import ProviderName

if TYPE_CHECKING:
    from gpuops.providers.base import Provider
    from gpuops.providers.volumes import VolumeService
    from gpuops.settings_base import Section


def build(settings: SettingsView) -> Provider:
    """``RunPodProvider`` with the key and API host ``settings`` and the environment give."""
    from gpuops.providers.keys import resolve_key, resolve_url
    from gpuops.providers.runpod.compute import RunPodProvider

    cfg = settings.providers.runpod
    return RunPodProvider(resolve_key(KEYS, cfg.api_key, settings.source), resolve_url(KEYS, cfg.url))


def load() -> type[Provider]:
    """``RunPodProvider``, imported on call."""
    from gpuops.providers.runpod.compute import RunPodProvider

    return RunPodProvider


def settings_model() -> type[Section]:
    """``RunpodSettings``, its ``[providers.runpod]`` table, imported on call (the help strings need no msgspec)."""
    from gpuops.providers.runpod.settings import RunpodSettings

    return RunpodSettings


def volume_service() -> type[VolumeService]:
    """``RunPodVolumes``, imported on call."""
    from gpuops.providers.runpod.volumes import RunPodVolumes

    return RunPodVolumes


ENTRY = ProviderEntry(
    ProviderName.RUNPOD,
    "RunPod",
    build,
    load,
    settings_model,
    keys=KEYS,
    volumes=volume_service,
    volume_region="datacenter (e.g. EU-RO-1, required)",
    billing=True,
    # Whole seconds, a second begun billed whole, no minimum charge documented: "All compute and
    # storage charges are billed per second" (https://docs.runpod.io/accounts-billing/billing);
    # "rounded up to the nearest second" is stated for Serverless (https://docs.runpod.io/serverless/pricing),
    # nothing finer for Pods. Network volumes bill hourly on size (docs.runpod.io/get-started/billing-information).
    billing_increment_s=1.0,
    # no SDK: REST v2 and the one GraphQL POST go through requests, the runpod extra (docs/sdks.md)
    catalog_field="runpod_id",
    catalog_heading="RunPod gpuTypeId",
    agent_credential="the pod-scoped RUNPOD_API_KEY from the pod's PID 1 environment (DELETE /v2/pods/{id}); "
    "the account key never goes to the box",
    agent_refused="the agent stops the pod instead (POST /v2/pods/{id}/action stop: GPU billing ends), else keeps "
    "trying; the watchdog and reconcile terminate it with the account key",
)
