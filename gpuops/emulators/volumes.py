"""Persistent volumes on the provider emulators (RunPod network volumes, Vast volumes).

Wire shapes:

- RunPod: REST v2 network volumes are served by the RunPod emulator itself
  (gpuops/emulators/runpod.py: ``/v2/network-volumes``, the pod create's ``mounts.network``);
  ``RunPodVolumeEmulator`` is that emulator, kept as the storage tests' name for it.
- Vast (vastai SDK 1.9.1 vastai/api/storage.py, vastai/api/offers.py): ``GET
  /api/v0/volumes?owner=me&type=local_volume|network_volume|all_volume`` -> ``{"volumes": [...]}``
  (rows carry a numeric ``start_date``: the SDK computes ``duration`` from it); ``POST
  /api/v0/volumes/search/`` -> ``{"offers": [...]}``; ``PUT /api/v0/volumes/`` ``{"size","id","name"}``
  -> ``{"success": true, "volume_name"}`` (the spec's answer); the list's rows carry no name (the
  spec's Volume), or our label when ``volume_label_in_list``; ``DELETE
  /api/v0/volumes/?id=N`` -> ``{"success": true}``, refused while an instance uses the volume (as
  ``vastai delete volume`` documents). An instance create carrying ``volume_info`` must be on the
  volume's machine.
"""

from __future__ import annotations

import itertools
from typing import Any

from gpuops.emulators.runpod import RunPodEmulator
from gpuops.emulators.vast import VastEmulator


class RunPodVolumeEmulator(RunPodEmulator):
    """RunPod with network volumes (the v2 emulator serves them).

    ``add_volume(name, size, dc)`` makes one as the console would; ``network_volumes``: id -> NetworkVolume."""


class VastVolumeEmulator(VastEmulator):
    """Vast with volumes. ``volume_offers``: id -> offer row; ``volumes``: id -> volume row."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        # Undocumented: the spec's list reply has no name; whether it carries our label is a switch.
        self.volume_label_in_list = False
        self.volumes: dict[int, dict] = {}
        self.volume_offers: dict[int, dict] = {}
        self._vol_ids = itertools.count(70001)
        for ask in (1001, 1002, 2001):  # a volume offer on the machines of these GPU offers
            o = self.offers[ask]
            self.add_volume_offer(9000 + ask, o["machine_id"], 500.0, 0.10 + 0.01 * (ask % 7), o["geolocation"])

    def add_volume_offer(
        self, oid: int, machine_id: int, disk_space: float, storage_cost: float, geolocation: str
    ) -> dict:
        """A volume offer: ``disk_space`` GB at ``storage_cost`` USD/GB/month; returns its row."""
        row = {
            "id": oid,
            "machine_id": machine_id,
            "host_id": machine_id * 10,
            "disk_space": disk_space,
            "storage_cost": storage_cost,
            "geolocation": geolocation,
            "verified": True,
            "verification": "verified",
            "external": False,
            "reliability": 0.99,
            "inet_down": 850.0,
            "inet_up": 600.0,
            "disk_bw": 2000.0,
            "duration": 86400.0 * 90,
            "score": 1.0,
        }
        self.volume_offers[oid] = row
        return row

    def handle(self, req: dict) -> tuple[int, Any, str]:
        """The reply to ``req``: (HTTP status, JSON payload, content type)."""
        path = req["path"]
        if path not in ("/api/v0/volumes", "/api/v0/volumes/", "/api/v0/volumes/search/"):
            return super().handle(req)
        if not self.authorized(req):
            return self._fail(401, "auth_error", "Invalid API key")
        injected = self.market.take_injected("volumes")
        if injected is not None:
            return self._fail(injected, "server_error", f"emulated HTTP {injected}")
        body, q, m = req["body"] or {}, req["query"], req["method"]
        with self.market.lock:
            if path.endswith("/search/") and m == "POST":
                need = float((body.get("disk_space") or {}).get("gte") or 0)
                rows = [o for o in self.volume_offers.values() if o["disk_space"] >= need]
                for k in ("machine_id", "geolocation"):
                    if k in body:
                        rows = [o for o in rows if str(o[k]).endswith(str(body[k]["eq"]))]
                return self._ok({"offers": rows})
            if m == "GET":
                kind = {"local_volume": "local", "network_volume": "network"}.get(q.get("type", ""), None)
                hide = {"kind"} | (set() if self.volume_label_in_list else {"label"})
                return self._ok(
                    {
                        "volumes": [
                            {k: x for k, x in v.items() if k not in hide}
                            for v in self.volumes.values()
                            if kind is None or v["kind"] == kind
                        ]
                    }
                )
            if m == "PUT":
                o = self.volume_offers.get(int(body.get("id") or 0))
                size = int(body.get("size") or 0)
                if o is None or size < 1 or size > o["disk_space"]:
                    return self._fail(400, "invalid_args", "no such volume offer, or not enough space on it")
                vid = next(self._vol_ids)
                o["disk_space"] -= size
                self.volumes[vid] = {
                    "id": vid,
                    "label": body.get("name") or "",
                    "disk_space": size,
                    "machine_id": o["machine_id"],
                    "geolocation": o["geolocation"],
                    "storage_cost": o["storage_cost"],
                    "status": "running",
                    "start_date": self.market.now(),
                    "instances": [],
                    "kind": "local",
                }
                return self._ok({"success": True, "volume_name": body.get("name") or f"V.{vid}"})
            if m == "DELETE":
                vid = int(q.get("id") or 0)
                if vid not in self.volumes:
                    return self._fail(404, "no_such_volume", f"Volume {vid} not found.")
                if any((i.request.get("volume_info") or {}).get("volume_id") == vid for i in self.market.live()):
                    return self._fail(
                        400, "invalid_args", "All instances using the volume must be destroyed before deletion."
                    )
                del self.volumes[vid]
                return self._ok({"success": True})
        return self._fail(404, "not_found", "no route")

    def _create(self, oid: int, body: dict, account: str = "acct-1") -> tuple[int, Any, str]:
        vi = body.get("volume_info")
        if vi:
            vol = self.volumes.get(int(vi.get("volume_id") or 0))
            o = self.offers.get(oid)
            if vol is None or vi.get("create_new"):
                return self._fail(400, "invalid_args", "no such volume")
            if o is not None and o["machine_id"] != vol["machine_id"]:
                return self._fail(400, "invalid_args", "the volume is on another machine")
        return super()._create(oid, body, account)
