"""Vast.ai emulator: the REST routes vastai 1.9.1 uses.

From vastai/api/offers.py, instances.py and billing.py; https://docs.vast.ai/api-reference/overview-and-quickstart.

Routes: ``POST /api/v0/bundles/`` (search, filters ``{op: value}``, ``order``, ``type``, ``limit``,
``allocated_storage``), ``PUT /api/v0/asks/{id}/`` (create), ``GET /api/v1/instances/`` (paged
list; rows carry numeric ``start_date`` and list-of-pairs ``extra_env`` as the SDK requires),
``GET|PUT|DELETE /api/v0/instances/{id}/``, ``PUT /api/v0/instances/bid_price/{id}/``,
``POST /api/v0/instances/{id}/ssh/``, ``GET /api/v0/users/current``, and the billing routes
``GET /api/v0/charges/`` and ``GET /api/v1/invoices/`` (``_charges``, ``_invoices``).

Every request and reply is held to Vast's published spec (tests/data/specs/vast.openapi.yaml,
tests/emulators/contract.py). Charges (spec ``get /api/v0/charges``): one entry per contract
(``{"start","end","type":"instance","source":"instance-<id>","description":"Instance <id> Charges -
N days","amount","metadata":{"label"},"items":[{"type":"gpu"|"disk","start","end","description":"N.NNN
hours at $R.RRR/hour","amount"}]}``, one item per type over the contract's period, integer unix seconds),
``select_filters={"day":{"gte","lte"}}`` in unix seconds, paged by ``after_token``; whether an
entry is cut to the asked window is undocumented (``charges_clipped``).

Undocumented answers, as switches: ``outbid_intended`` (an outbid instance's
``intended_status``, "running" or "stopped"), ``destroy_unsuccessful`` (a destroy answered 200
``{"success": false}``), ``low_bid_msg`` (a refused bid in other words), ``user_without`` (``/users/current`` without ``credit``
or ``balance``), ``low_bid_leaves_instance`` (a bid under ``min_bid`` leaves a
stopped instance, or nothing: either way a 400 ``invalid_price``), ``charges_clipped``,
``VastVolumeEmulator.volume_label_in_list`` (volumes/volumes.py).

Money: ``dph_total`` = ``dph_base`` + storage (``storage_cost`` USD/GB/month x allocated GB / 730 h).
An interruptible instance is charged its bid plus storage. A stopped instance bills storage only.
"""

from __future__ import annotations

import base64
import json
import math
import operator
import re
from typing import Any

from gpuops.emulators.base import JSON, EmuInstance, Emulator, Market, contract

HOURS_PER_MONTH = 730.0
# The statuses that come from Vast's gateway in front of its API, the ones vastai's own client
# retries as "gateway/upstream errors that usually clear" (vastai 1.9.1 vastai/api/client.py
# _RETRYABLE_STATUS, beside 429): answered as a gateway does, with an HTML page.
GATEWAY_STATUSES = (502, 503, 504)
GATEWAY_PAGE = (
    b"<html><head><title>%d</title></head><body><center><h1>%d</h1></center><hr><center>nginx</center></body></html>"
)
_RESERVED = {"order", "type", "limit", "allocated_storage", "disable_bundling"}
# Instance fields the spec allows to be null (components.schemas.Instance, the v1 list's rows).
_NULLABLE = {
    "actual_status",
    "label",
    "status_msg",
    "uptime_mins",
    "gpu_util",
    "gpu_temp",
    "template_id",
    "template_hash_id",
    "template_name",
    "mem_limit",
    "mem_usage",
    "vmem_usage",
    "dlperf",
    "score",
    "os_version",
    "credit_balance",
}

# id, gpu_name, num_gpus, gpu_ram (MiB per GPU), dph_base (USD/h), min_bid (USD/h), reliability2, geolocation
DEFAULT_OFFERS = [
    (1001, "RTX 4090", 1, 24564, 0.30, 0.18, 0.995, "Sweden, SE"),
    (1002, "RTX 4090", 1, 24564, 0.28, 0.15, 0.970, "Texas, US"),
    (1003, "RTX 4090", 2, 24564, 0.62, 0.36, 0.990, "Germany, DE"),
    (2001, "A100 SXM4", 1, 81920, 1.10, 0.70, 0.992, "Quebec, CA"),
    (2002, "A100 SXM4", 1, 40960, 0.75, 0.45, 0.985, "Oregon, US"),
    (3001, "H100 SXM", 1, 81559, 2.10, 1.40, 0.999, "Finland, FI"),
    (4001, "RTX 3070", 1, 8192, 0.06, 0.03, 0.950, "Spain, ES"),  # a card our catalog may not have
]


class _BadQuery(ValueError):
    pass


def _num(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


_OPS = {
    "eq": operator.eq,
    "neq": operator.ne,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
    "in": lambda v, w: v in w,
    "notin": lambda v, w: v not in w,
    "nin": lambda v, w: v not in w,
}


def _match(value: Any, cond: dict) -> bool:
    for op, want in cond.items():
        v, w = _num(value), _num(want) if not isinstance(want, list) else [_num(x) for x in want]
        if v is None and op not in ("eq", "neq"):
            return False
        ok = _OPS.get(op)
        if ok is None or not ok(v, w):
            return False
    return True


def _hours_at(seconds: float, usd: float) -> str:
    """A charge item's description as Vast writes it (spec ``get /api/v0/charges``).

    As in "96.000 hours at $0.389/hour": the hours billed, to 3 places, at the item's rate (USD/h, to 3 places)."""
    hours = seconds / 3600.0
    return f"{hours:.3f} hours at ${usd / hours if hours else 0.0:.3f}/hour"


class VastEmulator(Emulator):
    """Stateful Vast.ai. ``offers``: ask id -> offer row (``rented`` offers are not listed)."""

    OPS = ("search", "create", "list", "show", "update", "bid", "destroy", "user", "ssh", "charges", "invoices")

    # "charged the base active rental cost for every second your instance is in the active/connected
    # state ... the storage cost ... for every second your instance exists" (https://docs.vast.ai/billing-help):
    # a second begun is billed whole; no minimum charge is documented.
    BILLING_INCREMENT_S = 1.0

    def __init__(self, api_key: str = "vast_TESTKEY", balance_usd: float = 100.0):
        super().__init__(Market(api_key, balance_usd, self.BILLING_INCREMENT_S))
        self.contract = contract("vast")
        # Undocumented answers, both ways (each a switch the tests flip):
        self.low_bid_leaves_instance = True  # a bid under min_bid leaves a stopped instance (True) or nothing
        # (account, ask id) -> the search types it was served as ("bid", "on-demand"): a create of an
        # ask served only as "bid" is a spot create, which must carry its price (contract.py)
        self.served_as: dict[tuple[str | None, int], set[str]] = {}
        self.charges_clipped = False  # a charges entry is cut to the asked window (True) or is the whole contract
        self.min_bid_rises_to: float | None = None  # every create first sees min_bid at least this (USD/h)
        # /api/v0/users/current leaves these fields out: "credit" (undocumented, what Vast's console
        # shows) or "balance" (the spec's field); both carry the account's credit when sent.
        self.user_without: set[str] = set()
        # A refused bid's words (the code stays the spec's invalid_price); None: the default sentence.
        self.low_bid_msg: str | None = None
        # The next N destroys answer 200 {"success": false} and leave the instance as it was.
        self.destroy_unsuccessful = 0
        # What an outbid instance reports as intended_status: "running" (it runs again when the bid
        # wins) or "stopped" (cur_state == intended_status == next_state == "stopped", dstack's test).
        self.outbid_intended = "running"
        self.offers: dict[int, dict] = {}
        for oid, name, n, ram, base, min_bid, rel, geo in DEFAULT_OFFERS:
            self.add_offer(oid, name, n, ram, base, min_bid, rel, geo)

    def add_offer(
        self,
        oid: int,
        gpu_name: str,
        num_gpus: int,
        gpu_ram: int,
        dph_base: float,
        min_bid: float,
        reliability: float = 0.99,
        geolocation: str = "",
        storage_cost: float = 0.15,
    ) -> dict:
        """A rentable offer ``oid``; returns its row.

        ``gpu_ram``: MiB per GPU; ``dph_base`` and ``min_bid``: USD/h; ``storage_cost``: USD/GB/month."""
        row = {
            "id": oid,
            "ask_contract_id": oid,
            "machine_id": oid * 10,
            "host_id": oid * 100,
            "gpu_name": gpu_name,
            "num_gpus": num_gpus,
            "gpu_ram": gpu_ram,
            "gpu_total_ram": gpu_ram * num_gpus,
            "dph_base": dph_base,
            "min_bid": min_bid,
            "storage_cost": storage_cost,
            "reliability2": reliability,
            "reliability": reliability,
            "geolocation": geolocation,
            "inet_down": 850.0,
            "inet_up": 600.0,
            "disk_space": 250.0,
            "cpu_ram": 64000,
            "cpu_cores_effective": 16.0,
            "verified": True,
            "verification": "verified",
            "external": False,
            "rentable": True,
            "rented": False,
            "hosting_type": 0,
            "cuda_max_good": 12.4,
            "direct_port_count": 20,
            "public_ipaddr": "203.0.113.20",
            "score": 100.0 * reliability,
        }
        self.offers[oid] = row
        return row

    def take_offer(self, oid: int) -> None:
        """Someone else rents the offer (it vanishes from search; a create for it fails)."""
        with self.market.lock:
            self.offers[oid]["rented"] = True

    # -- rows --------------------------------------------------------------------------------
    @staticmethod
    def _ok(payload: Any, status: int = 200) -> tuple[int, Any, str]:
        return status, payload, JSON

    @staticmethod
    def _fail(status: int, error: str, msg: str, **extra: Any) -> tuple[int, Any, str]:
        return status, {"success": False, "error": error, "msg": msg, **extra}, JSON

    def _storage_per_hour(self, o: dict, disk_gb: float) -> float:
        return o["storage_cost"] * disk_gb / HOURS_PER_MONTH

    def _row(self, inst: EmuInstance) -> dict:
        o = inst.offer
        elapsed = self.market.now() - inst.created_t
        intended = "running"
        actual: str | None  # Vast's actual_status; None while the contract is still being scheduled
        if inst.stuck_status is not None:
            actual = inst.stuck_status
        elif inst.state == "provisioning":
            actual = None if elapsed < inst.boot_s / 2 else "loading"
        elif inst.state == "stopped":
            actual = "stopped"
            intended = "running" if inst.preempted and self.outbid_intended == "running" else "stopped"
        elif inst.state == "offline":  # Market.preempt(mode="host_gone"): the host machine went offline
            actual = "offline"
        else:
            actual = "running"
        running = actual == "running"
        ports: dict[str, list[dict[str, str]]] = {}  # container port -> its host bindings
        proxy: tuple[str | None, int | None] = (None, None)  # (ssh_host, ssh_port)
        if not inst.no_ssh_port:
            proxy = (inst.ssh[0] if self.market.ssh_endpoint else "ssh5.emulator.invalid", inst.ssh[1])
            if running:
                ports = {
                    "22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(inst.ssh[1])}],
                    "8080/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41080"}],
                }
        req = inst.request
        row = {
            "id": int(inst.id),
            "label": inst.label,
            "actual_status": actual,
            "intended_status": intended,
            "cur_state": actual or "created",
            "next_state": intended,
            "status_msg": (
                "host machine offline" if actual == "offline" else "outbid: stopped until the bid wins again"
            )
            if inst.preempted
            else (actual or "scheduling"),
            "start_date": inst.created_t,
            "end_date": None,
            "extra_env": [[k, v] for k, v in (req.get("env") or {}).items()],
            "is_bid": inst.spot,
            "min_bid": o["min_bid"],
            "dph_total": round(inst.usd_per_hour, 6),
            "dph_base": o["dph_base"],
            "num_gpus": inst.delivered.get("num_gpus", o["num_gpus"]),
            "gpu_name": inst.delivered.get("gpu_name", o["gpu_name"]),
            "gpu_ram": o["gpu_ram"],
            "machine_id": o["machine_id"],
            "host_id": o["host_id"],
            "public_ipaddr": (inst.ssh[0] if running else None),
            "ports": ports,
            "ssh_host": proxy[0],
            "ssh_port": proxy[1],
            "ssh_idx": "5",
            "image_uuid": req.get("image"),
            "disk_space": req.get("disk"),
            "onstart": req.get("onstart"),
            "reliability2": o["reliability2"],
            "geolocation": o["geolocation"],
            "gpu_util": 0.0,
            "uptime_mins": max(0.0, elapsed / 60.0),
        }
        # The spec types these as a number or a string, never null: a field with no value is left out.
        return {k: v for k, v in row.items() if v is not None or k in _NULLABLE}

    # -- request handling ----------------------------------------------------------------------
    def _op(self, method: str, path: str) -> tuple[str, dict]:
        m = re.fullmatch(r"/api/v0/(asks|instances|instances/bid_price)/(\d+)/", path)
        ssh = re.fullmatch(r"/api/v0/instances/(\d+)/ssh/", path)
        if path == "/api/v0/bundles/" and method == "POST":
            return "search", {}
        if path == "/api/v1/instances/" and method == "GET":
            return "list", {}
        if path == "/api/v0/users/current" and method == "GET":
            return "user", {}
        if path == "/api/v0/charges/" and method == "GET":
            return "charges", {}
        if path == "/api/v1/invoices/" and method == "GET":
            return "invoices", {}
        if ssh and method == "POST":
            return "ssh", {"id": ssh.group(1)}
        if m:
            kind, iid = m.group(1), m.group(2)
            if kind == "asks" and method == "PUT":
                return "create", {"id": int(iid)}
            if kind == "instances/bid_price" and method == "PUT":
                return "bid", {"id": iid}
            if kind == "instances":
                return {"GET": "show", "PUT": "update", "DELETE": "destroy"}.get(method, "?"), {"id": iid}
        return "?", {}

    def handle(self, req: dict) -> tuple[int, Any, str]:
        """The reply to ``req``: (HTTP status, JSON payload, content type)."""
        if not self.authorized(req):
            return self._fail(401, "auth_error", "Invalid API key: log in again or create a new key")
        op, p = self._op(req["method"], req["path"])
        if op == "?":
            return self._fail(404, "not_found", f"no route {req['method']} {req['path']}")
        injected = self.market.take_injected(op)
        if injected is not None:
            if injected in GATEWAY_STATUSES:  # Vast's gateway answers these, not its API: a page, not JSON
                return injected, GATEWAY_PAGE % (injected, injected), "text/html"
            # Vast's API's own error: the spec's Error body (components.schemas.Error), as its
            # documented 500s carry it ({"success": false, "error", "msg"}; contract.py judges it)
            return self._fail(
                injected, "rate_limited" if injected == 429 else "server_error", f"emulated HTTP {injected}"
            )
        body = req["body"] or {}
        account = req["account"]  # instances of other accounts are "not found" for this key
        with self.market.lock:
            if op == "search":
                status, payload, ctype = self._search(body)
                kind = "bid" if body.get("type") == "bid" else "on-demand"
                for row in payload.get("offers", []) if isinstance(payload, dict) else []:
                    self.served_as.setdefault((account, row["id"]), set()).add(kind)
                return status, payload, ctype
            if op == "create":
                # served to this account as an interruptible offer only: a spot create (contract.py)
                req["spot_create"] = self.served_as.get((account, p["id"])) == {"bid"}
                return self._create(p["id"], body, account)
            if op == "list":
                return self._list(req["query"], account)
            if op == "charges":
                return self._charges(req["query"], account)
            if op == "invoices":
                return self._invoices(req["query"], account)
            if op == "user":
                user = {
                    "id": int(account.split("-")[1]),
                    "username": "emulator",
                    "email": "emu@example.invalid",
                    "credit": round(self.market.balance(account), 6),
                    "balance": round(self.market.balance(account), 6),
                    "api_key": self.market.key_of(account),
                    "has_billing": True,
                    "can_pay": True,
                }
                return self._ok({k: v for k, v in user.items() if k not in self.user_without})
            inst = self.market.find(p["id"], account)
            if op == "show":
                return self._ok({"instances": self._row(inst) if inst else None})
            if inst is None:
                return self._fail(404, "no_such_instance", f"Instance {p['id']} not found.")
            if op == "destroy":
                if self.destroy_unsuccessful > 0:
                    self.destroy_unsuccessful -= 1
                    return self._fail(200, "destroy_failed", "Unable to destroy the instance right now.")
                self.market.api_destroy(inst.id)
                return self._ok({"success": True})
            if op == "update":
                self.market.tick(inst)
                if body.get("state") == "stopped":
                    inst.state = "stopped"
                elif body.get("state") == "running":
                    inst.state, inst.preempted = "running", False
                if "label" in body:
                    inst.label = str(body["label"])
                return self._ok({"success": True})
            if op == "bid":
                self.market.tick(inst)
                inst.bid = float(body["price"])
                inst.usd_per_hour = inst.bid + inst.storage_usd_per_hour
                return self._ok({"success": True})
            if op == "ssh":
                inst.request.setdefault("attached_keys", []).append(body.get("ssh_key"))
                return self._ok({"success": True})
        return self._fail(404, "not_found", "no route")  # pragma: no cover

    # -- billing -------------------------------------------------------------------------------
    @staticmethod
    def _window(query: dict, col: str) -> tuple[float, float, dict]:
        try:
            filters = json.loads(query.get("select_filters") or "{}")
            rng = filters[col]
            return float(rng["gte"]), float(rng["lte"]), filters
        except (ValueError, KeyError, TypeError):
            raise _BadQuery(f"select_filters needs {col}: {{gte, lte}} in unix seconds") from None

    @staticmethod
    def _page(rows: list, query: dict) -> tuple[int, Any, str]:
        limit = min(int(query.get("limit") or 20), 100)
        start = int(base64.b64decode(query["after_token"]).decode()) if query.get("after_token") else 0
        page = rows[start : start + limit]
        nxt = base64.b64encode(str(start + limit).encode()).decode() if start + limit < len(rows) else None
        return 200, {"success": True, "count": len(page), "total": len(rows), "next_token": nxt, "results": page}, JSON

    def charge_rows(self, lo: float, hi: float, account: str | None = None) -> list[dict]:
        """Charges in the ``/api/v0/charges/`` shape, for [``lo``, ``hi``] epoch s.

        One entry per contract (instance) that billed in [``lo``, ``hi``], its items ``gpu`` (compute:
        the price less storage, while running) and
        ``disk`` (storage, running or stopped), one of each over the contract's period (stopped
        stretches included), each described as the spec's example is ("96.000 hours at
        $0.389/hour": the gpu item's running hours, the disk item's whole period), with integer
        unix-second times as the spec types them. ``charges_clipped``: entries and items cut to the
        window, else whole contracts (from their start to now)."""
        wlo, whi = (lo, hi) if self.charges_clipped else (0.0, float("inf"))
        by_inst: dict[str, list] = {}
        for inst, a, b, usd, kind in self.market.charges(wlo, whi, account):
            if self.charges_clipped or any(max(t0, lo) < min(t1, hi) for t0, t1, _, _ in inst.segments):
                by_inst.setdefault(inst.id, []).append((inst, a, b, usd, kind))
        rows = []
        for iid, parts in sorted(by_inst.items(), key=lambda kv: (kv[1][0][1], int(kv[0]))):
            inst = parts[0][0]
            start, end = int(math.floor(parts[0][1])), int(math.ceil(max(b for _, _, b, _, _ in parts)))
            gpu_s = gpu_usd = disk_s = disk_usd = 0.0
            for _, a, b, usd, kind in parts:
                disk = inst.storage_usd_per_hour * (b - a) / 3600.0 if kind == "gpu" else usd
                if kind == "gpu":
                    gpu_s, gpu_usd = gpu_s + (b - a), gpu_usd + usd - disk
                disk_s, disk_usd = disk_s + (b - a), disk_usd + disk
            # One item per charge type over the contract's period (stopped stretches included), its
            # description the hours it billed at its rate: the spec's "96.000 hours at $0.389/hour".
            when: dict[str, object] = {"start": start, "end": end, "source": None, "metadata": {}, "items": []}
            items: list[dict[str, object]] = []
            if gpu_usd > 0:
                items.append({**when, "type": "gpu", "description": _hours_at(gpu_s, gpu_usd), "amount": gpu_usd})
            if disk_usd > 0:
                items.append({**when, "type": "disk", "description": _hours_at(disk_s, disk_usd), "amount": disk_usd})
            if not items:
                continue
            days = end // 86400 - start // 86400 + 1  # UTC days the contract touches (the spec's "- 4 days")
            rows.append(
                {
                    "start": start,
                    "end": end,
                    "type": "instance",
                    "source": f"instance-{iid}",
                    "description": f"Instance {iid} Charges - {days} day{'s' if days != 1 else ''}",
                    "amount": sum(usd for usd in (gpu_usd, disk_usd) if usd > 0),  # the items' amounts
                    "metadata": {"label": inst.label},
                    "items": items,
                }
            )
        return rows

    def _charges(self, query: dict, account: str | None = None) -> tuple[int, Any, str]:
        try:
            lo, hi, filters = self._window(query, "day")
        except _BadQuery as e:
            return self._fail(400, "invalid_args", str(e))
        rows = self.charge_rows(lo, hi, account)
        types = (filters.get("type") or {}).get("in")
        if types:
            rows = [r for r in rows if r["type"] in types]
        if str(query.get("latest_first", "false")).lower() == "true":
            rows.reverse()
        return self._page(rows, query)

    def _invoices(self, query: dict, account: str | None = None) -> tuple[int, Any, str]:
        """Payments and credits (not spend): the emulated account's opening credit, one Stripe top-up."""
        try:
            lo, hi, _ = self._window(query, "when")
        except _BadQuery as e:
            return self._fail(400, "invalid_args", str(e))
        t = self.market.opened_at
        rows = (
            [
                {
                    "start": t,
                    "end": t,
                    "type": "credit",
                    "source": "stripe",
                    "description": "Credit purchase",
                    "amount": self.market.initial_balance,
                    "metadata": {"invoice_id": 1},
                    "items": [],
                }
            ]
            if lo <= t <= hi
            else []
        )
        return self._page(rows, query)

    def _search(self, body: dict) -> tuple[int, Any, str]:
        storage = float(body.get("allocated_storage") or 5.0)
        # Both spellings of on-demand: the spec's enum "ondemand" and "on-demand", which Vast's own
        # clients send (vastai search_offers, vast-cli) and its server answers.
        kind = body.get("type", "on-demand")
        if kind not in ("on-demand", "ondemand", "bid", "reserved"):
            return self._fail(400, "invalid_args", f"unknown offer type {kind!r}")
        rows = []
        for o in self.offers.values():
            if o["rented"]:
                continue
            row = dict(o)
            # A bid offer is priced at its bid (the minimum), an on-demand one at dph_base; both plus storage.
            base = o["min_bid"] if kind == "bid" else o["dph_base"]
            row["dph_total"] = round(base + self._storage_per_hour(o, storage), 6)
            row["storage_total_cost"] = round(self._storage_per_hour(o, storage), 6)
            row["is_bid"] = kind == "bid"
            if all(_match(row.get(k), v) for k, v in body.items() if k not in _RESERVED and isinstance(v, dict)):
                rows.append(row)
        for col, direction in reversed(body.get("order") or []):
            rows.sort(key=lambda r: (r.get(col) is None, r.get(col)), reverse=(direction == "desc"))
        if body.get("limit"):
            rows = rows[: int(body["limit"])]
        return self._ok({"offers": rows})

    def _list(self, query: dict, account: str = "acct-1") -> tuple[int, Any, str]:
        limit = int(query.get("limit") or 25)
        start = int(query.get("after_token") or 0)
        live = sorted(self.market.live(account), key=lambda i: int(i.id))
        page = live[start : start + limit]
        nxt = str(start + limit) if start + limit < len(live) else None
        return self._ok({"instances": [self._row(i) for i in page], "next_token": nxt, "total_instances": len(live)})

    def _create(self, oid: int, body: dict, account: str = "acct-1") -> tuple[int, Any, str]:
        o = self.offers.get(oid)
        if o is not None and self.faults.vanish_on_create:
            o["rented"] = True
        if o is None or o["rented"]:
            return self._fail(404, "no_such_ask", f"Instance type by id {oid} is not available.")
        disk = float(body.get("disk") or 10)
        storage = self._storage_per_hour(o, disk)
        bid_price = body.get("price")
        bid = None if bid_price is None else float(bid_price)  # the spot bid, USD/h; None: on-demand
        spot = bid is not None
        price = (bid + storage) if bid is not None else o["dph_base"] + storage
        if self.market.balance(account) < price:
            return self._fail(400, "invalid_args", "Your account lacks credit to rent this instance.")
        label = str(body.get("label") or "")
        if self.min_bid_rises_to is not None:  # the market moved between the search and this create
            o["min_bid"] = max(o["min_bid"], self.min_bid_rises_to)
        if bid is not None and bid < o["min_bid"]:
            # Undocumented which: the contract is made and left stopped (billing its disk), or
            # nothing is made; either way the answer is the spec's 400 invalid_price (no id in it).
            if self.low_bid_leaves_instance:
                inst = self.market.new_instance(
                    label, o, price, storage, spot=True, bid=bid, request=body, account=account
                )
                inst.state = "stopped"
            return self._fail(
                400,
                "invalid_price",
                self.low_bid_msg
                or f"Bid price {bid:.4f} is below the minimum bid {o['min_bid']:.4f} for this machine.",
                ask_id=oid,
            )
        o["rented"] = True
        inst = self.market.new_instance(label, o, price, storage, spot=spot, bid=bid, request=body, account=account)
        if self.faults.create_fails_but_creates > 0:
            self.faults.create_fails_but_creates -= 1
            self.market.mark_fault()
            return self._fail(500, "server_error", "Internal error while creating the instance.")
        if self.faults.create_unsuccessful_but_creates > 0:
            self.faults.create_unsuccessful_but_creates -= 1
            return self._fail(200, "internal_error", "Something went wrong.")
        return self._ok({"success": True, "new_contract": int(inst.id), "instance_api_key": f"inst-{inst.id}-scoped"})
