"""RunPod through its REST API v2 (``https://api.runpod.io/v2``, ``Authorization: Bearer <key>``).

Routes (RunPod's published OpenAPI spec, api-reference-v2/openapi.json in github.com/runpod/docs;
the migration guide docs.runpod.io/api-reference-v2/migrate-from-v1), ``ROUTES`` in client.py:

- ``GET /v2/catalog/gpus?include=AVAILABILITY&product=POD&count=N&cloud=C`` -- GPU types, per-GPU
  list prices per cloud, per-cloud ``maxCount``, and the current pod stock (``availability``:
  NONE, LOW, MEDIUM, HIGH): an offer is made only for what is in stock.
- ``POST /v2/pods`` (201, the Pod), ``GET /v2/pods`` (``{"pods": [...]}``: one list, the spec
  pages nothing), ``GET /v2/pods/{id}``, ``DELETE /v2/pods/{id}`` (204), ``POST
  /v2/pods/{id}/action`` (``{"action": "stop"}`` and the rest: ``stop``).
- ``GET|POST /v2/network-volumes``, ``DELETE /v2/network-volumes/{id}`` (volumes.py).
- ``GET /v2/billing/pods`` and ``GET /v2/billing/network-volumes`` (``billing``; parsed in billing.py).

How a status maps to a ``ProviderError`` kind: client.py.

Where v2 has no route -- the account balance -- one GraphQL POST (``POST {host}/graphql``,
``RunPodClient._graphql``) reads ``myself { clientBalance currentSpendPerHr }``; GraphQL is to be
retired in early 2027, so an error answer there is a ``Balance`` with no figure and a note, never a
crash (``balance``). No runpod SDK: it was used for that one POST only (docs/sdks.md).

``RUNPOD_API_BASE_URL`` / ``[providers.runpod] url`` names the API host (default
``https://api.runpod.io``); ``/v2/...`` and ``/graphql`` are under it. Interruptible (spot) pods:
v2 has none, so a spot request is ProviderError(UNSUPPORTED), never a silent on-demand rent.
Every HTTP call runs under the provider's total deadline and reply cap (``@guarded`` on every
contract method: ``http_guard``) and the tenacity policy (``retry.py``); a create is never retried
blindly (its label is looked up after an ambiguous failure).
"""

from __future__ import annotations

import builtins  # a method named list shadows the type in its class
import enum
import math
import time
from typing import Any
from urllib.parse import quote

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
    Offer,
    OfferQuery,
    ProviderError,
    ProviderErrorKind,
    SshEndpoint,
    guarded,
)
from gpuops.providers.keys import Credential, redact
from gpuops.providers.retry import RetryPolicy, create_with_retries
from gpuops.providers.runpod.client import BALANCE_QUERY, NAME, ROUTES, RunPodClient, parse_time, stamp

CLOUDS = ("SECURE", "COMMUNITY")
SPOT_WITHDRAWN = "RunPod's REST API v2 has no interruptible (spot) pods; gpuops will not rent on-demand in their place"
GB = 10**9


def _spot_fix() -> str:
    """The fix line for a spot request: the other providers with spot, or on-demand here.

    Read from the sibling folders' entries, not the registry (which imports this folder): a
    provider's modules never import the registry back."""
    from gpuops.providers import local, vast

    spot = " or ".join(f"--provider {e.name}" for e in (local.ENTRY, vast.ENTRY) if e.spot)
    return f"use {spot} for interruptible offers, or --on-demand to rent an on-demand RunPod pod"


class PodStatus(str, enum.Enum):
    """A pod's ``status`` as the v2 spec enumerates it (components.schemas.PodStatus)."""

    PROVISIONING = "PROVISIONING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    EXITED = "EXITED"  # stopped: GPU released, disk kept (and billed)
    ERROR = "ERROR"  # unrecoverable: it never runs again without a start
    TERMINATED = "TERMINATED"


# RunPod's status -> ours. RUNNING is PROVISIONING until SSH is published (see _instance).
_STATUS = {
    PodStatus.PROVISIONING: InstanceStatus.PROVISIONING,
    PodStatus.STARTING: InstanceStatus.PROVISIONING,
    PodStatus.RUNNING: InstanceStatus.RUNNING,
    PodStatus.EXITED: InstanceStatus.EXITED,
    PodStatus.ERROR: InstanceStatus.EXITED,
    PodStatus.TERMINATED: InstanceStatus.GONE,
}


class AvailabilityLevel(str, enum.Enum):
    """The catalog's stock level (components.schemas.AvailabilityLevel)."""

    NONE = "NONE"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"


def _public_ip(ip: object) -> bool:
    """Whether ``ip`` is an internet address (not private, loopback, link-local or reserved; not a name)."""
    import ipaddress

    try:
        return ipaddress.ip_address(str(ip)).is_global
    except ValueError:
        return False


class RunPodProvider(RunPodClient, HasVolumes, HasBilling):
    """RunPod on-demand pods over REST v2. ``credential`` None: every call raises AUTH with the fix.

    ``url``: the API host (``/v2/...`` and ``/graphql`` are appended). ``retry``: bounded retries
    for rate limits and 5xx. ``cloud_types``: which RunPod clouds to offer (SECURE, COMMUNITY).
    """

    name = NAME
    no_spot_reason = "its REST v2 API withdrew them"  # v2 has no interruptible pods: not Interruptible
    requires = ("requests",)  # the runpod extra: REST v2 and the balance's GraphQL POST over requests
    routes = ROUTES

    def __init__(
        self,
        credential: Credential | None,
        url: str,
        retry: RetryPolicy | None = None,
        cloud_types: tuple[str, ...] = CLOUDS,
        timeout_s: float = 30.0,
    ):
        self.credential = credential
        self.url = url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.call_deadline_s, self.max_reply_bytes = self.retry.call_deadline_s, self.retry.max_reply_bytes
        self.create_deadline_s = self.retry.create_deadline_s
        self.cloud_types = cloud_types
        self.timeout_s = timeout_s
        # The account this key acts for (gpuops.ownership): None without a key.
        self.account = f"{NAME}:{credential.account}" if credential is not None else None

    # -- offers ------------------------------------------------------------------------------
    def _cards(self, query: OfferQuery) -> list[Card]:
        chosen = [c for c in cards() if c.runpod_id and (not query.cards or c.name in query.cards)]
        from gpuops.providers.base import VRAM_TOLERANCE

        return [c for c in chosen if c.vram_bytes >= query.min_vram_bytes * (1.0 - VRAM_TOLERANCE)]

    @guarded
    def offers(self, query: OfferQuery) -> list[Offer]:
        """On-demand offers in stock.

        One per (card, cloud) the catalog lists at ``query.gpu_count`` with ``availability`` other
        than NONE in that cloud.

        ``usd_per_hour`` = the per-GPU list price of that cloud x gpu_count (RunPod prices GPU
        time; disk is billed apart). ``vram_bytes`` = ``memory`` GB x 10^9 as RunPod quotes it,
        the catalog's figure when the card's own is larger (RunPod rounds). Reliability: RunPod
        publishes none (1.0). Raises ProviderError(UNSUPPORTED) when ``query.spot`` is True."""
        if query.spot is True:
            raise ProviderError(ProviderErrorKind.UNSUPPORTED, SPOT_WITHDRAWN, _spot_fix())
        wanted = {c.runpod_id: c for c in self._cards(query)}
        if not wanted:
            return []
        out: list[Offer] = []
        for cloud in self.cloud_types:
            params = {"include": "AVAILABILITY", "product": "POD", "count": int(query.gpu_count), "cloud": cloud}
            _, payload = self._rest("GET", "/v2/catalog/gpus", f"list {cloud.lower()} GPU stock", params=params)
            for g in self._object(payload, "gpus", "the GPU catalog") or []:
                o = self._offer(g, cloud, wanted, query)
                if o is not None:
                    out.append(o)
        return out

    def _offer(self, g: Any, cloud: str, wanted: dict[str, Card], query: OfferQuery) -> Offer | None:
        if not isinstance(g, dict) or g.get("id") not in wanted:
            return None
        card = wanted[g["id"]]
        c = cloud.lower()
        try:
            if not g.get(c) or AvailabilityLevel(g.get("availability") or "NONE") == AvailabilityLevel.NONE:
                return None  # not offered in this cloud, or none in stock now
            if int((g.get("maxCount") or {}).get(c) or 0) < query.gpu_count:
                return None
            per_gpu = (g.get("price") or {}).get(c)
            price = round(float(per_gpu) * query.gpu_count, 6) if per_gpu is not None else float("nan")
        except (TypeError, ValueError):
            return None  # a level or count outside the spec's enum/types: not an offer we can trust
        if per_gpu is None or (math.isfinite(price) and price <= 0):
            return None
        if query.max_usd_per_hour is not None and price > query.max_usd_per_hour:
            return None
        # Numbers as RunPod sent them: gpuops.planning.offers.screen drops a NaN or negative one with a note.
        mem = g.get("memory")
        try:
            vram = max(card.vram_bytes, int(float(mem) * GB)) if mem is not None else card.vram_bytes
        except (TypeError, ValueError, OverflowError):
            vram = float("nan")  # type: ignore[assignment]  # as RunPod sent it: planning.offers.screen drops the offer with a note
        dcs = [
            d.get("id")
            for d in g.get("dataCenters") or []
            if isinstance(d, dict) and d.get("availability") not in (None, "NONE")
        ]
        return Offer(
            provider=NAME,
            offer_id=f"{c}:{card.runpod_id}",
            card=card.name,
            gpu_count=query.gpu_count,
            vram_bytes=vram,
            usd_per_hour=price,
            spot=False,
            min_bid=None,
            reliability=1.0,
            region=f"{c} cloud" + (f" ({', '.join(str(d) for d in dcs[:4])})" if dcs else ""),
            simulated=self.simulated,
        )

    # -- instances ---------------------------------------------------------------------------
    def _instance(self, pod: dict) -> Instance:
        raw = str(pod.get("status") or "")
        try:
            status = _STATUS[PodStatus(raw)]
        except ValueError:
            status = InstanceStatus.UNKNOWN
        ssh = None
        direct = (pod.get("ssh") or {}).get("direct") if isinstance(pod.get("ssh"), dict) else None
        if isinstance(direct, dict) and direct.get("host") and direct.get("port"):
            ssh = SshEndpoint(
                host=str(direct["host"]), port=int(direct["port"]), user=str(direct.get("username") or "root")
            )
        runtime = pod.get("runtime")
        listed = runtime.get("ports") if isinstance(runtime, dict) else None
        ports = [p for p in (listed if isinstance(listed, list) else []) if isinstance(p, dict)]
        p22 = [p for p in ports if p.get("private") == 22 and p.get("type") == "tcp"]
        if ssh is None:  # the runtime's published port 22 over TCP, on a public address only
            for p in p22:
                if p.get("public") and _public_ip(p.get("ip")):
                    ssh = SshEndpoint(host=str(p["ip"]), port=int(p["public"]))
                    break
        if status == InstanceStatus.RUNNING and not pod.get("runtime"):
            status = InstanceStatus.PROVISIONING  # the container is not up yet (runtime null)
        no_ssh = None  # why a running pod will never be reachable over SSH (wait_for_ssh fails at once)
        if status == InstanceStatus.RUNNING and ssh is None and ports:
            if p22:
                where = ", ".join(f"{p.get('ip') or 'no address'}:{p.get('public') or 'no port'}" for p in p22)
                no_ssh = f"port 22 is published only on {where}, not on a public address"
            else:
                shown = ", ".join(f"{p.get('private')}/{p.get('type')}" for p in ports)
                no_ssh = f"the running pod publishes no 22/tcp port (its ports: {shown})"
        cost = pod.get("cost")
        gpu = pod.get("gpu")
        gpu = gpu if isinstance(gpu, dict) else {}
        return Instance(
            id=str(pod["id"]),
            label=str(pod.get("name") or ""),
            status=status,
            usd_per_hour=float(cost) if isinstance(cost, (int, float)) else None,
            ssh=ssh if status == InstanceStatus.RUNNING else None,
            created_at=parse_time(pod.get("createdAt")),
            raw_status=raw,
            extra={
                "gpu_count": gpu.get("count"),
                "gpu": gpu.get("id"),
                "data_center": pod.get("dataCenterId"),
                "started_at": parse_time(pod.get("startedAt")),
                "actions": pod.get("actions"),
                "no_ssh": no_ssh,
            },
        )

    @staticmethod
    def _pod_path(instance_id: str) -> str:
        return "/v2/pods/" + quote(inputs.check_provider_id(instance_id, "RunPod pod id"), safe="")

    @guarded
    def get(self, instance_id: str) -> Instance | None:
        """The pod, or None when RunPod no longer knows it (404; a TERMINATED pod is GONE)."""
        path = self._pod_path(instance_id)
        try:
            _, pod = self._rest("GET", path, f"read pod {instance_id}")
        except ProviderError as e:
            if e.kind == ProviderErrorKind.GONE:
                return None
            raise
        return self._instance(self._object(pod, None, f"read pod {instance_id}"))

    @guarded
    def list(self, label_prefix: str = "gpuops-") -> list[Instance]:
        """Pods whose name starts with ``label_prefix`` (``GET /v2/pods`` answers the whole list)."""
        _, payload = self._rest("GET", "/v2/pods", "list pods")
        pods = self._object(payload, "pods", "list pods") or []
        return [
            self._instance(p) for p in pods if isinstance(p, dict) and str(p.get("name") or "").startswith(label_prefix)
        ]

    def _find_label(self, label: str) -> Instance | None:
        """``find_by_label`` where a failed look-up means "not found" (the caller raises its own error)."""
        try:
            return self.find_by_label(label)
        except ProviderError:
            return None

    @guarded
    def create(self, offer: Offer, spec: CreateSpec) -> Instance:
        """``POST /v2/pods`` for ``offer`` (offer id ``<cloud>:<gpu type id>``).

        The SSH public key goes in ``PUBLIC_KEY`` (RunPod images install it for root; the spec's
        ``startSsh`` keeps a key the request sets), ``22/tcp`` is exposed for direct SSH. After an
        ambiguous failure (5xx, rate limit) the label is looked up: a pod that was created anyway
        is returned (``extra["recovered_after"]`` holds the error) so it is tracked and destroyed.
        Raises ProviderError: UNSUPPORTED for a bid, NO_CAPACITY (400), OFFER_GONE (403), FUNDS (402).
        """
        if offer.spot or spec.bid_usd_per_hour is not None:
            raise ProviderError(ProviderErrorKind.UNSUPPORTED, SPOT_WITHDRAWN, _spot_fix())
        cloud, _, gpu_type = offer.offer_id.partition(":")
        if cloud.upper() not in CLOUDS or not gpu_type:
            raise BadInput(
                f"not a RunPod offer id: {offer.offer_id!r}", "pick an offer from `gpuops offers --provider runpod`"
            )
        label = inputs.check_label(spec.label)
        image = inputs.check_image(spec.image)
        gpu_id = inputs.check_provider_id(gpu_type, "RunPod GPU type")
        env = dict(inputs.check_env(spec.env))
        if spec.ssh_public_key:
            env["PUBLIC_KEY"] = inputs.check_ssh_public_key(spec.ssh_public_key)
        body: dict[str, Any] = {
            "name": label,
            "image": image,
            "cloud": cloud.upper(),
            "gpu": {"id": gpu_id, "count": int(offer.gpu_count)},
            "disk": max(1, int(round(spec.disk_gb))),
            "ports": ["22/tcp"],
            "env": env,
            "startSsh": True,
        }
        mount_path = ""
        if spec.volume_id:  # a network volume: Secure Cloud, its datacenter (gpuops.providers.volumes)
            mount_path = spec.volume_mount_path or "/workspace"
            body["mounts"] = {
                "network": [
                    {
                        "volumeId": inputs.check_provider_id(spec.volume_id, "RunPod network volume id"),
                        "path": mount_path,
                    }
                ]
            }
            body["dataCenterIds"] = [inputs.check_provider_id(spec.volume_region, "RunPod datacenter id")]

        asked_at = time.time()  # the instance cannot predate our request (stamps may be whole seconds)

        def once() -> Any:  # the reply's pod
            return self._rest(
                "POST", "/v2/pods", f"create a {offer.card} pod", body=body, retries=False, creating=True
            )[1]

        pod, found = create_with_retries(once, self._find_label, label, self.retry.for_create(), asked_at)
        if found is not None:
            return found
        try:
            inst = self._instance(self._object(pod, None, "create a pod"))
        except (KeyError, TypeError, ValueError, ProviderError):
            found = self._find_label(label)
            if found is None:
                raise ProviderError(
                    ProviderErrorKind.SERVER, "RunPod's answer to the create has no pod id", "run `gpuops reconcile`"
                ) from None
            inst = found
        inst.created_at = max(inst.created_at or 0.0, asked_at)
        if inst.usd_per_hour is None:
            inst.usd_per_hour = offer.usd_per_hour
        if mount_path:
            inst.extra["volume_path"] = mount_path
        return inst

    @guarded
    def destroy(self, instance_id: str) -> None:
        """``DELETE /v2/pods/{id}`` (terminate; never stop: a stopped pod still bills its disk).

        Idempotent: a pod RunPod no longer knows (404) is success."""
        path = self._pod_path(instance_id)
        try:
            self._rest("DELETE", path, f"terminate pod {instance_id}")
        except ProviderError as e:
            if e.kind != ProviderErrorKind.GONE:
                raise

    def stop(self, instance_id: str) -> Instance | None:
        """``POST /v2/pods/{id}/action`` ``{"action": "stop"}``: GPU released, disk kept (and billed).

        The pod as RunPod answers it (None when gone). Raises ProviderError."""
        path = self._pod_path(instance_id) + "/action"
        try:
            _, pod = self._rest("POST", path, f"stop pod {instance_id}", body={"action": "stop"})
        except ProviderError as e:
            if e.kind == ProviderErrorKind.GONE:
                return None
            raise
        return self._instance(pod) if isinstance(pod, dict) and "id" in pod else None

    def volumes(self):
        """Persistent volumes (``RunPodVolumes``): list, create, delete, mountable offers."""
        from gpuops.providers.runpod.volumes import RunPodVolumes

        return RunPodVolumes(self)

    # -- the balance: GraphQL, which v2 lacks ----------------------------------------------------
    @guarded
    def balance(self) -> Balance:
        """The balance (USD) and spend rate (USD/h): GraphQL, v2 has no balance route.

        ``myself { clientBalance currentSpendPerHr }`` in one POST to ``<url>/graphql``
        (``RunPodClient._graphql``). A GraphQL error or an answer without a numeric balance (the API retired,
        a field gone) is ``Balance(usd=None, note=why)`` (``Balance.unreadable``). Raises
        ProviderError: SERVER at once for a web page or a 404 (no JSON): one POST, never retried,
        as it is not transient (runpod's own GraphQL helper retries nothing; provider_errors.py);
        SERVER or RATE_LIMIT for a 5xx (a gateway's page too), an unreachable host or a 429 once
        the retry policy's tries are spent; AUTH at once for a rejected key.
        ``gpuops.teardown.budget.read_balance`` takes every one of them but AUTH as the same
        "cannot be read", and says what stands in for the floor."""
        got = self._graphql(BALANCE_QUERY, "read the balance")
        errors = got.get("errors")
        if errors:  # GraphQL's own error answer (a 200): the API retired, a field gone
            first = errors[0] if isinstance(errors, list) else errors
            text = redact(str(first.get("message") if isinstance(first, dict) else first), self._key())
            return Balance(usd=None, note=f"RunPod's GraphQL API (the only one with the balance) answered {text[:200]}")
        data = got.get("data")
        me = data.get("myself") if isinstance(data, dict) else None
        if not isinstance(me, dict):
            return Balance(usd=None, note="RunPod's GraphQL API answered no account (myself)")
        bal, spend = me.get("clientBalance"), me.get("currentSpendPerHr")
        try:
            usd = float(bal)  # type: ignore[arg-type]  # None and non-numbers raise, caught below
            rate = float(spend) if spend is not None else None
        except (TypeError, ValueError):
            return Balance(usd=None, note=f"RunPod's GraphQL API answered a balance that is not a number ({bal!r:.40})")
        if not math.isfinite(usd):
            return Balance(usd=None, note=f"RunPod's GraphQL API answered a balance that is not a number ({bal!r:.40})")
        return Balance(usd=usd, spend_usd_per_hour=rate)

    # -- billing: the records, parsed in billing.py ---------------------------------------------
    @guarded
    def billing(self, since: float, until: float) -> builtins.list:
        """Pod and network-volume records over [since, until) epoch s as ``ledger.billing.ChargeLine``.

        Parsed by ``gpuops.providers.runpod.billing.charge_lines``. Raises ProviderError (AUTH,
        RATE_LIMIT, SERVER; retried as every call)."""
        from gpuops.providers.runpod.billing import BUCKET, charge_lines

        window = {"startTime": stamp(since), "endTime": stamp(until), "bucketSize": BUCKET}

        def records(path: str, what: str) -> list:
            _, payload = self._rest("GET", path, f"read {what} billing", params=window)
            recs = self._object(payload, "records", f"read {what} billing")
            if not isinstance(recs, list):
                raise ProviderError(
                    ProviderErrorKind.SERVER, f"RunPod's {what} billing has no list of records", "retry later"
                )
            return recs

        return charge_lines(
            records("/v2/billing/pods", "pod"), records("/v2/billing/network-volumes", "network-volume")
        )
