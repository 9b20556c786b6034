"""RunPod emulator: REST API v2 (``/v2/...``), plus the one GraphQL query v2 has no route for.

Routes (RunPod's published OpenAPI spec, tests/data/specs/runpod-rest-v2.openapi.json, which
validates every request and reply here in the test suite: tests/emulators/contract.py):

- ``GET /v2/catalog/gpus`` (``include=AVAILABILITY``, ``product=POD``, ``count``, ``cloud``): GPU
  types with per-cloud prices and ``maxCount``, and the stock as ``availability`` (NONE / LOW /
  MEDIUM / HIGH from ``gpus[id]["stock"]``, the pods it can still place) and ``dataCenters``.
- ``POST /v2/pods`` (201 Pod; 400 no capacity, 402 funds), ``GET /v2/pods`` (``{"pods": [...]}``),
  ``GET /v2/pods/{id}``, ``DELETE /v2/pods/{id}`` (204), ``POST /v2/pods/{id}/action`` (start,
  stop, restart, terminate; 409 when not valid for the status; terminate answers 204).
- ``GET|POST /v2/network-volumes``, ``GET|DELETE /v2/network-volumes/{id}``.
- ``GET /v2/billing/pods`` and ``GET /v2/billing/network-volumes``: the billing clock cut into
  ``bucketSize`` buckets, one record per pod (volume) per bucket, ``{"records", "metadata"}``.
- ``POST /graphql``: ``myself { clientBalance currentSpendPerHr ... }`` only (the account
  balance, which v2 lacks; the document runpodctl reads it with). ``graphql_retired``: it
  answers as it may once RunPod retires GraphQL (early 2027): a GraphQL error (``"errors"``), a
  web page (``"html"``) or a plain 404 (``"404"``). Every document is judged against the
  documents RunPod's own clients send (tests/emulators/graphql_contract.py; no schema is published).

Errors are RFC 9457 problems ``{"title", "status", "detail"}`` (``application/problem+json``).

The pod-scoped key (``RUNPOD_API_KEY`` inside a pod, ``pod_key(id)`` here): what it may do is not
documented, so it is a switch: ``pod_key_may`` holds any of ``"terminate"`` (``DELETE
/v2/pods/{own id}`` and the terminate action) and ``"stop"`` (the stop action); anything else it
asks is refused with ``pod_key_refusal`` (403 by default, or 401). It never reaches another pod.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from gpuops.emulators.base import HOURS, HTML, JSON, EmuInstance, Emulator, Market, contract

PROBLEM = "application/problem+json"
NO_CAPACITY = (
    "There are no longer any instances available with the requested specifications. Please refresh and try again."
)
STORAGE_USD_PER_GB_HOUR = 0.20 / 730  # stopped pod: its disk, USD/GB/month / hours per month
DATA_CENTERS = {"EU-RO-1": "EU Romania 1", "US-KS-2": "US Kansas 2"}
STATUSES = ("PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR", "TERMINATED")
ACTIONS = {
    "RUNNING": ["stop", "restart", "terminate"],
    "EXITED": ["start", "terminate"],
    "ERROR": ["start", "terminate"],
    "PROVISIONING": ["stop", "terminate"],
    "STARTING": ["stop", "terminate"],
}

# id, name, memory GB, secure price, community price, maxCount (prices USD/h per GPU; 0: not in that cloud)
DEFAULT_GPUS = [
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34, 8),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, 1.89, 1.49, 8),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 1.64, 1.19, 8),
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.99, 2.69, 8),
    ("NVIDIA GeForce RTX 3070", "RTX 3070", 8, 0.0, 0.13, 4),  # a type our catalog may not have
]


def _stamp(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(text: str | None, default: float) -> float:
    if not text:
        return default
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _level(stock: int) -> str:
    return "NONE" if stock <= 0 else "LOW" if stock <= 2 else "MEDIUM" if stock <= 5 else "HIGH"


# GraphQL's lexical tokens (spec.graphql.org/October2021, 2.1): ignored ones, block and plain strings,
# names, numbers, punctuators.
_GQL_TOKEN = re.compile(
    r'(?P<skip>[\s,\ufeff]+|#[^\n\r]*)|(?P<string>"""(?:\\"""|[^"]|"(?!""))*"""|"(?:\\.|[^"\\\n\r])*")'
    r"|(?P<name>[_A-Za-z][_0-9A-Za-z]*)|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<punct>\.\.\.|[!$&():=@\[\]{|}])"
)
_CLOSE = {"{": "}", "(": ")", "[": "]"}


def read_document(text: str) -> tuple[str, list[str]]:
    """The first operation of a GraphQL document: (its first root field, the names that field selects).

    What the server needs of a document to answer ``myself``; the suite judges every document with
    the reference parser besides (tests/emulators/graphql_contract.py). Raises ValueError with the
    parser's words for a document that is not one (an unterminated string, an unclosed brace)."""
    tokens: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        m = _GQL_TOKEN.match(text, at)
        if m is None:
            raise ValueError("Unterminated string." if text[at] == '"' else f"Unexpected character: {text[at]!r}.")
        if m.lastgroup != "skip":
            tokens.append((m.lastgroup or "", m.group()))
        at = m.end()
    opened: list[str] = []  # the closers still owed, innermost last
    root, selected = "", []
    for i, (kind, value) in enumerate(tokens):
        if value in _CLOSE:
            opened.append(_CLOSE[value])
        elif value in _CLOSE.values() and (not opened or opened.pop() != value):
            raise ValueError(f'Unexpected "{value}".')
        if value == "}" and not opened and root:
            break  # the end of the first operation
        if kind in ("string", "number") and opened and all(c == "}" for c in opened):
            raise ValueError(
                f"Expected Name, found {'String' if kind == 'string' else 'Number'}."
            )  # a value outside arguments
        before = tokens[i - 1][1] if i else ""
        after = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        field = (  # a field's name: in selection sets only (no argument, list or variable around it)
            kind == "name"
            and all(c == "}" for c in opened)
            and after != ":"  # an alias
            and before not in ("$", "@", "...")  # a variable, a directive, a fragment spread
            and not (before == "on" and i > 1 and tokens[i - 2][1] == "...")  # an inline fragment's type
        )
        if field and len(opened) == 1 and not root:
            root = value
        elif field and len(opened) == 2 and root:
            selected.append(value)
    if opened or not root:
        raise ValueError("Expected Name, found <EOF>." if opened or tokens else "Unexpected <EOF>.")
    return root, selected


def pod_key(pod_id: str) -> str:
    """The pod-scoped ``RUNPOD_API_KEY`` RunPod puts in pod ``pod_id``'s environment (here)."""
    return f"rp_pod_{pod_id}_scoped"


class RunPodEmulator(Emulator):
    """Stateful RunPod v2.

    ``gpus``: id -> catalog fields plus ``stock`` (pods it can still place);
    ``network_volumes``: id -> NetworkVolume; ``volumes``: billing of network volumes (id -> size,
    from, to)."""

    OPS = ("gpus", "create", "pods", "pod", "terminate", "action", "networkvolumes", "billing", "myself")
    NETWORK_VOLUME_USD_PER_GB_MONTH = 0.07  # docs.runpod.io/get-started/billing-information (under 1 TB)
    # "All compute and storage charges are billed per second" (https://docs.runpod.io/accounts-billing/billing);
    # a second begun is billed whole, as its Serverless page states ("rounded up to the nearest
    # second", https://docs.runpod.io/serverless/pricing); no minimum charge is documented.
    BILLING_INCREMENT_S = 1.0

    def __init__(self, api_key: str = "rp_TESTKEY", balance_usd: float = 100.0):
        super().__init__(Market(api_key, balance_usd, self.BILLING_INCREMENT_S))
        self.contract = contract("runpod")
        self.volumes: dict[str, dict] = {}
        self.network_volumes: dict[str, dict] = {}
        self._vol_n = 0
        self.gpus: dict[str, dict] = {}
        for gid, name, mem, secure, community, maxn in DEFAULT_GPUS:
            self.gpus[gid] = {
                "id": gid,
                "name": name,
                "memory": mem,
                "secure": secure > 0,
                "community": community > 0,
                "price": {"secure": secure, "community": community},
                "maxCount": {"secure": maxn if secure else 0, "community": maxn},
                "stock": 10,
            }
        self.pod_key_may: set[str] = {"terminate", "stop"}
        self.pod_key_refusal = 403
        # How /graphql answers once RunPod retires it: None (it serves the balance), "errors" (200
        # with a GraphQL error), "html" (200 with a web page), "404" (a plain not-found page).
        self.graphql_retired: str | None = None
        # Running pods map 22/tcp on a private address only (ssh.direct null): never reachable.
        self.ssh_port_private = False
        # The next N pod actions answer 409 "not valid for its status" and do nothing (a status race).
        self.action_conflict = 0
        self.billing_tail_cut = False  # records for the current (in-progress) bucket are left out
        # USD added to every pod record's totalAmount and to no part of it (a fee outside GPU, CPU, disk).
        self.billing_fee_usd = 0.0

    # -- helpers -----------------------------------------------------------------------------
    @staticmethod
    def problem(status: int, detail: str, title: str | None = None) -> tuple[int, Any, str]:
        """An RFC 9457 problem reply (status, ``{title, status, detail}``, content type)."""
        titles = {
            400: "Bad Request",
            401: "Unauthorized",
            402: "Payment Required",
            403: "Forbidden",
            404: "Not Found",
            409: "Conflict",
            422: "Unprocessable Entity",
            429: "Too Many Requests",
            500: "Internal Server Error",
        }
        return status, {"title": title or titles.get(status, "Error"), "status": status, "detail": detail}, PROBLEM

    def pod_key(self, pod_id: str) -> str:
        """The pod-scoped ``RUNPOD_API_KEY`` RunPod puts in pod ``pod_id``'s environment."""
        return pod_key(pod_id)

    def _pod(self, inst: EmuInstance) -> dict:
        req = inst.request
        if inst.stuck_status is not None:
            status, runtime = inst.stuck_status, None
            if status not in STATUSES:
                self.market.mark_fault()  # an undocumented status: deliberately outside the spec
        elif inst.state == "stopped":
            status, runtime = "EXITED", None
        elif inst.state == "running":
            ports = [{"private": 8888, "public": None, "type": "http", "ip": None}]
            if self.ssh_port_private:  # 22/tcp mapped on the host's private network only
                ports.insert(0, {"private": 22, "public": 22022, "type": "tcp", "ip": "10.65.0.7"})
            elif not inst.no_ssh_port:
                ports.insert(0, {"private": 22, "public": inst.ssh[1], "type": "tcp", "ip": inst.ssh[0]})
            status, runtime = (
                "RUNNING",
                {"uptime": int(max(0.0, self.market.now() - inst.created_t - inst.boot_s)), "ports": ports},
            )
        else:
            status, runtime = (
                ("PROVISIONING" if self.market.now() - inst.created_t < inst.boot_s / 2 else "STARTING"),
                None,
            )
        direct = None
        if status == "RUNNING" and not inst.no_ssh_port and not self.ssh_port_private:
            direct = {
                "host": inst.ssh[0],
                "port": inst.ssh[1],
                "username": "root",
                "command": f"ssh root@{inst.ssh[0]} -p {inst.ssh[1]}",
            }
        gpu = req.get("gpu") or {}
        mounts: dict = {}
        if (req.get("mounts") or {}).get("network"):
            mounts["network"] = req["mounts"]["network"]
        running = inst.state in ("provisioning", "running") and inst.stuck_status is None
        return {
            "id": inst.id,
            "name": inst.label,
            "status": status,
            "actions": ACTIONS.get(status, ["terminate"]),
            "image": req.get("image", ""),
            "args": req.get("args", ""),
            "disk": req.get("disk", 10),
            "mounts": mounts,
            "ports": req.get("ports", []),
            "env": req.get("env", {}),
            "registry": None,
            "cloud": inst.offer.get("cloud", "SECURE"),
            "dataCenterId": inst.offer.get("dc"),
            "cudaVersion": "12.8",
            "template": None,
            "gpu": {
                "id": inst.delivered.get("gpu_name", gpu.get("id", "")),
                "count": int(inst.delivered.get("num_gpus", gpu.get("count", 1))),
            },
            "ssh": {
                "proxy": {
                    "host": "ssh.runpod.io",
                    "port": 22,
                    "username": f"{inst.id}-64411eb2",
                    "command": f"ssh {inst.id}-64411eb2@ssh.runpod.io",
                },
                "direct": direct,
            },
            "cost": round(inst.usd_per_hour, 6) if running else 0.0,
            "locked": False,
            "globalNetworking": {"enabled": False},
            "runtime": runtime,
            "createdAt": _stamp(inst.created_t),
            "startedAt": _stamp(inst.created_t + inst.boot_s) if status == "RUNNING" else None,
        }

    # -- billing -------------------------------------------------------------------------------
    def add_network_volume(self, volume_id: str, size_gb: int) -> None:
        """A network volume billed per GB-month from now until removed."""
        with self.market.lock:
            self.volumes[volume_id] = {"id": volume_id, "size": size_gb, "from": self.market.now(), "to": None}

    def remove_network_volume(self, volume_id: str) -> None:
        """The network volume is deleted: its billing ends now."""
        with self.market.lock:
            self.volumes[volume_id]["to"] = self.market.now()

    def add_volume(self, name: str, size: int, dc: str, type_: str = "STANDARD") -> dict:
        """A network volume made in the console (listed, mountable, billed)."""
        with self.market.lock:
            self._vol_n += 1
            vid = f"vol{self._vol_n:04d}abcd"
            self.network_volumes[vid] = {"id": vid, "name": name, "size": int(size), "dataCenter": dc, "type": type_}
            self.add_network_volume(vid, int(size))
            return self.network_volumes[vid]

    @staticmethod
    def _buckets(lo: float, hi: float, size: str) -> list[tuple[float, float]]:
        step = {"hour": 3600.0, "day": 86400.0}.get(size)
        if step is None:
            raise ValueError(f"bucketSize {size!r}: this emulator serves hour and day")
        t, out = lo - lo % step, []
        while t < hi:
            out.append((t, t + step))
            t += step
        return out

    def billing_records(self, what: str, query: dict, account: str = "acct-1") -> dict:
        """``/v2/billing/pods`` or ``/v2/billing/network-volumes`` for ``query``.

        The reply is a ListPodBillingResponse or a ListNetworkVolumeBillingResponse."""
        now = self.market.now()
        lo = _time(query.get("startTime"), now - 30 * 86400)
        hi = _time(query.get("endTime"), now)
        size = query.get("bucketSize") or "day"
        buckets = self._buckets(lo, hi, size)
        if self.billing_tail_cut:
            buckets = [b for b in buckets if b[1] <= now]
        q = {
            "startTime": _stamp(buckets[0][0] if buckets else lo),
            "endTime": _stamp(buckets[-1][1] if buckets else hi),
            "bucketSize": size,
        }
        out: list[dict] = []
        if what == "network-volumes":
            for b0, b1 in buckets:
                for v in self.volumes.values():
                    a, b = max(b0, v["from"]), min(b1, v["to"] if v["to"] is not None else now)
                    if b > a:
                        usd = v["size"] * self.NETWORK_VOLUME_USD_PER_GB_MONTH / 730.0 * (b - a) / HOURS
                        out.append(
                            {
                                "startTime": _stamp(b0),
                                "endTime": _stamp(b1),
                                "networkVolumeId": v["id"],
                                "totalAmount": usd,
                                "standardAmount": usd,
                                "highPerformanceAmount": 0.0,
                            }
                        )
            tot = sum(r["totalAmount"] for r in out)
            return {
                "records": out,
                "metadata": {
                    "query": q,
                    "recordCount": len(out),
                    "uniqueNetworkVolumeCount": len({r["networkVolumeId"] for r in out}),
                    "totals": {"totalAmount": tot, "standardAmount": tot, "highPerformanceAmount": 0.0},
                },
            }
        pod = query.get("podId")
        groups: dict[tuple[str, float], dict] = {}
        for b0, b1 in buckets:
            for inst, _a, _b, usd, kind in self.market.charges(b0, b1, account):
                if pod and inst.id != pod:
                    continue
                rec = groups.setdefault(
                    (inst.id, b0),
                    {
                        "startTime": _stamp(b0),
                        "endTime": _stamp(b1),
                        "podId": inst.id,
                        "totalAmount": 0.0,
                        "gpuAmount": 0.0,
                        "cpuAmount": 0.0,
                        "diskAmount": 0.0,
                    },
                )
                rec["totalAmount"] += usd
                rec["gpuAmount" if kind == "gpu" else "diskAmount"] += usd
        recs = [groups[k] for k in sorted(groups, key=lambda k: (k[1], k[0]))]
        for r in recs:
            r["totalAmount"] += self.billing_fee_usd
        totals = {k: sum(r[k] for r in recs) for k in ("totalAmount", "gpuAmount", "cpuAmount", "diskAmount")}
        return {
            "records": recs,
            "metadata": {
                "query": {**q, "podId": pod},
                "recordCount": len(recs),
                "uniquePodCount": len({r["podId"] for r in recs}),
                "totals": totals,
            },
        }

    # -- request handling ----------------------------------------------------------------------
    def _route(self, method: str, path: str) -> tuple[str, str]:
        """(op, id) for a request; op "?" when no route."""
        if path == "/v2/catalog/gpus" and method == "GET":
            return "gpus", ""
        if path == "/v2/pods":
            return {"GET": "pods", "POST": "create"}.get(method, "?"), ""
        m = re.fullmatch(r"/v2/pods/([^/]+)(/action)?", path)
        if m:
            if m.group(2):
                return ("action" if method == "POST" else "?"), m.group(1)
            return {"GET": "pod", "DELETE": "terminate"}.get(method, "?"), m.group(1)
        m = re.fullmatch(r"/v2/network-volumes(?:/([^/]+))?", path)
        if m:
            return ("networkvolumes" if method in ("GET", "POST", "DELETE") else "?"), m.group(1) or ""
        if path in ("/v2/billing/pods", "/v2/billing/network-volumes") and method == "GET":
            return "billing", path.rsplit("/", 1)[1]
        if path == "/graphql" and method == "POST":
            return "graphql", ""
        return "?", ""

    def _pod_key_account(self, req: dict, op: str, pid: str) -> tuple[str | None, tuple[int, Any, str] | None]:
        """For a pod-scoped key: (the pod's account, None) when it may do this, else (None, refusal)."""
        m = re.fullmatch(r"Bearer rp_pod_(.+)_scoped", req["auth"])
        if not m:
            return None, None
        own = m.group(1)
        inst = self.market.instances.get(own)
        if inst is None:
            return None, self.problem(401, "invalid API key")
        action = (req["body"] or {}).get("action") if isinstance(req["body"], dict) else None
        wanted = (
            "terminate"
            if op == "terminate" or (op == "action" and action == "terminate")
            else "stop"
            if op == "action" and action == "stop"
            else None
        )
        if pid == own and (op == "pod" or (wanted is not None and wanted in self.pod_key_may)):
            return inst.account, None
        s = self.pod_key_refusal
        return None, self.problem(s, "this API key is limited to its pod and may not perform this action")

    def handle(self, req: dict) -> tuple[int, Any, str]:
        """The reply to ``req``: (HTTP status, JSON payload, content type)."""
        op, ident = self._route(req["method"], req["path"])
        if op == "?":
            return self.problem(404, f"no route {req['method']} {req['path']}")
        account = req["account"]
        if account is None:
            account, refusal = self._pod_key_account(req, op, ident)
            if refusal is not None:
                return refusal
            if account is None:
                if op == "graphql":
                    return 401, {"errors": [{"message": "Unauthorized"}]}, JSON
                return self.problem(401, "missing or invalid API key")
        if op == "graphql":
            return self._graphql(req, account)
        injected = self.market.take_injected(op)
        if injected == 429:
            return self.problem(429, "rate limit exceeded; retry after the Retry-After interval")
        if injected in (502, 503, 504):  # a gateway's HTML page
            return injected, f"<html><body><h1>{injected} Bad Gateway</h1></body></html>".encode(), HTML
        if injected is not None:
            return self.problem(injected, f"emulated HTTP {injected}")
        body = req["body"] if isinstance(req["body"], dict) else {}
        with self.market.lock:
            if op == "gpus":
                return self._catalog(req["query"])
            if op == "create":
                return self._deploy(body, account)
            if op == "pods":
                return 200, {"pods": [self._pod(i) for i in self.market.live(account)]}, JSON
            if op == "billing":
                try:
                    return 200, self.billing_records(ident, req["query"], account), JSON
                except ValueError as e:
                    return self.problem(400, str(e))
            if op == "networkvolumes":
                return self._network_volumes(req["method"], ident, body)
            inst = self.market.find(ident, account)
            if inst is None:
                return self.problem(404, "The requested Pod does not exist.")
            if op == "pod":
                return 200, self._pod(inst), JSON
            if op == "terminate":
                self.market.api_destroy(inst.id)
                return 204, b"", JSON
            return self._action(inst, body.get("action"))

    def _action(self, inst: EmuInstance, action: Any) -> tuple[int, Any, str]:
        status = self._pod(inst)["status"]
        if self.action_conflict > 0:
            self.action_conflict -= 1
            return self.problem(409, f"action {action!r} is not valid for a pod in status {status}")
        if action not in ACTIONS.get(status, []):
            return self.problem(409, f"action {action!r} is not valid for a pod in status {status}")
        self.market.tick(inst)
        if action == "terminate":
            self.market.api_destroy(inst.id)
            return 204, b"", JSON
        if action == "stop":
            inst.state = "stopped"
        elif action == "start":
            inst.state, inst.preempted = "running", False
        return 200, self._pod(inst), JSON

    def _catalog(self, q: dict) -> tuple[int, Any, str]:
        want = q.get("include") == "AVAILABILITY"
        if want and "POD" not in (q.get("product") or "").split(","):
            return self.problem(400, "include=AVAILABILITY requires product")
        count = int(q.get("count") or 1)
        clouds = [q["cloud"].lower()] if q.get("cloud") else ["secure", "community"]
        out = []
        for g in self.gpus.values():
            row = {
                "id": g["id"],
                "name": g["name"],
                "pool": None,
                "manufacturer": "NVIDIA",
                "memory": g["memory"],
                "secure": g["secure"],
                "community": g["community"],
                "price": dict(g["price"]),
                "maxCount": dict(g["maxCount"]),
            }
            if want:
                fits = any(g[c] and g["maxCount"][c] >= count for c in clouds)
                level = _level(g["stock"]) if fits else "NONE"
                row["availability"] = level
                if level != "NONE":
                    row["dataCenters"] = [
                        {"id": dc, "name": name, "availability": level} for dc, name in DATA_CENTERS.items()
                    ]
            out.append(row)
        return 200, {"gpus": out}, JSON

    def _deploy(self, inp: dict, account: str) -> tuple[int, Any, str]:
        gpu = inp.get("gpu") or {}
        if not inp.get("name") or not inp.get("image") or not gpu.get("id"):
            return self.problem(422, "the body does not match the contract", "Unprocessable Entity")
        g = self.gpus.get(gpu["id"])
        if g is None:
            return self.problem(400, f"GPU type {gpu['id']!r} is not available")
        n = int(gpu.get("count") or 1)
        cloud = str(inp.get("cloud") or "SECURE")
        c = cloud.lower()
        dcs = inp.get("dataCenterIds") or []
        for m in (inp.get("mounts") or {}).get("network") or []:
            vol = self.network_volumes.get(m.get("volumeId"))
            if vol is None:
                return self.problem(400, "network volume not found")
            if cloud != "SECURE":
                return self.problem(400, "network volumes are available on Secure Cloud only")
            if vol["dataCenter"] not in dcs:
                return self.problem(400, "the pod must be in the network volume's data center")
        if self.faults.vanish_on_create:
            g["stock"] = 0
        if not g[c] or n > g["maxCount"][c] or g["stock"] < 1:
            return self.problem(400, NO_CAPACITY)
        price = round(g["price"][c] * n, 6)
        if self.market.balance(account) < price:
            return self.problem(402, "Insufficient balance: your account balance is too low to deploy this pod.")
        g["stock"] -= 1
        disk = int(inp.get("disk") or 10)
        dc = dcs[0] if dcs else next(iter(DATA_CENTERS))
        inst = self.market.new_instance(
            inp["name"],
            {"gpuTypeId": g["id"], "cloud": cloud, "dc": dc},
            price,
            disk * STORAGE_USD_PER_GB_HOUR,
            request=inp,
            id_prefix="pod",
            account=account,
        )
        if self.faults.create_fails_but_creates > 0:
            self.faults.create_fails_but_creates -= 1
            self.market.mark_fault()
            return 502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", HTML
        return 201, self._pod(inst), JSON

    def _network_volumes(self, method: str, vid: str, b: dict) -> tuple[int, Any, str]:
        if not vid and method == "GET":
            return 200, {"networkVolumes": list(self.network_volumes.values())}, JSON
        if not vid and method == "POST":
            if b.get("dataCenter") not in DATA_CENTERS:
                return self.problem(400, f"data center {b.get('dataCenter')!r} does not offer network volumes")
            if not isinstance(b.get("size"), int) or not 10 <= b["size"] <= 4096 or not b.get("name"):
                return self.problem(422, "name and size (10-4096 GB) are required")
            return 201, self.add_volume(b["name"], b["size"], b["dataCenter"], b.get("type") or "STANDARD"), JSON
        if vid not in self.network_volumes:
            return self.problem(404, "network volume not found")
        if method == "GET":
            return 200, self.network_volumes[vid], JSON
        if any(
            m.get("volumeId") == vid
            for i in self.market.live()
            for m in ((i.request.get("mounts") or {}).get("network") or [])
        ):
            return self.problem(400, "network volume is attached to a pod")
        del self.network_volumes[vid]
        self.remove_network_volume(vid)
        return 204, b"", JSON

    # -- GraphQL: the balance ------------------------------------------------------------------
    def _graphql(self, req: dict, account: str) -> tuple[int, Any, str]:
        text = (req["body"] or {}).get("query", "") if isinstance(req["body"], dict) else ""
        if self.contract is not None:  # no schema is published: RunPod's own clients' documents judge it
            self.contract.check_document(text)
        try:
            root, selected = read_document(text)
        except ValueError as e:
            return 400, {"data": None, "errors": [{"message": f"Syntax Error: {e}"}]}, JSON
        injected = self.market.take_injected(root)
        if injected == 429:
            return 429, {"errors": [{"message": "Too Many Requests: rate limit exceeded"}]}, JSON
        if injected == 500:  # JSON without data: the SDK's caller fails on ["data"][...]
            return 500, {"data": None}, JSON
        if injected is not None:
            return injected, f"<html><body><h1>{injected} Bad Gateway</h1></body></html>".encode(), HTML
        if self.graphql_retired == "html":
            return (
                200,
                b"<!doctype html><html><body><h1>RunPod API v2</h1><p>GraphQL has moved.</p></body></html>",
                HTML,
            )
        if self.graphql_retired == "404":
            return 404, b"404 page not found", HTML
        if self.graphql_retired == "errors":
            return (
                200,
                {
                    "data": None,
                    "errors": [{"message": "The GraphQL API has been retired; use REST API v2", "path": [root]}],
                },
                JSON,
            )
        if root != "myself":
            return 400, {"data": None, "errors": [{"message": f'Cannot query field "{root}" on type "Query".'}]}, JSON
        with self.market.lock:
            value = {
                "id": f"user-{account}",
                "pubKey": "",
                "clientBalance": round(self.market.balance(account), 6),
                "currentSpendPerHr": round(self.market.spend_rate(account), 6),
            }
        return (
            200,
            {"data": {"myself": {name: value.get(name) for name in selected}}},
            JSON,
        )
