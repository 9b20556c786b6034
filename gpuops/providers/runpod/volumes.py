"""RunPod network volumes (``HasVolumes``): the ``VolumeService`` of ``RunPodProvider``.

RunPod, REST API v2 (RunPod's OpenAPI spec, api-reference-v2/openapi.json): ``GET
/v2/network-volumes`` answering ``{"networkVolumes": [{"id", "name", "size", "dataCenter",
"type"}]}`` (``size`` in GB, 10-4096); ``POST /v2/network-volumes`` with ``{"name", "size",
"dataCenter"}`` answering 201 with the volume; ``DELETE /v2/network-volumes/{id}`` answering 204.
Mount: the pod create's ``mounts.network`` ``[{"volumeId", "path"}]`` with ``dataCenterIds``
``[<its datacenter>]``; network volumes exist on Secure Cloud only, in one datacenter, so only
SECURE offers in that datacenter can mount it (docs.runpod.io/pods/storage/network-volumes).
Price: 0.07 USD/GB/month (docs.runpod.io/pods/storage/create-network-volumes: "$0.07/GB/month
rather than $0.10/GB/month" for pod disk); 0.05 USD/GB/month past 1 TB (runpod.io/pricing).
"""

from __future__ import annotations

import builtins  # a method named list shadows the type in its class
import re
from dataclasses import replace

from gpuops.errors import BadInput
from gpuops.providers.volumes import Volume, VolumeService, check_name, check_size

RUNPOD_USD_PER_GB_MONTH = 0.07  # docs.runpod.io/pods/storage/create-network-volumes
RUNPOD_USD_PER_GB_MONTH_OVER_1TB = 0.05  # runpod.io/pricing: network volume storage past 1 TB
RUNPOD_MOUNT = "/workspace"  # where a network volume is mounted in a pod (docs.runpod.io/pods/storage/network-volumes)
_RUNPOD_DC = re.compile(r"^[A-Z]{2}-[A-Z]{2,4}-\d{1,3}$")  # e.g. EU-RO-1, US-KS-2


def runpod_usd_per_month(size_gb: float) -> float:
    """RunPod network volume price for ``size_gb`` GB.

    0.07 USD/GB/month up to 1,000 GB, 0.05 past it (sources: module constants)."""
    first = min(size_gb, 1000.0)
    return round(first * RUNPOD_USD_PER_GB_MONTH + max(0.0, size_gb - 1000.0) * RUNPOD_USD_PER_GB_MONTH_OVER_1TB, 4)


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
        return Volume(
            provider="runpod",
            id=str(v["id"]),
            name=str(v.get("name") or ""),
            size_gb=size,
            region=str(v.get("dataCenter") or ""),
            usd_per_month=runpod_usd_per_month(size),
            kind="network",
            mount_path=RUNPOD_MOUNT,
            raw=dict(v),
        )

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
            raise BadInput(
                f"a RunPod network volume is {self.MIN_GB}-{self.MAX_GB} GB, not {size} GB",
                f"pass --size-gb between {self.MIN_GB} and {self.MAX_GB}",
            )
        if not _RUNPOD_DC.match(region or ""):
            raise BadInput(
                f"RunPod datacenter {region!r} is not a datacenter id", "pass --region like EU-RO-1 or US-KS-2"
            )
        _, body = self.p._rest(
            "POST",
            "/v2/network-volumes",
            f"create network volume {name}",
            body={"name": name, "size": size, "dataCenter": region},
            retries=False,
        )
        if not isinstance(body, dict) or "id" not in body:
            raise ProviderError(
                ProviderErrorKind.SERVER,
                "RunPod's answer to the volume create has no id",
                "run `gpuops volumes list --provider runpod`",
            )
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

    def mountable(self, volume: Volume, offers: builtins.list) -> builtins.list:
        """The offers that can mount ``volume``: Secure Cloud ones, re-tagged to its datacenter."""
        return [replace(o, region=volume.region) for o in offers if o.offer_id.startswith("secure:")]

    def where(self, volume: Volume) -> str:
        """A network volume lives in one datacenter."""
        return f"datacenter {volume.region}"
