"""Persistent volumes: storage that survives the destroy (a ``HasVolumes`` provider's ``VolumeService``).

A volume is created and deleted only by ``gpuops volumes create|delete``; no teardown path ever
deletes one. ``[storage] volume = "<provider>:<id or name>"`` (or ``up --volume``) makes `up` rent
only offers that can mount it, mount it at create, and point the bootstrap caches (uv/pip wheels,
Hugging Face weights) at ``<mount>/.cache/gpuops`` (see gpuops.agent.bootstrap_config).

Each provider's service is its folder's ``volumes.py`` (``VolumeService`` below; the wire shapes
there, emulated by gpuops/emulators/volumes.py); this module has what they share: the ``Volume``,
names and sizes; ``volume_refs`` reads a reference (``<provider>:<id or name>``) against the
registry and finds the volume `up` mounts.

Sizes are GB (10^9 bytes) as both providers quote them; money is USD per month (730 h, the month
both providers' storage prices use) or USD/h where said.
"""

from __future__ import annotations

import abc
import builtins  # a method named list shadows the type in its class
import re
from dataclasses import dataclass, field
from typing import ClassVar

from gpuops.errors import BadInput

HOURS_PER_MONTH = 730.0  # 8760 h / 12, the month RunPod and Vast divide storage prices by
VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


# ``Volume.as_json`` keys in order: the CSV header of `gpuops volumes list`, printed even with no volume.
VOLUME_COLUMNS = ("provider", "id", "name", "size_gb", "region", "usd_per_month", "kind", "machine_id", "mount_path")


@dataclass(frozen=True)
class Volume:
    """A persistent volume.

    ``size_gb``: GB (10^9 bytes); ``region``: RunPod datacenter id or Vast country/geolocation;
    ``usd_per_month``: its storage price (None when the provider gives none); ``kind``: "network"
    (RunPod, Vast network) or "local" (Vast, bound to ``machine_id``); ``mount_path``: where gpuops
    mounts it on a box."""

    provider: str
    id: str
    name: str
    size_gb: float
    region: str
    usd_per_month: float | None
    kind: str = "network"
    machine_id: str = ""
    mount_path: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    def as_json(self) -> dict:
        """The volume as a JSON-ready dict, keys ``VOLUME_COLUMNS`` in order."""
        return dict(
            zip(
                VOLUME_COLUMNS,
                (
                    self.provider,
                    self.id,
                    self.name,
                    self.size_gb,
                    self.region,
                    self.usd_per_month,
                    self.kind,
                    self.machine_id or None,
                    self.mount_path,
                ),
            )
        )


class VolumeService(abc.ABC):
    """One provider's persistent volumes (``Provider.volumes()`` of a ``HasVolumes`` provider).

    Through that provider object (``self.p``): its client, key, deadline and retry policy.

    Class facts, read without a key (`gpuops plan storage`, `gpuops volumes create`'s checks):
    ``usd_per_gb_month`` the list price (USD per GB-month) and ``price_source`` where it is from;
    ``plan_note`` a line `plan storage` adds; ``region_required``: (message, fix) when a create
    needs ``--region``, else None; ``example``: a volume reference for fix lines. (What
    ``--region`` means there is the registry's ``volume_region``: help strings import no class.)"""

    usd_per_gb_month: ClassVar[float]
    price_source: ClassVar[str]
    plan_note: ClassVar[str] = ""
    region_required: ClassVar[tuple[str, str] | None] = None
    example: ClassVar[str] = ""

    def __init__(self, provider):
        self.p = provider

    @classmethod
    def usd_per_month(cls, size_gb: float) -> float:
        """The list price of a ``size_gb`` GB volume, USD per month."""
        return round(size_gb * cls.usd_per_gb_month, 4)

    @abc.abstractmethod
    def list(self) -> list[Volume]:
        """Every volume of the account. Raises ProviderError."""

    @abc.abstractmethod
    def create(self, name: str, size_gb: float, region: str) -> Volume:
        """Create a ``size_gb`` GB volume named ``name`` (in ``region``); never retried blindly.

        Raises BadInput (before any call) or ProviderError."""

    @abc.abstractmethod
    def delete(self, volume_id: str) -> None:
        """Delete the volume. Idempotent: a volume the provider no longer knows is success."""

    @abc.abstractmethod
    def mountable(self, volume: Volume, offers: builtins.list) -> builtins.list:
        """The offers (re-tagged where needed) that can mount ``volume``."""

    def where(self, volume: Volume) -> str:
        """Where ``volume`` lives, as a fix line names it (``datacenter EU-RO-1``)."""
        return f"region {volume.region}"


def check_name(name: str) -> str:
    if not VOLUME_NAME.match(name or ""):
        raise BadInput(f"volume name {name!r} is not allowed", "use letters, digits, '.', '_' and '-' (at most 63)")
    return name


def check_size(size_gb: float) -> float:
    import math

    if not isinstance(size_gb, (int, float)) or not math.isfinite(size_gb) or not 1 <= size_gb <= 100_000:
        raise BadInput(
            f"volume size {size_gb!r} GB is not a size", "pass --size-gb between 1 and 100000, e.g. --size-gb 50"
        )
    return float(size_gb)


def spec_fields(volume: Volume | None) -> dict:
    """CreateSpec fields that mount ``volume`` (empty for None)."""
    if volume is None:
        return {}
    return {"volume_id": volume.id, "volume_region": volume.region, "volume_mount_path": volume.mount_path}
