"""Vast.ai through the ``vastai`` SDK (1.9.1; imported lazily, inside methods).

Calls used: ``VastAI(api_key=..., server_url=..., retry=1)``; ``search_offers`` (``type="on-demand"``,
``type="bid"`` for interruptible offers), ``create_instance`` (``price=`` the bid for interruptible offers),
``show_instance``/``show_instances``, ``destroy_instance`` (never stop: a stopped instance keeps
billing its disk), ``show_user`` (``balance``, USD, the spec's field).

Units (offer fields of ``POST /api/v0/bundles/`` as vastai 1.9.1 returns them, vastai/api/offers.py and
vastai/api/query.py; https://docs.vast.ai/cli/reference/search-offers): ``gpu_ram`` is per GPU in
Vast "MB", which are MiB in practice (an RTX 4090 lists 24564, an 80 GB A100 81920, as nvidia-smi
prints MiB), so vram_bytes = gpu_ram x 2^20; ``dph_total`` is USD/h for the whole box including
storage at ``allocated_storage`` GiB; ``min_bid`` is USD/h; ``reliability2``/``reliability`` 0..1.

SDK quirks handled here:
- ``VAST_URL`` is read once, when ``vastai.api.client`` is imported; we always pass ``server_url=``.
- the SDK retries 429/5xx itself (3 tries, ~0.4 s) and then raises ``requests.HTTPError``; we pass
  ``retry=1`` so that the only retries are ours (bounded, tenacity) and a create is never retried
  blindly. Its per-request timeout is 120 s; we lower it (``timeout_s``).
- a ``type="bid"`` search followed by a create without ``price`` rents ON-DEMAND: an interruptible
  create always sends a price (the bid, default the offer's ``min_bid``).
- a bid under the minimum may leave a stopped instance that bills storage (undocumented; the spec's
  400 ``invalid_price`` carries no id): after any refusal of a bid (BID_TOO_LOW, known by that code
  and never by its words, or BAD_REQUEST) the instance is looked for by its label, destroyed at
  once, and the error is raised with ``instance_id`` set and Vast's own words.
- a destroy answered 2xx with ``"success": false`` failed (dstack reads it too): retried, then raised.
- ``unknown``/``offline`` never reach running (the spec): they map to EXITED, so a wait fails at
  once naming the state.
- errors are ``requests.HTTPError`` whose JSON body holds ``error``/``msg``; they are mapped to
  kinds in client.py.
"""

from __future__ import annotations

import builtins  # a method named list shadows the type in its class
import math
import time
from typing import Any

import gpuops.providers.inputs as inputs
from gpuops.catalog import Card, cards
from gpuops.errors import BadInput
from gpuops.providers.base import (
    Balance,
    CreateSpec,
    HasBilling,
    HasVolumes,
    Instance,
    InstanceStatus,
    Interruptible,
    Offer,
    OfferQuery,
    ProviderError,
    ProviderErrorKind,
    SshEndpoint,
    guarded,
)
from gpuops.providers.keys import Credential
from gpuops.providers.retry import RetryPolicy, create_with_retries
from gpuops.providers.vast.client import NAME, VastClient

MIB = 2**20

_STATUS = {
    "created": InstanceStatus.PROVISIONING,
    "loading": InstanceStatus.PROVISIONING,
    "scheduling": InstanceStatus.PROVISIONING,
    "rebooting": InstanceStatus.PROVISIONING,
    "running": InstanceStatus.RUNNING,
    "stopped": InstanceStatus.STOPPED,
    "frozen": InstanceStatus.STOPPED,
    "exited": InstanceStatus.EXITED,
    # The spec: "if actual_status becomes exited, unknown, or offline it will never reach running --
    # destroy and retry". Stopped-like, so a wait fails at once naming the state (raw_status).
    "unknown": InstanceStatus.EXITED,
    "offline": InstanceStatus.EXITED,
}


def _card_for(gpu_name: str, vram_bytes: int, pool: list[Card]) -> Card | None:
    """The catalog card Vast's ``gpu_name`` means.

    Among cards sharing a name (A100 SXM4 40/80 GB) the one whose VRAM is closest to what the offer
    reports."""
    same = [c for c in pool if c.vast_name and c.vast_name.lower() == (gpu_name or "").lower()]
    if not same:
        return None
    return min(same, key=lambda c: abs(c.vram_bytes - vram_bytes))


class VastProvider(VastClient, Interruptible, HasVolumes, HasBilling):
    """Vast.ai offers and instances. ``credential`` None: every call raises AUTH with the fix.

    ``url``: REST base (no trailing slash). ``search_limit``: offers per search type.
    ``storage_gb``: disk (GiB) Vast prices into ``dph_total`` during search.
    """

    name = NAME

    requires = ("vastai", "requests")  # the vast extra: vastai==1.9.1 (it brings requests)
    routes = (
        ("POST", "/api/v0/bundles/"),
        ("PUT", "/api/v0/asks/{id}/"),
        ("GET", "/api/v1/instances/"),
        ("GET", "/api/v0/instances/{id}/"),
        ("DELETE", "/api/v0/instances/{id}/"),
        ("GET", "/api/v0/users/current"),
        ("GET", "/api/v0/charges/"),
        ("GET", "/api/v0/volumes"),
        ("POST", "/api/v0/volumes/search/"),
        ("PUT", "/api/v0/volumes/"),
        ("DELETE", "/api/v0/volumes/"),
    )  # what gpuops calls on Vast (through vastai 1.9.1), for `gpuops check` and the docs

    def __init__(
        self,
        credential: Credential | None,
        url: str,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        search_limit: int = 64,
        storage_gb: float = 40.0,
        data_dir=None,
    ):
        self.data_dir = (
            data_dir  # where gpuops.providers.volumes keeps the names of the volumes it created (Vast lists none)
        )
        self.credential = credential
        self.url = url
        self.retry = retry or RetryPolicy()
        self.call_deadline_s, self.max_reply_bytes = self.retry.call_deadline_s, self.retry.max_reply_bytes
        self.create_deadline_s = self.retry.create_deadline_s
        self.timeout_s = timeout_s
        self.search_limit = search_limit
        self.storage_gb = storage_gb
        self._client: Any = None
        # The account this key acts for (gpuops.ownership): None without a key.
        self.account = f"{NAME}:{credential.account}" if credential is not None else None

    # -- offers ------------------------------------------------------------------------------
    @guarded
    def offers(self, query: OfferQuery) -> list[Offer]:
        """Offers for ``query``: on-demand (``spot`` False), interruptible (True) or both (None).

        Interruptible offers carry ``min_bid`` (USD/h); their ``usd_per_hour`` is ``dph_total``, and
        ``storage_usd_per_hour`` (``dph_total - dph_base``) is what Vast bills beside the bid.
        Offers whose GPU is not in the catalog are dropped (a card must be a catalog name).
        """
        from gpuops.providers.base import VRAM_TOLERANCE

        pool = [c for c in cards() if c.vast_name]
        if query.cards:
            pool = [c for c in pool if c.name in query.cards]
            if not pool:
                return []
        q: dict[str, Any] = {"num_gpus": {"eq": int(query.gpu_count)}}
        if query.cards:
            q["gpu_name"] = {"in": sorted({c.vast_name for c in pool})}
        if query.min_vram_bytes:
            # Never stricter than our own fit test (offers.fits), which runs afterwards.
            q["gpu_ram"] = {"gte": math.floor(query.min_vram_bytes * (1.0 - VRAM_TOLERANCE) / MIB)}
        # On-demand is asked as "on-demand": what Vast's own clients send on real accounts every day
        # (vastai 1.9.1 search_offers' default, vast-cli --type, the spec's own example), though the
        # spec's enum spells it "ondemand" (tests/data/specs/CAUGHT.md says why the client wins).
        kinds = {None: ("on-demand", "bid"), True: ("bid",), False: ("on-demand",)}[query.spot]
        out: list[Offer] = []
        for kind in kinds:
            qk = dict(q)
            if query.max_usd_per_hour is not None and kind == "on-demand":
                qk["dph_total"] = {"lte": float(query.max_usd_per_hour)}
            rows = (
                self._call(
                    f"search {kind} offers",
                    lambda v: v.search_offers(
                        query=qk, type=kind, order="dph_total", limit=self.search_limit, storage=self.storage_gb
                    ),
                )
                or []
            )
            for r in rows:
                o = self._offer(r, kind == "bid", pool)
                if o is None:
                    continue
                if query.max_usd_per_hour is not None and o.price > query.max_usd_per_hour:
                    continue
                out.append(o)
        # A bid row is priced at its bid; the same machine's on-demand price is known when both
        # searches ran: it stands beside the bid (Offer.on_demand_usd_per_hour).
        import dataclasses

        on_demand = {o.offer_id: o.usd_per_hour for o in out if not o.spot}
        return [
            dataclasses.replace(o, listed_usd_per_hour=on_demand[o.offer_id])
            if o.spot and o.offer_id in on_demand
            else o
            for o in out
        ]

    def _offer(self, r: dict, spot: bool, pool: list[Card]) -> Offer | None:
        # Numbers are taken as Vast sent them (NaN, negative, 0 GPUs included): gpuops.planning.offers.screen
        # drops such an offer with a note. A missing num_gpus is 0 GPUs, never a guessed 1.
        try:
            ram = float(r.get("gpu_ram") or 0)
            vram = int(ram * MIB) if math.isfinite(ram) else ram
            card = _card_for(str(r.get("gpu_name") or ""), int(vram) if math.isfinite(vram) else 0, pool)
            if card is None:
                return None
            rel = r.get("reliability2", r.get("reliability"))
            min_bid = r.get("min_bid")
            n = float(r.get("num_gpus") or 0)
            gpu_count = int(n) if math.isfinite(n) and n == int(n) else n
            total, base, stc = float(r["dph_total"]), r.get("dph_base"), r.get("storage_total_cost")
            # the storage billed beside a bid: storage_total_cost, else dph_total - dph_base (when it fits under the total)
            if isinstance(stc, (int, float)) and math.isfinite(stc) and stc >= 0:
                storage = float(stc)
            elif isinstance(base, (int, float)) and math.isfinite(base) and 0 <= base <= total:
                storage = total - float(base)
            else:
                storage = 0.0
            price = total
            if spot and min_bid is not None and stc is not None:
                price = float(min_bid) + storage  # what a bid at the minimum is charged: bid + storage
            return Offer(
                provider=NAME,
                offer_id=str(int(r["id"])),
                card=card.name,
                gpu_count=gpu_count,  # type: ignore[arg-type]  # as Vast sent it (a NaN, a fraction): planning.offers.screen drops it with a note
                vram_bytes=vram,  # type: ignore[arg-type]  # as gpu_count
                usd_per_hour=round(price, 6),
                spot=spot,
                min_bid=float(min_bid) if (spot and min_bid is not None) else None,
                reliability=float(rel) if rel is not None else 1.0,
                region=str(r.get("geolocation") or ""),
                disk_gb=float(r.get("disk_space") or 0.0),
                net_down_mbps=float(r.get("inet_down") or 0.0),
                machine_id=str(r.get("machine_id") or ""),
                storage_usd_per_hour=round(storage, 6) if math.isfinite(storage) else 0.0,
                simulated=self.simulated,
            )
        except (KeyError, TypeError, ValueError):
            return None  # a malformed row must not break the whole search

    # -- instances ---------------------------------------------------------------------------
    def _instance(self, row: dict) -> Instance:
        raw = row.get("actual_status")
        raw_s = "" if raw is None else str(raw)
        status = InstanceStatus.PROVISIONING if raw is None else _STATUS.get(raw_s.lower(), InstanceStatus.UNKNOWN)
        is_bid = bool(row.get("is_bid"))
        # An interruptible instance that stopped was preempted (outbid, or its host went away):
        # gpuops never stops a Vast instance. Outbid shows either as intended_status "running" (it
        # runs again when the bid wins) or as cur_state == intended_status == next_state ==
        # "stopped" (dstack's test for interrupted or outbid); both are preemption.
        preempted = is_bid and status in (InstanceStatus.STOPPED, InstanceStatus.EXITED)
        direct = proxy = None
        ports = row.get("ports")
        ports = ports if isinstance(ports, dict) else {}
        p22 = ports.get("22/tcp") or []
        if p22 and row.get("public_ipaddr") and p22[0].get("HostPort"):
            direct = SshEndpoint(host=str(row["public_ipaddr"]).strip(), port=int(p22[0]["HostPort"]))
        if row.get("ssh_host") and row.get("ssh_port"):
            proxy = SshEndpoint(host=str(row["ssh_host"]), port=int(row["ssh_port"]))
        ssh = (direct or proxy) if status == InstanceStatus.RUNNING else None
        price = row.get("dph_total")
        return Instance(
            id=str(row["id"]),
            label=str(row.get("label") or ""),
            status=status,
            usd_per_hour=float(price) if price is not None else None,
            ssh=ssh,
            created_at=float(row["start_date"]) if row.get("start_date") is not None else None,
            raw_status=raw_s,
            extra={
                "preempted": preempted,
                "spot": is_bid,
                "ssh_proxy": proxy,
                "ssh_direct": direct,
                "gpu_name": row.get("gpu_name"),
                "num_gpus": row.get("num_gpus"),  # checked against the order (offers.check_delivered)
                "intended_status": row.get("intended_status"),
                "status_msg": row.get("status_msg"),
            },
        )

    def _id(self, instance_id: str) -> int:
        try:
            return int(instance_id)
        except (TypeError, ValueError):
            raise BadInput(
                f"not a Vast.ai instance id: {instance_id!r}", "Vast ids are numbers; see `gpuops reconcile`"
            ) from None

    @guarded
    def get(self, instance_id: str) -> Instance | None:
        """The instance, or None when Vast no longer knows it."""
        iid = self._id(instance_id)
        try:
            row = self._call(f"read instance {iid}", lambda v: v.show_instance(iid))
        except ProviderError as e:
            if e.kind == ProviderErrorKind.GONE:
                return None
            raise
        return self._instance(row) if row else None

    @guarded
    def list(self, label_prefix: str = "gpuops-") -> list[Instance]:
        """Instances whose label starts with ``label_prefix``."""
        rows = self._call("list instances", lambda v: v.show_instances()) or []
        return [self._instance(r) for r in rows if str(r.get("label") or "").startswith(label_prefix)]

    def _find_label(self, label: str) -> Instance | None:
        """``find_by_label`` where a failed look-up means "not found" (the caller raises its own error)."""
        try:
            return self.find_by_label(label)
        except ProviderError:
            return None

    @guarded
    def create(self, offer: Offer, spec: CreateSpec) -> Instance:
        """Rent ``offer`` (its id is Vast's ask id).

        Interruptible: ``price`` = the bid (default the offer's ``min_bid``). SSH key: appended to
        root's authorized_keys by ``onstart`` (quoted).

        Raises ProviderError: OFFER_GONE (rented by someone else since the search), BID_TOO_LOW
        (``instance_id`` set when Vast left a stopped instance; it has already been destroyed),
        FUNDS, AUTH, BAD_REQUEST. After an ambiguous failure (5xx, rate limit) an instance created
        anyway is found by its label and returned (``extra["recovered_after"]``)."""
        ask = self._id(offer.offer_id)
        label = inputs.check_label(spec.label)
        image = inputs.check_image(spec.image)
        env = inputs.check_env(spec.env)
        onstart = inputs.authorized_keys_onstart(spec.ssh_public_key) if spec.ssh_public_key else None
        bid = None
        if offer.spot:
            bid = (
                spec.bid_usd_per_hour
                if spec.bid_usd_per_hour is not None
                else (offer.min_bid if offer.min_bid is not None else offer.usd_per_hour)
            )
            if not bid or bid <= 0:
                raise BadInput(f"bid {bid!r} USD/h is not a price", "pass a positive bid")
        elif spec.bid_usd_per_hour is not None:
            raise BadInput(
                "a bid was given for an on-demand Vast offer", "pick an interruptible offer (--spot) or drop the bid"
            )

        mount = {}
        if spec.volume_id:  # a Vast local volume on this offer's machine (gpuops.providers.volumes)
            if not str(spec.volume_id).isdigit():
                raise BadInput(
                    f"Vast volume id {spec.volume_id!r} is not a number", "see `gpuops volumes list --provider vast`"
                )
            mount = {"link_volume": int(spec.volume_id), "mount_path": spec.volume_mount_path or "/gpuops-volume"}

        def rent(v):
            res = v.create_instance(
                ask,
                image=image,
                disk=float(spec.disk_gb),
                env=env,
                price=bid,
                label=label,
                onstart_cmd=onstart,
                ssh=True,
                direct=True,
                **mount,
            )
            if not isinstance(res, dict) or not res.get("success") or not res.get("new_contract"):
                raise self._body_error(200, res if isinstance(res, dict) else {}, f"rent offer {ask}", True)
            return res

        asked_at = time.time()  # the instance cannot predate our request (stamps may be whole seconds)

        def once() -> Any:  # the create's answer; a refusal that left a stopped instance destroys it first
            try:
                return self._call(f"rent offer {ask}", rent, retries=False, creating=True)
            except ProviderError as e:
                refused_bid = bid is not None and e.kind in (
                    ProviderErrorKind.BID_TOO_LOW,
                    ProviderErrorKind.BAD_REQUEST,
                )
                if refused_bid and not e.instance_id:
                    # Undocumented whether a refused bid leaves a (stopped, disk-billing) instance;
                    # the spec's answer carries no id, so look for one by its label (after any
                    # refusal of a bid: the code or the words of the answer may not say "bid").
                    left = self._find_label(label)
                    e.instance_id = left.id if left is not None else None
                if e.instance_id and not e.retryable:
                    # e.g. a bid under the minimum: Vast made a stopped instance that bills storage.
                    try:
                        self.destroy(e.instance_id)
                        e.message += f"; the stopped instance {e.instance_id} it left was destroyed"
                    except ProviderError as d:
                        e.message += f"; destroying the stopped instance {e.instance_id} it left failed ({d.kind.value}): destroy it"
                    raise e from None
                raise

        res, found = create_with_retries(once, self._find_label, label, self.retry.for_create(), asked_at)
        if found is not None:
            return found
        assert res is not None  # create_with_retries: the answer, or the instance found
        iid = str(res["new_contract"])
        inst = None
        try:
            inst = self.get(iid)
        except ProviderError:
            pass
        if inst is None:
            inst = Instance(
                id=iid,
                label=label,
                status=InstanceStatus.PROVISIONING,
                usd_per_hour=bid if bid is not None else offer.usd_per_hour,
                created_at=time.time(),
            )
        inst.extra["bid_usd_per_hour"] = bid
        if mount:
            inst.extra["volume_path"] = mount["mount_path"]
        inst.created_at = max(inst.created_at or 0.0, asked_at)
        return inst

    @guarded
    def destroy(self, instance_id: str) -> None:
        """Destroy (not stop) the instance. Idempotent: an instance Vast no longer knows is success.

        A 2xx whose body says ``"success": false`` is a failed destroy (SERVER, retried as every
        call, then raised with Vast's words); only ``success`` true, or a body without it, is done.
        Raises ProviderError."""
        iid = self._id(instance_id)
        action = f"destroy instance {iid}"

        def kill(v: Any) -> Any:
            res = v.destroy_instance(iid)
            if isinstance(res, dict) and res.get("success") is False:
                err = self._body_error(200, res, action, False)
                if err.kind == ProviderErrorKind.GONE:
                    raise err
                raise ProviderError(
                    ProviderErrorKind.SERVER,
                    f"Vast.ai answered success: false to {action}: {err.message}",
                    "retry the destroy; `gpuops reconcile` destroys it later",
                )
            return res

        try:
            self._call(action, kill)
        except ProviderError as e:
            if e.kind != ProviderErrorKind.GONE:
                raise

    def volumes(self):
        """Persistent volumes (``VastVolumes``): list, create, delete, mountable offers."""
        from gpuops.providers.vast.volumes import VastVolumes

        return VastVolumes(self)

    @guarded
    def balance(self) -> Balance:
        """``show_user()["balance"]``: the account's balance in USD (the spec's field).

        ``GET /api/v0/users/current``; Vast reports no spend rate.

        An answer without a finite number there is a balance that cannot be read:
        ``Balance(usd=None, note=why)`` (``Balance.unreadable``), never a silent skip. Raises
        ProviderError as every call (AUTH, RATE_LIMIT, SERVER)."""
        user = self._call("read the balance", lambda v: v.show_user())
        user = user if isinstance(user, dict) else {}
        value = user.get("balance")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            why = "has no balance field" if value is None else f"has a balance that is not a number ({value!r:.40})"
            return Balance(usd=None, note=f"Vast.ai's account answer (/api/v0/users/current) {why}")
        return Balance(usd=float(value))

    # -- billing: the charges, parsed in billing.py ---------------------------------------------
    @guarded
    def billing(self, since: float, until: float) -> builtins.list:
        """Vast's charges over [since, until) epoch s as ``ledger.billing.ChargeLine``, one per item.

        Parsed by ``gpuops.providers.vast.billing.charge_lines``, every page: through the SDK's
        ``show_invoices_v1(charges=True, ...)`` (vastai 1.9.1 api/billing.py): ``GET
        /api/v0/charges/?select_filters={"day":{"gte","lte"}}&limit=100[&after_token=]``.
        ``/api/v1/invoices/`` lists payments and credits, not spend, so it is not read here.
        Raises ProviderError (SERVER when the pages never end)."""
        from gpuops.providers.vast.billing import charge_lines

        out = []
        token = None
        lo, hi = int(since), int(math.ceil(until))
        for _ in range(10_000):  # a bounded page loop: a provider that never ends pagination is an error
            params: dict[str, Any] = {"charges": True, "start_date": lo, "end_date": hi, "limit": 100}
            if token:
                params["next_token"] = token
            page = self._call("read charges", lambda v: v.show_invoices_v1(**params)) or {}
            out += charge_lines(page.get("results") or [], since, until)
            token = page.get("next_token")
            if not token:
                return out
        raise ProviderError(ProviderErrorKind.SERVER, "Vast.ai charges never stopped paginating", "retry later")
