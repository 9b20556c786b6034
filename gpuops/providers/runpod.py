"""RunPod through the ``runpod`` SDK (1.11.0; imported lazily, inside methods).

Calls used: ``get_gpus``/``get_gpu`` (types and per-GPU prices), ``create_pod`` (on-demand pods,
``podFindAndDeployOnDemand``), ``get_pod``/``get_pods``, ``terminate_pod``, and the SDK's own
``run_graphql_query`` for ``myself { clientBalance currentSpendPerHr }`` (the SDK has no balance
call). Interruptible (spot) pods: RunPod withdrew them from its API in 2026, so a spot request is
ProviderError(UNSUPPORTED), never a silent on-demand rent.

SDK quirks handled here (runpod 1.11.0: runpod/__init__.py, runpod/api/graphql.py, runpod/api/ctl_commands.py,
runpod/api/mutations/pods.py):
- the key is module state (``runpod.api_key``), and ``create_pod``/``terminate_pod`` take no
  ``api_key=``; the base URL is read from ``RUNPOD_API_BASE_URL`` on every call. Both are set for the
  duration of each call under one lock (``_sdk``) and restored after.
- it never reads ``RUNPOD_API_KEY``; ``keys.resolve_key`` does.
- every string is pasted into GraphQL unescaped: labels and images are validated, env values
  escaped (``inputs``).
- it checks only HTTP 401; any other non-JSON reply surfaces as a JSON decode error and a JSON reply
  without ``data`` as TypeError/KeyError. Those are mapped to SERVER (retryable).
- ``import runpod`` spawns py-cpuinfo subprocesses (~1.2 s); a stub module is in place during the
  import (``_import_runpod``).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
import types
from datetime import datetime, timezone
from typing import Any, Iterator

from gpuops.catalog import GIB, Card, cards
from gpuops.errors import BadInput
import gpuops.providers.inputs as inputs
from gpuops.providers.base import Balance, CreateSpec, Instance, InstanceStatus, Offer, OfferQuery, Provider, ProviderError, ProviderErrorKind, SshEndpoint
from gpuops.providers.keys import Credential, missing_key_fix, redact
from gpuops.providers.retry import RetryPolicy, call_with_retries

NAME = "runpod"
CLOUDS = ("SECURE", "COMMUNITY")
SPOT_WITHDRAWN = "RunPod withdrew interruptible (spot) pods from its API in 2026; gpuops will not rent on-demand in their place"
SPOT_FIX = "use --provider vast for interruptible offers, or --on-demand to rent an on-demand RunPod pod"
BALANCE_QUERY = "query myself { myself { clientBalance currentSpendPerHr } }"

_SDK_LOCK = threading.RLock()

# RunPod desiredStatus -> ours. RUNNING is PROVISIONING until the pod has a runtime (see _status).
_STATUS = {
    "RUNNING": InstanceStatus.RUNNING,
    "CREATED": InstanceStatus.PROVISIONING,
    "RESTARTING": InstanceStatus.PROVISIONING,
    "EXITED": InstanceStatus.EXITED,
    "STOPPED": InstanceStatus.STOPPED,
    "PAUSED": InstanceStatus.STOPPED,
    "TERMINATED": InstanceStatus.GONE,
    "DEAD": InstanceStatus.GONE,
}


def _import_runpod() -> Any:
    """``import runpod`` without py-cpuinfo's import-time subprocesses (a stub stands in for the
    import only; runpod keeps "Unable to get processor info." as its serverless debug string)."""
    if "runpod" in sys.modules:
        return sys.modules["runpod"]
    stubbed = "cpuinfo" not in sys.modules
    if stubbed:
        stub = types.ModuleType("cpuinfo")
        stub.get_cpu_info = lambda: {}  # type: ignore[attr-defined]
        sys.modules["cpuinfo"] = stub
    try:
        import runpod
    finally:
        if stubbed:
            sys.modules.pop("cpuinfo", None)
    return runpod


def _parse_status_change(text: str | None) -> float | None:
    """Epoch seconds from RunPod's ``lastStatusChange`` ("Rented by User: Sun Nov 29 2026 16:00:00
    GMT+0000 (...)"), or None when it has another shape."""
    if not text or not text.startswith("Rented by User: "):
        return None  # other prefixes ("Exited by User: ...") are not the rental time
    stamp = text.split(": ", 1)[1].split(" (")[0].replace("GMT", "")
    try:
        return datetime.strptime(stamp, "%a %b %d %Y %H:%M:%S %z").timestamp()
    except ValueError:
        return None


class RunPodProvider(Provider):
    """RunPod on-demand pods. ``credential`` None: every call raises AUTH with the fix.

    ``url``: GraphQL base (``/graphql`` is appended by the SDK). ``retry``: bounded retries for rate
    limits and 5xx. ``cloud_types``: which RunPod clouds to offer (SECURE, COMMUNITY).
    """

    name = NAME
    supports_spot = False  # withdrawn from RunPod's API in 2026

    def __init__(self, credential: Credential | None, url: str, retry: RetryPolicy | None = None, cloud_types: tuple[str, ...] = CLOUDS):
        self.credential = credential
        self.url = url
        self.retry = retry or RetryPolicy()
        self.call_deadline_s, self.max_reply_bytes = self.retry.call_deadline_s, self.retry.max_reply_bytes
        self.cloud_types = cloud_types
        # The account this key acts for (gpuops.ownership): None without a key.
        self.account = f"{NAME}:{credential.account}" if credential is not None else None

    # -- the SDK session: key and URL are process-global in the SDK -------------------------
    @contextlib.contextmanager
    def _sdk(self) -> Iterator[Any]:
        if self.credential is None:
            raise ProviderError(ProviderErrorKind.AUTH, "no RunPod API key found", missing_key_fix(NAME))
        runpod = _import_runpod()
        with _SDK_LOCK:
            old_key, old_url = runpod.api_key, os.environ.get("RUNPOD_API_BASE_URL")
            runpod.api_key = self.credential.key
            os.environ["RUNPOD_API_BASE_URL"] = self.url
            try:
                yield runpod
            finally:
                runpod.api_key = old_key
                if old_url is None:
                    os.environ.pop("RUNPOD_API_BASE_URL", None)
                else:
                    os.environ["RUNPOD_API_BASE_URL"] = old_url

    def _error(self, e: Exception, action: str) -> ProviderError:
        """Map an SDK/transport exception to a ProviderError (the key scrubbed from any text)."""
        import requests
        from runpod import error as rperr

        key = self.credential.key if self.credential else None
        msg = redact(str(e), key)
        if isinstance(e, rperr.AuthenticationError):
            return ProviderError(ProviderErrorKind.AUTH, f"RunPod rejected the API key ({self.credential.source if self.credential else 'none'}) while trying to {action}", missing_key_fix(NAME))
        if isinstance(e, rperr.QueryError):
            low = msg.lower()
            if "balance" in low or "insufficient" in low or "funds" in low:
                return ProviderError(ProviderErrorKind.FUNDS, f"RunPod refused to {action}: {msg}", "add credit at runpod.io > Billing")
            if "no longer any instances available" in low or "no instances" in low or "not enough" in low or "no available" in low:
                return ProviderError(ProviderErrorKind.NO_CAPACITY, f"RunPod has no capacity to {action}: {msg}", "try another offer or card")
            if "rate limit" in low or "too many requests" in low:
                return ProviderError(ProviderErrorKind.RATE_LIMIT, f"RunPod rate limit while trying to {action}", "wait a minute and retry")
            if "not found" in low or "does not exist" in low:
                return ProviderError(ProviderErrorKind.GONE, f"RunPod: {msg}")
            if "internal" in low or "unavailable" in low or "timeout" in low:
                return ProviderError(ProviderErrorKind.SERVER, f"RunPod server error while trying to {action}: {msg}", "retry later")
            return ProviderError(ProviderErrorKind.BAD_REQUEST, f"RunPod rejected the request to {action}: {msg}", "check the card, image and disk size")
        if isinstance(e, (requests.ConnectionError, requests.Timeout)):
            return ProviderError(ProviderErrorKind.SERVER, f"cannot reach RunPod at {self.url} to {action}", "check the network or [providers.runpod] url")
        if isinstance(e, ValueError) and "no gpu found" in msg.lower():
            return ProviderError(ProviderErrorKind.OFFER_GONE, f"RunPod does not list this GPU type any more (while trying to {action})", "try the next offer")
        # No status check in the SDK: 429/5xx arrive as a JSON decode error (HTML body) or as a
        # TypeError/KeyError when the JSON has no "data".
        if isinstance(e, (ValueError, TypeError, KeyError)) and not isinstance(e, rperr.RunPodError):
            return ProviderError(ProviderErrorKind.SERVER, f"RunPod answered with an error page or no data while trying to {action}", "retry later; see status.runpod.io")
        return ProviderError(ProviderErrorKind.SERVER, f"RunPod call failed while trying to {action}: {type(e).__name__}: {msg}")

    def _call(self, action: str, fn, retries: bool = True):
        def once():
            with self._sdk() as runpod:
                try:
                    return fn(runpod)
                except ProviderError:
                    raise
                except Exception as e:  # the SDK raises several unrelated types; all are mapped
                    raise self._error(e, action) from None

        return call_with_retries(once, self.retry) if retries else once()

    # -- offers ------------------------------------------------------------------------------
    def _cards(self, query: OfferQuery) -> list[Card]:
        chosen = [c for c in cards() if c.runpod_id and (not query.cards or c.name in query.cards)]
        from gpuops.providers.base import VRAM_TOLERANCE

        return [c for c in chosen if c.vram_bytes >= query.min_vram_bytes * (1.0 - VRAM_TOLERANCE)]

    def offers(self, query: OfferQuery) -> list[Offer]:
        """On-demand offers: one per (card, cloud type) RunPod lists at ``query.gpu_count``.

        ``usd_per_hour`` = per-GPU ``securePrice``/``communityPrice`` x gpu_count (RunPod prices
        GPU time; container disk is billed per GB-month, not included). Reliability: RunPod
        publishes none (1.0). Raises ProviderError(UNSUPPORTED) when ``query.spot`` is True.
        """
        if query.spot is True:
            raise ProviderError(ProviderErrorKind.UNSUPPORTED, SPOT_WITHDRAWN, SPOT_FIX)
        wanted = self._cards(query)
        if not wanted:
            return []
        key = self.credential.key if self.credential else None
        listed = {g["id"] for g in self._call("list GPU types", lambda rp: rp.get_gpus(api_key=key)) or []}
        out: list[Offer] = []
        for card in wanted:
            if card.runpod_id not in listed:
                continue
            gpu_id = inputs.graphql_escape(inputs.check_provider_id(card.runpod_id, "RunPod GPU type"))
            try:
                g = self._call(f"price {card.name}", lambda rp: rp.get_gpu(gpu_id, query.gpu_count, api_key=key))
            except ProviderError as e:
                if e.kind in (ProviderErrorKind.SERVER, ProviderErrorKind.BAD_REQUEST, ProviderErrorKind.GONE):
                    continue  # one card's price missing must not hide the others
                raise
            if (g.get("maxGpuCount") or 0) < query.gpu_count:
                continue
            # Numbers as RunPod sent them (NaN, negative included): gpuops.planning.offers.screen drops such an
            # offer with a note. Memory not reported at all: the catalog's figure.
            mem = g.get("memoryInGb")
            try:
                mem_f = float(mem) if mem is not None else None
            except (TypeError, ValueError):
                mem_f = float("nan")
            vram = card.vram_bytes if mem_f is None else (int(mem_f * GIB) if math.isfinite(mem_f) else mem_f)
            for cloud in self.cloud_types:
                available = g.get("secureCloud") if cloud == "SECURE" else g.get("communityCloud")
                per_gpu = g.get("securePrice") if cloud == "SECURE" else g.get("communityPrice")
                if not available or per_gpu is None:
                    continue
                try:
                    price = round(float(per_gpu) * query.gpu_count, 6)
                except (TypeError, ValueError):
                    price = float("nan")
                if query.max_usd_per_hour is not None and price > query.max_usd_per_hour:
                    continue
                out.append(Offer(provider=NAME, offer_id=f"{cloud.lower()}:{card.runpod_id}", card=card.name, gpu_count=query.gpu_count,
                                 vram_bytes=vram, usd_per_hour=price, spot=False, min_bid=None, reliability=1.0,
                                 region=f"{cloud.lower()} cloud"))
        return out

    # -- instances ---------------------------------------------------------------------------
    def _instance(self, pod: dict) -> Instance:
        raw = str(pod.get("desiredStatus") or "")
        runtime = pod.get("runtime") or None
        status = _STATUS.get(raw.upper(), InstanceStatus.UNKNOWN)
        if status == InstanceStatus.RUNNING and not runtime:
            status = InstanceStatus.PROVISIONING
        ssh = None
        for p in (runtime or {}).get("ports") or []:
            # Port 22 published on a public IP over TCP; the SDK's own helper checks only privatePort.
            if p.get("privatePort") == 22 and p.get("isIpPublic") and p.get("type", "tcp") == "tcp" and p.get("ip") and p.get("publicPort"):
                ssh = SshEndpoint(host=str(p["ip"]), port=int(p["publicPort"]))
                break
        cost = pod.get("costPerHr")
        return Instance(
            id=str(pod["id"]), label=str(pod.get("name") or ""), status=status,
            usd_per_hour=float(cost) if cost is not None else None, ssh=ssh,
            created_at=_parse_status_change(pod.get("lastStatusChange")), raw_status=raw,
            extra={"gpu_count": pod.get("gpuCount"), "gpu": (pod.get("machine") or {}).get("gpuDisplayName"),
                   "uptime_seconds": pod.get("uptimeSeconds")},
        )

    def get(self, instance_id: str) -> Instance | None:
        """The pod, or None when RunPod no longer knows it (terminated pods vanish)."""
        pid = inputs.check_provider_id(instance_id, "RunPod pod id")
        key = self.credential.key if self.credential else None
        try:
            pod = self._call(f"read pod {pid}", lambda rp: rp.get_pod(pid, api_key=key))
        except ProviderError as e:
            if e.kind == ProviderErrorKind.GONE:
                return None
            raise
        return self._instance(pod) if pod else None

    def list(self, label_prefix: str = "gpuops-") -> list[Instance]:
        """Pods whose name starts with ``label_prefix`` (terminated pods are not listed by RunPod)."""
        key = self.credential.key if self.credential else None
        pods = self._call("list pods", lambda rp: rp.get_pods(api_key=key)) or []
        return [self._instance(p) for p in pods if str(p.get("name") or "").startswith(label_prefix)]

    def _find_label(self, label: str) -> Instance | None:
        """``find_by_label`` where a failed look-up means "not found" (the caller raises its own error)."""
        try:
            return self.find_by_label(label)
        except ProviderError:
            return None

    def create(self, offer: Offer, spec: CreateSpec) -> Instance:
        """Deploy an on-demand pod for ``offer`` (offer id ``<cloud>:<gpu type id>``).

        The SSH public key goes in ``PUBLIC_KEY`` (RunPod images install it for root). After an
        ambiguous failure (5xx, rate limit) the label is looked up: a pod that was created anyway is
        returned (``extra["recovered_after"]`` holds the error) so it is tracked and destroyed.
        Raises ProviderError: UNSUPPORTED for a bid, NO_CAPACITY when RunPod has no machine left.
        """
        if offer.spot or spec.bid_usd_per_hour is not None:
            raise ProviderError(ProviderErrorKind.UNSUPPORTED, SPOT_WITHDRAWN, SPOT_FIX)
        cloud, _, gpu_type = offer.offer_id.partition(":")
        if cloud.upper() not in CLOUDS or not gpu_type:
            raise BadInput(f"not a RunPod offer id: {offer.offer_id!r}", "pick an offer from `gpuops offers --provider runpod`")
        label = inputs.check_label(spec.label)
        image = inputs.check_image(spec.image)
        gpu_id = inputs.graphql_escape(inputs.check_provider_id(gpu_type, "RunPod GPU type"))
        env = dict(inputs.check_env(spec.env))
        if spec.ssh_public_key:
            env["PUBLIC_KEY"] = inputs.check_ssh_public_key(spec.ssh_public_key)
        env_escaped = {k: inputs.graphql_escape(v) for k, v in env.items()}
        disk = max(1, int(round(spec.disk_gb)))

        mount = {}
        if spec.volume_id:  # a network volume: Secure Cloud, its datacenter (gpuops.providers.volumes)
            mount = {"network_volume_id": inputs.check_provider_id(spec.volume_id, "RunPod network volume id"),
                     "data_center_id": inputs.check_provider_id(spec.volume_region, "RunPod datacenter id"),
                     "volume_mount_path": spec.volume_mount_path or "/workspace"}

        def deploy(rp):
            return rp.create_pod(name=label, image_name=image, gpu_type_id=gpu_id, cloud_type=cloud.upper(), gpu_count=offer.gpu_count,
                                 container_disk_in_gb=disk, volume_in_gb=0, ports="22/tcp", env=env_escaped or None,
                                 support_public_ip=True, start_ssh=True, **mount)

        asked_at = time.time()  # the instance cannot predate our request (stamps may be whole seconds)
        attempts = max(1, self.retry.attempts)
        last: ProviderError | None = None
        for attempt in range(attempts):
            try:
                pod = self._call(f"create a {offer.card} pod", deploy, retries=False)
                break
            except ProviderError as e:
                if not e.retryable:
                    raise e from None
                last = e
                found = self._find_label(label)
                if found is not None:
                    found.extra["recovered_after"] = e.message
                    found.created_at = max(found.created_at or 0.0, asked_at)
                    return found
                if attempt + 1 < attempts:
                    time.sleep(min(self.retry.max_wait_s, self.retry.wait_s * (2**attempt)))
        else:
            assert last is not None
            raise last
        inst = None
        try:
            inst = self.get(str(pod["id"]))
        except ProviderError:
            pass
        if inst is None:
            inst = Instance(id=str(pod["id"]), label=label, status=InstanceStatus.PROVISIONING, usd_per_hour=offer.usd_per_hour,
                            created_at=time.time(), raw_status="")
        inst.created_at = max(inst.created_at or 0.0, asked_at)
        if mount:
            inst.extra["volume_path"] = mount["volume_mount_path"]
        return inst

    def destroy(self, instance_id: str) -> None:
        """Terminate the pod (never stop: a stopped pod still bills its disk). Idempotent: a pod
        RunPod no longer knows is success."""
        pid = inputs.check_provider_id(instance_id, "RunPod pod id")
        try:
            self._call(f"terminate pod {pid}", lambda rp: rp.terminate_pod(pid))
        except ProviderError as e:
            if e.kind in (ProviderErrorKind.AUTH, ProviderErrorKind.RATE_LIMIT, ProviderErrorKind.SERVER):
                raise
            if self.get(pid) is not None:  # "not found"-like errors: success only if it is gone
                raise

    def volumes(self):
        """Persistent volumes (gpuops.providers.volumes.RunPodVolumes): list, create, delete, mountable offers."""
        from gpuops.providers.volumes import RunPodVolumes

        return RunPodVolumes(self)

    def balance(self) -> Balance:
        """``myself { clientBalance currentSpendPerHr }`` through the SDK's GraphQL helper (USD, USD/h)."""

        def q(rp):
            from runpod.api.graphql import run_graphql_query

            return run_graphql_query(BALANCE_QUERY, api_key=self.credential.key)["data"]["myself"]

        me = self._call("read the balance", q)
        bal, spend = me.get("clientBalance"), me.get("currentSpendPerHr")
        return Balance(usd=float(bal) if bal is not None else None, spend_usd_per_hour=float(spend) if spend is not None else None)

    # -- billing -----------------------------------------------------------------------------
    # RunPod's REST API (not the GraphQL one the SDK speaks): https://rest.runpod.io/v1, Bearer key.
    # ``GET /billing/pods?bucketSize=&grouping=podId&startTime=&endTime=`` is what runpodctl sends for
    # ``runpodctl billing pods --bucket-size ... --grouping podId`` (runpod/runpodctl
    # internal/api/billing.go ``GetPodBilling``, cmd/billing/pods.go); it answers a JSON list of
    # ``{"time","amount","timeBilledMs","diskSpaceBilledGb","podId"}`` (docs.runpod.io/api-reference/
    # billing/GET/billing/pods). ``GET /billing/networkvolumes`` (``GetNetworkVolumeBilling``) answers
    # ``{"time","amount","diskSpaceBilledGb"}`` per bucket, for the whole account (no volume id).
    # Hour buckets: the finest RunPod has, so a month boundary falls between records.
    REST_URL = "https://rest.runpod.io/v1"
    BILLING_BUCKET = "hour"

    def _rest_url(self) -> str:
        """RunPod's REST base: the public one for the public GraphQL endpoint, else ``<url>/v1`` on
        the same host (a proxy or an emulator serves both), or ``RUNPOD_REST_URL`` when set."""
        env = os.environ.get("RUNPOD_REST_URL", "").strip().rstrip("/")
        if env:
            return env
        if self.url.rstrip("/") in ("https://api.runpod.io", "https://api.runpod.io/graphql"):
            return self.REST_URL
        return self.url.rstrip("/") + "/v1"

    def billing(self, since: float, until: float) -> list:
        """Pod records (``grouping=podId``, hour buckets) and network-volume records over [since,
        until) epoch s as ``ledger.billing.ChargeLine``: a pod record with compute time
        (``timeBilledMs`` > 0) is kind ``gpu`` (RunPod's pod price includes the running pod's disk),
        one without is ``storage`` (a stopped pod's disk); network-volume records are account-level
        ``storage`` lines (instance_id None). Billing unit: per second (PROVIDER_INCREMENT_S).
        Raises ProviderError (AUTH, RATE_LIMIT, SERVER; retried as every call)."""
        import requests

        from ledger.billing import ChargeLine

        if self.credential is None:
            raise ProviderError(ProviderErrorKind.AUTH, "no RunPod API key found", missing_key_fix(NAME))
        key = self.credential.key
        base = self._rest_url()

        def stamp(t: float) -> str:
            return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

        def get(path: str, params: dict) -> list:
            def once():
                try:
                    r = requests.get(base + path, params=params, headers={"Authorization": f"Bearer {key}"}, timeout=30)
                except (requests.ConnectionError, requests.Timeout):
                    raise ProviderError(ProviderErrorKind.SERVER, f"cannot reach RunPod's REST API at {base} to read billing",
                                        "check the network, or set RUNPOD_REST_URL") from None
                if r.status_code in (401, 403):
                    raise ProviderError(ProviderErrorKind.AUTH, "RunPod rejected the API key while reading billing", missing_key_fix(NAME))
                if r.status_code == 429:
                    raise ProviderError(ProviderErrorKind.RATE_LIMIT, "RunPod rate limit while reading billing", "wait a minute and retry")
                if r.status_code >= 500:
                    raise ProviderError(ProviderErrorKind.SERVER, f"RunPod server error {r.status_code} while reading billing", "retry later")
                if r.status_code != 200:
                    raise ProviderError(ProviderErrorKind.BAD_REQUEST, f"RunPod refused the billing query ({r.status_code}): {redact(r.text[:200], key)}")
                try:
                    body = r.json()
                except ValueError:
                    raise ProviderError(ProviderErrorKind.SERVER, "RunPod's billing answer is not JSON", "retry later") from None
                if isinstance(body, dict):  # the v2 envelope {"records": [...], "metadata": {...}}
                    body = body.get("records") or []
                if not isinstance(body, list):
                    raise ProviderError(ProviderErrorKind.SERVER, "RunPod's billing answer is not a list of records")
                return body

            return call_with_retries(once, self.retry)

        window = {"bucketSize": self.BILLING_BUCKET, "startTime": stamp(since), "endTime": stamp(until)}
        step = 3600.0
        out = []
        for rec in get("/billing/pods", {**window, "grouping": "podId"}):
            try:
                start = datetime.fromisoformat(str(rec["time"]).replace("Z", "+00:00")).timestamp()
                usd = float(rec.get("amount") or rec.get("totalAmount") or 0.0)
                ms = float(rec.get("timeBilledMs") or 0.0)
                pod = str(rec["podId"])
            except (KeyError, TypeError, ValueError):
                continue  # a malformed record is not a charge we can attribute
            if usd <= 0:
                continue
            out.append(ChargeLine(NAME, pod, usd, start, start + step, kind="gpu" if ms > 0 else "storage",
                                  description=f"pod {pod}, {ms / 1000:.0f} s billed", seconds=ms / 1000.0))
        for rec in get("/billing/networkvolumes", window):
            try:
                start = datetime.fromisoformat(str(rec["time"]).replace("Z", "+00:00")).timestamp()
                usd = float(rec.get("amount") or 0.0) + float(rec.get("highPerformanceStorageAmount") or 0.0)
            except (KeyError, TypeError, ValueError):
                continue
            if usd > 0:
                out.append(ChargeLine(NAME, None, usd, start, start + step, kind="storage",
                                      description=f"network volumes, {rec.get('diskSpaceBilledGb') or 0} GB"))
        return out
