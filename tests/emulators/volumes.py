"""Persistent volumes on the provider emulators (RunPod network volumes, Vast volumes).

Subclasses of the two emulators; everything else they serve is unchanged. Wire shapes:

- RunPod (runpod SDK 1.11.0 runpod/api/queries/user.py; REST API reference
  docs.runpod.io/api-reference/network-volumes): ``myself { networkVolumes { id name size
  dataCenterId } }``; ``POST /v1/networkvolumes`` ``{"name","size","dataCenterId"}`` -> 200 with the
  volume; ``GET /v1/networkvolumes`` -> list; ``DELETE /v1/networkvolumes/{id}`` -> 204, 404 when
  unknown. A pod deploy naming ``networkVolumeId`` must be SECURE and in the volume's datacenter
  (runpod/api/mutations/pods.py sends ``networkVolumeId``, ``dataCenterId``, ``volumeMountPath``).
- Vast (vastai SDK 1.9.1 vastai/api/storage.py, vastai/api/offers.py): ``GET
  /api/v0/volumes?owner=me&type=local_volume|network_volume|all_volume`` -> ``{"volumes": [...]}``
  (rows carry a numeric ``start_date``: the SDK computes ``duration`` from it); ``POST
  /api/v0/volumes/search/`` -> ``{"offers": [...]}``; ``PUT /api/v0/volumes/`` ``{"size","id","name"}``
  -> ``{"success": true}`` (the real answer is undocumented; gpuops does not read it); ``DELETE
  /api/v0/volumes/?id=N`` -> ``{"success": true}``, refused while an instance uses the volume (as
  ``vastai delete volume`` documents). An instance create carrying ``volume_info`` must be on the
  volume's machine.
"""

from __future__ import annotations

import itertools
from typing import Any

from tests.emulators.base import JSON
from tests.emulators.runpod import RunPodEmulator, _project
from tests.emulators.vast import VastEmulator


class RunPodVolumeEmulator(RunPodEmulator):
    """RunPod with network volumes. ``network_volumes``: id -> {id, name, size, dataCenterId}; each
    is also billed per GB-month from its create to its delete (the base emulator's ``volumes``,
    served by ``/v1/billing/networkvolumes``)."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.network_volumes: dict[str, dict] = {}
        self._vol_ids = itertools.count(1)

    def add_volume(self, name: str, size: int, dc: str) -> dict:
        with self.market.lock:
            vid = f"vol{next(self._vol_ids):04d}abcd"
            self.network_volumes[vid] = {"id": vid, "name": name, "size": size, "dataCenterId": dc}
            self.add_network_volume(vid, size)
            return self.network_volumes[vid]

    def handle(self, req: dict) -> tuple[int, Any, str]:
        path = req["path"].rstrip("/")
        if not path.startswith("/v1/networkvolumes"):
            return super().handle(req)
        if not self.authorized(req):
            return 401, {"error": "Unauthorized"}, JSON
        injected = self.market.take_injected("networkvolumes")
        if injected is not None:
            return injected, {"error": f"emulated HTTP {injected}"}, JSON
        with self.market.lock:
            tail = path[len("/v1/networkvolumes"):].strip("/")
            if not tail and req["method"] == "GET":
                return 200, list(self.network_volumes.values()), JSON
            if not tail and req["method"] == "POST":
                b = req["body"] or {}
                if not b.get("name") or not isinstance(b.get("size"), int) or not b.get("dataCenterId"):
                    return 400, {"error": "name, size (integer GB) and dataCenterId are required"}, JSON
                if not 1 <= b["size"] <= 4000:
                    return 400, {"error": "size must be between 1 and 4000 GB"}, JSON
                return 200, self.add_volume(b["name"], b["size"], b["dataCenterId"]), JSON
            if tail and req["method"] == "DELETE":
                if tail not in self.network_volumes:
                    return 404, {"error": "network volume not found"}, JSON
                if any(i.request.get("networkVolumeId") == tail for i in self.market.live()):
                    return 400, {"error": "network volume is attached to a pod"}, JSON
                del self.network_volumes[tail]
                self.remove_network_volume(tail)
                return 204, b"", JSON
        return 404, {"error": "not found"}, JSON

    def _dispatch(self, root: str, args: dict, field: Any, account: str = "acct-1") -> tuple[int, Any, str]:
        status, payload, ctype = super()._dispatch(root, args, field, account)
        if root == "myself" and status == 200:
            for f in field.selection_set.selections:
                if f.name.value == "networkVolumes":
                    payload["data"]["myself"]["networkVolumes"] = _project(list(self.network_volumes.values()), f.selection_set)
        return status, payload, ctype

    def _deploy(self, inp: dict, field: Any, account: str = "acct-1") -> tuple[int, Any, str]:
        vid = inp.get("networkVolumeId")
        if vid:
            vol = self.network_volumes.get(vid)
            if vol is None:
                return self._error("network volume not found", "podFindAndDeployOnDemand")
            if str(inp.get("cloudType")) != "SECURE":
                return self._error("network volumes are available on Secure Cloud only", "podFindAndDeployOnDemand")
            if inp.get("dataCenterId") != vol["dataCenterId"]:
                return self._error("the pod must be in the network volume's data center", "podFindAndDeployOnDemand")
        return super()._deploy(inp, field, account)


class VastVolumeEmulator(VastEmulator):
    """Vast with volumes. ``volume_offers``: id -> offer row; ``volumes``: id -> volume row."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.volumes: dict[int, dict] = {}
        self.volume_offers: dict[int, dict] = {}
        self._vol_ids = itertools.count(70001)
        for ask in (1001, 1002, 2001):  # a volume offer on the machines of these GPU offers
            o = self.offers[ask]
            self.add_volume_offer(9000 + ask, o["machine_id"], 500.0, 0.10 + 0.01 * (ask % 7), o["geolocation"])

    def add_volume_offer(self, oid: int, machine_id: int, disk_space: float, storage_cost: float, geolocation: str) -> dict:
        row = {"id": oid, "machine_id": machine_id, "host_id": machine_id * 10, "disk_space": disk_space, "storage_cost": storage_cost,
               "geolocation": geolocation, "verified": True, "verification": "verified", "external": False, "reliability": 0.99,
               "inet_down": 850.0, "inet_up": 600.0, "disk_bw": 2000.0, "duration": 86400.0 * 90, "score": 1.0}
        self.volume_offers[oid] = row
        return row

    def handle(self, req: dict) -> tuple[int, Any, str]:
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
                return self._ok({"volumes": [v for v in self.volumes.values() if kind is None or v["kind"] == kind]})
            if m == "PUT":
                o = self.volume_offers.get(int(body.get("id") or 0))
                size = int(body.get("size") or 0)
                if o is None or size < 1 or size > o["disk_space"]:
                    return self._fail(400, "invalid_args", "no such volume offer, or not enough space on it")
                vid = next(self._vol_ids)
                o["disk_space"] -= size
                self.volumes[vid] = {"id": vid, "label": body.get("name") or "", "disk_space": size, "machine_id": o["machine_id"],
                                     "geolocation": o["geolocation"], "storage_cost": o["storage_cost"], "status": "running",
                                     "start_date": self.market.now(), "instances": [], "kind": "local", "cluster_id": None}
                return self._ok({"success": True})
            if m == "DELETE":
                vid = int(q.get("id") or 0)
                if vid not in self.volumes:
                    return self._fail(404, "no_such_volume", f"Volume {vid} not found.")
                if any((i.request.get("volume_info") or {}).get("volume_id") == vid for i in self.market.live()):
                    return self._fail(400, "volume_in_use", "All instances using the volume must be destroyed before deletion.")
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
