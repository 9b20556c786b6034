"""RunPod emulator: ``POST /graphql`` answering the documents the runpod 1.11.0 SDK sends.

Documents are parsed with graphql-core (a quote the SDK forgot to escape is a syntax error here as
upstream), dispatched on the first root field, and answered by projecting a full Python object
through the document's selection set, so any field subset the SDK asks for comes back in shape.
Wire shapes: the documents of runpod 1.11.0 (runpod/api/queries/*.py, runpod/api/mutations/pods.py)
and RunPod's GraphQL reference (https://graphql-spec.runpod.io/).

Root fields served: ``gpuTypes`` (list, or ``input:{id}`` with prices and ``lowestPrice``),
``podFindAndDeployOnDemand``, ``pod``, ``myself`` (``pods``, ``id``/``pubKey``/``networkVolumes``,
``clientBalance``/``currentSpendPerHr``), ``podStop``, ``podResume``, ``podTerminate``.
Interruptible pods are not served: RunPod withdrew them from its API in 2026.

Billing, on the same server under ``/v1`` (RunPod's REST API, https://rest.runpod.io/v1):
``GET /v1/billing/pods`` and ``GET /v1/billing/networkvolumes`` with ``startTime``/``endTime``
(RFC 3339), ``bucketSize`` (hour|day|week|month|year) and, for pods, ``grouping`` (podId|gpuTypeId)
and ``podId``; answered as a JSON list of records ``{"time","amount","timeBilledMs",
"diskSpaceBilledGb","podId"|"gpuTypeId"}``, one per group per bucket. Sources: runpodctl
``internal/api/billing.go`` (``BillingRecord``, ``GetPodBilling``: ``/billing/pods`` with those
parameters, as ``runpodctl billing pods --bucket-size ... --grouping podId`` sends them;
``GetNetworkVolumeBilling``: ``/billing/networkvolumes``) and docs.runpod.io/api-reference/billing/
GET/billing/pods and .../networkvolumes (the record fields; network volume records carry no volume
id). Amounts come from the billing clock per second (docs.runpod.io/pods/pricing: "billed by the
second"); a record of a stopped pod bills disk only (``timeBilledMs`` 0).
"""

from __future__ import annotations

import time
from typing import Any

import graphql
from graphql.utilities import value_from_ast_untyped

from datetime import datetime, timezone

from tests.emulators.contract import Contract
from tests.emulators.base import HOURS, HTML, JSON, EmuInstance, Emulator, Market

NO_CAPACITY = "There are no longer any instances available with the requested specifications. Please refresh and try again."
STORAGE_USD_PER_GB_HOUR = 0.20 / 730  # stopped pod: volume + container disk, USD/GB/month / hours per month

# id, displayName, memoryInGb, securePrice, communityPrice, maxGpuCount (prices USD/h per GPU)
DEFAULT_GPUS = [
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34, 8),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, 1.89, 1.49, 8),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 1.64, 1.19, 8),
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.99, 2.69, 8),
    ("NVIDIA GeForce RTX 3070", "RTX 3070", 8, 0.0, 0.13, 4),  # a type our catalog may not have
]


def _project(value: Any, selection_set: Any) -> Any:
    if selection_set is None or value is None:
        return value
    if isinstance(value, list):
        return [_project(v, selection_set) for v in value]
    out = {}
    for f in selection_set.selections:
        name = f.name.value
        v = value.get(name) if isinstance(value, dict) else None
        if callable(v):
            v = v({a.name.value: value_from_ast_untyped(a.value) for a in (f.arguments or ())})
        out[f.alias.value if f.alias else name] = _project(v, f.selection_set)
    return out


class RunPodEmulator(Emulator):
    """Stateful RunPod. ``gpus``: id -> dict of type fields plus ``stock`` (pods it can still place)."""

    OPS = ("gpuTypes", "podFindAndDeployOnDemand", "pod", "myself", "podStop", "podResume", "podTerminate", "billing")
    NETWORK_VOLUME_USD_PER_GB_MONTH = 0.07  # docs.runpod.io/get-started/billing-information (under 1 TB)

    def __init__(self, api_key: str = "rp_TESTKEY", balance_usd: float = 100.0):
        super().__init__(Market(api_key, balance_usd))
        self.contract = Contract('runpod')
        self.volumes: dict[str, dict] = {}
        self.gpus: dict[str, dict] = {}
        for gid, disp, mem, secure, community, maxn in DEFAULT_GPUS:
            self.gpus[gid] = {"id": gid, "displayName": disp, "manufacturer": "Nvidia", "memoryInGb": mem, "cudaCores": 0,
                              "secureCloud": secure > 0, "communityCloud": community > 0, "securePrice": secure or None,
                              "communityPrice": community or None, "oneMonthPrice": None, "threeMonthPrice": None, "oneWeekPrice": None,
                              "communitySpotPrice": None, "secureSpotPrice": None, "maxGpuCount": maxn, "stock": 10}

    # -- helpers -----------------------------------------------------------------------------
    @staticmethod
    def _error(message: str, root: str, code: str = "BAD_USER_INPUT", status: int = 200) -> tuple[int, Any, str]:
        return status, {"data": None, "errors": [{"message": message, "path": [root], "extensions": {"code": code}}]}, JSON

    def _gpu_full(self, g: dict) -> dict:
        def lowest(args: dict) -> dict:
            n = int((args.get("input") or {}).get("gpuCount") or 1)
            prices = [p for p in (g["securePrice"], g["communityPrice"]) if p]
            return {"minimumBidPrice": None, "uninterruptablePrice": round(min(prices) * n, 4) if prices else None}

        return {**{k: v for k, v in g.items() if k != "stock"}, "lowestPrice": lowest}

    def _pod(self, inst: EmuInstance) -> dict:
        req = inst.request
        if inst.stuck_status is not None:
            raw, runtime = inst.stuck_status, None
        elif inst.state == "stopped":
            raw, runtime = "EXITED", None
        elif inst.state == "running":
            ports = [{"ip": "100.65.0.2", "isIpPublic": False, "privatePort": 8888, "publicPort": 60888, "type": "http"}]
            if not inst.no_ssh_port:
                ports.insert(0, {"ip": inst.ssh[0], "isIpPublic": True, "privatePort": 22, "publicPort": inst.ssh[1], "type": "tcp"})
            raw, runtime = "RUNNING", {"uptimeInSeconds": int(self.market.now() - inst.created_t - inst.boot_s), "ports": ports}
        else:
            raw, runtime = "RUNNING", None
        env = [f"{e['key']}={e['value']}" for e in req.get("env") or []]
        return {
            "id": inst.id, "name": inst.label, "containerDiskInGb": req.get("containerDiskInGb", 10), "costPerHr": inst.usd_per_hour,
            "adjustedCostPerHr": inst.usd_per_hour, "desiredStatus": raw, "dockerArgs": req.get("dockerArgs", ""), "dockerId": None,
            "env": env, "gpuCount": inst.delivered.get("num_gpus", req.get("gpuCount", 1)), "imageName": req.get("imageName", ""),
            "lastStatusChange": "Rented by User: " + time.strftime("%a %b %d %Y %H:%M:%S GMT+0000 (Coordinated Universal Time)", time.gmtime(inst.created_t)),
            "machineId": f"m{inst.id}", "memoryInGb": 62, "podType": "RESERVED", "port": None, "ports": req.get("ports", ""),
            "uptimeSeconds": runtime["uptimeInSeconds"] if runtime else 0, "vcpuCount": 8, "volumeInGb": req.get("volumeInGb", 0),
            "volumeMountPath": req.get("volumeMountPath", "/workspace"), "runtime": runtime,
            "machine": {"gpuDisplayName": inst.delivered.get("gpu_name", self.gpus.get(req.get("gpuTypeId", ""), {}).get("displayName")),
                        "podHostId": f"{inst.id}-64410a2b"},
        }

    # -- billing (REST) ----------------------------------------------------------------------------
    def add_network_volume(self, volume_id: str, size_gb: int) -> None:
        """A network volume made in the console: billed per GB-month from now until removed."""
        with self.market.lock:
            self.volumes[volume_id] = {"id": volume_id, "size": size_gb, "from": self.market.now(), "to": None}

    def remove_network_volume(self, volume_id: str) -> None:
        with self.market.lock:
            self.volumes[volume_id]["to"] = self.market.now()

    @staticmethod
    def _buckets(lo: float, hi: float, size: str) -> list[tuple[float, float]]:
        if size not in ("hour", "day"):
            raise ValueError(f"bucketSize {size!r}: this emulator serves hour and day")
        step = 3600.0 if size == "hour" else 86400.0
        t, out = lo - lo % step, []
        while t < hi:
            out.append((t, t + step))
            t += step
        return out

    @staticmethod
    def _time(text: str | None, default: float) -> float:
        if not text:
            return default
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    @staticmethod
    def _stamp(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def billing_records(self, what: str, query: dict) -> list[dict]:
        """``/v1/billing/pods`` or ``/v1/billing/networkvolumes`` records for ``query``."""
        now = self.market.now()
        lo = self._time(query.get("startTime"), now - 30 * 86400)
        hi = self._time(query.get("endTime"), now)
        buckets = self._buckets(lo, hi, query.get("bucketSize") or "day")
        out: list[dict] = []
        if what == "networkvolumes":
            for b0, b1 in buckets:
                usd = gb = 0.0
                for v in self.volumes.values():
                    a, b = max(b0, v["from"]), min(b1, v["to"] if v["to"] is not None else now)
                    if b > a:
                        usd += v["size"] * self.NETWORK_VOLUME_USD_PER_GB_MONTH / 730.0 * (b - a) / HOURS
                        gb += v["size"]
                if usd:
                    out.append({"time": self._stamp(b0), "amount": usd, "diskSpaceBilledGb": int(gb)})
            return out
        grouping = query.get("grouping") or "gpuTypeId"
        pod = query.get("podId")
        groups: dict[tuple[str, float], dict] = {}
        for b0, b1 in buckets:
            for inst, a, b, usd, kind in self.market.charges(b0, b1):
                if pod and inst.id != pod:
                    continue
                key = inst.id if grouping == "podId" else inst.offer.get("gpuTypeId", "")
                rec = groups.setdefault((key, b0), {"time": self._stamp(b0), "amount": 0.0, "timeBilledMs": 0,
                                                     "diskSpaceBilledGb": int(inst.request.get("containerDiskInGb") or 10),
                                                     "podId" if grouping == "podId" else "gpuTypeId": key})
                rec["amount"] += usd
                if kind == "gpu":
                    rec["timeBilledMs"] += int(round((b - a) * 1000))
        return [groups[k] for k in sorted(groups, key=lambda k: (k[1], k[0]))]

    # -- request handling ----------------------------------------------------------------------
    def handle(self, req: dict) -> tuple[int, Any, str]:
        if req["method"] == "GET" and req["path"] in ("/v1/billing/pods", "/v1/billing/networkvolumes"):
            if not self.authorized(req):
                return 401, {"error": "Unauthorized"}, JSON
            injected = self.market.take_injected("billing")
            if injected is not None:
                return injected, {"error": f"emulated HTTP {injected}"}, JSON
            try:
                return 200, self.billing_records(req["path"].rsplit("/", 1)[1], req["query"]), JSON
            except ValueError as e:
                return 400, {"error": str(e)}, JSON
        if req["method"] != "POST" or req["path"] != "/graphql":
            return 404, {"errors": [{"message": "not found"}]}, JSON
        if not self.authorized(req):
            return 401, {"errors": [{"message": "Unauthorized"}]}, JSON
        text = (req["body"] or {}).get("query", "")
        try:
            doc = graphql.parse(text)
        except graphql.GraphQLError as e:
            return self._error(f"Syntax Error: {e.message}", "", "GRAPHQL_PARSE_FAILED", 400)
        op = doc.definitions[0]
        field = op.selection_set.selections[0]
        root = field.name.value
        args = {a.name.value: value_from_ast_untyped(a.value) for a in (field.arguments or ())}
        injected = self.market.take_injected(root)
        if injected == 429:
            return 429, {"errors": [{"message": "Too Many Requests: rate limit exceeded"}]}, JSON
        if injected == 500:  # JSON without data: the SDK's caller fails on ["data"][...]
            return 500, {"data": None}, JSON
        if injected is not None:  # a gateway's HTML page: the SDK fails decoding JSON
            return injected, f"<html><body><h1>{injected} Bad Gateway</h1></body></html>".encode(), HTML
        with self.market.lock:
            return self._dispatch(root, args, field, req["account"])

    def _dispatch(self, root: str, args: dict, field: Any, account: str = "acct-1") -> tuple[int, Any, str]:
        """Answer one root field for ``account`` (the key's): pods of other accounts are "not found"."""
        inp = args.get("input") or {}
        if root == "gpuTypes":
            if "id" in inp:
                g = self.gpus.get(inp["id"])
                value = [self._gpu_full(g)] if g else []
            else:
                value = [self._gpu_full(g) for g in self.gpus.values()]
        elif root == "podFindAndDeployOnDemand":
            return self._deploy(inp, field, account)
        elif root == "pod":
            inst = self.market.find(inp.get("podId", ""), account)
            value = self._pod(inst) if inst else None
        elif root == "myself":
            value = {"id": f"user-{account}", "pubKey": "", "networkVolumes": [], "clientBalance": round(self.market.balance(account), 6),
                     "currentSpendPerHr": round(self.market.spend_rate(account), 6), "pods": [self._pod(i) for i in self.market.live(account)]}
        elif root == "podStop":
            if not self.market.stop(inp.get("podId", ""), account):
                return self._error("pod not found", root)
            value = {"id": inp["podId"], "desiredStatus": "EXITED"}
        elif root == "podResume":
            inst = self.market.find(inp.get("podId", ""), account)
            if inst is None:
                return self._error("pod not found", root)
            self.market.tick(inst)
            inst.state = "running"
            value = {**self._pod(inst), "desiredStatus": "RUNNING"}
        elif root == "podTerminate":
            if not self.market.destroy(inp.get("podId", ""), account):
                return self._error("pod not found to terminate", root)
            value = None
        else:
            return self._error(f'Cannot query field "{root}" on type "Query".', root, "GRAPHQL_VALIDATION_FAILED", 400)
        return 200, {"data": {root: _project(value, field.selection_set)}}, JSON

    def _deploy(self, inp: dict, field: Any, account: str = "acct-1") -> tuple[int, Any, str]:
        root = "podFindAndDeployOnDemand"
        for required in ("name", "imageName", "gpuTypeId"):
            if not inp.get(required):
                return self._error(f"{required} is required", root)
        g = self.gpus.get(inp["gpuTypeId"])
        if g is None:
            return self._error("Invalid GPU type id", root)
        n = int(inp.get("gpuCount") or 1)
        cloud = str(inp.get("cloudType") or "ALL")
        prices = {"SECURE": g["securePrice"] if g["secureCloud"] else None, "COMMUNITY": g["communityPrice"] if g["communityCloud"] else None}
        per_gpu = min(p for p in prices.values() if p) if cloud == "ALL" and any(prices.values()) else prices.get(cloud)
        if self.faults.vanish_on_create:
            g["stock"] = 0
        if not per_gpu or n > g["maxGpuCount"] or g["stock"] < 1:
            return self._error(NO_CAPACITY, root, "NO_CAPACITY")
        price = round(per_gpu * n, 6)
        if self.market.balance(account) < price:
            return self._error("Insufficient balance: your account balance is too low to deploy this pod.", root, "INSUFFICIENT_FUNDS")
        g["stock"] -= 1
        disk = int(inp.get("containerDiskInGb") or 10) + int(inp.get("volumeInGb") or 0)
        inst = self.market.new_instance(inp["name"], {"gpuTypeId": g["id"], "cloud": cloud}, price, disk * STORAGE_USD_PER_GB_HOUR, request=inp,
                                        id_prefix="pod", account=account)
        if self.faults.create_fails_but_creates > 0:
            self.faults.create_fails_but_creates -= 1
            return 502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", HTML
        value = {"id": inst.id, "imageName": inp["imageName"], "env": self._pod(inst)["env"], "machineId": f"m{inst.id}",
                 "machine": {"podHostId": f"{inst.id}-64410a2b"}}
        return 200, {"data": {root: _project(value, field.selection_set)}}, JSON
