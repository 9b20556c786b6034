"""Persistent volumes: storage that survives the destroy (RunPod network volumes, Vast volumes).

A volume is created and deleted only by ``gpuops volumes create|delete``; no teardown path ever
deletes one. ``[storage] volume = "<provider>:<id or name>"`` (or ``up --volume``) makes `up` rent
only offers that can mount it, mount it at create, and point the bootstrap caches (uv/pip wheels,
Hugging Face weights) at ``<mount>/.cache/gpuops`` (see gpuops.agent.bootstrap_config).

Wire shapes (tests/emulators/volumes.py emulates exactly these):

- RunPod, REST API v2 (RunPod's OpenAPI spec, api-reference-v2/openapi.json): ``GET
  /v2/network-volumes`` answering ``{"networkVolumes": [{"id", "name", "size", "dataCenter",
  "type"}]}`` (``size`` in GB, 10-4096); ``POST /v2/network-volumes`` with ``{"name", "size",
  "dataCenter"}`` answering 201 with the volume; ``DELETE /v2/network-volumes/{id}`` answering 204.
  Mount: the pod create's ``mounts.network`` ``[{"volumeId", "path"}]`` with ``dataCenterIds``
  ``[<its datacenter>]``; network volumes exist on Secure Cloud only, in one datacenter, so only
  SECURE offers in that datacenter can mount it (docs.runpod.io/pods/storage/network-volumes).
  Price: 0.07 USD/GB/month (docs.runpod.io/pods/storage/create-network-volumes: "$0.07/GB/month
  rather than $0.10/GB/month" for pod disk); 0.05 USD/GB/month past 1 TB (runpod.io/pricing).
- Vast, the vastai SDK 1.9.1 (vastai/api/storage.py, vastai/api/offers.py):
  ``show_volumes(type="local"|"network")`` -> ``GET /api/v0/volumes?owner=me&type=local_volume``
  answering ``{"volumes": [{"id", "label", "disk_space", "machine_id", "geolocation",
  "storage_cost", "start_date", ...}]}`` (display columns in vastai/cli/display.py
  ``volume_fields``); ``search_volumes(query, storage=GB)`` -> ``POST /api/v0/volumes/search/``
  answering ``{"offers": [{"id", "machine_id", "disk_space", "storage_cost" (USD/GB/month),
  "geolocation", ...}]}``; ``create_volume(offer_id, size, name)`` -> ``PUT /api/v0/volumes/`` with
  ``{"size", "id", "name"}`` answering ``{"success", "volume_name"}`` (the spec; its list rows
  carry no name, so the new volume is the one listed after and not before, and its name is kept in
  the data dir); ``delete_volume(id)`` -> ``DELETE /api/v0/volumes/?id=N``. Mount:
  ``create_instance(link_volume=id, mount_path=...)`` (``volume_info``); a Vast local volume lives
  on one machine, so only offers on that ``machine_id`` can mount it.

Sizes are GB (10^9 bytes) as both providers quote them; money is USD per month (730 h, the month
both providers' storage prices use) or USD/h where said.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from gpuops.errors import BadInput

HOURS_PER_MONTH = 730.0  # 8760 h / 12, the month RunPod and Vast divide storage prices by
RUNPOD_USD_PER_GB_MONTH = 0.07  # docs.runpod.io/pods/storage/create-network-volumes
RUNPOD_USD_PER_GB_MONTH_OVER_1TB = 0.05  # runpod.io/pricing: network volume storage past 1 TB
RUNPOD_MOUNT = "/workspace"  # where a network volume is mounted in a pod (docs.runpod.io/pods/storage/network-volumes)
VAST_MOUNT = "/gpuops-volume"  # Vast mounts a volume where the renter says (volume_info.mount_path)
_RUNPOD_DC = re.compile(r"^[A-Z]{2}-[A-Z]{2,4}-\d{1,3}$")  # e.g. EU-RO-1, US-KS-2
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
VAST_USD_PER_GB_MONTH = 0.10  # vastai 1.9.1 vastai/api/storage.py list_volume(price_disk=0.10): hosts' default volume price


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
        return dict(zip(VOLUME_COLUMNS, (self.provider, self.id, self.name, self.size_gb, self.region, self.usd_per_month,
                                         self.kind, self.machine_id or None, self.mount_path)))


def runpod_usd_per_month(size_gb: float) -> float:
    """RunPod network volume price for ``size_gb`` GB.

    0.07 USD/GB/month up to 1,000 GB, 0.05 past it (sources: module constants)."""
    first = min(size_gb, 1000.0)
    return round(first * RUNPOD_USD_PER_GB_MONTH + max(0.0, size_gb - 1000.0) * RUNPOD_USD_PER_GB_MONTH_OVER_1TB, 4)


class VolumeService(abc.ABC):
    """One provider's persistent volumes (``Provider.volumes()`` of a ``HasVolumes`` provider),
    through that provider object (``self.p``): its client, key, deadline and retry policy.

    Class facts, read without a key (`gpuops plan storage`, `gpuops volumes create`'s checks):
    ``usd_per_gb_month`` the list price (USD per GB-month) and ``price_source`` where it is from;
    ``plan_note`` a line `plan storage` adds; ``region_required``: (message, fix) when a create
    needs ``--region``, else None; ``example``: a volume reference for fix lines. (What
    ``--region`` means there is the registry's ``volume_region``: help strings import no class.)"""

    usd_per_gb_month: ClassVar[float]
    price_source: ClassVar[str]
    plan_note: ClassVar[str] = ""
    region_required: ClassVar["tuple[str, str] | None"] = None
    example: ClassVar[str] = ""

    def __init__(self, provider):
        self.p = provider

    @classmethod
    def usd_per_month(cls, size_gb: float) -> float:
        """The list price of a ``size_gb`` GB volume, USD per month."""
        return round(size_gb * cls.usd_per_gb_month, 4)

    @abc.abstractmethod
    def list(self) -> "list[Volume]":
        """Every volume of the account. Raises ProviderError."""

    @abc.abstractmethod
    def create(self, name: str, size_gb: float, region: str) -> Volume:
        """Create a ``size_gb`` GB volume named ``name`` (in ``region``); never retried blindly.
        Raises BadInput (before any call) or ProviderError."""

    @abc.abstractmethod
    def delete(self, volume_id: str) -> None:
        """Delete the volume. Idempotent: a volume the provider no longer knows is success."""

    @abc.abstractmethod
    def mountable(self, volume: Volume, offers: list) -> list:
        """The offers (re-tagged where needed) that can mount ``volume``."""

    def where(self, volume: Volume) -> str:
        """Where ``volume`` lives, as a fix line names it (``datacenter EU-RO-1``)."""
        return f"region {volume.region}"


def _with_volumes() -> tuple[str, ...]:
    from gpuops.providers import WITH_VOLUMES

    return WITH_VOLUMES


def parse_ref(ref: str) -> tuple[str, str]:
    """``"<provider>:<id or name>"`` -> (provider, id or name). Raises BadInput naming the fix."""
    from gpuops.providers import NAMES, REGISTRY, choices

    have = _with_volumes()
    prov, sep, ident = (ref or "").strip().partition(":")
    if sep and prov not in have and prov in NAMES:  # a real provider without volumes
        raise BadInput(f"volume {ref!r}: the {prov} provider has no persistent volumes (only {', '.join(have)} do)",
                       f"drop --volume for a {prov} run, or rent on --provider {choices(have, ' / ')}")
    if not sep or prov not in have or not ident or not _NAME.match(ident):
        examples = [REGISTRY[n].volumes().example for n in have[:2]]  # type: ignore[misc]
        eg = f"--volume {examples[0]}" + (f" or [storage] volume = \"{examples[1]}\"" if len(examples) > 1 else "")
        raise BadInput(f"volume {ref!r} is not <provider>:<id or name>", f"e.g. {eg}; see `gpuops volumes list`")
    return prov, ident


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise BadInput(f"volume name {name!r} is not allowed", "use letters, digits, '.', '_' and '-' (at most 63)")
    return name


def check_size(size_gb: float) -> float:
    import math

    if not isinstance(size_gb, (int, float)) or not math.isfinite(size_gb) or not 1 <= size_gb <= 100_000:
        raise BadInput(f"volume size {size_gb!r} GB is not a size", "pass --size-gb between 1 and 100000, e.g. --size-gb 50")
    return float(size_gb)


# ------------------------------------------------------------------------------------------------
# RunPod
# ------------------------------------------------------------------------------------------------
class RunPodVolumes(VolumeService):
    """RunPod network volumes through ``provider`` (gpuops.providers.runpod.RunPodProvider).

    Its REST v2 client, same key, same deadline and retry policy."""

    MIN_GB, MAX_GB = 10, 4096  # the spec's NetworkVolume.size bounds
    usd_per_gb_month = RUNPOD_USD_PER_GB_MONTH
    price_source = "RunPod network volume, docs.runpod.io/pods/storage/create-network-volumes"
    plan_note = "a RunPod network volume pins boxes to Secure Cloud in its datacenter (fewer, dearer offers)"
    region_required = ("a RunPod network volume lives in one datacenter", "add --region, e.g. --region EU-RO-1")
    example = "runpod:weights-eu"

    @classmethod
    def usd_per_month(cls, size_gb: float) -> float:
        """0.07 USD/GB/month up to 1,000 GB, 0.05 past it (``runpod_usd_per_month``)."""
        return runpod_usd_per_month(size_gb)

    def _volume(self, v: dict) -> Volume:
        size = float(v.get("size") or 0)
        return Volume(provider="runpod", id=str(v["id"]), name=str(v.get("name") or ""), size_gb=size, region=str(v.get("dataCenter") or ""),
                      usd_per_month=runpod_usd_per_month(size), kind="network", mount_path=RUNPOD_MOUNT, raw=dict(v))

    def list(self) -> list[Volume]:
        """Every network volume of the account (``GET /v2/network-volumes``). Raises ProviderError."""
        _, payload = self.p._rest("GET", "/v2/network-volumes", "list network volumes")
        out = []
        for v in self.p._object(payload, "networkVolumes", "list network volumes") or []:
            try:
                out.append(self._volume(v))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # a malformed row is not a volume we can use
        return out

    def create(self, name: str, size_gb: float, region: str) -> Volume:
        """Create a ``size_gb`` GB network volume named ``name`` in datacenter ``region`` (e.g. EU-RO-1).

        ``POST /v2/network-volumes``, never retried blindly (it may have happened). Raises BadInput
        (bad name/size/datacenter, before any call) or ProviderError."""
        from gpuops.providers.base import ProviderError, ProviderErrorKind

        check_name(name)
        size = int(round(check_size(size_gb)))
        if not self.MIN_GB <= size <= self.MAX_GB:
            raise BadInput(f"a RunPod network volume is {self.MIN_GB}-{self.MAX_GB} GB, not {size} GB", f"pass --size-gb between {self.MIN_GB} and {self.MAX_GB}")
        if not _RUNPOD_DC.match(region or ""):
            raise BadInput(f"RunPod datacenter {region!r} is not a datacenter id", "pass --region like EU-RO-1 or US-KS-2")
        _, body = self.p._rest("POST", "/v2/network-volumes", f"create network volume {name}",
                               body={"name": name, "size": size, "dataCenter": region}, retries=False)
        if not isinstance(body, dict) or "id" not in body:
            raise ProviderError(ProviderErrorKind.SERVER, "RunPod's answer to the volume create has no id", "run `gpuops volumes list --provider runpod`")
        return self._volume(body)

    def delete(self, volume_id: str) -> None:
        """Delete the network volume. Idempotent: a volume RunPod no longer knows (404) is success."""
        from urllib.parse import quote

        import gpuops.providers.inputs as inputs
        from gpuops.providers.base import ProviderError, ProviderErrorKind

        vid = inputs.check_provider_id(volume_id, "RunPod network volume id")
        try:
            self.p._rest("DELETE", "/v2/network-volumes/" + quote(vid, safe=""), f"delete network volume {vid}")
        except ProviderError as e:
            if e.kind != ProviderErrorKind.GONE:
                raise

    def mountable(self, volume: Volume, offers: list) -> list:
        """The offers that can mount ``volume``: Secure Cloud ones, re-tagged to its datacenter."""
        return [replace(o, region=volume.region) for o in offers if o.offer_id.startswith("secure:")]

    def where(self, volume: Volume) -> str:
        """A network volume lives in one datacenter."""
        return f"datacenter {volume.region}"


# ------------------------------------------------------------------------------------------------
# Vast
# ------------------------------------------------------------------------------------------------
class VastVolumes(VolumeService):
    """Vast volumes through ``provider`` (gpuops.providers.vast.VastProvider) and its SDK client.

    Vast's list reply documents no name for a volume (the spec's ``Volume``); its create answers a
    ``volume_name``. So the name a volume was created under is kept in ``<data dir>/vast-volumes.json``
    (id -> name, volume_name), and a list row's own ``label``/``name`` wins where Vast sends one."""

    BOOK = "vast-volumes.json"
    usd_per_gb_month = VAST_USD_PER_GB_MONTH
    price_source = "Vast hosts' default volume price (vastai 1.9.1 list_volume); live prices: `vastai search volumes`"
    example = "vast:12345"

    # -- the local name book ------------------------------------------------------------------------
    def _book_path(self):
        d = getattr(self.p, "data_dir", None)
        return None if d is None else Path(d) / self.BOOK

    def _book(self) -> dict:
        import json

        path = self._book_path()
        if path is None:
            return getattr(self.p, "_volume_book", {})
        try:
            got = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return got if isinstance(got, dict) else {}

    def _write_book(self, book: dict) -> None:
        import json
        import os

        path = self._book_path()
        if path is None:
            self.p._volume_book = book
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(book, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)

    def _volume(self, row: dict, kind: str, book: dict | None = None) -> Volume:
        size = float(row.get("disk_space") or row.get("size") or 0)
        cost = row.get("storage_cost")
        vid = str(int(row["id"]))
        own = row.get("label") or row.get("name") or row.get("volume_name")
        name = str(own) if own else str(((book or {}).get(vid) or {}).get("name") or "")
        return Volume(provider="vast", id=vid, name=name, size_gb=size,
                      region=str(row.get("geolocation") or ""), usd_per_month=round(float(cost) * size, 4) if cost is not None else None,
                      kind=kind, machine_id=str(row.get("machine_id") or ""), mount_path=VAST_MOUNT, raw=dict(row))

    def list(self) -> list[Volume]:
        """Local and network volumes of the account (named from the row, else from the book). Raises ProviderError."""
        book = self._book()
        out = []
        for kind in ("local", "network"):
            rows = self.p._call(f"list {kind} volumes", lambda v, k=kind: v.show_volumes(type=k)) or []
            for row in rows:
                try:
                    out.append(self._volume(row, kind, book))
                except (KeyError, TypeError, ValueError):
                    continue
        return out

    def create(self, name: str, size_gb: float, region: str = "") -> Volume:
        """Create a ``size_gb`` GB volume named ``name`` on the cheapest Vast volume offer with room for it.

        Create a ``size_gb`` GB local volume named ``name`` on the cheapest volume offer (by
        ``storage_cost``, USD/GB/month) with room for it; ``region``: a two-letter country code
        (e.g. SE) or ``machine:<id>``, empty for any. The new volume is the one the list shows after
        the create and not before, named ``name`` or the answer's ``volume_name`` where the row
        carries a name, on the offer's machine; its name is booked locally. Raises BadInput or
        ProviderError (SERVER when Vast accepted it but it cannot be told apart)."""
        from gpuops.providers.base import ProviderError, ProviderErrorKind

        check_name(name)
        size = check_size(size_gb)
        query: dict = {"disk_space": {"gte": size}}
        if region.startswith("machine:") and region[8:].isdigit():
            query["machine_id"] = {"eq": int(region[8:])}
        elif re.fullmatch(r"[A-Z]{2}", region or ""):
            query["geolocation"] = {"eq": region}
        elif region:
            raise BadInput(f"Vast region {region!r} is not a country code or machine:<id>", "pass --region SE, or --region machine:12345")
        offers = self.p._call("search volume offers", lambda v: v.search_volumes(query=query, order=[["storage_cost", "asc"]], storage=size))
        offers = [o for o in offers or [] if float(o.get("disk_space") or 0) >= size and o.get("storage_cost") is not None]
        if not offers:
            raise ProviderError(ProviderErrorKind.NO_CAPACITY, f"no Vast volume offer has {size:g} GB free" + (f" in {region}" if region else ""),
                                "try another --region or a smaller --size-gb")
        best = min(offers, key=lambda o: float(o["storage_cost"]))
        before = {v.id for v in self.list()}
        res = self.p._call(f"create volume on offer {best['id']}", lambda v: v.create_volume(int(best["id"]), size=size, name=name), retries=False)
        vname = str(res.get("volume_name") or "") if isinstance(res, dict) else ""
        new = [v for v in self.list() if v.id not in before and (not v.machine_id or v.machine_id == str(best.get("machine_id") or v.machine_id))]
        named = [v for v in new if v.name and v.name in (name, vname)]
        pick = named[0] if len(named) == 1 else new[0] if len(new) == 1 else None
        if pick is None:
            raise ProviderError(ProviderErrorKind.SERVER, f"Vast accepted the volume {name!r} ({vname or 'no volume_name'}) but the list "
                                f"shows {len(new)} new volumes", "run `gpuops volumes list --provider vast`")
        book = self._book()
        book[pick.id] = {"name": name, "volume_name": vname}
        self._write_book(book)
        return replace(pick, name=name)

    def delete(self, volume_id: str) -> None:
        """Delete the volume (every instance using it must be destroyed first). Idempotent."""
        from gpuops.providers.base import ProviderError, ProviderErrorKind

        if not str(volume_id).isdigit():
            raise BadInput(f"Vast volume id {volume_id!r} is not a number", "see `gpuops volumes list --provider vast`")
        try:
            self.p._call(f"delete volume {volume_id}", lambda v: v.delete_volume(int(volume_id)))
        except ProviderError as e:
            if e.kind not in (ProviderErrorKind.GONE, ProviderErrorKind.OFFER_GONE) and "not found" not in e.message.lower():
                raise
        book = self._book()
        if book.pop(str(volume_id), None) is not None:
            self._write_book(book)

    def mountable(self, volume: Volume, offers: list) -> list:
        """The offers that can mount ``volume``: those on its machine (a Vast local volume)."""
        if volume.kind != "local":
            raise BadInput(f"Vast network volume {volume.id} cannot be mounted by gpuops yet", "use a Vast local volume, or a RunPod network volume")
        return [o for o in offers if getattr(o, "machine_id", "") == volume.machine_id]

    def where(self, volume: Volume) -> str:
        """A Vast local volume lives on one machine."""
        return f"machine {volume.machine_id}"


# ------------------------------------------------------------------------------------------------
def service(provider):
    """The provider's volume service (``Provider.volumes()``). Raises BadInput when it has none."""
    svc = provider.volumes()
    if svc is None:
        have = _with_volumes()
        raise BadInput(f"provider {provider.name!r} has no volumes", f"volumes exist on {' and '.join(have)}")
    return svc


def resolve(provider, ref: str) -> Volume:
    """The volume ``ref`` (``<provider>:<id or name>``) names, on ``provider``.

    Raises BadInput when the provider differs, or no volume (or more than one) has that id or name."""
    prov, ident = parse_ref(ref)
    if prov != provider.name:
        raise BadInput(f"volume {ref!r} is on {prov}, but `up` rents on {provider.name}", f"add --provider {prov}, or pick a {provider.name} volume")
    vols = service(provider).list()
    found = [v for v in vols if v.id == ident] or [v for v in vols if v.name == ident]
    if not found:
        names = ", ".join(f"{v.name or v.id}" for v in vols[:5]) or "none"
        raise BadInput(f"no {prov} volume with id or name {ident!r} (yours: {names})", "create it with `gpuops volumes create`, or fix [storage] volume")
    if len(found) > 1:
        raise BadInput(f"{len(found)} {prov} volumes are named {ident!r}", "name it by id (see `gpuops volumes list`)")
    return found[0]


def mountable(provider, volume: Volume, offers: list) -> list:
    """``offers`` narrowed to those that can mount ``volume`` (RunPod: Secure Cloud, its datacenter; Vast: its machine).

    Raises BadInput when none can."""
    ok = service(provider).mountable(volume, offers)
    if offers and not ok:
        where = service(provider).where(volume)
        raise BadInput(f"no offer can mount volume {volume.name or volume.id} ({where})",
                       "try another --card, or drop --volume (weights are then fetched on the box)")
    return ok


def spec_fields(volume: Volume | None) -> dict:
    """CreateSpec fields that mount ``volume`` (empty for None)."""
    if volume is None:
        return {}
    return {"volume_id": volume.id, "volume_region": volume.region, "volume_mount_path": volume.mount_path}
