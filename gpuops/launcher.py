"""`gpuops up` as an explicit state machine.

    validate -> plan -> intent -> create -> ready -> arm -> bootstrap -> job -> teardown

Nothing is rented before validate and plan pass. The ledger row is written (intent) before
create; every stage entered is an event; teardown runs in ``finally`` (job end, job failure,
Ctrl-C, SIGTERM, TTL) with SIGINT ignored so a second Ctrl-C cannot skip it, and closes the row
with the end time of the confirmed destroy, the reason, the exit code and the cost.
"""

from __future__ import annotations

import json
import secrets
import shlex
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from gpuops.config import Settings
from gpuops.errors import BadInput, GpuopsError
from gpuops.providers.base import CreateSpec, Instance, InstanceStatus, Offer, OfferQuery, Provider, ProviderError, ProviderErrorKind

BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "bootstrap"
# On the box, everything gpuops owns lives under <root>/.gpuops
META = ".gpuops"
# How many next-best offers to try when one vanishes or has no capacity (no spend is booked).
MAX_OFFER_ATTEMPTS = 3
# Destroy retries: a provider hiccup must not leave a box billing.
DESTROY_ATTEMPTS = 5
LOG_POLL_S = 0.2
# The job wrapper rewrites a heartbeat every second (bootstrap/jobwrap.py); this long without a
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
    max_hours: float = 4.0
    note: str = ""
    gpu_count: int = 1
    need_bytes_per_gpu: int = 0
    dry_run: bool = False
    # `up --model`: size the box from the model first (gpuops.plan); offers must fit these bytes.
    model: str = ""
    dtype: str = "auto"
    kv_dtype: str = "auto"
    seq: int = 4096
    batch: int = 1
    allow_unverified: bool = False  # rent even when nothing confirms the model's size (gpuops.plan: "unverified")


@dataclass
class PlanResult:
    provider: str
    offer: Offer
    candidates: list[Offer]
    projected_cost_usd: float  # offer price x max_hours
    need_bytes_per_gpu: int = 0  # VRAM per GPU the model needs (0: no --model)

    def as_json(self, settings: Settings) -> dict:
        return {
            "provider": self.provider,
            "card": self.offer.card,
            "gpu_count": self.offer.gpu_count,
            "usd_per_hour": self.offer.usd_per_hour,
            "spot": self.offer.spot,
            "simulated": self.offer.simulated,
            "max_hours": settings.teardown.max_hours,
            "projected_cost_usd": round(self.projected_cost_usd, 4),
            "need_bytes_per_gpu": self.need_bytes_per_gpu,
            "teardown": settings.teardown.model_dump(),
            "settings_file": settings.source,
        }


class Reporter:
    """Where `up` tells the user what happens. The CLI subclasses it; tests use it silent."""

    def stage(self, name: str, detail: str = "") -> None: ...

    def step(self, line: dict) -> None: ...

    def job_line(self, text: str) -> None: ...

    def warn(self, text: str) -> None: ...


def new_session_id(now: float | None = None) -> str:
    """``YYYYMMDD-HHMMSS-xxxx`` (UTC, 4 random hex): sortable, short, safe in labels and paths."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(2)


# -- validate + plan (pure of side effects: nothing rented, nothing booked) -----------------------
def validate(req: UpRequest) -> None:
    """Raise BadInput for anything a typo could break. Settings were validated when loaded."""
    if not req.job.exists():
        raise BadInput(f"job file {req.job} not found", "pass the path of a script, e.g. --job examples/bench.sh")
    if req.job.is_dir():
        raise BadInput(f"job {req.job} is a directory", "pass a script file, e.g. --job examples/bench.sh")
    if not req.job.is_file():  # a FIFO would hang the copy to the box, /dev/zero would fill its disk
        raise BadInput(f"job {req.job} is not a regular file", "pass a script file, e.g. --job examples/bench.sh")
    if not req.experiment.strip() or any(ch < " " or ch == "\x7f" for ch in req.experiment):
        # It is a row label in every report and a CSV field: one visible line.
        raise BadInput(f"--experiment must be one line of visible text, got {req.experiment!r}", "e.g. --experiment llama-sweep")
    if req.max_hours <= 0:
        raise BadInput(f"--max-hours must be > 0, got {req.max_hours:g}", "pass the box's time limit in hours, e.g. --max-hours 2")
    if req.max_usd_per_hour is not None and req.max_usd_per_hour <= 0:
        raise BadInput(f"--max-price must be > 0 USD/h, got {req.max_usd_per_hour:g}", "pass a price in USD per hour, e.g. --max-price 2.5")
    if req.gpu_count < 1:
        raise BadInput(f"--gpu-count must be >= 1, got {req.gpu_count}", "pass a whole number of GPUs")


def query_for(req: UpRequest) -> OfferQuery:
    cards: tuple[str, ...] = ()
    if req.card:
        from gpuops.catalog import resolve_cards

        cards = tuple(c.name for c in resolve_cards(req.card))
    return OfferQuery(cards=cards, gpu_count=req.gpu_count, min_vram_bytes=req.need_bytes_per_gpu,
                      spot=req.spot, max_usd_per_hour=req.max_usd_per_hour)


def plan(req: UpRequest, provider: Provider, settings: Settings) -> PlanResult:
    """Offers that fit, cheapest first; BadInput when none does."""
    from gpuops.offers import rank

    query = query_for(req)
    if req.model:  # VRAM first: only cards the model fits (BadInput with the fix when none does)
        from dataclasses import replace

        from gpuops.plan import size_for_up

        need, fitting, _ = size_for_up(req.model, dtype=req.dtype, kv_dtype=req.kv_dtype, seq=req.seq, batch=req.batch,
                                       gpu_count=req.gpu_count, card=req.card or None, allow_unverified=req.allow_unverified)
        req = replace(req, need_bytes_per_gpu=max(req.need_bytes_per_gpu, need))
        query = replace(query, cards=fitting, min_vram_bytes=req.need_bytes_per_gpu)
    if query.spot and not req.spot_explicit and not getattr(provider, "supports_spot", True):
        # [up] spot = true means "prefer interruptible where the provider has them" (RunPod: none).
        import dataclasses

        query = dataclasses.replace(query, spot=None)
    offers = provider.offers(query)
    ranked = rank(offers, need_bytes_per_gpu=req.need_bytes_per_gpu, max_usd_per_hour=req.max_usd_per_hour, spot=query.spot)
    if not ranked:
        what = f"card {req.card!r}" if req.card else "any card"
        cheapest = min((o.usd_per_hour for o in offers), default=None)
        hint = f"the cheapest fitting offer is {cheapest:.2f} USD/h; raise --max-price" if cheapest and req.max_usd_per_hour else "try another --card or --provider"
        raise BadInput(f"no {provider.name} offer for {what} fits", hint)
    best = ranked[0]
    return PlanResult(provider.name, best, ranked, best.usd_per_hour * settings.teardown.max_hours, req.need_bytes_per_gpu)


# -- the run --------------------------------------------------------------------------------------
@contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM/SIGHUP become Interrupted, like Ctrl-C, for the duration of the run."""

    def handler(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def _shielded() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM/SIGHUP: teardown must finish once it has started."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class Session:
    """What the run knows as it goes; becomes the summary."""

    id: str
    req: UpRequest
    offer: Offer | None = None
    instance: Instance | None = None
    box: object | None = None
    exit_code: int | None = None
    end_reason: str = "provision_failed"
    tokens: int = 0
    job_seconds: float | None = None
    steps: list = field(default_factory=list)
    slowest_step: str | None = None
    slowest_step_seconds: float = 0.0
    log_path: Path | None = None
    results_path: str = ""
    # Wall clock at which max_hours runs out: counted from create (billing starts there), not job start.
    ttl_deadline: float | None = None


def _job_command(job_name: str) -> str:
    path = f"{META}/job/{job_name}"
    if job_name.endswith(".py"):
        return "python3 " + shlex.quote(path)
    if job_name.endswith(".sh"):
        return "bash " + shlex.quote(path)
    return shlex.quote("./" + path)


def run_up(req: UpRequest, settings: Settings, reporter: Reporter, provider: Provider | None = None, ledger=None,
           open_box: Callable | None = None) -> dict:
    """Run the whole state machine; return the summary dict (see ``summary``).

    ``provider``/``ledger``/``open_box`` default to those named by ``settings``; tests pass their
    own. Raises BadInput (before anything is rented) and Interrupted (after teardown is done).
    """
    from gpuops.providers import get_provider

    validate(req)
    from gpuops.bootstrap_config import build_plan

    build_plan(settings)  # [bootstrap] input errors (missing secret, requirements file) before renting
    provider = provider or get_provider(req.provider, settings)
    reporter.stage("plan")
    try:
        p = plan(req, provider, settings)
    except ProviderError as e:
        if e.kind in (ProviderErrorKind.AUTH, ProviderErrorKind.UNSUPPORTED, ProviderErrorKind.BAD_REQUEST):
            raise BadInput(e.message, e.fix) from None  # nothing rented yet: this is input to fix
        raise
    if req.dry_run:
        return {"dry_run": True, **p.as_json(settings), "experiment": req.experiment, "note": req.note}

    if ledger is None:
        from ledger import Ledger

        ledger = Ledger(settings.ledger_url())
    from ledger import Session as Row

    _quick_reconcile(settings, ledger, provider, reporter)
    from gpuops.budget import budget_for_up

    budget_for_up(ledger, settings, provider, p.offer.usd_per_hour)  # BadInput: refused, or does not fit
    sid = new_session_id()
    s = Session(id=sid, req=req, offer=p.offer)
    logs_dir = settings.data_path() / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    s.log_path = logs_dir / f"{sid}.log"
    label = f"gpuops-{sid}"
    reporter.stage("intent", f"session {sid}")
    ledger.add_session(Row(
        id=sid, experiment=req.experiment, job=str(req.job), provider=provider.name, card=p.offer.card,
        gpu_count=p.offer.gpu_count, spot=p.offer.spot, label=label, simulated=p.offer.simulated,
        status="provisioning", created_at=time.time(), note=req.note, log_path=str(s.log_path),
    ))
    interrupted: BaseException | None = None
    try:
        with _signals_raise():
            _create(s, p, provider, ledger, reporter, label, settings)
            _ready(s, provider, ledger, reporter, settings, open_box)
            _arm(s, ledger, reporter, settings, provider)
            if not _bootstrap(s, ledger, reporter, settings):
                if s.end_reason != "ttl":
                    s.end_reason = "bootstrap_failed"
            else:
                _job(s, ledger, reporter, settings)
                _collect(s, ledger, reporter, settings)
    except (KeyboardInterrupt, Interrupted) as e:
        s.end_reason = "interrupted"
        interrupted = e
    except ProviderError as e:
        ledger.event(sid, "provider_error", {"kind": e.kind.value, "message": e.message})
        if s.end_reason not in ("provision_failed", "ssh_never_ready"):
            s.end_reason = "provider_error"
        reporter.warn(str(e))
        interrupted = e
    except GpuopsError as e:
        reporter.warn(str(e))
        interrupted = e
    except Exception as e:  # a bug or an unforeseen failure: still tear down, book why, summarize
        import traceback

        s.end_reason = "error"
        ledger.event(sid, "error", f"{type(e).__name__}: {e}")
        with open(s.log_path, "a", encoding="utf-8") as log:  # type: ignore[arg-type]
            log.write("gpuops internal error:\n" + traceback.format_exc())
        interrupted = GpuopsError(f"internal error: {type(e).__name__}: {e}", f"the traceback is in {s.log_path}; please report it")
        reporter.warn(str(interrupted))
    finally:
        with _shielded():
            _teardown(s, provider, ledger, reporter)
    summ = summary(s, ledger)
    if interrupted is not None and not isinstance(interrupted, GpuopsError):
        summ["interrupted"] = True
    elif isinstance(interrupted, GpuopsError):
        summ["error"] = str(interrupted)
    return summ


def _create(s: Session, p: PlanResult, provider: Provider, ledger, reporter: Reporter, label: str, settings: Settings) -> None:
    reporter.stage("create", f"{p.offer.card} x{p.offer.gpu_count} on {provider.name} at {p.offer.usd_per_hour:.4f} USD/h")
    ledger.event(s.id, "create", {"offer": p.offer.offer_id})
    s.ttl_deadline = time.time() + s.req.max_hours * 3600.0
    from gpuops.providers.rent import rent_first

    key = _ssh_public_key(provider, settings)

    def spec_for(offer: Offer) -> CreateSpec:
        return CreateSpec(label=label, image=settings.up.image, disk_gb=settings.up.disk_gb,
                          bid_usd_per_hour=offer.min_bid if offer.spot else None, ssh_public_key=key)

    def leftover(offer: Offer, e: ProviderError) -> None:
        # A failed create that still made an instance: book it so teardown (and reconcile) end it.
        s.instance = Instance(id=e.instance_id or "", label=label, status=InstanceStatus.UNKNOWN)
        ledger.update(s.id, instance_id=e.instance_id, instance_created_at=time.time(), usd_per_hour=offer.usd_per_hour)
        ledger.event(s.id, "create_left_instance", {"offer": offer.offer_id, "instance": e.instance_id, "kind": e.kind.value})

    def skipped(offer: Offer, e: ProviderError) -> None:
        ledger.event(s.id, "offer_skipped", {"offer": offer.offer_id, "kind": e.kind.value})

    got = rent_first(provider, p.candidates, spec_for, max_offers=MAX_OFFER_ATTEMPTS, on_skip=skipped, on_leftover=leftover)
    inst, offer = got.instance, got.offer
    bid = offer.min_bid if offer.spot else None
    s.instance, s.offer = inst, offer
    ledger.update(
        s.id, instance_id=inst.id, offer_id=offer.offer_id, card=offer.card, gpu_count=offer.gpu_count,
        spot=offer.spot, bid_usd_per_hour=bid, status="running",
        instance_created_at=inst.created_at or time.time(),
        usd_per_hour=inst.usd_per_hour if inst.usd_per_hour is not None else offer.usd_per_hour,
        simulated=offer.simulated,
    )
    ledger.event(s.id, "created", {"instance": inst.id})


def _ssh_public_key(provider: Provider, settings: Settings) -> str:
    """The key line the provider puts in the box's authorized_keys (none for the local provider)."""
    if provider.name == "local":
        return ""
    from gpuops import remote

    if settings.up.ssh_key:
        return remote.public_key_line(Path(settings.up.ssh_key).expanduser())
    return remote.ensure_ssh_key(settings.data_path())[1]


def _ready(s: Session, provider: Provider, ledger, reporter: Reporter, settings: Settings, open_box: Callable | None) -> None:
    reporter.stage("ready")
    s.end_reason = "ssh_never_ready"
    assert s.instance is not None
    deadline = time.monotonic() + settings.up.ready_timeout_seconds
    if open_box is not None:
        s.box = open_box(provider, s.instance, deadline, settings)
    else:
        from gpuops import remote

        from gpuops.providers.wait import wait_for_ssh

        if s.instance.ssh is None and not s.instance.extra.get("local_root"):
            s.instance = wait_for_ssh(provider, s.instance.id, timeout_s=max(0.0, deadline - time.monotonic()), poll_s=READY_POLL_S)
        s.box = remote.open_box(s.instance, data_dir=settings.data_path(), deadline=deadline, ssh_key=settings.up.ssh_key)
    ledger.update(s.id, ready_at=time.time())
    ledger.event(s.id, "ready")
    s.end_reason = "job_failed"


def _quick_reconcile(settings: Settings, ledger, provider: Provider, reporter: Reporter) -> None:
    """Reconcile this provider before renting (orphans, gone boxes); a failure only warns."""
    from gpuops.reconcile import Context, reconcile

    try:
        for a in reconcile(Context(settings, ledger=ledger, providers={provider.name: provider})):
            if a.kind in ("closed", "destroyed", "orphan_destroyed", "adopted", "error"):
                reporter.warn(f"reconcile: {a}")
    except GpuopsError as e:
        reporter.warn(f"reconcile skipped: {e}")


def _arm(s: Session, ledger, reporter: Reporter, settings: Settings, provider: Provider) -> None:
    """Ship bootstrap/ and start the on-box agent FIRST: from here on the box can destroy itself."""
    from gpuops import agentctl

    reporter.stage("arm")
    row = ledger.get(s.id)
    cfg = agentctl.agent_config(
        session_id=s.id, provider=provider.name, instance_id=s.instance.id, root=s.box.root,  # type: ignore[union-attr]
        teardown=settings.teardown, started_at=row.instance_created_at, usd_per_hour=row.usd_per_hour, settings=settings,
    )
    agentctl.arm(s.box, cfg)
    ledger.event(s.id, "armed")


def _bootstrap(s: Session, ledger, reporter: Reporter, settings: Settings) -> bool:
    from gpuops.bootstrap_config import RUNNER_DIR, build_plan, run_plan
    from gpuops.catalog import cards

    reporter.stage("bootstrap")
    card = next((c for c in cards() if s.offer is not None and c.name == s.offer.card), None)
    volume = s.instance.extra.get("volume_path") if s.instance is not None else None
    plan = build_plan(settings, card=card, volume_path=volume)
    plan.files = [(local, remote) for local, remote in plan.files if remote != RUNNER_DIR]  # shipped by arm
    remaining = s.ttl_deadline - time.time() if s.ttl_deadline is not None else None
    ttl_bound = remaining is not None and remaining < plan.timeout
    if ttl_bound:
        plan.timeout = max(remaining, 0.1)  # type: ignore[type-var]
    try:
        res = run_plan(s.box, plan, on_step=reporter.step, on_line=reporter.job_line)
    except TimeoutError:
        why = "ttl" if ttl_bound else "bootstrap_timeout"
        ledger.event(s.id, why, {"during": "bootstrap", "seconds": round(plan.timeout, 3)})
        reporter.warn(f"bootstrap ran past {plan.timeout:.0f} s"
                      + (" (max_hours ran out)" if ttl_bound else " ([bootstrap] timeout_seconds)"))
        if ttl_bound:
            s.end_reason = "ttl"
        return False
    s.steps = res.steps
    s.slowest_step = res.summary.get("slowest")
    s.slowest_step_seconds = max((float(st.get("seconds") or 0.0) for st in res.steps if "step" in st), default=0.0)
    ledger.add_steps(s.id, res.steps)
    ledger.event(s.id, "bootstrapped", {"rc": res.rc, "slowest": s.slowest_step, "failed": res.failed,
                                        "cache_dir": plan.config.get("cache_dir") or "~/.cache/gpuops (on the box, lost with it)"})
    return res.rc == 0 and res.failed is None


def _job(s: Session, ledger, reporter: Reporter, settings: Settings) -> None:
    from gpuops import jobio

    box = s.box
    req = s.req
    reporter.stage("job", req.job.name)
    box.put(req.job, f"{META}/job/{req.job.name}")  # type: ignore[union-attr]
    metrics = f"{box.root}/{META}/metrics.jsonl"  # type: ignore[union-attr]
    env = {"GPUOPS_SESSION": s.id, "GPUOPS_EXPERIMENT": req.experiment, "GPUOPS_METRICS": metrics}
    ttl_deadline = s.ttl_deadline if s.ttl_deadline is not None else time.time() + req.max_hours * 3600.0
    if time.time() > ttl_deadline:  # ready + bootstrap used up max_hours: the job does not start
        s.end_reason = "ttl"
        ledger.event(s.id, "ttl", {"max_hours": req.max_hours, "before_job": True})
        return
    jobio.start_job(box, _job_command(req.job.name), env=env)
    ledger.event(s.id, "job_started")
    pending = b""

    with open(s.log_path, "ab") as log:  # type: ignore[arg-type]
        def sink(chunk: bytes) -> None:
            nonlocal pending
            log.write(chunk)
            log.flush()
            *whole, pending = (pending + chunk).split(b"\n")
            for line in whole:
                reporter.job_line(line.decode("utf-8", "replace"))

        try:
            _, ended = jobio.follow_log(box, sink, poll_s=LOG_POLL_S, deadline=time.monotonic() + (ttl_deadline - time.time()),
                                        stale_after_s=WRAPPER_STALE_S)
        except jobio.WrapperLost as e:
            s.end_reason = "job_failed"
            ledger.event(s.id, "wrapper_lost", e.message)
            reporter.warn(str(e))
            return
        finally:
            if pending:
                reporter.job_line(pending.decode("utf-8", "replace"))
    if ended is None:
        s.end_reason = "ttl"
        ledger.event(s.id, "ttl", {"max_hours": req.max_hours})
        return
    s.exit_code = ended.code
    if ended.started is not None and ended.ended is not None:
        s.job_seconds = round(ended.ended - ended.started, 3)
    s.end_reason = "job_end" if s.exit_code == 0 else "job_failed"
    ledger.event(s.id, "job_exited", {"exit_code": s.exit_code})


MAX_TOKENS_PER_LINE = 10**15  # far above any job; keeps the sum inside a 64-bit ledger INTEGER


def tokens_from_metrics(text: str) -> int:
    """Sum of ``tokens`` over the JSON lines a job appended to $GPUOPS_METRICS; other lines ignored,
    and so are values that are not a finite number in [0, 1e15] (booleans, NaN, Infinity, 1e30)."""
    import math

    total = 0
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        n = obj.get("tokens") if isinstance(obj, dict) else None
        if isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) and 0 <= n <= MAX_TOKENS_PER_LINE:
            total += int(n)
    return min(total, 2**62)


def _collect(s: Session, ledger, reporter: Reporter, settings: Settings) -> None:
    box = s.box
    raw = box.read_file(f"{META}/metrics.jsonl")  # type: ignore[union-attr]
    s.tokens = tokens_from_metrics(raw.decode("utf-8", "replace")) if raw else 0
    results = settings.job.results.strip("/")
    if results:
        dest = settings.data_path() / "results" / s.id
        if box.get(results, dest):  # type: ignore[union-attr]
            s.results_path = str(dest)
    ledger.update(s.id, tokens=s.tokens, job_seconds=s.job_seconds, results_path=s.results_path)


def _agent_reason(s: Session) -> str | None:
    """The reason the on-box agent destroyed the box (idle, ttl, ...), when it did."""
    if s.box is None:
        return None
    try:
        from gpuops.agentctl import read_status

        st = read_status(s.box) or {}
    except Exception:  # the box may already be gone; then the laptop's reason stands
        return None
    return (st.get("destroy") or {}).get("reason")


def _teardown(s: Session, provider: Provider, ledger, reporter: Reporter) -> None:
    s.end_reason = _agent_reason(s) or s.end_reason
    reporter.stage("teardown", s.end_reason)
    ended = time.time()
    if s.instance is not None:
        last_err = None
        for attempt in range(DESTROY_ATTEMPTS):
            try:
                provider.destroy(s.instance.id)
                last_err = None
                break
            except ProviderError as e:  # keep trying: a box left running is the one unforgivable bug
                last_err = e
                ledger.event(s.id, "destroy_failed", {"attempt": attempt + 1, "kind": e.kind.value})
                time.sleep(min(2**attempt, 10))
        ended = getattr(provider, "destroyed_at", lambda _id: None)(s.instance.id) or time.time()
        if last_err is not None:
            reporter.warn(f"destroy of {s.instance.id} failed {DESTROY_ATTEMPTS} times: {last_err}; "
                          "run `gpuops down " + s.id + "` or `gpuops reconcile`")
            ledger.event(s.id, "destroy_gave_up", str(last_err))
            return  # the row stays open so reconcile/watchdog finish the job
        ledger.event(s.id, "destroyed", {"instance": s.instance.id})
    if s.box is not None:
        try:
            s.box.close()  # type: ignore[union-attr]
        except Exception:  # closing a transport to a destroyed box may fail; nothing to do
            pass
    ledger.close(s.id, ended_at=ended, reason=s.end_reason, exit_code=s.exit_code)


def summary(s: Session, ledger) -> dict:
    """The run's summary: ``session, provider, card, usd_per_hour, seconds, cost_usd, simulated,
    tokens, usd_per_mtoken, end_reason, exit_code, log`` (+ slowest_step, results)."""
    row = ledger.get(s.id)
    cost = row.cost_usd or 0.0
    return {
        "session": s.id,
        "provider": row.provider,
        "card": row.card,
        "usd_per_hour": row.usd_per_hour,
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
        "status": row.status,
    }
