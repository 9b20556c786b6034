"""The provider contract: what every marketplace (and this machine) must answer.

A provider is a subclass of the ABC ``Provider`` that fills in six abstract methods (``offers``,
``create``, ``get``, ``list``, ``destroy``, ``balance``), may override the optional ones
(``destroyed_at``, ``find_by_label``, ``box``), and states what else it can do with capability
mixins (``Interruptible``, ``HasVolumes``, ``HasBilling``) whose methods are then abstract too.
Everything above it (selection, lifecycle, teardown, books) is provider-agnostic and calls those
methods directly -- never through ``getattr`` probes. Units everywhere: money in USD, prices in
USD/hour for the whole box, times in epoch seconds UTC, sizes in bytes (``vram_bytes``) or GB
(``disk_gb``, 10^9 bytes, as providers quote disks). Errors: every method raises ``ProviderError``
(its ``kind`` says what the caller may do: retry, next offer, give up); nothing else may escape a
provider method except bugs.
"""

from __future__ import annotations

import abc
import builtins  # a method named list shadows the type in its class
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from gpuops.providers.provider_errors import ProviderError, ProviderErrorKind  # noqa: F401  (part of the base's interface)

if TYPE_CHECKING:
    from gpuops.providers.volumes import VolumeService
    from ledger.billing import ChargeLine

T = TypeVar("T")


class InstanceStatus(str, enum.Enum):
    """Our status vocabulary; a provider's unknown string maps to UNKNOWN (raw value kept)."""

    PROVISIONING = "provisioning"
    RUNNING = "running"
    STOPPED = "stopped"
    EXITED = "exited"
    GONE = "gone"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Offer:
    """A rentable configuration.

        ``vram_bytes`` is per GPU; ``usd_per_hour`` is the whole box (all GPUs, storage included where
        the provider bills it hourly). ``min_bid`` is USD/h for interruptible offers, else None.
        ``reliability`` is 0..1 (1 when the provider publishes none). ``storage_usd_per_hour`` is what
        the provider bills beside a bid (Vast: the disk, ``storage_total_cost``); ``listed_usd_per_hour``
        an interruptible offer's on-demand price where the provider gave it (Vast: the same machine's
    on-demand row). ``price`` is what the row costs per hour if rented as
        offered (on spot: the bid + storage).
    """

    provider: str
    offer_id: str
    card: str
    gpu_count: int
    vram_bytes: int
    usd_per_hour: float
    spot: bool
    min_bid: float | None = None
    reliability: float = 1.0
    region: str = ""
    disk_gb: float = 0.0
    net_down_mbps: float = 0.0
    simulated: bool = False
    machine_id: str = ""  # the host machine, where the provider has one (Vast); a Vast volume mounts only there
    storage_usd_per_hour: float = 0.0
    listed_usd_per_hour: float | None = (
        None  # an interruptible offer's on-demand price, where the provider gives one (Vast's dph_total)
    )

    @property
    def price(self) -> float:
        """USD/h for the whole box if rented as offered.

        For an interruptible offer the minimum bid (gpuops bids it: ``CreateSpec.bid_usd_per_hour``)
        plus the storage billed beside it (Vast charges ``bid + storage``, as gpuhunt prices a spot
        offer: min_bid + disk cost), else the listed price."""
        if self.spot and self.min_bid is not None:
            return round(self.min_bid + self.storage_usd_per_hour, 6)
        return self.usd_per_hour

    @property
    def on_demand_usd_per_hour(self) -> float | None:
        """The on-demand price beside ``price`` when the two differ (a spot offer), else None.

        ``listed_usd_per_hour`` where the provider gave one, else ``usd_per_hour``."""
        listed = self.listed_usd_per_hour if self.listed_usd_per_hour is not None else self.usd_per_hour
        return listed if round(listed, 6) != round(self.price, 6) else None

    def as_json(self) -> dict:
        """``price_usd_per_hour`` is what the offer costs rented as shown (the bid on spot).

        ``on_demand_usd_per_hour`` the listed price where it differs (else null); ``usd_per_hour``
        and ``min_bid`` the provider's own figures; ``simulated``: priced, never charged (the local
        provider's catalog price, `gpuops demo`'s emulators)."""
        return {
            "price_usd_per_hour": self.price,
            "on_demand_usd_per_hour": self.on_demand_usd_per_hour,
            "provider": self.provider,
            "offer_id": self.offer_id,
            "card": self.card,
            "gpu_count": self.gpu_count,
            "vram_bytes": self.vram_bytes,
            "usd_per_hour": self.usd_per_hour,
            "spot": self.spot,
            "min_bid": self.min_bid,
            "reliability": self.reliability,
            "region": self.region,
            "simulated": self.simulated,
        }


# Providers report usable memory a little under the nominal figure (ECC, driver reservations):
# an 80 GiB card shows ~79.2 GiB in nvidia-smi, Vast's gpu_ram is in MB. Accept offers whose
# reported VRAM is within this fraction of what the plan needs: the same 7 % gpuhunt applies
# (https://github.com/dstackai/gpuhunt, src/gpuhunt/_internal/constraints.py, correct_gpu_memory_gib).
VRAM_TOLERANCE = 0.07


@dataclass(frozen=True)
class OfferQuery:
    """What `up`/`offers` asks for.

    ``cards`` are catalog names (empty = any); ``min_vram_bytes`` per GPU; ``spot`` True/False, or
    None for both; ``max_usd_per_hour`` for the whole box."""

    cards: tuple[str, ...] = ()
    gpu_count: int = 1
    min_vram_bytes: int = 0
    spot: bool | None = None
    max_usd_per_hour: float | None = None


@dataclass(frozen=True)
class SshEndpoint:
    host: str
    port: int
    user: str = "root"


@dataclass
class Instance:
    """A rented box as the provider reports it. ``usd_per_hour`` is the price really charged."""

    id: str
    label: str
    status: InstanceStatus
    usd_per_hour: float | None = None
    ssh: SshEndpoint | None = None
    created_at: float | None = None  # epoch seconds, UTC
    raw_status: str = ""
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CreateSpec:
    """What to put on the box.

    ``label`` is ``gpuops-<session>``; ``env`` values never contain the account key;
    ``bid_usd_per_hour`` is set for interruptible offers only. Optional capability
    (gpuops.providers.volumes): ``volume_id`` mounts that persistent volume at ``volume_mount_path``
    (``volume_region``: its RunPod datacenter); a provider that cannot mount one raises
    ProviderError(UNSUPPORTED), and a volume is never deleted by ``destroy``."""

    label: str
    image: str = ""
    disk_gb: float = 40.0
    env: dict[str, str] = field(default_factory=dict)
    ssh_public_key: str = ""
    bid_usd_per_hour: float | None = None
    workdir: str = ""
    volume_id: str = ""
    volume_region: str = ""
    volume_mount_path: str = ""


@dataclass(frozen=True)
class Balance:
    """Account credit in USD, and the current spend rate in USD/h when the provider reports it.

    ``usd`` None: no figure. With a ``note`` the balance exists but cannot be read (a field the
    answer lacks, an API retired: the note says why) and a balance floor cannot be enforced
    (``unreadable``); without one the provider keeps no balance at all (local)."""

    usd: float | None
    spend_usd_per_hour: float | None = None
    note: str = ""

    @property
    def unreadable(self) -> bool:
        """True when the provider keeps a balance this answer could not give (``usd`` None, ``note`` why)."""
        return self.usd is None and bool(self.note)


def extra_fix(provider: str) -> str:
    """The one line that installs what ``provider`` needs: its pyproject extra (``gpuops[<name>]``)."""
    return f"pip install 'gpuops[{provider}]'"


def missing_packages(modules: tuple[str, ...]) -> list[str]:
    """The import names among ``modules`` that this Python cannot import (``importlib.util.find_spec``)."""
    import importlib.util

    out = []
    for m in modules:
        try:
            found = importlib.util.find_spec(m) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(m)
    return out


def require_packages(provider: str, modules: tuple[str, ...]) -> None:
    """Raise ProviderError(UNSUPPORTED) naming ``extra_fix(provider)`` when a package of ``modules`` is missing.

    The one check of a provider's extra: every guarded call runs it first (``Provider.requires``),
    so the first call of an `up` (the offers search, before anything is rented) stops with one
    line naming the fix, and `gpuops check` reports the same packages (``missing_packages``)."""
    missing = missing_packages(modules)
    if missing:
        raise ProviderError(
            ProviderErrorKind.UNSUPPORTED,
            f"{provider}: {', '.join(missing)} is not installed (the {provider} extra)",
            extra_fix(provider),
        )


def guarded(fn: Callable[..., T]) -> Callable[..., T]:
    """Run a provider method under its call guard (``gpuops.providers.http_guard``).

    One total deadline (``self.call_deadline_s`` seconds; a ``create``'s is
    ``self.create_deadline_s``, which leaves room to wait out a rate limit) and a reply size cap
    (``self.max_reply_bytes`` bytes) over every HTTP request it makes. Past the deadline the method
    raises ProviderError(TIMEOUT), over the cap ProviderError(SERVER). A provider with
    ``http_calls`` False (local) runs the method bare: the guard would import requests only to guard
    nothing. Nested guarded calls keep the outer deadline. Every HTTP provider's contract methods
    carry it (``tests/providers/test_registry.py`` checks ``GUARDED`` on each registered class).
    A package of the provider's extra that is missing (``requires``) raises ProviderError(UNSUPPORTED)
    with ``extra_fix`` before anything is called."""
    import functools

    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        if not self.http_calls:
            return fn(self, *args, **kwargs)
        require_packages(self.name, self.requires)  # before the guard, which imports requests
        from gpuops.providers.http_guard import guard

        deadline_s = self.create_deadline_s if fn.__name__ == "create" else self.call_deadline_s
        with guard(f"{self.name}: {fn.__name__}", deadline_s, self.max_reply_bytes):
            return fn(self, *args, **kwargs)

    call.guarded = True  # type: ignore[attr-defined]  # a mark on the wrapper function, read by the provider tests
    return call


class Provider(abc.ABC):
    """One marketplace (or this machine).

    Subclass it (with the capability mixins below that it has) and register it in
    ``gpuops.providers`` (docs/adding-a-provider.md). ``name`` is a
    ``onbox.vocabulary.ProviderName`` value.

    Required (abstract: a class missing one cannot be instantiated):

    * ``offers(query) -> list[Offer]`` -- rentable now and matching ``query`` (any order; the
      caller ranks). Numbers as the provider sent them: ``gpuops.planning.offers.screen`` drops an offer whose
      price, VRAM or GPU count is not a finite positive number, with a note. Raises ProviderError
      (AUTH, RATE_LIMIT, SERVER, ...).
    * ``create(offer, spec) -> Instance`` -- rent ``offer`` labelled ``spec.label``. Returns the
      instance (``usd_per_hour``: the price really charged when the provider says it). Raises
      ProviderError; when the failed call may still have made an instance, ``instance_id`` is set
      (or the caller finds it with ``find_by_label``): the caller books and destroys it.
    * ``get(instance_id) -> Instance | None`` -- None (or status GONE) when it no longer exists.
    * ``list(label_prefix="gpuops-") -> list[Instance]`` -- live instances whose label starts with
      the prefix (gone ones may be omitted).
    * ``destroy(instance_id) -> None`` -- idempotent: destroying a gone instance succeeds. Raises
      ProviderError only when the instance may still exist.
    * ``balance() -> Balance`` -- account credit (``usd`` None when the provider has no balance).

    An HTTP provider decorates each of ``GUARDED`` it defines with ``@guarded``: one total deadline
    (``call_deadline_s``) and a reply size cap (``max_reply_bytes``) per call.

    Optional, with typed defaults here (override when the provider can do better):

    * ``destroyed_at(instance_id) -> float | None`` -- the provider's own record of when billing
      stopped (epoch s), or None when it keeps none (the caller then uses its own rule).
    * ``find_by_label(label) -> Instance | None`` -- the live instance with exactly this label
      (default: scans ``list``). Used when a create failed or was interrupted mid-call.
    * ``box(instance) -> Box | None`` -- a transport to the instance other than SSH (the local
      provider's own directory), or None to use SSH.

    Capabilities, each a mixin that makes its methods abstract (callers ask the base's typed
    defaults, never ``getattr``): ``Interruptible`` (``supports_spot``: spot offers at a bid),
    ``HasVolumes`` (``volumes()``: persistent volumes), ``HasBilling`` (``billing()``: the
    provider's own charge lines for ``gpuops ledger sync``).

    Ownership: ``account`` is the non-secret name of the account this provider object acts for
    (``gpuops.ownership``: ``<provider>:<8 hex of sha256(key)>``; local: login@host + data dir;
    None: no credential, it owns nothing). Every row it rents books it; only a provider with the
    same ``account`` ends that row or confirms its instance gone.
    """

    name: str = ""
    # Whether interruptible offers exist at all (False: `up` asks on-demand); True via Interruptible.
    supports_spot: bool = False
    # Why not, for `up --spot --recover` on a provider without interruptible boxes.
    no_spot_reason: str = "it rents on-demand boxes only"
    # The provider API routes this provider calls, as (method, path template under its API base),
    # for `gpuops check` and the docs; empty for one that calls none (local).
    routes: tuple[tuple[str, str], ...] = ()
    # The import names of the packages its pyproject extra installs (``require_packages`` checks
    # them before every guarded call; `gpuops check` reports them).
    requires: tuple[str, ...] = ()
    account: str | None = None
    # Every contract method is one provider call with a total deadline (seconds, retries included)
    # and a per-reply size cap (bytes), enforced on the SDK's HTTP by ``http_guard`` (sources there).
    call_deadline_s: float = 60.0
    max_reply_bytes: int = 16 * 2**20
    # A create's own deadline (seconds): room to wait out a provider's rate limit within it
    # (``RetryPolicy.create_deadline_s``, where the figure is stated).
    create_deadline_s: float = 60.0
    # False for a provider that makes no HTTP call (local): ``@guarded`` runs its methods bare (the
    # guard would import requests, ~30 ms of `watchdog --once` start-up, only to guard nothing).
    http_calls: bool = True
    # Every offer is simulated (priced, never charged): set by ``get_provider`` in `gpuops demo`'s
    # data directory, where the marketplaces are its emulators on 127.0.0.1.
    simulated: bool = False

    @property
    def containment_note(self) -> str:
        """What `up` says once when it rents a box that the user's own files are not hidden from.

        "" for a rented box, which is another machine (the local provider overrides it)."""
        return ""

    # The methods that are one provider call each: an HTTP provider's own definitions carry @guarded.
    GUARDED = ("offers", "create", "get", "list", "destroy", "balance", "find_by_label", "billing")

    @abc.abstractmethod
    def offers(self, query: OfferQuery) -> list[Offer]:
        """Offers rentable now that match ``query`` (see the class docstring)."""

    @abc.abstractmethod
    def create(self, offer: Offer, spec: CreateSpec) -> Instance:
        """Rent ``offer`` labelled ``spec.label`` (see the class docstring)."""

    @abc.abstractmethod
    def get(self, instance_id: str) -> Instance | None:
        """The instance, or None when it no longer exists."""

    @abc.abstractmethod
    def list(self, label_prefix: str = "gpuops-") -> list[Instance]:
        """Live instances whose label starts with ``label_prefix``."""

    @abc.abstractmethod
    def destroy(self, instance_id: str) -> None:
        """Destroy the instance; idempotent (a gone instance is success)."""

    @abc.abstractmethod
    def balance(self) -> Balance:
        """Account credit in USD (``usd`` None when the provider has none)."""

    # -- optional, with typed defaults ------------------------------------------------------------
    def destroyed_at(self, instance_id: str) -> float | None:
        """When the provider says billing for ``instance_id`` stopped (epoch s); None: unknown."""
        return None

    def find_by_label(self, label: str) -> Instance | None:
        """The live instance labelled exactly ``label`` (None when there is none).

        Raises ProviderError when the provider cannot be asked."""
        for inst in self.list(label):
            if inst.label == label and inst.status != InstanceStatus.GONE:
                return inst
        return None

    def box(self, instance: Instance):
        """A non-SSH transport to ``instance`` (``gpuops.box.base.Box``), or None: use SSH."""
        return None

    # -- capabilities: the defaults of a provider without the mixin ------------------------------
    def billing(self, since: float, until: float) -> builtins.list[ChargeLine]:
        """The provider's own charge lines over [``since``, ``until``) (``HasBilling``).

        Without it: ProviderError UNSUPPORTED, which ``ledger sync`` shows as "not compared"."""
        raise ProviderError(ProviderErrorKind.UNSUPPORTED, f"{self.name} gives no billing through its API")

    def volumes(self) -> VolumeService | None:
        """The provider's persistent volumes (``HasVolumes``), or None: it has none."""
        return None


class Interruptible(Provider):
    """Capability: interruptible (spot) offers, rented at a bid.

    The bid is ``Offer.min_bid`` (``CreateSpec.bid_usd_per_hour``); the provider may take the box
    back (status STOPPED/EXITED while meant to run: ``ProviderErrorKind.PREEMPTED``)."""

    supports_spot = True


class HasVolumes(Provider):
    """Capability: persistent volumes that survive the destroy.

    Mounted through ``CreateSpec.volume_*``; ``destroy`` never deletes one."""

    @abc.abstractmethod
    def volumes(self) -> VolumeService:
        """The provider's volume service (``gpuops.providers.volumes.VolumeService``)."""


class HasBilling(Provider):
    """Capability: the provider's own billing, as ``ledger.billing.ChargeLine`` records."""

    @abc.abstractmethod
    def billing(self, since: float, until: float) -> builtins.list[ChargeLine]:
        """The provider's own charge lines over [``since``, ``until``) epoch s, every page read.

        ``ledger.billing.ChargeLine``: provider, instance id, USD, period, kind
        gpu|storage|network|other; what ``gpuops ledger sync`` compares the books with. Raises
        ProviderError (AUTH, RATE_LIMIT, SERVER, ...) like every other call."""
