"""`gpuops up` as an explicit state machine.

The stages and their failure table live in ``gpuops.teardown.lifecycle``:

    validate -> plan -> intent -> create -> ready -> arm -> bootstrap -> job -> collect -> teardown

Nothing is rented before validate and plan pass. The ledger row is written (intent) before
create, with the session's limits on it; ``run_up`` walks the stages in a loop, each stage returns
the outcome it decided (or None), and an error escaping a stage books what
``lifecycle.FAILURE_BOOKS`` says. Teardown runs in ``finally`` (job end, job failure, Ctrl-C,
SIGTERM, SIGHUP, TTL) with those signals ignored so a second one cannot skip it, and ends the
rental through ``lifecycle.end_rental``. Output never decides a rental's fate: the reporter is
wrapped in ``SafeReporter``, which swallows writes to a closed or broken terminal.
"""

from __future__ import annotations

import math
import re
import secrets
import shlex
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from gpuops.agent.jobio import tokens_from_metrics
from gpuops.config import Settings
from gpuops.errors import BadInput, GpuopsError
from gpuops.providers.base import (
    CreateSpec,
    Instance,
    InstanceStatus,
    Offer,
    OfferQuery,
    Provider,
    ProviderError,
    ProviderErrorKind,
)
from gpuops.providers.retry import RetryPolicy, call_with_retries
from gpuops.teardown.lifecycle import DESTROY_ATTEMPTS, end_rental, failure_reason
from onbox.policy import MAX_HOURS
from onbox.vocabulary import EndReason, EventKind, RowStatus

if TYPE_CHECKING:
    from gpuops.box.base import Box
    from gpuops.providers.volumes import Volume
    from ledger.books import Books

# On the box, everything gpuops owns lives under <root>/.gpuops
META = ".gpuops"
# How many next-best offers to try when one vanishes or has no capacity (no spend is booked).
MAX_OFFER_ATTEMPTS = 3
LOG_POLL_S = 0.2
# A box whose files are this machine's (LocalBox.local_reads): a poll is three file reads, so the
# job's end is seen within this, not within LOG_POLL_S (job end to row closed is what the user pays).
LOCAL_LOG_POLL_S = 0.02
# The job wrapper rewrites a heartbeat every second (onbox/jobwrap.py); this long without a
# change and without an exit marker means it died: the job is booked failed, not waited on until TTL.
WRAPPER_STALE_S = 30.0
READY_POLL_S = 3.0  # provider polls while waiting for an SSH endpoint


class Interrupted(BaseException):
    """Ctrl-C, SIGTERM or SIGHUP during `up` (a BaseException, like KeyboardInterrupt)."""


@dataclass
class UpRequest:
    """A validated `up` call. ``spot``: True prefer interruptible, False on-demand only."""

    job: Path
    card: str = ""
    experiment: str = "default"
    provider: str = "local"
    spot: bool = True
    spot_explicit: bool = False  # --spot/--on-demand was typed (a provider without spot then refuses)
    max_usd_per_hour: float | None = None
    max_hours: float = MAX_HOURS
    note: str = ""
    gpu_count: int = 1
    need_bytes_per_gpu: int = 0
    dry_run: bool = False
    # `up --model`: size the box from the model first (gpuops.planning.sizing); offers must fit these bytes.
    model: str = ""
    dtype: str = "auto"
    kv_dtype: str = "auto"
    seq: int = 4096
    batch: int = 1
    allow_unverified: bool = (
        False  # rent even when nothing confirms the model's size (gpuops.planning.sizing: "unverified")
    )
    volume: str = ""  # "<provider>:<id or name>" of a persistent volume to mount (gpuops.providers.volumes)
    name: str = ""  # `up --name`: the session id the user chose (SESSION_NAME), instead of new_session_id()
    vendor: str = (
        ""  # nvidia | amd | any; "": from the card named, a ROCm [up] image, else nvidia (gpuops.catalog.vendor_for)
    )
    # up --recover N: a run of up to N + 1 rentals, re-rented when one ends for a reason in recover_on
    recover: int = 0
    recover_on: tuple[str, ...] = ("preempted",)
    # up --interactive: no job; `up` leaves the box up after bootstrap (ended by idle, TTL, the money
    # limits or `gpuops down`), and its row open, booked like any rental by whoever ends it.
    interactive: bool = False
    # up --workdir DIR: uploaded to <box root>/workdir during the bootstrap stage (gpuops.rental.workdir);
    # "" none. workdir_exclude: fnmatch patterns left out beside .gitignore.
    workdir: str = ""
    workdir_exclude: tuple[str, ...] = ()
    # A spot run re-rents spot only; True: an on-demand box too when no spot offer is left (--recover-on-demand).
    recover_on_demand: bool = False
    # up --env: NAME or NAME=VALUE entries, which win by name over [job] env; job_env: what the job
    # gets, resolved by run_up (gpuops.config.resolve_job_env). Values are never printed (repr=False),
    # booked or put on a command line: they reach the box only through its 0600 env file.
    env: tuple[str, ...] = field(default=(), repr=False)
    job_env: dict[str, str] = field(default_factory=dict, repr=False)
    # up ... -- ARG ...: the job's argv, each quoted onto its command line (_job_command) and booked
    # in its job_started event; checked by request.build (no NUL, UTF-8, MAX_JOB_LINE_BYTES).
    job_args: tuple[str, ...] = ()
    # A job of a sweep (gpuops.sweep): always a run (its runs row carries sweep_id), whose id the
    # sweep's executor chose and booked on the queued job before the run's first row.
    sweep_id: str = ""
    run_id: str = ""


INTERACTIVE_JOB = "(interactive)"  # the row's job of an `up --interactive` box
# The providers taking part in one `up`, by name: one, or every one with a key (`--provider any`).
Providers = Mapping[str, Provider]
SPOT_ONLY_FIX = "--recover-on-demand lets a spot run go on on an on-demand box"
# How many ranked offers `up --dry-run` shows, each with its provider and why it ranks there.
DRY_RUN_SHOWN = 5


@dataclass
class OfferChoice:
    provider: str
    offer: Offer
    candidates: list[Offer]
    projected_cost_usd: float  # the offer's price as rented (Offer.price: the bid on spot) x max_hours
    need_bytes_per_gpu: int = 0  # VRAM per GPU the model needs (0: no --model)
    volume: Volume | None = None  # mounted at create
    notes: list = field(default_factory=list)  # offers dropped as untrustworthy (gpuops.planning.offers.screen)

    def ranking(self, n: int = DRY_RUN_SHOWN) -> list[dict]:
        """The first ``n`` candidates as rented in order: rank, provider, offer, price booked (USD/h), why there."""
        out = []
        for i, o in enumerate(self.candidates[:n]):
            booked = "the minimum bid + storage (spot)" if o.spot and o.min_bid is not None else "the listed price"
            why = f"${o.price:.4f}/h booked ({booked})"
            if i:
                prev = self.candidates[i - 1]
                if round(o.price, 6) == round(prev.price, 6) and prev.spot and not o.spot:
                    why += f"; same price as #{i}, on-demand after spot ([up] spot = true prefers spot at a price)"
                elif round(o.price, 6) == round(prev.price, 6):
                    why += (
                        f"; same price as #{i}, reliability {o.reliability:.3f} against {prev.reliability:.3f}"
                        if o.reliability != prev.reliability
                        else f"; same price and reliability as #{i}: by provider, then offer id"
                    )
                else:
                    why += f"; ${o.price - prev.price:.4f}/h above #{i}"
            elif len(self.candidates) > 1:
                why += "; the cheapest fitting offer in stock"
            out.append(
                {
                    "rank": i + 1,
                    "provider": o.provider,
                    "offer_id": o.offer_id,
                    "card": o.card,
                    "gpu_count": o.gpu_count,
                    "spot": o.spot,
                    "price_usd_per_hour": o.price,
                    "reliability": o.reliability,
                    "why": why,
                }
            )
        return out

    def as_json(self, settings: Settings) -> dict:
        return {
            "provider": self.provider,
            "ranked": self.ranking(),
            "card": self.offer.card,
            "gpu_count": self.offer.gpu_count,
            "usd_per_hour": self.offer.price,  # what it will cost rented as shown: the bid on spot
            "on_demand_usd_per_hour": self.offer.on_demand_usd_per_hour,
            "spot": self.offer.spot,
            "simulated": self.offer.simulated,
            "max_hours": settings.teardown.max_hours,
            "projected_cost_usd": round(self.projected_cost_usd, 4),
            "need_bytes_per_gpu": self.need_bytes_per_gpu,
            "teardown": msgspec.to_builtins(settings.teardown),
            "settings_file": settings.source,
        }


class Reporter:
    """Where `up` tells the user what happens. The CLI subclasses it; tests use it silent."""

    def stage(self, name: str, detail: str = "") -> None: ...

    def step(self, line: dict) -> None: ...

    def job_line(self, text: str) -> None: ...

    def warn(self, text: str) -> None: ...


def fault_point(stage: str) -> None:
    """A named point of `up` where the fault-matrix tests (tests/lifecycle/test_fault_matrix.py) hold the run.

    With ``GPUOPS_TEST_PAUSE_AT=<stage>`` and ``GPUOPS_TEST_PAUSE_FILE=<path>``, on
    reaching ``stage`` it creates ``<path>.reached`` and waits while ``<path>`` exists (at most
    600 s), so a test can send a signal, close the output or SIGKILL exactly there. Unset (always,
    outside tests): returns at once."""
    import os

    if os.environ.get("GPUOPS_TEST_PAUSE_AT") != stage or not os.environ.get("GPUOPS_TEST_PAUSE_FILE"):
        return
    path = Path(os.environ["GPUOPS_TEST_PAUSE_FILE"])
    Path(str(path) + ".reached").write_text(str(os.getpid()))
    deadline = time.monotonic() + 600
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


# `up --name`: a session id a user chooses (it becomes the instance label gpuops-<name> and a file name).
SESSION_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


def new_session_id(now: float | None = None) -> str:
    """``YYYYMMDD-HHMMSS-xxxx`` (UTC, 4 random hex): sortable, short, safe in labels and paths."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(2)


# The most GPUs one host holds: HGX/DGX boards carry 8; the largest single-host rigs listed on
# Vast.ai's marketplace carry up to 16 (RunPod's gpuTypes report maxGpuCount <= 10). A bigger
# count is a typo (80 for 8), and would otherwise be "rented" on the local provider.
MAX_GPUS_PER_BOX = 16
MAX_EXPERIMENT_CHARS = 200  # an experiment is a name that labels report rows, not a description


# -- validate + plan (pure of side effects: nothing rented, nothing booked) -----------------------
def validate(req: UpRequest) -> None:
    """Raise BadInput for anything a typo could break. Settings were validated when loaded."""
    if req.interactive:
        if req.recover:
            raise BadInput("--interactive has no job to recover", "drop --recover, or pass --job PATH for a run")
    elif not req.job.exists():
        raise BadInput(f"job file {req.job} not found", "pass the path of a script, e.g. --job examples/bench.sh")
    elif req.job.is_dir():
        raise BadInput(f"job {req.job} is a directory", "pass a script file, e.g. --job examples/bench.sh")
    elif not req.job.is_file():  # a FIFO would hang the copy to the box, /dev/zero would fill its disk
        raise BadInput(f"job {req.job} is not a regular file", "pass a script file, e.g. --job examples/bench.sh")
    if not req.experiment.strip() or any(ch < " " or ch == "\x7f" for ch in req.experiment):
        # It is a row label in every report and a CSV field: one visible line.
        raise BadInput(
            f"--experiment must be one line of visible text, got {req.experiment!r}", "e.g. --experiment llama-sweep"
        )
    from gpuops.textsafe import check_name

    check_name(req.experiment, "--experiment")  # C1 controls (U+009B) and bidi overrides (U+202E) too
    if not any(ch.isprintable() and not ch.isspace() for ch in req.experiment):  # only U+200B and the like
        raise BadInput(
            f"--experiment must be one line of visible text, got {req.experiment!r}", "e.g. --experiment llama-sweep"
        )
    if len(req.experiment) > MAX_EXPERIMENT_CHARS:  # a row label in every report: 100 KB wrapped to 4000 lines
        raise BadInput(
            f"--experiment is {len(req.experiment):,} characters long, more than {MAX_EXPERIMENT_CHARS}",
            "use a short name, e.g. --experiment llama-sweep (the --note holds the details)",
        )
    if req.name and not SESSION_NAME.match(req.name):
        raise BadInput(
            f"--name {req.name!r} is not a session name",
            "1-40 lower-case letters, digits and dashes, e.g. --name llama-sweep-1",
        )
    from gpuops.rental.runs import RUN_PREFIX

    if req.name and req.name.startswith(RUN_PREFIX):  # `ledger show run-...` reads it as a run id and finds nothing
        raise BadInput(
            f"--name {req.name!r} looks like a run id ({RUN_PREFIX}...): `gpuops ledger show` would look for a run",
            f"pick a name that does not start with {RUN_PREFIX!r}, e.g. --name {req.name[len(RUN_PREFIX) :] or 'a1'}",
        )
    if req.max_hours <= 0:
        raise BadInput(
            f"--max-hours must be > 0, got {req.max_hours:g}", "pass the box's time limit in hours, e.g. --max-hours 2"
        )
    if req.max_usd_per_hour is not None and req.max_usd_per_hour <= 0:
        raise BadInput(
            f"--max-price must be > 0 USD/h, got {req.max_usd_per_hour:g}",
            "pass a price in USD per hour, e.g. --max-price 2.5",
        )
    if req.gpu_count < 1:
        raise BadInput(f"--gpu-count must be >= 1, got {req.gpu_count}", "pass a whole number of GPUs")
    if req.gpu_count > MAX_GPUS_PER_BOX:  # the local provider would "rent" any count and book its simulated price
        raise BadInput(
            f"--gpu-count must be <= {MAX_GPUS_PER_BOX} GPUs in one box, got {req.gpu_count}",
            "pass the GPUs of one machine, e.g. --gpu-count 8",
        )


def query_for(req: UpRequest) -> OfferQuery:
    cards: tuple[str, ...] = ()
    if req.card:
        from gpuops.catalog import resolve_cards

        cards = tuple(c.name for c in resolve_cards(req.card))
    return OfferQuery(
        cards=cards,
        gpu_count=req.gpu_count,
        min_vram_bytes=req.need_bytes_per_gpu,
        spot=req.spot,
        max_usd_per_hour=req.max_usd_per_hour,
    )


def _of_vendor(offers: list, vendor: str) -> list:
    """Offers whose card is ``vendor``'s (a card the catalog does not know counts as NVIDIA's).

    A CUDA job never lands on an AMD card unless asked (gpuops.catalog.vendor_for)."""
    if vendor == "any":
        return list(offers)
    from gpuops.catalog import card_by_name

    def of(o) -> str:
        try:
            return card_by_name(o.card).vendor
        except KeyError:
            return "nvidia"

    return [o for o in offers if of(o) == vendor]


def as_providers(provider: Provider | Providers) -> dict[str, Provider]:
    """One provider or several, as the mapping by name every stage looks a rental's provider up in."""
    return dict(provider) if isinstance(provider, Mapping) else {provider.name: provider}


def choose_offer(
    req: UpRequest, provider: Provider | Providers, settings: Settings, rerent: bool = False
) -> OfferChoice:
    """Offers that fit from every provider taking part, cheapest first; BadInput when none does.

    The providers are asked at once (``rental.offers.ask_all``, as `offers` asks them); one that
    fails is named in ``notes`` and left out, unless every one failed (its error raised). Ranked by
    ``planning.offers.rank``: the price that will be booked (``Offer.price``), then reliability.
    ``rerent``: a run's next rental, which ``req.recover_on_demand`` lets go on on an on-demand box
    of a provider with no spot; a first rental is the kind it asked for."""
    from gpuops.catalog import vendor_for
    from gpuops.planning.offers import rank, screen
    from gpuops.rental.offers import ask_all

    providers = as_providers(provider)

    query = query_for(req)
    context_notes: list[str] = []
    if req.model:  # VRAM first: only cards the model fits (BadInput with the fix when none does)
        from dataclasses import replace

        from gpuops.planning.sizing import context_limit, size_for_up

        need, fitting, sized = size_for_up(
            req.model,
            dtype=req.dtype,
            kv_dtype=req.kv_dtype,
            seq=req.seq,
            batch=req.batch,
            gpu_count=req.gpu_count,
            card=req.card or None,
            allow_unverified=req.allow_unverified,
            vendor=req.vendor or None,
            image=settings.up.image,
        )
        req = replace(req, need_bytes_per_gpu=max(req.need_bytes_per_gpu, need))
        query = replace(query, cards=fitting, min_vram_bytes=req.need_bytes_per_gpu)
        beyond = context_limit(sized.arch, sized.seq)  # the line `plan` prints, printed by up too (a warning)
        if beyond is not None:
            context_notes.append(beyond[0])
    import dataclasses

    # [up] spot = true (no --spot typed) prefers spot at a price: both kinds are asked wherever the
    # provider has them and ranked by the price that will be booked, a spot offer first only at the
    # same price (a dearer interruptible box is worse on both counts). --spot rents spot only.
    prefer_spot = bool(query.spot) and not req.spot_explicit

    def query_of(prov: Provider) -> OfferQuery:
        if prefer_spot or (query.spot and rerent and req.recover_on_demand and not prov.supports_spot):
            # a re-rent of a --spot run with --recover-on-demand (``rerent``: its first rental is
            # spot only, as asked) goes on on-demand where the provider has no spot
            return dataclasses.replace(query, spot=None)
        return query

    spot = (
        None
        if prefer_spot
        else (query.spot if any(query_of(p).spot == query.spot for p in providers.values()) else None)
    )
    volume = None
    if req.volume:  # only offers that can mount it (BadInput before anything is rented)
        from gpuops.providers import volume_refs

        if len(providers) > 1:
            raise BadInput(
                f"--volume {req.volume} lives on one provider, and --provider any rents on several",
                "pass --provider with the volume's provider (the part before the colon)",
            )
        volume = volume_refs.resolve(next(iter(providers.values())), req.volume)
    pooled: list[Offer] = []
    failed: list[BaseException] = []
    asked_notes: list[str] = []
    for name, got in ask_all(
        list(providers), settings, query, ask_one=lambda n: providers[n].offers(query_of(providers[n]))
    ):
        if isinstance(got, list):
            pooled.extend(got)
        else:
            failed.append(got)  # ask_all yields the exception a provider raised
            asked_notes.append(f"{name}: left out of this up: {got}")
    if failed and len(failed) == len(providers):
        raise failed[0]
    offers, notes = screen(pooled, req.gpu_count)  # NaN/negative prices, 0 GPUs, other GPU counts
    notes = context_notes + asked_notes + notes
    offers = _of_vendor(offers, vendor_for(req.vendor or None, settings.up.image, req.card or None))
    if volume is not None:
        offers = volume_refs.mountable(next(iter(providers.values())), volume, offers)
    ranked = rank(
        offers,
        need_bytes_per_gpu=req.need_bytes_per_gpu,
        max_usd_per_hour=req.max_usd_per_hour,
        spot=spot,
        prefer_spot=prefer_spot,
    )
    if not ranked:
        what = f"card {req.card!r}" if req.card else "any card"
        cheapest = min((o.price for o in offers), default=None)
        hint = (
            f"the cheapest fitting offer is {cheapest:.2f} USD/h; raise --max-price"
            if cheapest and req.max_usd_per_hour
            else "try another --card or --provider"
        )
        raise BadInput(f"no {', '.join(providers)} offer for {what} fits", hint)
    best = ranked[0]
    return OfferChoice(
        best.provider, best, ranked, best.price * settings.teardown.max_hours, req.need_bytes_per_gpu, volume, notes
    )


def _providers_for(req: UpRequest, settings: Settings, given: Provider | Providers | None) -> dict[str, Provider]:
    """The providers taking part in this `up`, by name.

    ``given`` (tests), every marketplace with a key for ``any`` (BadInput when none has one), else the one named."""
    from gpuops.providers import ANY, MARKETPLACES, REGISTRY, configured, get_provider, titles

    if given is not None:
        return as_providers(given)
    if req.provider != ANY:
        return {req.provider: get_provider(req.provider, settings)}
    names = configured(settings)
    if not names:
        raise BadInput(
            f"--provider {ANY} rents where a key is set, and no {titles(MARKETPLACES)} key was found",
            "set " + " or ".join(REGISTRY[n].key_source.env_var for n in MARKETPLACES) + ", or pass --provider local",
        )
    return {n: get_provider(n, settings) for n in names}


def _within_budget(
    ledger: Books, settings: Settings, providers: Providers, p: OfferChoice, reporter: Reporter
) -> OfferChoice:
    """``p`` with the offers of every provider `up`'s money checks refuse left out (said once each).

    ``budget_for_up`` per provider taking part (refusals, its balance floor, the monthly cap), at
    its cheapest candidate's price; its BadInput (or a rejected key) raised when every provider is refused."""
    from dataclasses import replace

    from gpuops.teardown.budget import budget_for_up

    names = list(dict.fromkeys(o.provider for o in p.candidates))
    refused: list[Exception] = []
    kept = list(p.candidates)
    for name in names:
        price = min(o.price for o in p.candidates if o.provider == name)
        try:
            budget_for_up(ledger, settings, providers[name], price)
        except (BadInput, ProviderError) as e:
            if len(names) == 1 or (isinstance(e, ProviderError) and not e.account_refused):
                raise
            refused.append(e)
            kept = [o for o in kept if o.provider != name]
            reporter.warn(f"{name}: left out of this up: {e}")
    if not kept:
        raise refused[0]
    best = kept[0]
    return replace(
        p,
        provider=best.provider,
        offer=best,
        candidates=kept,
        projected_cost_usd=best.price * settings.teardown.max_hours,
    )


# -- the run --------------------------------------------------------------------------------------
@contextmanager
def stop_signals_handled(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP go to ``handler(signum, frame)``; the old handlers after.

    The one way `up` and a sweep take the stop signals (main thread only: ``signal.signal`` raises
    ValueError elsewhere). A signal the process inherited ignored (``nohup``, a shell's ``cmd &``)
    stays ignored, as the caller asked."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {n: signal.signal(n, handler) for n in sigs if signal.getsignal(n) != signal.SIG_IGN}
    try:
        yield
    finally:
        for n, h in old.items():
            signal.signal(n, h)


@contextmanager
def _signals_raise() -> Iterator[list]:
    """Make SIGINT (KeyboardInterrupt), SIGTERM and SIGHUP (Interrupted) stop the run, once.

    A second signal while the first is being handled is ignored: it must not cut the booking or
    teardown. A signal the process inherited ignored stays ignored, as the caller asked:
    `nohup gpuops up ... &` keeps the run (and its box) going when the terminal closes, and so does
    the SIGINT a shell without job control ignores for `cmd &`. The other layers (TTL, idle window,
    the box's own watchdog) still end such a run."""
    fired: list[int] = []

    def handler(signum, _frame):
        if fired:
            fired.append(signum)  # noted (a run then rents no more), never raised: teardown goes on
            return
        fired.append(signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signal.Signals(signum).name)

    with stop_signals_handled(handler):
        yield fired  # append to it to ignore every later signal (teardown has begun)


def raise_lost_signal(signalled: list) -> None:
    """Raise the signal ``_signals_raise`` noted whose exception Python dropped; no-op otherwise.

    The handler raises wherever the main thread is, and an exception raised in a ``__del__`` or a
    weakref callback (SQLAlchemy's, say) is printed ("Exception ignored in") and dropped, while
    ``_signals_raise`` ignores every later signal: the user's Ctrl-C would be spent. A loop that
    runs while the signals are armed calls this each round. ``signalled`` holding 0 means
    teardown has begun (signals are noted there, never raised)."""
    if signalled and 0 not in signalled:
        first = signalled[0]
        if first == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signal.Signals(first).name)


@contextmanager
def _shielded(noted: list | None = None) -> Iterator[None]:
    """Ignore SIGINT/SIGTERM/SIGHUP: teardown must finish once it has started.

    ``noted``: append each signal's number there instead (a run's loop then rents nothing more)."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    action = signal.SIG_IGN if noted is None else (lambda signum, _frame: noted.append(signum))
    old = {s: signal.signal(s, action) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class SafeReporter(Reporter):
    """A reporter wrapper: output never decides a rental's fate.

    Every call to the wrapped reporter that raises (a
    closed terminal, a broken pipe -- EPIPE/EBADF/EIO -- a closed file, or rich's SystemExit(1) on
    a broken pipe) is swallowed; only a signal's Ctrl-C/Interrupted goes through."""

    def __init__(self, inner: Reporter):
        self.inner = inner

    def _call(self, name: str, *args) -> None:
        try:
            getattr(self.inner, name)(*args)
        except (KeyboardInterrupt, Interrupted):
            raise  # a signal that arrived while printing still stops the run
        except BaseException:  # noqa: BLE001  incl. rich's SystemExit(1) on a broken pipe
            pass

    def stage(self, name: str, detail: str = "") -> None:
        self._call("stage", name, detail)

    def step(self, line: dict) -> None:
        self._call("step", line)

    def job_line(self, text: str) -> None:
        self._call("job_line", text)

    def warn(self, text: str) -> None:
        self._call("warn", text)


@dataclass
class UpRun:
    """What the run knows as it goes; becomes the summary.

    ``stage``: the stage being run (the
    failure table in gpuops.teardown.lifecycle is looked up with it); ``end_reason``: the outcome a stage
    decided (None until one did)."""

    id: str
    req: UpRequest
    offer: Offer | None = None
    instance: Instance | None = None
    box: Box | None = None
    workdir: Any = None  # gpuops.rental.workdir.WorkTree: what --workdir sends, scanned before renting
    exit_code: int | None = None
    end_reason: EndReason | None = None
    stage: str = "intent"
    label: str = ""
    tokens: int = 0
    tokens_booked: bool = False
    job_started: bool = False
    job_seconds: float | None = None
    steps: list = field(default_factory=list)
    slowest_step: str | None = None
    slowest_step_seconds: float = 0.0
    log_path: Path | None = None
    results_path: str = ""
    results_copy: dict | None = None  # gpuops.rental.results.CopyReport.as_json() of the copy-back
    # Wall clock at which max_hours runs out: counted from create (billing starts there), not job start.
    ttl_deadline: float | None = None
    last_seen_at: float | None = None  # epoch s: the last job read the box answered was asked then (a proof of life)
    box_gone: bool = False  # the box stopped answering and the provider showed it gone or stopped (BoxGone)
    # A rental of a run (up --recover): the run, which attempt this is, the money left to it (its
    # own max_session_usd), and the previous rental's results at home to resume from.
    run_id: str = ""
    attempt: int = 0
    max_session_usd: float | None = None
    resume_from: Path | None = None
    synced_at: float = 0.0  # monotonic time of the last checkpoint copy home during the job
    left_up: bool = False  # up --interactive: bootstrapped and left running for the user (no teardown by up)
    collected: bool = False  # collect finished: the job's tokens and results are home (every file verified)
    exited_at: float | None = None  # monotonic time `up` read the job's exit: the fetch deadline counts from it
    fetch_deadline_s: float = 0.0  # [teardown] fetch_deadline_seconds (_new_rental): what must come home, within this
    log_view: JobOutput | None = None  # the terminal's view of the job's output (the rest shown after the destroy)
    log_kept: bool = False  # collect finished the kept copy of the log (joblog.keep_log): teardown does not again
    log_complete: bool = False  # the kept copy holds the whole log (keep_log's "complete")


class JobOutput:
    """The job's output on the terminal: its bytes shown in order, each once, as lines (``OutputLines``).

    While the job runs, from the pieces `up` appends to the kept copy; once the box is destroyed,
    the rest from the kept copy itself (``rest``). ``shown``: bytes of the copy shown so far."""

    def __init__(self, emit: Callable[[str], None], shown: int = 0):
        from gpuops.box.base import OutputLines

        self._lines = OutputLines(emit)  # whole characters; a line without end in pieces
        self.shown = shown

    def feed(self, chunk: bytes) -> None:
        """Show the next ``chunk`` of the output."""
        self._lines.feed(chunk)
        self.shown += len(chunk)

    def rest(self, path: Path) -> None:
        """Show what the kept copy at ``path`` holds past ``shown``, in pieces of ``LOG_CHUNK_BYTES``."""
        from gpuops.agent.jobio import LOG_CHUNK_BYTES

        with open(path, "rb") as f:
            f.seek(self.shown)
            while chunk := f.read(LOG_CHUNK_BYTES):
                self.feed(chunk)

    def close(self) -> None:
        """Show a last line without a newline."""
        self._lines.close()


# The most bytes the job's command line may take as the box's shell receives it (job_line_bytes):
# _job_command quotes each argument, jobio.start_job quotes that line again for its `bash -c`, and
# an SSH box's run_detached once more for the shell sshd starts, whose `-c` string is one argument
# of execve -- which Linux refuses over 128 KiB (MAX_ARG_STRLEN). Half of that, so the rest of the
# line (the wrapper, the box's root, the env file's path) always fits. Plain arguments count about
# their own bytes; each single quote in one counts about 53 (every layer of quoting multiplies it).
MAX_JOB_LINE_BYTES = 64 * 1024


def _job_command(job_name: str, args: Sequence[str]) -> str:
    """The shell line that runs the job file ``job_name`` (in ``.gpuops/job``) with ``args`` as its argv.

    Each argument is quoted (shlex.quote), so the job receives it byte for byte, whatever it holds
    (``$(...)``, ``;``, quotes, newlines, the empty string); none may hold a NUL byte (request.build
    refuses it before renting)."""
    path = f"{META}/job/{job_name}"
    if job_name.endswith(".py"):
        head = "python3 " + shlex.quote(path)
    elif job_name.endswith(".sh"):
        head = "bash " + shlex.quote(path)
    else:
        head = shlex.quote("./" + path)
    return " ".join([head, *(shlex.quote(a) for a in args)])


def job_line_bytes(job_name: str, args: Sequence[str]) -> int:
    """Bytes (UTF-8) the job's command line takes as the box's shell receives it.

    That is ``_job_command``'s line quoted twice more, as jobio.start_job and SSHBox.run_detached
    quote it (see MAX_JOB_LINE_BYTES)."""
    return len(shlex.quote(shlex.quote(_job_command(job_name, args))).encode())


def _idle_minutes_for_row(teardown) -> float:
    """The idle window as the row stores it: minutes, 0 when the idle layer is off."""
    from onbox.policy import idle_minutes_of

    v = idle_minutes_of(teardown)
    return 0.0 if v is None else float(v)


def run_up(
    req: UpRequest,
    settings: Settings,
    reporter: Reporter,
    provider: Provider | Providers | None = None,
    ledger: Books | None = None,
    open_box: Callable | None = None,
) -> dict:
    """Run the whole state machine; return the summary dict (see ``summary``).

    ``provider``/``ledger``/``open_box`` default to those named by ``settings``; tests pass their
    own (``provider``: one, or several by name: `--provider any`). Raises BadInput (before anything is rented). After the intent row exists nothing raises
    out of here but BaseExceptions other than Ctrl-C/SIGTERM/SIGHUP, and only after teardown: an
    interrupt is reported as ``summary["interrupted"]``, a failure as ``summary["error"]``.
    """
    from gpuops.providers import ANY, SPOT, flags

    reporter = reporter if isinstance(reporter, SafeReporter) else SafeReporter(reporter)
    fault_point("validate")
    validate(req)
    from gpuops.config import resolve_job_env

    req = replace(req, job_env=resolve_job_env(settings.job.env, req.env))  # BadInput before anything is rented
    from gpuops.agent.bootstrap_config import build_bootstrap_plan
    from gpuops.providers.inputs import check_image

    setup = build_bootstrap_plan(
        settings
    )  # [bootstrap] input errors (missing secret, requirements file) before renting
    tree = None
    if req.workdir:  # what goes up, its size and sha256: a tree over the cap is refused before renting
        from gpuops.rental.workdir import scan, skipped_line

        tree = scan(req.workdir, req.workdir_exclude, int(settings.job.workdir_max_mb * 2**20))
        if (skipped := skipped_line(tree)) is not None:  # said before renting, not only in `ledger show`
            reporter.warn(skipped)
    from gpuops.notify import notifier

    notifier.use(settings)  # the rental's end, a run's end, a failed destroy tell ([notify]); nothing when no target
    check_image(settings.up.image)  # the create would refuse it after the intent row: refused here, dry run too
    providers = _providers_for(req, settings, provider)
    if req.recover and req.spot and req.spot_explicit and not any(p.supports_spot for p in providers.values()):
        nospot = next(iter(providers.values()))
        raise BadInput(
            f"{nospot.name} has no interruptible (spot) boxes: {nospot.no_spot_reason}, so --spot --recover "
            "has nothing to recover from there",
            f"use {flags(SPOT)} for spot with recovery, or --on-demand",
        )
    if req.recover and req.name:
        raise BadInput(
            "--name names one rental; a run's rentals are named by gpuops (the run is run-<id>)",
            "drop --name, or drop --recover",
        )
    if ledger is None:  # opened before the plan: a ledger that is down, damaged or from a newer gpuops stops here
        from ledger import Ledger

        ledger = Ledger(settings.ledger_url())
    reporter.stage("plan")
    fault_point("plan")
    try:
        p = choose_offer(req, providers, settings)
    except ProviderError as e:
        if e.kind in (ProviderErrorKind.AUTH, ProviderErrorKind.UNSUPPORTED, ProviderErrorKind.BAD_REQUEST):
            raise BadInput(e.message, e.fix) from None  # nothing rented yet: this is input to fix
        raise
    for n in p.notes:
        reporter.warn(n)
    if req.name and ledger.get(req.name) is not None:  # a dry run says so too, before anything is written
        raise BadInput(
            f"session {req.name} is already in the ledger", "pick another --name (a session id names one rental)"
        )
    if req.dry_run:  # every check `up` makes (refusals, balance floor, monthly cap), then nothing rented or booked
        p = _within_budget(ledger, settings, providers, p, reporter)
        return {
            "dry_run": True,
            **p.as_json(settings),
            "any_provider": req.provider == ANY,
            "experiment": req.experiment,
            "note": req.note,
            "volume": p.volume.as_json() if p.volume is not None else None,
            "job": str(req.job),
            "job_args": list(req.job_args),  # the job's argv, as it will be booked (never a secret)
            "job_env": list(req.job_env),  # the names only: a value may be a secret
            "setup": [step["name"] for step in setup.config.get("steps", [])],  # the bootstrap's steps, by name
            "dearest_usd_per_hour": max(o.price for o in p.candidates),  # the dearest offer this up accepts now
        }
    _quick_reconcile(settings, ledger, providers, reporter)
    if req.recover or req.sweep_id:
        return _run_recovering(req, p, settings, reporter, providers, ledger, open_box, workdir=tree)
    p = _within_budget(ledger, settings, providers, p, reporter)  # BadInput: refused, or does not fit
    if not p.offer.simulated:  # real money: say once when no watchdog holds the money layer
        _watchdog_note(ledger, reporter, settings)
    s = _new_rental(req, p, settings, name=req.name, workdir=tree)
    _intent(s, p, settings, providers[p.offer.provider], ledger, reporter)
    # Teardown runs inside the signal block, shielded: there is no instant between the run and the
    # teardown in which a SIGTERM gets its default action (kill, no destroy).
    with _signals_raise() as signalled, ledger.bounded():
        failure = _rent(s, p, settings, reporter, providers, ledger, open_box, signalled)
        summ = summary(s, ledger)
    return _with_failure(summ, failure, s)


def _with_failure(summ: dict, failure: BaseException | None, s: UpRun) -> dict:
    """The summary with how the run stopped: ``interrupted`` (a signal) or ``error`` (the message)."""
    if failure is not None and not isinstance(failure, Exception):
        summ["interrupted"] = True
    elif isinstance(failure, GpuopsError):
        summ["error"] = str(failure)
    elif failure is not None:
        summ["error"] = (
            f"internal error: {type(failure).__name__}: {failure} (the traceback is in {s.log_path}; please report it)"
        )
    return summ


def _new_rental(req: UpRequest, p: OfferChoice, settings: Settings, name: str = "", **run: Any) -> UpRun:
    """A rental's id, label and log file (0600 from the first byte).

    ``name``: the one `up --name` chose, else a new one. ``run``: more UpRun fields (a run's rental: run_id,
    attempt, max_session_usd, resume_from; workdir)."""
    import os

    sid = name or new_session_id()
    s = UpRun(
        id=sid,
        req=req,
        offer=p.offer,
        label=f"gpuops-{sid}",
        fetch_deadline_s=settings.teardown.fetch_deadline_seconds,
        **run,
    )
    logs_dir = settings.private_data_path() / "logs"
    logs_dir.mkdir(mode=0o700, exist_ok=True)
    s.log_path = logs_dir / f"{sid}.log"
    os.close(os.open(s.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    return s


def _intent(
    s: UpRun, p: OfferChoice, settings: Settings, provider: Provider, ledger: Books, reporter: Reporter
) -> None:
    """Write the rental's row BEFORE anything is created, with its limits on it.

    The row is a dict of its columns: the ledger's light path writes it without importing the ORM's model."""
    req = s.req
    reporter.stage("intent", f"session {s.id}" + (f" (run {s.run_id}, attempt {s.attempt})" if s.run_id else ""))
    ledger.add_session(
        dict(
            id=s.id,
            experiment=req.experiment,
            job=INTERACTIVE_JOB if req.interactive else str(req.job),
            provider=provider.name,
            card=p.offer.card,
            gpu_count=p.offer.gpu_count,
            spot=p.offer.spot,
            label=s.label,
            simulated=p.offer.simulated,
            status=str(RowStatus.PROVISIONING),
            created_at=time.time(),
            note=req.note,
            log_path=str(s.log_path),
            max_hours=req.max_hours,
            ready_timeout_seconds=float(settings.up.ready_timeout_seconds),
            idle_minutes=_idle_minutes_for_row(settings.teardown),
            owner=settings.owner(),
            account=provider.account,  # gpuops.ownership: who rented it, under which key
            run_id=s.run_id or None,
            attempt=s.attempt or None,
            max_session_usd=s.max_session_usd,
        )
    )


def _rent(
    s: UpRun,
    p: OfferChoice,
    settings: Settings,
    reporter: Reporter,
    providers: Providers,
    ledger: Books,
    open_box: Callable | None,
    signalled: list,
    intent: Callable[[], None] | None = None,
) -> BaseException | None:
    """One rental from create to teardown (the stages after intent, then ``_teardown`` in ``finally``, shielded).

    ``providers``: those taking part; the rental's own is its offer's (the one being tried during
    create, the one rented after it).

    ``signalled``: the run's signal list (``_signals_raise``); a rental of a
    run has its row written by ``intent`` inside the guarded block, and notes the signals that come
    during its teardown there. Returns the failure that ended it (None: a stage decided)."""

    # The stages after intent, in order (gpuops.teardown.lifecycle.STAGES). Each returns None to go on, or
    # the outcome it decided; a stage in STOP_ON_OUTCOME ends the run when it decides one.
    def prov() -> Provider:
        return providers[(s.offer or p.offer).provider]

    stages: list[tuple[str, Callable[[], EndReason | None]]] = [
        ("create", lambda: _create(s, p, providers, ledger, reporter, s.label, settings)),
        ("ready", lambda: _ready(s, prov(), ledger, reporter, settings, open_box)),
        ("arm", lambda: _arm(s, ledger, reporter, settings, prov())),
        ("bootstrap", lambda: _bootstrap(s, ledger, reporter, settings)),
        ("job", lambda: _job(s, ledger, reporter, settings, prov(), signalled)),
        ("collect", lambda: _collect(s, ledger, reporter, settings)),
    ]
    if s.req.interactive:  # a box to work on: no job, nothing to collect; left up once bootstrapped
        stages = stages[:-2]
    stop_on_outcome = {"create", "bootstrap"}  # create: the delivered box is not the order
    failure: BaseException | None = None
    try:
        try:
            if intent is not None:
                intent()
            fault_point("intent")
            for name, run_stage in stages:
                raise_lost_signal(signalled)
                s.stage = name
                if name != "create":
                    fault_point(name)  # create's point is inside _create: the instance exists, the row does not know
                    if s.run_id and _taken_back(s, prov(), ledger):  # a run's box taken back between stages
                        s.end_reason = EndReason.PREEMPTED
                        break
                outcome = run_stage()
                if name == "collect" and s.run_id and not s.collected and _taken_back(s, prov(), ledger, name):
                    outcome = EndReason.PREEMPTED  # taken back during the copy-back: the result is not home
                if outcome is not None:
                    s.end_reason = outcome
                    if name in stop_on_outcome or outcome == EndReason.PREEMPTED:
                        break
        except (Exception, KeyboardInterrupt, Interrupted) as e:
            failure = e
            s.end_reason = failure_reason(s.stage, e, s.end_reason)
            if s.run_id and s.end_reason != EndReason.INTERRUPTED and _taken_back(s, prov(), ledger):
                s.end_reason = EndReason.PREEMPTED  # the box failed us because the market took it back
            _book_failure(s, ledger, reporter, e)
    finally:
        signalled.append(0)  # from here on a signal changes nothing: the rental is being ended
        s.left_up = s.req.interactive and failure is None and s.end_reason is None
        if s.left_up:  # bootstrapped: the box is the user's now; its agent (idle, TTL, caps) or `down` ends it
            if s.box is not None:
                s.box.close()
        else:
            with _shielded(signalled if s.run_id else None):
                if intent is None or _has_row(ledger, s.id):
                    _teardown(s, prov(), ledger, reporter)
        _show_rest(s, reporter)
    return failure


class _ReplayStopped(BaseException):
    """Ctrl-C (or SIGTERM/SIGHUP) during the replay after the destroy: stop showing, nothing else."""


@contextmanager
def _signals_stop_replay() -> Iterator[None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP raise ``_ReplayStopped`` (main thread only).

    The box is destroyed and booked by then, so a signal stops only the showing. A signal the
    process runs with ignored (``nohup``) stays ignored."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum, _frame):
        raise _ReplayStopped

    with stop_signals_handled(handler):
        yield


def _show_rest(s: UpRun, reporter: Reporter | None = None) -> None:
    """After the destroy: the rest of the job's output shown from the kept copy, in order (the job exited).

    After an interrupt or a lost box only a last line without a newline is shown. Ctrl-C stops the
    showing at once (the box is gone, the kept copy is on disk): one line says where the copy is.
    Never raises: output never decides a rental's fate, and the box is gone by now."""
    view, s.log_view = s.log_view, None
    if view is None:
        return
    stopped = False
    try:
        with _signals_stop_replay():
            try:
                if s.exit_code is not None and s.log_path is not None:
                    view.rest(s.log_path)
            except _ReplayStopped:
                stopped = True
            except Exception:  # noqa: BLE001  the kept copy stays on disk (gpuops logs)
                pass
            finally:
                if not stopped:
                    view.close()
    except _ReplayStopped:  # a second signal while the first was being handled
        stopped = True
    if stopped and reporter is not None:
        whole = "complete" if s.log_complete else "as far as it was fetched (it says where it stops)"
        with suppress(BaseException):
            reporter.warn(
                f"output stopped at byte {view.shown:,}; the job's log is kept {whole} at {s.log_path} "
                f"(gpuops logs {s.id})"
            )


def _has_row(ledger: Books, session_id: str) -> bool:
    """True when this process wrote (or read) the session's row.

    A run's intent that a signal cut before the row was written has nothing to end."""
    held = getattr(ledger, "held", None)
    return held is None or held(session_id) is not None


class TakenBack(GpuopsError):
    """The provider shows the interruptible box stopped, exited or offline: the market took it back."""


# How often `up` asks the provider whether a run's spot box was taken back while its job runs (s).
TAKEN_BACK_POLL_S = 10.0


def _taken_back(s: UpRun, provider: Provider, ledger: Books, stage: str | None = None) -> bool:
    """True when the provider's own state says the rental's interruptible box was taken back.

    Stopped or exited while spot (outbid, host gone; never guessed from a silent box); writes
    the event ``taken_back``. A provider that cannot be read, an instance that does not answer with
    the rental's label (``reconcile.ours``), or an on-demand box: False."""
    if s.instance is None or not s.instance.id or s.offer is None or not s.offer.spot:
        return False
    try:
        inst = provider.get(s.instance.id)
    except ProviderError:
        return False
    from gpuops.teardown.reconcile import ours

    inst = ours(s, inst)  # another label, or none: not certainly ours, so not ours taken back
    if inst is None or inst.status not in (InstanceStatus.STOPPED, InstanceStatus.EXITED):
        return False
    try:
        ledger.event(
            s.id,
            EventKind.TAKEN_BACK,
            {"stage": stage or s.stage, "status": inst.status.value, "raw_status": inst.raw_status},
        )
    except Exception:  # noqa: BLE001  the teardown books it either way
        pass
    return True


def _rental_settings(settings: Settings, hours: float, usd: float | None) -> Settings:
    """``settings`` with a run's rental limits as its teardown.

    ``max_hours`` and ``max_session_usd``
    what the run has left (the agent is armed with them; the budget check counts them)."""
    t = msgspec.structs.replace(settings.teardown, max_hours=hours, max_session_usd=usd)
    return msgspec.structs.replace(settings, teardown=t)


def _spent(rentals: list[UpRun], ledger: Books) -> tuple[float, float, bool]:
    """(billed seconds, cost USD, all closed) of a run's rentals, from the rows this process holds."""
    secs = usd = 0.0
    closed = True
    for r in rentals:
        row = ledger.held(r.id) if _has_row(ledger, r.id) else None
        if row is None:
            continue
        if row.status != RowStatus.CLOSED:
            closed = False
        secs += float(row.billed_seconds or 0.0)
        usd += float(row.cost_usd or 0.0)
    return secs, usd, closed


def _resume_source(rentals: list[UpRun], settings: Settings) -> Path | None:
    """The newest earlier rental's results at home that hold a file, else None.

    It is what the next rental resumes from."""
    base = settings.data_path() / "results"
    for r in reversed(rentals):
        d = base / r.id
        if d.is_dir() and any(p.is_file() and not p.name.endswith(".gpuops-part") for p in d.rglob("*")):
            return d
    return None


def _run_recovering(
    req: UpRequest,
    p: OfferChoice,
    settings: Settings,
    reporter: Reporter,
    providers: Providers,
    ledger: Books,
    open_box: Callable | None,
    workdir: Any = None,
) -> dict:
    """`up --recover N`: one run of up to N + 1 rentals (``workdir``: the scanned --workdir, sent to each).

    A rental that ends for a reason in
    ``req.recover_on`` (default: preempted) is followed by the next offer that fits (the same plan,
    --max-price and providers: with `--provider any` any provider with a key; a spot run's next
    rental spot only unless ``req.recover_on_demand``) while attempts and money remain; each rental is a whole `up` (row
    before create, teardown in finally). Money counts the whole run (``gpuops.rental.runs``); the
    refusals, balance floor and monthly cap are checked before each rental. A signal at any
    point ends the run ``interrupted`` after the open rental's teardown. Returns the last rental's
    summary with the run's outcome on top (``run``, ``rentals``, ``end_reason``, ``cost_usd``)."""
    from dataclasses import replace

    from gpuops.rental import runs
    from onbox.vocabulary import RunEnd

    t = settings.teardown
    nxt = runs.next_rental(req.max_hours, t.max_session_usd, 0.0, 0.0, p.offer.price)
    if nxt.reason is not None:
        raise BadInput(nxt.detail, "raise --max-hours / max_session_usd, or pick a cheaper offer")
    cur_settings = _rental_settings(settings, nxt.hours, nxt.usd)
    cur_req = replace(req, max_hours=nxt.hours)
    p = _within_budget(ledger, cur_settings, providers, p, reporter)  # BadInput: refused, or does not fit
    if not p.offer.simulated:  # real money: say once when no watchdog holds the money layer
        _watchdog_note(ledger, reporter, settings)
    spot_only = p.offer.spot and not req.recover_on_demand  # spot where spot was asked (and rented)
    run_id = req.run_id or runs.new_run_id(new_session_id())
    ledger.add_run(
        dict(
            id=run_id,
            experiment=req.experiment,
            job=INTERACTIVE_JOB if req.interactive else str(req.job),
            provider=p.offer.provider,
            status="open",
            created_at=time.time(),
            recover=req.recover,
            recover_on=",".join(req.recover_on),
            attempts=0,
            max_hours=req.max_hours,
            max_usd=t.max_session_usd,
            note=req.note,
            owner=settings.owner(),
            account=providers[p.offer.provider].account,
            sweep_id=req.sweep_id or None,
        )
    )
    rentals: list[UpRun] = []
    failure: BaseException | None = None
    end: str | None = None
    detail = ""
    choice, usd_left, resume = p, nxt.usd, None
    with _signals_raise() as signalled, ledger.bounded():
        try:
            while True:
                attempt = len(rentals) + 1
                raise_lost_signal(signalled)  # one dropped while re-renting: not cleared away below
                signalled.clear()  # armed: a signal now raises (and ends the run once the rental is torn down)
                s = _new_rental(
                    cur_req,
                    choice,
                    cur_settings,
                    run_id=run_id,
                    attempt=attempt,
                    max_session_usd=usd_left,
                    resume_from=resume,
                    workdir=workdir,
                )
                rentals.append(s)
                ledger.update_run(run_id, attempts=attempt)

                def write_intent(
                    s=s, choice=choice, cur_settings=cur_settings, attempt=attempt, usd_left=usd_left
                ) -> None:
                    _intent(s, choice, cur_settings, providers[choice.offer.provider], ledger, reporter)
                    if attempt > 1:
                        ledger.event(
                            s.id,
                            EventKind.RECOVER,
                            {
                                "run": run_id,
                                "attempt": attempt,
                                "after": str(rentals[-2].end_reason),
                                "hours_left": round(cur_settings.teardown.max_hours, 6),
                                "usd_left": usd_left,
                            },
                        )
                        from gpuops.notify import notifier, texts

                        after = str(rentals[-2].end_reason)  # that rental is destroyed and booked by now
                        price = choice.offer.price
                        notifier.post(texts.rerented(run_id, attempt, req.recover + 1, after, price, usd_left))

                failure = _rent(
                    s, choice, cur_settings, reporter, providers, ledger, open_box, signalled, intent=write_intent
                )
                got = str(s.end_reason or EndReason.ERROR)
                if (
                    s.exit_code == 0 and s.collected
                ):  # the job finished and came home: a box lost after that re-runs nothing
                    got = str(EndReason.JOB_END)
                spent_s, spent_usd, all_closed = _spent(rentals, ledger)
                if any(signalled) or (failure is not None and not isinstance(failure, Exception)):
                    end, detail = str(EndReason.INTERRUPTED), f"interrupted during rental {attempt} ({s.id})"
                    break
                if got not in req.recover_on:
                    end, detail = got, f"rental {attempt} ({s.id}) ended {got}"
                    break
                if not all_closed:  # a destroy that gave up: never rent a second box beside a billing one
                    end, detail = got, f"rental {attempt} ({s.id}) is still open (its destroy failed): not re-renting"
                    break
                if attempt > req.recover:
                    end = str(RunEnd.ATTEMPTS_SPENT)
                    detail = f"{attempt} rentals, the last ended {got}: --recover {req.recover} spent"
                    break
                signalled.clear()  # re-renting: no box is open; a signal ends the run here
                reporter.stage(
                    "recover",
                    f"rental {attempt} ended {got}; run {run_id}: ${spent_usd:.4f}, {spent_s:.0f} s billed so far; "
                    f"attempt {attempt + 1} of {req.recover + 1}",
                )
                fault_point("recover")
                try:
                    choice = _same_kind(choose_offer(req, providers, settings, rerent=True), spot_only)
                except (BadInput, ProviderError) as e:
                    end, detail = str(RunEnd.NO_OFFER), f"no offer for rental {attempt + 1}: {e}"
                    if spot_only and "--recover-on-demand" not in detail:
                        detail += f"; {SPOT_ONLY_FIX}"
                    break
                nxt = runs.next_rental(req.max_hours, t.max_session_usd, spent_s, spent_usd, choice.offer.price)
                if nxt.reason is not None:
                    end, detail = str(nxt.reason), nxt.detail
                    break
                cur_settings = _rental_settings(settings, nxt.hours, nxt.usd)
                cur_req, usd_left = replace(req, max_hours=nxt.hours), nxt.usd
                try:
                    choice = _within_budget(ledger, cur_settings, providers, choice, reporter)
                except BadInput as e:  # a refusal, the balance floor or the monthly cap: checked before every rental
                    end, detail = str(getattr(e, "limit", None) or EndReason.MONTHLY_CAP), str(e)
                    break
                resume = _resume_source(rentals, settings)
        except (Exception, KeyboardInterrupt, Interrupted) as e:  # while re-renting: no box is open
            failure = e
            interrupted = not isinstance(e, Exception)
            end = str(EndReason.INTERRUPTED if interrupted else EndReason.ERROR)
            detail = "interrupted while re-renting" if interrupted else f"{type(e).__name__}: {e}"
        finally:
            signalled.append(0)
            with _shielded():
                try:
                    ledger.close_run(run_id, time.time(), end or str(EndReason.ERROR), detail)
                except Exception:  # noqa: BLE001  the rentals are booked; the run's close is a label on them
                    reporter.warn(f"run {run_id}: its close could not be booked ({end}: {detail})")
        summ = _run_summary(run_id, rentals, ledger, end or str(EndReason.ERROR), detail)
    reporter.stage("run", f"{run_id}: {end} after {len(rentals)} rental(s), ${summ['cost_usd']:.4f}")
    from types import SimpleNamespace

    from gpuops.notify import notifier, texts

    ran = SimpleNamespace(id=run_id, end_reason=end or str(EndReason.ERROR), attempts=len(rentals), detail=detail)
    notifier.post(texts.run_ended(ran, summ.get("cost_usd")))  # every rental is closed and booked by now
    return _with_failure(summ, failure, rentals[-1] if rentals else UpRun(id="", req=req))


def _same_kind(choice: OfferChoice, spot_only: bool) -> OfferChoice:
    """A run's next offer of the kind it asked for: spot only when ``spot_only``; BadInput when none is left."""
    if not spot_only:
        return choice
    from dataclasses import replace

    kept = [o for o in choice.candidates if o.spot]
    if not kept:
        raise BadInput(
            f"no spot offer left on {', '.join(dict.fromkeys(o.provider for o in choice.candidates))}",
            SPOT_ONLY_FIX,
        )
    return replace(choice, provider=kept[0].provider, offer=kept[0], candidates=kept)


def _way_in(s: UpRun) -> dict:
    """How the user reaches an `up --interactive` box: ``{"ssh", "down"}`` command lines.

    A local box is a folder on this machine, reached by `gpuops exec` (`gpuops ssh` refuses it)."""
    local = bool(getattr(s.box, "local_reads", False))
    way = f"gpuops exec {s.id} CMD..." if local else f"gpuops ssh {s.id}"
    return {"ssh": way, "down": f"gpuops down {s.id}"}


def _run_summary(run_id: str, rentals: list[UpRun], ledger: Books, end: str, detail: str) -> dict:
    """The last rental's summary with the run on top.

    ``run`` (id, end reason, detail), ``rentals``
    (each one's session, attempt, end reason, seconds, cost), ``end_reason`` the run's, ``cost_usd``
    / ``seconds`` / ``tokens`` the sums over its rentals."""
    booked = [r for r in rentals if _has_row(ledger, r.id)]
    parts = [summary(r, ledger) for r in booked]
    empty = {
        "session": None,
        "provider": None,
        "card": None,
        "usd_per_hour": None,
        "simulated": False,
        "exit_code": None,
        "log": None,
        "slowest_step": None,
        "slowest_step_seconds": 0.0,
        "results": None,
        "results_copy": None,
        "status": None,
    }
    last: dict[str, Any] = dict(parts[-1]) if parts else empty  # a signal before the first row was written
    rows = [
        {
            "session": x["session"],
            "provider": x.get("provider"),
            "attempt": r.attempt,
            "end_reason": x["end_reason"],
            "card": x.get("card"),
            "usd_per_hour": x.get("usd_per_hour"),
            "seconds": x.get("seconds"),
            "cost_usd": x.get("cost_usd"),
            "tokens": x.get("tokens"),
            "results": x.get("results"),
        }
        for r, x in zip(booked, parts)
    ]
    last.update(
        {
            "run": {"id": run_id, "end_reason": end, "detail": detail, "rentals": len(rows)},
            "rentals": rows,
            "end_reason": end,
            "seconds": round(sum(float(x.get("seconds") or 0.0) for x in parts), 3),
            "cost_usd": round(sum(float(x.get("cost_usd") or 0.0) for x in parts), 6),
            "tokens": sum(int(x.get("tokens") or 0) for x in parts),
        }
    )
    last["usd_per_mtoken"] = round(last["cost_usd"] / last["tokens"] * 1e6, 6) if last["tokens"] else None
    return last


def _book_failure(s: UpRun, ledger: Books, reporter: Reporter, e: BaseException) -> None:
    """Events (and the traceback of a bug) for a failure the stage table booked.

    Never raises: a ledger or disk that fails here must not skip the teardown."""
    try:
        detail = {"stage": s.stage, "reason": str(s.end_reason), "error": f"{type(e).__name__}: {e}"}
        if isinstance(e, ProviderError):
            ledger.event(s.id, EventKind.PROVIDER_ERROR, {"kind": e.kind.value, "message": e.message, "stage": s.stage})
        elif isinstance(e, Exception) and not isinstance(e, GpuopsError):
            import traceback

            ledger.event(s.id, EventKind.ERROR, f"{type(e).__name__}: {e}")
            with open(s.log_path, "a", encoding="utf-8") as log:  # type: ignore[arg-type]  # _new_rental set it
                log.write("gpuops internal error:\n" + traceback.format_exc())
        ledger.event(s.id, EventKind.STAGE_FAILED, detail)
    except Exception:  # noqa: BLE001
        pass
    if isinstance(e, GpuopsError):
        reporter.warn(str(e))
    elif isinstance(e, Exception):
        reporter.warn(f"internal error: {type(e).__name__}: {e}; the traceback is in {s.log_path}; please report it")


def _create(
    s: UpRun, p: OfferChoice, providers: Providers, ledger: Books, reporter: Reporter, label: str, settings: Settings
) -> EndReason | None:
    """Rent the first offer that can be rented, on any provider taking part; book what was delivered.

    Each try is a ``create`` event on the row (offer, provider, try); a try on another provider
    first moves the row to it (provider, account, card), so whoever ends the rental asks the right
    one. The outcome ``delivery_mismatch`` (the run stops, teardown destroys) when the instance is not the offer:
    another card, GPU count, or a price above the offer or --max-price (``offers.check_delivered``)."""
    first = providers[p.offer.provider]
    reporter.stage("create", f"{p.offer.card} x{p.offer.gpu_count} on {first.name} at {price_words(p.offer)}")
    if first.containment_note:  # said once per `up`: what the box can reach of ours
        reporter.warn(first.containment_note)
    created_from = time.time()
    s.ttl_deadline = created_from + s.req.max_hours * 3600.0
    from gpuops.providers.rent import rent_first

    keys: dict[str, str] = {}
    tries = [0]

    def key_for(name: str) -> str:
        if name not in keys:
            keys[name] = _ssh_public_key(providers[name], settings)
        return keys[name]

    def attempt(offer: Offer) -> None:
        tries[0] += 1
        booked = (s.offer or p.offer).provider
        if offer.provider != booked:  # the row follows the try: an interrupt now is ended on this provider
            reporter.stage("create", f"{offer.card} x{offer.gpu_count} on {offer.provider} at {price_words(offer)}")
            ledger.update(
                s.id,
                provider=offer.provider,
                account=providers[offer.provider].account,
                card=offer.card,
                gpu_count=offer.gpu_count,
                spot=offer.spot,
                simulated=offer.simulated,
            )
        s.offer = offer
        hours = rental_hours_at(s, offer)
        if hours < s.req.max_hours:  # a run's rental failing over to a dearer offer: its money left buys less
            from dataclasses import replace

            s.req = replace(s.req, max_hours=hours)
            s.ttl_deadline = created_from + hours * 3600.0
            ledger.update(s.id, max_hours=hours)
        ledger.event(
            s.id,
            EventKind.CREATE,
            {
                "offer": offer.offer_id,
                "provider": offer.provider,
                "try": tries[0],
                "max_hours": round(s.req.max_hours, 6),
            },
        )

    def spec_for(offer: Offer) -> CreateSpec:
        from gpuops.providers.volumes import spec_fields

        return CreateSpec(
            label=label,
            image=settings.up.image,
            disk_gb=settings.up.disk_gb,
            bid_usd_per_hour=offer.min_bid if offer.spot else None,
            ssh_public_key=key_for(offer.provider),
            **spec_fields(p.volume),
        )

    def leftover(offer: Offer, e: ProviderError) -> None:
        # A failed create that still made an instance: book it so teardown (and reconcile) end it.
        s.instance = Instance(id=e.instance_id or "", label=label, status=InstanceStatus.UNKNOWN)
        ledger.update(s.id, instance_id=e.instance_id, instance_created_at=time.time(), usd_per_hour=offer.price)
        ledger.event(
            s.id,
            EventKind.CREATE_LEFT_INSTANCE,
            {"offer": offer.offer_id, "instance": e.instance_id, "kind": e.kind.value},
        )

    def skipped(offer: Offer, e: ProviderError) -> None:
        ledger.event(
            s.id, EventKind.OFFER_SKIPPED, {"offer": offer.offer_id, "provider": offer.provider, "kind": e.kind.value}
        )

    def provider_skipped(name: str, e: ProviderError) -> None:  # the account's reason: said once
        if len(providers) > 1:  # alone, its error ends the create and is said as any error is
            reporter.warn(f"{name} refused the account ({e.kind.value}: {e.message}); skipping {name} for this up")
        ledger.event(s.id, EventKind.OFFER_SKIPPED, {"provider": name, "kind": e.kind.value, "skipped": "provider"})

    got = rent_first(
        providers,
        _affordable(s, p.candidates, ledger),
        spec_for,
        max_offers=MAX_OFFER_ATTEMPTS * len(providers),
        on_attempt=attempt,
        on_skip=skipped,
        on_leftover=leftover,
        on_provider_skipped=provider_skipped,
        deadline_s=RetryPolicy().create_deadline_s,
    )
    inst, offer = got.instance, got.offer
    bid = offer.min_bid if offer.spot else None
    s.instance, s.offer = inst, offer
    if p.volume is not None:  # also when create was recovered by label: the volume is mounted there
        inst.extra.setdefault("volume_path", p.volume.mount_path)
        ledger.event(s.id, EventKind.VOLUME, {"volume": p.volume.as_json()})
    fault_point("create")
    from gpuops.planning.offers import check_delivered, delivered

    # Book what was delivered (card, GPU count, price really charged), not what was asked.
    d = delivered(offer, inst)
    mismatch = check_delivered(offer, inst, s.req.max_usd_per_hour)
    price = d["usd_per_hour"] if d["usd_per_hour"] is not None else offer.price
    count = d["gpu_count"]
    ledger.update(
        s.id,
        instance_id=inst.id,
        offer_id=offer.offer_id,
        card=d["card"] or (_safe_name(d["gpu_name"]) if mismatch else offer.card),
        gpu_count=int(count)
        if isinstance(count, (int, float)) and math.isfinite(count) and count == int(count)
        else offer.gpu_count,
        spot=offer.spot,
        bid_usd_per_hour=bid,
        status=RowStatus.RUNNING,
        instance_created_at=inst.created_at or time.time(),
        usd_per_hour=price if isinstance(price, (int, float)) and math.isfinite(price) and price >= 0 else None,
        simulated=offer.simulated,
    )
    ledger.event(s.id, EventKind.CREATED, {"instance": inst.id})
    if mismatch:
        ledger.event(
            s.id, EventKind.DELIVERY_MISMATCH, {"ordered": offer.as_json(), "delivered": d, "problem": mismatch}
        )
        reporter.warn(f"the delivered box is not the order: {mismatch}; destroying it")
        return EndReason.DELIVERY_MISMATCH
    return None


def _affordable(s: UpRun, candidates: list[Offer], ledger: Books) -> list[Offer]:
    """``candidates`` less the failover offers whose price leaves the rental under a minimum.

    The first candidate was sized by the run (``runs.next_rental``); a later, dearer one whose
    money left buys under ``runs.MIN_RENTAL_S`` of box time, or under the rental's own TTL when
    that is shorter (``check``'s 30 s layer), is not tried (``rental_hours_at``):
    it would boot and be ended by its money cap before the job computed anything. Each one left
    out is booked as an ``offer_skipped`` event of kind ``money_left``."""
    from gpuops.rental.runs import MIN_RENTAL_S

    floor_s = min(MIN_RENTAL_S, s.req.max_hours * 3600.0)  # a rental whose own TTL is shorter needs no more
    kept = candidates[:1]
    for offer in candidates[1:]:
        if rental_hours_at(s, offer) * 3600.0 >= floor_s - 1e-6:
            kept.append(offer)
        else:
            ledger.event(
                s.id,
                EventKind.OFFER_SKIPPED,
                {"offer": offer.offer_id, "provider": offer.provider, "kind": "money_left"},
            )
    return kept


def rental_hours_at(s: UpRun, offer: Offer) -> float:
    """The hours a rental may run on ``offer`` (its TTL): what its money left buys at the offer's price.

    A run's rental (``s.max_session_usd``: the run's money left, USD) was given the hours left at
    its first candidate's price (``runs.next_rental``); a failover to a dearer offer buys fewer:
    ``min(s.req.max_hours, money left / offer.price x 3600 s) / 3600``. Never more than
    ``s.req.max_hours`` (a limit only tightens); unchanged outside a run or without a money cap."""
    if s.max_session_usd is None or not (offer.price > 0 and math.isfinite(offer.price)):
        return s.req.max_hours
    return min(s.req.max_hours, max(0.0, s.max_session_usd) / offer.price)


def price_words(offer: Offer) -> str:
    """The price `up` rents ``offer`` at, as one phrase (USD/h for the whole box, ``Offer.price``).

    E.g. ``0.1582 USD/h (spot bid; on-demand 0.2882)`` (the on-demand price where it is known),
    ``0.1582 USD/h (spot bid)`` or ``0.2882 USD/h``."""
    if offer.on_demand_usd_per_hour is not None:
        return f"{offer.price:.4f} USD/h (spot bid; on-demand {offer.on_demand_usd_per_hour:.4f})"
    return f"{offer.price:.4f} USD/h" + (" (spot bid)" if offer.spot else "")


def _safe_name(name: str | None) -> str:
    """A provider's GPU name as a ledger card name: escaped (gpuops.textsafe), at most 64 characters."""
    from gpuops.textsafe import safe

    return safe(name or "unknown")[:64]


def _ssh_public_key(provider: Provider, settings: Settings) -> str:
    """The key line the provider puts in the box's authorized_keys (none for the local provider)."""
    if provider.name == "local":
        return ""
    from gpuops.box.ssh import ensure_ssh_key, public_key_line

    if settings.up.ssh_key:
        return public_key_line(Path(settings.up.ssh_key).expanduser())
    return ensure_ssh_key(settings.data_path())[1]


def _ready(
    s: UpRun, provider: Provider, ledger: Books, reporter: Reporter, settings: Settings, open_box: Callable | None
) -> None:
    reporter.stage("ready")
    assert s.instance is not None
    deadline = time.monotonic() + settings.up.ready_timeout_seconds
    if open_box is not None:
        s.box = open_box(provider, s.instance, deadline, settings)
    else:
        from gpuops.box import remote
        from gpuops.providers.wait import wait_for_ssh

        if s.instance.ssh is None and not s.instance.extra.get("local_root"):
            fresh = wait_for_ssh(
                provider, s.instance.id, timeout_s=max(0.0, deadline - time.monotonic()), poll_s=READY_POLL_S
            )
            fresh.extra = {**s.instance.extra, **fresh.extra}  # what create knew (volume_path, bid) stays known
            s.instance = fresh
        s.box = remote.open_box(
            s.instance, data_dir=settings.data_path(), deadline=deadline, ssh_key=settings.up.ssh_key
        )
    if hasattr(s.box, "still_there"):  # an SSH box that stops answering: ask the provider, not the reconnects
        s.box.still_there = _still_there(s, provider)
    ledger.update(s.id, ready_at=time.time())
    # where the box answered: what `gpuops ssh`/`exec` and `ps --json` read (gpuops.rental.sessions.endpoint)
    ssh = s.instance.ssh if not s.instance.extra.get("local_root") else None
    where: dict[str, str | int] = {"root": str(s.box.root)}
    if ssh is not None:
        where.update(host=ssh.host, port=int(ssh.port), user=ssh.user or "root")
    ledger.event(s.id, EventKind.READY, where)


def _still_there(s: UpRun, provider: Provider) -> Callable[[], bool]:
    """What an SSH box that stopped answering asks before each reconnect try (``SSHBox.still_there``).

    False when the provider shows the rental's instance gone, stopped or exited, or answers its id
    with another label (the box cannot answer again); True when it runs or the provider cannot be
    asked (then the reconnects go on, to their deadline)."""

    def ask() -> bool:
        if s.instance is None:
            return True
        try:
            inst = provider.get(s.instance.id)
        except ProviderError:
            return True
        # Doubt (an answer with no label) keeps the reconnects going: a live job is never ended on
        # it; an answer with another label is another's box, so ours is gone.
        if inst is None or inst.status == InstanceStatus.GONE or (inst.label and inst.label != s.label):
            return False
        return inst.status not in (InstanceStatus.STOPPED, InstanceStatus.EXITED)

    return ask


def _quick_reconcile(settings: Settings, ledger: Books, providers: Provider | Providers, reporter: Reporter) -> None:
    """Reconcile the providers taking part before renting (orphans, gone boxes); a failure only warns."""
    from gpuops.teardown.reconcile import Context, reconcile

    try:
        for a in reconcile(Context(settings, ledger=ledger, providers=as_providers(providers))):
            if a.kind in ("closed", "destroyed", "orphan_destroyed", "adopted", "error"):  # reconcile.Action kinds
                reporter.warn(f"reconcile: {a}")
    except GpuopsError as e:
        reporter.warn(f"reconcile skipped: {e}")


def _watchdog_note(ledger: Books, reporter: Reporter, settings: Settings | None = None) -> None:
    """Warn once when no watchdog passed over the ledger within three of its intervals.

    Then only the box's own agent guards the rental (gpuops.teardown.watchdog_passes.guarded_recently)."""
    from gpuops.teardown.watchdog_passes import INSTALL_HINT, guarded_recently, tell_if_silent

    if settings is not None:
        tell_if_silent(settings, ledger)  # a dead watchdog cannot say so: the next `up` that sees it does
    if not guarded_recently(ledger):
        reporter.warn(
            "no watchdog has made a pass lately: only the box's own agent (job end, idle, TTL) guards this rental; "
            f"the balance floor and the monthly cap are not enforced; {INSTALL_HINT}"
        )


def _arm(s: UpRun, ledger: Books, reporter: Reporter, settings: Settings, provider: Provider) -> None:
    """Ship onbox/ and start the on-box agent FIRST: from here on the box can destroy itself."""
    from gpuops.agent import agentctl

    reporter.stage("arm")
    row = ledger.held(s.id) or ledger.get(s.id)  # written by this run: in memory, no read to wait on
    assert s.instance is not None and s.box is not None and row is not None  # rented, connected, booked before arm
    cfg = agentctl.agent_config(
        session_id=s.id,
        provider=provider.name,
        instance_id=s.instance.id,
        root=s.box.root,
        teardown=settings.teardown,
        started_at=row.instance_created_at,
        usd_per_hour=row.usd_per_hour,
        settings=settings,
        max_hours=min(settings.teardown.max_hours, s.req.max_hours),  # tightened at a dearer failover (rental_hours_at)
    )
    if s.req.interactive:
        cfg["interactive"] = True  # no job comes: no armed-no-job wait (onbox/agent.py)
    agentctl.arm(s.box, cfg)
    ledger.event(s.id, EventKind.ARMED)


def _bootstrap(s: UpRun, ledger: Books, reporter: Reporter, settings: Settings) -> EndReason | None:
    """Run bootstrap.py's steps; None when every step passed, else the outcome.

    The outcome: bootstrap_failed, or ttl when max_hours ran out during it."""
    from gpuops.agent.bootstrap_config import RUNNER_DIR, build_bootstrap_plan, run_bootstrap_plan
    from gpuops.catalog import cards

    reporter.stage("bootstrap")
    card = next((c for c in cards() if s.offer is not None and c.name == s.offer.card), None)
    volume = s.instance.extra.get("volume_path") if s.instance is not None else None
    plan = build_bootstrap_plan(settings, card=card, volume_path=volume)
    plan.files = [(local, remote) for local, remote in plan.files if remote != RUNNER_DIR]  # shipped by arm
    remaining = s.ttl_deadline - time.time() if s.ttl_deadline is not None else None
    ttl_bound = remaining is not None and remaining < plan.timeout
    if ttl_bound:
        assert remaining is not None  # what ttl_bound checked
        plan.timeout = max(remaining, 0.1)
    upload = _workdir_upload(s, reporter) if s.workdir is not None else None  # beside the steps, as the weights
    try:
        try:
            res = run_bootstrap_plan(s.box, plan, on_step=reporter.step, on_line=reporter.job_line)
        finally:
            sent = upload() if upload is not None else None
    except TimeoutError:
        why = EventKind.TTL if ttl_bound else EventKind.BOOTSTRAP_TIMEOUT
        ledger.event(s.id, why, {"during": "bootstrap", "seconds": round(plan.timeout, 3)})
        reporter.warn(
            f"bootstrap ran past {plan.timeout:.0f} s"
            + (" (max_hours ran out)" if ttl_bound else " ([bootstrap] timeout_seconds)")
        )
        return EndReason.TTL if ttl_bound else EndReason.BOOTSTRAP_FAILED
    if sent is not None:
        res.steps.append(sent)  # a failed upload is a failed step: res.failed names it
    s.steps = res.steps
    s.slowest_step = res.summary.get("slowest")
    s.slowest_step_seconds = max((float(st.get("seconds") or 0.0) for st in res.steps if "step" in st), default=0.0)
    ledger.add_steps(s.id, res.steps)
    ledger.event(
        s.id,
        EventKind.BOOTSTRAPPED,
        {
            "rc": res.rc,
            "slowest": s.slowest_step,
            "failed": res.failed,
            "cache_dir": plan.config.get("cache_dir") or "~/.cache/gpuops (on the box, lost with it)",
        },
    )
    return None if res.rc == 0 and res.failed is None else EndReason.BOOTSTRAP_FAILED


def _workdir_upload(s: UpRun, reporter: Reporter) -> Callable[[], dict]:
    """Start ``up --workdir``'s upload on a thread (a second connection on an SSH box); return its join.

    The join returns the bootstrap step line it is booked as (``workdir``: done, or failed with why)."""
    import threading

    from gpuops.rental.workdir import upload

    assert s.box is not None and s.workdir is not None  # connected by ready, scanned before renting
    out: dict = {}
    t0 = time.monotonic()

    def work() -> None:
        box = s.box
        try:
            another = getattr(box, "another", None)
            if another is not None:
                box = another(time.monotonic() + 60.0)
            try:
                out.update(upload(box, s.workdir, on_progress=reporter.job_line).as_step())
            finally:
                if box is not s.box and box is not None:
                    box.close()
        except Exception as e:  # noqa: BLE001  booked as the step's failure; bootstrap_failed follows
            out.update(step="workdir", status="failed", seconds=round(time.monotonic() - t0, 3), detail=str(e)[:500])

    thread = threading.Thread(target=work, name="gpuops-workdir", daemon=True)
    thread.start()

    def join() -> dict:
        thread.join()
        reporter.step(out)
        return out

    return join


def _job(
    s: UpRun,
    ledger: Books,
    reporter: Reporter,
    settings: Settings,
    provider: Provider | None = None,
    signalled: list | None = None,
) -> EndReason:
    """Start the job detached, stream its log until it exits or max_hours runs out; return the outcome.

    Outcomes: job_end (exit 0), job_failed (non-zero, or its wrapper died), ttl; for a run's rental also
    preempted (the provider shows its spot box taken back: asked every ``TAKEN_BACK_POLL_S``)."""
    from gpuops.agent import jobio
    from gpuops.box.ssh import BoxGone

    box = s.box
    assert box is not None  # connected by the box stage
    req = s.req
    reporter.stage("job", req.job.name)
    box.put(req.job, f"{META}/job/{req.job.name}")
    from gpuops.agent.bootstrap_config import cache_dir_for
    from gpuops.agent.jobenv import job_env
    from gpuops.rental.workdir import WORKDIR

    env = dict(req.job_env)  # [job] env and up --env (resolve_job_env): the values, for the env file only
    env.update(  # gpuops' own, the same as `gpuops exec` gives (agent/jobenv.py)
        job_env(
            session=s.id,
            experiment=req.experiment,
            root=str(box.root),
            workdir=WORKDIR if s.workdir is not None else None,  # up --workdir: uploaded during bootstrap
            cache_dir=cache_dir_for(settings, s.instance.extra.get("volume_path") if s.instance is not None else None),
            run=_resume(s, ledger, settings) if s.run_id else None,
        )
    )
    ttl_deadline = s.ttl_deadline if s.ttl_deadline is not None else time.time() + req.max_hours * 3600.0
    if time.time() > ttl_deadline:  # ready + bootstrap used up max_hours: the job does not start
        ledger.event(s.id, EventKind.TTL, {"max_hours": req.max_hours, "before_job": True})
        return EndReason.TTL
    s.job_started = True  # from here a teardown reads the tokens the job wrote, whatever ends it
    started_here = time.monotonic()  # bounds the job seconds the box's clock reports
    jobio.start_job(box, _job_command(req.job.name, req.job_args), env=env)
    # What ran, for `ledger show`: the arguments are booked (never a secret: those are env values).
    ledger.event(s.id, EventKind.JOB_STARTED, {"args": list(req.job_args)} if req.job_args else "")
    import_meanwhile(TEARDOWN_IMPORTS)  # while the job runs: the teardown then imports nothing
    with open(s.log_path, "ab") as log:  # type: ignore[arg-type]  # _new_rental set it
        shown = s.log_view = JobOutput(reporter.job_line, shown=log.tell())

        def seen(asked_at: float) -> None:  # the box answered a read asked then: alive, billing (PROOF_OF_LIFE)
            s.last_seen_at = asked_at

        def sink(chunk: bytes) -> None:
            log.write(chunk)
            log.flush()
            shown.feed(chunk)

        from gpuops.teardown.live import LIVE_EVERY_S

        live_due = [time.monotonic() + min(2.0, LIVE_EVERY_S)]  # the first status soon after the job starts
        run_poll = _run_poll(s, ledger, settings, provider) if s.run_id and provider is not None else None

        def live() -> None:
            raise_lost_signal(signalled or [])  # a Ctrl-C whose exception was dropped ends the job now
            if time.monotonic() >= live_due[0]:
                live_due[0] = time.monotonic() + LIVE_EVERY_S
                _book_live(s, ledger)
            if run_poll is not None:  # a run's spot box taken back (raises TakenBack); its checkpoints home
                run_poll()

        try:
            log_read, ended = jobio.follow_log(
                box,
                sink,
                poll_s=_log_poll_s(box),
                deadline=time.monotonic() + (ttl_deadline - time.time()),
                stale_after_s=WRAPPER_STALE_S,
                on_poll=live,
                on_seen=seen,
                stop_at_exit=True,  # the exit is watched apart from the log: the rest comes home in bulk (collect)
            )
            if ended is not None:
                s.exited_at = time.monotonic()
        except TakenBack:
            return EndReason.PREEMPTED
        except BoxGone as e:  # the box went (its agent destroyed it, the host was reclaimed): nothing more to read
            s.box_gone = True
            reporter.warn(str(e))
            ledger.event(s.id, EventKind.PROVIDER_ERROR, {"during": "job", "error": str(e)})
            if provider is not None and _taken_back(s, provider, ledger, "job"):
                return EndReason.PREEMPTED
            return EndReason.AGENT_ENDED
        except jobio.WrapperLost as e:
            ledger.event(s.id, EventKind.WRAPPER_LOST, e.message)
            reporter.warn(str(e))
            return EndReason.JOB_FAILED
    if ended is None:
        ledger.event(s.id, EventKind.TTL, {"max_hours": req.max_hours})
        return EndReason.TTL
    s.exit_code = ended.code
    seconds = jobio.job_seconds(ended, time.monotonic() - started_here)
    if seconds is not None:
        s.job_seconds = seconds
    # log_read: the bytes of the log `up` had shown when it read the exit; collect fetches the rest (joblog.keep_log)
    ledger.event(s.id, EventKind.JOB_EXITED, {"exit_code": s.exit_code, "log_read": log_read})
    if s.exit_code != 0 and s.run_id and provider is not None and _taken_back(s, provider, ledger, "job"):
        return EndReason.PREEMPTED  # stopped with its box (a SIGTERM from the host), not a failure of its own
    return EndReason.JOB_END if s.exit_code == 0 else EndReason.JOB_FAILED


# What the teardown imports on first use, after the job's end: tenacity (the destroy's retries,
# gpuops.providers.retry), the local provider's box retention (gpuops.providers.boxes).
TEARDOWN_IMPORTS = ("tenacity", "gpuops.providers.boxes")


def import_meanwhile(modules: tuple[str, ...]) -> None:
    """Import ``modules`` on a daemon thread while the caller waits on something else (a running job).

    The code that needs them later finds them loaded (an import still under way makes it wait
    on the module's lock, as it would have waited for the import itself). An import that fails is
    left to that code to report."""
    import importlib
    import threading

    def work() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001  the caller's own import raises it where it matters
                pass

    threading.Thread(target=work, name="gpuops-import-meanwhile", daemon=True).start()


def _log_poll_s(box) -> float:
    """Seconds between two reads of the job's log and exit.

    ``LOCAL_LOG_POLL_S`` on a box whose
    reads are local files, else ``LOG_POLL_S`` (each read of an SSH box is a round trip)."""
    return LOCAL_LOG_POLL_S if getattr(box, "local_reads", False) else LOG_POLL_S


def _book_live(s: UpRun, ledger: Books) -> None:
    """Book what `ps` shows of the running box (``gpuops.teardown.live``).

    The tokens the job has written so far and the agent's idle streak (its heartbeat minus its ``idle_since``: one
    clock); nothing when the box answered neither read. Never raises."""
    import os
    import socket

    from gpuops.teardown.live import record_live

    try:
        from gpuops.agent.agentctl import read_status

        st = read_status(s.box) or {}
        since, beat = (st.get("decision") or {}).get("idle_since"), st.get("heartbeat")
        idle = None if beat is None else (max(0.0, float(beat) - float(since)) if since is not None else 0.0)
    except Exception:  # noqa: BLE001  no agent status (yet): the tokens still count
        idle = None
    tokens = _read_tokens(s)
    if tokens is None and idle is None:
        return  # the box did not answer: no status to book (a `live` event is also a proof of life: lifecycle.end_time)
    record_live(ledger, s.id, tokens=tokens, idle_seconds=idle, by=f"up:{socket.gethostname()}:{os.getpid()}")


def _resume(s: UpRun, ledger: Books, settings: Settings) -> tuple[str, int, str]:
    """A run's rental: (run id, attempt 1.., ``GPUOPS_RESUME_DIR``) for ``jobenv.job_env``, the folder made.

    ``GPUOPS_RESUME_DIR`` is the directory the job keeps its checkpoints in and resumes from
    (``jobenv.resume_dir``). With a volume it outlives every box. Without: the results directory
    on the box (``[job] results``), filled first with the newest earlier rental's results that came
    home (copied home during the job every ``[job] checkpoint_sync_seconds``, so a box taken back
    without warning leaves its last checkpoint behind)."""
    from gpuops.agent.jobenv import RESUME, resume_dir
    from gpuops.box.base import q

    box = s.box
    assert box is not None  # connected by the box stage
    volume = s.instance.extra.get("volume_path") if s.instance is not None else None
    where = resume_dir(str(box.root), settings.job.results, volume, s.run_id)
    if not volume and s.resume_from is not None:
        box.put(s.resume_from, settings.job.results.strip("/") or RESUME)
        files = sum(1 for p in s.resume_from.rglob("*") if p.is_file())
        ledger.event(s.id, EventKind.RESUME, {"from": s.resume_from.name, "files": files, "dir": where})
    box.run(f"mkdir -p {q(where)}", timeout=60)
    s.synced_at = time.monotonic()
    return s.run_id, s.attempt, where


def _run_poll(s: UpRun, ledger: Books, settings: Settings, provider: Provider) -> Callable[[], None]:
    """What `up` does between two log reads of a run's job.

    Every ``TAKEN_BACK_POLL_S`` ask the provider whether the spot box was taken back (raises TakenBack); every ``[job]
    checkpoint_sync_seconds`` (no volume) copy the results directory home and read the tokens, so
    a box lost without warning leaves its last checkpoint and work booked."""
    asked = [time.monotonic()]
    volume = s.instance.extra.get("volume_path") if s.instance is not None else None
    results = settings.job.results.strip("/")

    def poll() -> None:
        now = time.monotonic()
        if s.offer is not None and s.offer.spot and now - asked[0] >= TAKEN_BACK_POLL_S:
            asked[0] = now
            if _taken_back(s, provider, ledger, "job"):
                raise TakenBack(f"{provider.name} took back instance {s.instance.id if s.instance else '?'}")
        if results and not volume and now - s.synced_at >= settings.job.checkpoint_sync_seconds:
            s.synced_at = now
            _sync_home(s, ledger, settings, results)

    return poll


def _sync_home(s: UpRun, ledger: Books, settings: Settings, results: str) -> None:
    """Copy the job's results home now and read its tokens.

    Verified and resumable: what is home already is not read again; a copy that fails only waits for the next one."""
    from gpuops.rental import results as copyback

    dest = settings.data_path() / "results" / s.id
    rep = copyback.fetch_results(
        s.box, results, dest, deadline_s=max(5.0, min(120.0, settings.job.checkpoint_sync_seconds))
    )
    if rep.files and not s.results_path:
        s.results_path = str(dest)
        ledger.update(s.id, results_path=s.results_path)
    got = _read_tokens(s)
    if got is not None:
        s.tokens = got


def _read_tokens(s: UpRun) -> int | None:
    """Tokens the job wrote to $GPUOPS_METRICS so far (None when the box cannot be read)."""
    try:
        if s.box is None:
            return None  # never connected: nothing to read
        raw = s.box.read_file(f"{META}/metrics.jsonl")
    except Exception:  # noqa: BLE001  the box may be gone; the caller books what it has
        return None
    return tokens_from_metrics(raw.decode("utf-8", "replace")) if raw else 0


def _collect(s: UpRun, ledger: Books, reporter: Reporter, settings: Settings) -> None:
    """Bring home what must come home before the destroy: the tokens, the rest of the log, the results.

    The tokens first (they are the rental's work), then the rest of the job log in bulk
    (``joblog.keep_log``), then the results, all under one deadline: ``[teardown]
    fetch_deadline_seconds`` from the moment `up` read the job's exit. Past it the box is
    destroyed anyway (the kept log and the results' copy report say what is missing)."""
    import os
    import socket

    from gpuops.rental import results as copyback
    from gpuops.teardown.joblog import keep_log

    box = s.box
    assert box is not None  # connected by the box stage
    deadline = (s.exited_at or time.monotonic()) + s.fetch_deadline_s
    got = _read_tokens(s)
    if got is not None:
        s.tokens = got
        s.tokens_booked = True
        ledger.update(s.id, tokens=s.tokens, job_seconds=s.job_seconds)
    results = settings.job.results.strip("/")
    booked = s.tokens_booked  # the tokens and job seconds are on the row already
    if results and _no_results_dir(box, results):
        results = ""  # a local box without the directory: no manifest to run (a python start), nothing to copy
    row = ledger.held(s.id)
    with copyback.presence(box):  # the on-box agent must not destroy the box while its log and results come home
        if row is not None:
            by = f"up:{socket.gethostname()}:{os.getpid()}"
            done = keep_log(ledger, row, lambda: box, by=by, close=False, deadline=deadline, job_started=True)
            s.log_kept = True
            s.log_complete = bool(done and done.get("complete"))
        rep = None
        if results:
            rep = copyback.fetch_results(
                box,
                results,
                settings.data_path() / "results" / s.id,
                deadline_s=max(0.001, deadline - time.monotonic()),
                keep_to=_keep_results_to(s),
            )
    if rep is not None:
        booked = False
        dest = settings.data_path() / "results" / s.id
        if rep.files or not rep.ok:
            s.results_copy = rep.as_json()
            s.results_copy["line"] = rep.line()
            ledger.event(s.id, EventKind.RESULTS_COPIED if rep.ok else EventKind.RESULTS_COPY_FAILED, s.results_copy)
        if rep.files and rep.ok:
            s.results_path = str(dest)
        elif not rep.ok:
            reporter.warn(f"results: {rep.line()}")
            if dest.exists():
                s.results_path = str(dest)
    if not booked:
        ledger.update(s.id, tokens=s.tokens, job_seconds=s.job_seconds, results_path=s.results_path)
    s.collected = not (s.results_copy and not s.results_copy.get("ok"))  # a copy that failed: the result is not home
    return None


def _keep_results_to(s: UpRun) -> str | None:
    """Where the results are kept on the rental's volume too (absolute on the box), or None without one."""
    volume = s.instance.extra.get("volume_path") if s.instance is not None else None
    return f"{volume.rstrip('/')}/gpuops/results/{s.id}" if volume else None


def _no_results_dir(box, results: str) -> bool:
    """True when ``box`` reads its files locally (``LocalBox.local_reads``) and has no directory ``results``.

    False otherwise (an SSH box is asked by the manifest itself: one round trip)."""
    import os

    return bool(getattr(box, "local_reads", False)) and not os.path.isdir(box._abs(results))


def _agent_reason(s: UpRun) -> EndReason | None:
    """The reason the on-box agent destroyed the box (idle, ttl, ...), when it did."""
    if s.box is None:
        return None
    try:
        from gpuops.agent.agentctl import read_status

        st = read_status(s.box) or {}
    except Exception:  # the box may already be gone; then the laptop's reason stands
        return None
    return EndReason.parse((st.get("destroy") or {}).get("reason"))


# The look-up by label after a failed create: 3 tries, waits 1 s then 2 s.
ADOPT_RETRY = RetryPolicy(attempts=3, wait_s=1.0, max_wait_s=2.0, budget_s=None)


def _adopt_by_label(s: UpRun, provider: Provider, ledger: Books) -> None:
    """Find and book an instance a create that failed may have made anyway (the request reached the provider).

    Also after an interrupted create, or one that raised something not a provider's. Found by its label."""
    try:  # any ProviderError: 3 tries, 1 s then 2 s apart (each look-up has its provider call's deadline)
        found = call_with_retries(
            lambda: provider.find_by_label(s.label),
            ADOPT_RETRY,
            retry_on=lambda e: isinstance(e, ProviderError),
            retry_after=False,
        )
    except ProviderError:
        return
    if found is None:
        return
    _book_instance(s, ledger, found, "label")


def _book_instance(s: UpRun, ledger: Books, inst: Instance, found_by: str) -> None:
    """Put an instance the row does not know on the row (id, billing start, price) so the close bills it.

    Never raises (the destroy must still happen)."""
    s.instance = inst
    try:
        ledger.update(
            s.id,
            instance_id=inst.id,
            instance_created_at=inst.created_at or time.time(),
            usd_per_hour=inst.usd_per_hour if inst.usd_per_hour is not None else (s.offer.price if s.offer else None),
        )
        ledger.event(s.id, EventKind.CREATE_LEFT_INSTANCE, {"instance": inst.id, "found_by": found_by})
    except Exception:  # noqa: BLE001
        pass


def _teardown(s: UpRun, provider: Provider, ledger: Books, reporter: Reporter) -> None:
    """End the rental through ``gpuops.teardown.lifecycle.end_rental``.

    The reason: one requested on the
    row by someone else (``gpuops down`` from another terminal wins), else the agent's when it
    destroyed the box, else the outcome the stages decided. Tokens the job wrote are booked even
    when the run was interrupted."""
    import os
    import socket

    requested = None
    try:  # bounded (run_up holds ledger.bounded()): a ledger down or locked costs one short deadline
        row = ledger.quick(lambda: ledger.get(s.id)) or ledger.held(s.id)
        requested = EndReason.parse(row.end_reason) if row is not None else None
    except Exception:  # noqa: BLE001  a ledger that fails here must not stop the destroy
        row = None
    taken = s.end_reason == EndReason.PREEMPTED or s.box_gone  # the box is stopped or gone: read nothing more
    reason = requested or (None if taken else _agent_reason(s)) or s.end_reason or EndReason.ERROR
    s.end_reason = reason
    fault_point("teardown")
    if s.instance is None and s.stage == "create":
        _adopt_by_label(s, provider, ledger)
    elif s.instance is not None and row is not None and row.instance_id is None:
        _book_instance(s, ledger, s.instance, "create_returned")  # create returned, the row update did not happen
    if s.job_started and not s.tokens_booked and s.box is not None and not taken:
        got = _read_tokens(s)
        if got is not None:
            s.tokens, s.tokens_booked = got, True
    elif taken and s.tokens:
        s.tokens_booked = True  # the tokens read at the last checkpoint copy
    reporter.stage("teardown", str(reason))
    if s.job_started and not s.log_kept and s.box is not None and row is not None:  # interrupted: the rest first
        from gpuops.teardown.joblog import keep_log

        done = keep_log(
            ledger,
            row,
            lambda: s.box,
            by=f"up:{socket.gethostname()}:{os.getpid()}",
            close=False,
            deadline=(s.exited_at or time.monotonic()) + s.fetch_deadline_s,
            job_started=True,
        )
        s.log_complete = bool(done and done.get("complete"))
    ended = end_rental(
        ledger,
        provider if s.instance is not None else None,
        s.id,
        reason,
        by=f"up:{socket.gethostname()}:{os.getpid()}",
        instance_id=s.instance.id if s.instance else None,
        exit_code=s.exit_code,
        tokens=s.tokens if s.tokens_booked else None,
        last_seen_at=s.last_seen_at,
    )
    s.end_reason = EndReason.parse(ended.reason) or reason
    gave_up = ended.error and not ended.destroyed and not ended.closed and ended.error != "ledger write spooled"
    if gave_up and s.instance is not None:  # (a refused destroy of a reused id closes the row: not this)
        reporter.warn(
            f"destroy of {s.instance.id} failed {DESTROY_ATTEMPTS} times: {ended.error}; "
            "run `gpuops down " + s.id + "` or `gpuops reconcile`"
        )
    ledger.try_replay()  # the box is gone; a ledger that is back takes the spooled close now
    for note in ledger.notices:
        reporter.warn(note)
    for line in ledger.lost:  # neither spool could be written: one raw line each, a command that books it
        _raw_line(
            "warning: a ledger write no spool could hold; book it with: gpuops ledger replay " + shlex.quote(line)
        )
    if s.box is not None:
        try:
            s.box.close()
        except Exception:  # closing a transport to a destroyed box may fail; nothing to do
            pass


def _raw_line(text: str) -> None:
    """Write ``text`` as one line on stderr, never wrapped or styled (a command to copy).

    A closed or broken stderr loses it, nothing else."""
    import os

    try:
        os.write(2, (text.replace("\n", " ") + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def summary(s: UpRun, ledger: Books) -> dict:
    """The run's summary, as a dict.

    Keys: ``session, provider, card, gpu_count, usd_per_hour, seconds, cost_usd, simulated,
    tokens, usd_per_mtoken, end_reason, exit_code, log`` (+ slowest_step, results; ``ledger``: what
    the ledger could not take, when it refused: ``spooled`` pending writes, ``replay`` commands for
    lines no spool could hold, ``notices``). The row as this run holds it when the ledger cannot
    be read or has not yet taken the close (spooled): the summary tells the truth either way."""
    row = ledger.quick(lambda: ledger.get(s.id))
    held = ledger.held(s.id)
    if row is None or (row.status != RowStatus.CLOSED and held is not None and held.status == RowStatus.CLOSED):
        row = held
    assert row is not None  # this run wrote the row: it holds it at least
    cost = row.cost_usd or 0.0
    return {
        "session": s.id,
        "provider": row.provider,
        "card": row.card,
        "gpu_count": row.gpu_count,
        "usd_per_hour": row.usd_per_hour,  # the price booked (the bid on spot)
        "spot": bool(row.spot),
        "seconds": round(row.billed_seconds or 0.0, 3),
        "cost_usd": round(cost, 6),
        "simulated": row.simulated,
        "tokens": row.tokens,
        "usd_per_mtoken": round(cost / row.tokens * 1e6, 6) if row.tokens else None,
        "end_reason": row.end_reason,
        "exit_code": row.exit_code,
        "log": row.log_path,
        "slowest_step": s.slowest_step,
        "slowest_step_seconds": round(s.slowest_step_seconds, 3),
        "results": row.results_path or None,
        "results_copy": s.results_copy,
        "status": row.status,
        **_ledger_state(ledger),
        **({"interactive": _way_in(s)} if s.left_up else {}),
    }


def _ledger_state(ledger: Books) -> dict:
    """``{"ledger": {...}}`` when the ledger refused something this run (else {}).

    It holds how many writes
    wait in the spool (every later `ps`, `watchdog`, `reconcile` replays them), the lines no spool
    could take as commands that replay them, and the notices (a ledger file that vanished)."""
    waiting = len(ledger.spooled()) if ledger.has_spool() else 0
    if not (waiting or ledger.lost or ledger.notices):
        return {}
    replay = ["gpuops ledger replay " + shlex.quote(line) for line in ledger.lost]
    return {"ledger": {"spooled": waiting, "replay": replay, "notices": list(ledger.notices)}}
