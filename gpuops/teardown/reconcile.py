"""`gpuops reconcile`: make the ledger and the providers agree.

Lists every provider instance whose label starts with ``gpuops-`` and matches it to ledger rows:

* an instance whose row is closed (a crash between create and commit, a create that errored but
  created, a destroy that did not take) is an orphan: destroyed, event ``orphan_destroyed``;
* an instance with no row in this ledger at all is reported (``unknown_instance``), not destroyed:
  it may belong to a teammate's ledger (``destroy_unknown=True`` destroys it too);
* an open row without an instance id whose label matches an instance adopts it (the crash came
  between create and the row update);
* an open row whose instance is gone is closed, with the end time from the provider, else the last
  proof of life (the agent's destroy record or heartbeat, the last ledger event) -- never "now" --
  and the true reason when anything kept it (the agent's status, a reason requested on the row, the
  job's seen exit), else ``agent_ended`` when an agent was armed on it (it destroyed the box and
  nobody read why), else ``interrupted`` -- never a guessed ``preempted``;
* an open row whose box never got an agent heartbeat by the ROW's ``ready_timeout_seconds`` (the
  session's own limit; this process's setting only for rows older than m004) + ``arm_margin_s``
  after create was abandoned by a killed `up`: destroyed, reason ``interrupted``;
* an open row that never got an instance is closed ``provision_failed`` (cost 0) once older than
  the same deadline.

Every action takes the session's lease (ledger/limits.py), so concurrent watchdogs and reconciles
do not fight, and is a ledger event. Every end goes through ``gpuops.teardown.lifecycle.end_rental``.
Shared by ``gpuops.teardown.watchdog``.

Ownership (gpuops/ownership.py): only rows of a provider account this process holds a key for are
looked at. A row of another account is left to its owner (one ``left_to_owner`` line per provider),
its instance is never an orphan here, and "not found" under our key never closes it. A row from
before ownership was booked (no account) is closed only when its instance is seen gone; not seen
at all, it is reported ``unknown`` and left open.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuops.errors import GpuopsError
from gpuops.providers import ACCOUNTLESS
from gpuops.providers.base import Instance, InstanceStatus, Provider, ProviderError
from gpuops.teardown.joblog import keep_log
from gpuops.teardown.lifecycle import Ended, end_rental, requested_reason, seen_exit_code
from gpuops.units import money  # "simulated" on every money figure
from onbox.vocabulary import END_REASONS, Actor, EndReason, EventKind, RowStatus  # noqa: F401  (END_REASONS re-exported)

if TYPE_CHECKING:
    from ledger.books import Books

LABEL_PREFIX = "gpuops-"


ACTION_COLUMNS = ("session", "kind", "detail")  # ``Action.as_json`` keys: the CSV header of `gpuops reconcile`


@dataclass
class Action:
    """One thing reconcile/watchdog did or noticed.

    ``kind``: e.g. closed, destroyed, adopted, orphan_destroyed, unknown_instance, refused, lifted,
    skipped_leased, stale_heartbeat, error."""

    session: str
    kind: str
    detail: str

    def as_json(self) -> dict:
        return dict(zip(ACTION_COLUMNS, (self.session, self.kind, self.detail)))

    def __str__(self) -> str:  # details quote provider labels and owners: shown, never run by the terminal
        from gpuops.textsafe import safe

        return f"{self.kind:<18} {self.session or '-':<24} {safe(self.detail)}"


class Context:
    """What reconcile and the watchdog share: settings, ledger, providers, clock, lease owner.

    ``providers``: name -> Provider, used instead of building them from settings (tests);
    ``arm_margin_s``: seconds after ``ready_timeout_seconds`` by which an armed box must have
    heartbeated; ``lease_seconds``: how long one acts on a session before another may;
    ``ssh_connect_s``: how long to try reaching a box over SSH for the agent's status.
    """

    def __init__(
        self,
        settings,
        ledger: Books | None = None,
        providers: dict | None = None,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        arm_margin_s: float = 60.0,
        lease_seconds: float = 120.0,
        destroy_unknown: bool = False,
        ssh_connect_s: float = 10.0,
    ):
        from ledger.store import Ledger

        self.settings = settings
        from gpuops.notify import notifier

        notifier.use(settings)  # reconcile's and the watchdog's endings tell ([notify]); nothing when no target
        self.ledger = ledger if ledger is not None else Ledger(settings.ledger_url())
        self._providers: dict = dict(providers or {})
        self._injected = set(self._providers)
        self.clock = clock
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.arm_margin_s = arm_margin_s
        self.lease_seconds = lease_seconds
        self.destroy_unknown = destroy_unknown
        self.ssh_connect_s = ssh_connect_s
        self.actor = Actor.RECONCILE  # the watchdog sets Actor.WATCHDOG
        self.me = settings.owner()  # this user's name on the ledger
        self.checked = 0  # open sessions the last watchdog pass looked at (gpuops.teardown.watchdog)

    def account(self, name: str) -> str | None:
        """The provider account this process holds for provider ``name`` (None: no key for it)."""
        from gpuops.ownership import account_of

        try:
            return account_of(self.provider(name))
        except GpuopsError:
            return None

    def standing(self, row) -> str:
        """gpuops.ownership.HELD / OTHER / LEGACY for ``row`` under the keys held here."""
        from gpuops.ownership import standing

        return standing(row, self.account(row.provider))

    def holds(self, row) -> bool:
        """True when this process may act on ``row`` (its account, or a row without one)."""
        from gpuops.ownership import OTHER

        return self.standing(row) != OTHER

    @property
    def by(self) -> str:
        """``actor:host:pid`` for the ``by`` of end events."""
        return f"{self.actor}:{self.owner}"

    def provider(self, name: str) -> Provider:
        """The provider called ``name`` (cached). Raises GpuopsError when it cannot be built."""
        if name not in self._providers:
            from gpuops.providers import get_provider

            self._providers[name] = get_provider(name, self.settings)
        return self._providers[name]

    def provider_names(self) -> list[str]:
        """Providers to look at.

        Injected ones, else local plus those with an account key configured, plus every provider an
        open row names."""
        names = list(self._injected) if self._injected else list(ACCOUNTLESS)
        if not self._injected:
            from gpuops.providers import configured

            names += configured(self.settings)
        for r in self.ledger.open_sessions():
            if r.provider and r.provider not in names:
                names.append(r.provider)
        return names

    def box(self, provider: Provider, inst: Instance):
        """A Box on ``inst`` to read the agent's status, or None when it has no SSH endpoint.

        A Box on ``inst`` to read the agent's status (the local provider's own, else SSH with a
        ``ssh_connect_s`` deadline), or None when it has no SSH endpoint. Raises what
        ``gpuops.box.remote.open_box`` raises (the caller treats it as "no status")."""
        own = provider.box(inst)
        if own is not None:
            return own
        if inst.ssh is None:
            return None
        from gpuops.box import remote

        return remote.open_box(
            inst,
            data_dir=self.settings.data_path(),
            deadline=time.monotonic() + self.ssh_connect_s,
            ssh_key=self.settings.up.ssh_key,
            reconnect_s=0.0,
        )

    def event(self, session_id: str, kind: str, detail) -> None:
        self.ledger.event(session_id, kind, detail, at=self.clock())

    @contextmanager
    def lease(self, session_id: str) -> Iterator[bool]:
        from ledger.limits import acquire_lease, release_lease

        ok = acquire_lease(self.ledger, session_id, self.owner, self.lease_seconds, now=self.clock())
        try:
            yield ok
        finally:
            if ok:
                release_lease(self.ledger, session_id, self.owner)

    def open_sessions_leased(self, actions: list, keep: Callable[[Any], bool] = lambda row: True) -> Iterator[Any]:
        """Each open session row that ``keep`` accepts, yielded while this process holds its lease.

        Each open session row that ``keep`` accepts, re-read and yielded while this process holds
        its lease (released when the caller moves on); a row another watchdog holds is recorded in
        ``actions`` as skipped_leased, a row closed meanwhile is passed over."""
        for row in self.ledger.open_sessions():
            if not keep(row):
                continue
            with self.lease(row.id) as ok:
                if not ok:
                    actions.append(Action(row.id, "skipped_leased", "another watchdog acts on it"))
                    continue
                fresh = self.ledger.get(row.id)
                if fresh is not None and fresh.status != RowStatus.CLOSED:
                    yield fresh


# -- reading the box -------------------------------------------------------------------------------
def agent_status(ctx: Context, provider: Provider, inst: Instance) -> dict | None:
    """The agent's status document (None when unreachable or absent); records its heartbeat."""
    from gpuops.agent.agentctl import read_status

    try:
        box = ctx.box(provider, inst)
        if box is None:
            return None
        try:
            return read_status(box)
        finally:
            box.close()
    except Exception:  # an unreachable box is "no status"; the caller says so and keeps going
        return None


def ours(row, inst: Instance | None) -> Instance | None:
    """``inst`` when the provider answers the row's instance id with the row's own label, else None.

    An id answering with another label, or none, is not the row's box (ours deleted and the id
    handed on, or doubt): nothing on it is read as the row's -- its agent's heartbeat, tokens, log
    or end reason -- and ``lifecycle.end_rental`` decides what to destroy and when the row ended."""
    return inst if inst is not None and inst.label and inst.label == row.label else None


def record_proof_of_life(ctx: Context, row, status: dict, now: float) -> None:
    """Book that the box was alive now, by the laptop's clock, after a fresh heartbeat.

    The box's own heartbeat value is never booked: a box clock hours ahead or behind would bill 0 h
    or 6 h for a 1 h rental once its end goes unseen."""
    from gpuops.agent.agentctl import heartbeat_stale

    if not heartbeat_stale(status, now):
        ctx.ledger.heartbeat(row.id, now)


def box_tokens(ctx: Context, provider: Provider, inst: Instance | None) -> int | None:
    """Tokens the job wrote to the box's metrics file (``$GPUOPS_METRICS``), None when unreadable.

    Tokens the job wrote to the box's metrics file (``$GPUOPS_METRICS``), read before a destroy or
    from a gone box whose files remain (the local provider keeps them); None when unreadable."""
    if inst is None:
        return None
    from gpuops.agent.bootstrap_config import BOX_DIR as META
    from gpuops.agent.jobio import tokens_from_metrics

    try:
        box = ctx.box(provider, inst)
        if box is None:
            return None
        try:
            raw = box.read_file(f"{META}/metrics.jsonl")
        finally:
            box.close()
    except Exception:  # noqa: BLE001  an unreachable box has no tokens to give
        return None
    return tokens_from_metrics(raw.decode("utf-8", "replace")) if raw else None


def _tokens_to_book(ctx: Context, row, provider: Provider, inst: Instance | None) -> int | None:
    """The box's token count when the row has none booked yet (never lowers a booked count)."""
    if row.tokens:
        return None
    got = box_tokens(ctx, provider, inst)
    return got if got else None


def _ended_action(row, ended: Ended, what: str) -> Action:
    if ended.not_ours:
        return Action(
            row.id, "left_to_owner", f"{what}: the row belongs to account {row.account} ({row.owner}); not ended here"
        )
    if ended.unknown:
        return Action(
            row.id,
            "unknown",
            f"{what}: {row.provider} instance {row.instance_id} is not visible to this key "
            "(no account recorded on the row); left open for its owner",
        )
    if not ended.closed:
        return Action(row.id, "error", f"{what}: {ended.error or 'not closed'}")
    c = ended.row
    said = (
        what if what.startswith(f"{ended.reason}:") else f"{ended.reason}: {what}"
    )  # the policy's line names its reason: once
    return Action(
        row.id,
        "closed" if ended.already_gone else "destroyed",
        f"{said}; end time from {ended.end_source}; billed {c.billed_seconds:.0f} s, {money(c.cost_usd, c.simulated)}",
    )


def gone_reason(ctx: Context, row, inst: Instance | None, status: dict | None) -> EndReason:
    """The true reason for a box found gone, from what kept it.

    The agent's status (its destroy record), a reason the provider kept
    (``inst.extra["end_reason"]``), a reason requested on the row or the job's seen exit
    (``lifecycle.requested_reason``); else ``agent_ended`` when an agent was armed (heartbeat or
    ``armed`` event: it destroyed the box, nobody read why), else ``interrupted``. Never a guessed
    ``preempted``."""
    for text in (
        ((status or {}).get("destroy") or {}).get("reason"),
        (inst.extra.get("end_reason") if inst is not None else None),
    ):
        got = EndReason.parse(text)
        if got is not None:
            return got
    got = requested_reason(ctx.ledger, row.id)
    if got is not None:
        return got
    armed = row.last_heartbeat_at is not None or any(e.kind == EventKind.ARMED for e in ctx.ledger.events(row.id))
    return EndReason.AGENT_ENDED if armed else EndReason.INTERRUPTED


def _keep_log(ctx: Context, row, provider: Provider, mine) -> None:
    """Keep the box's job log before its rental is ended (``joblog.keep_log``).

    Within the one ``[teardown] fetch_deadline_seconds``; no box is opened unless the instance is
    ours (``mine``)."""
    keep_log(
        ctx.ledger,
        row,
        lambda: ctx.box(provider, mine) if mine is not None else None,
        by=ctx.by,
        deadline=time.monotonic() + ctx.settings.teardown.fetch_deadline_seconds,
    )


def status_exit_code(status: dict | None) -> int | None:
    """The job's exit code as the agent's status document says it (``status["job"]``), else None.

    The box's own record of its job: the agent writes it, with the job's end, before it destroys
    (``onbox/agent.py`` ``do_destroy``), so a row closed from that status books it even when no
    ``job_exited`` event was booked (the `up` that would have was killed)."""
    return exit_code_of(((status or {}).get("job") or {}).get("exit_code"))


def exit_code_of(value: object) -> int | None:
    """``value`` when the box gave a real exit code (an int, not a bool), else None: the box's files are input."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def close_gone(ctx: Context, row, provider: Provider, inst: Instance | None, status: dict | None) -> Action:
    """Close the row of a box that is gone.

    Reason by ``gone_reason``, end time by ``lifecycle.end_time`` (provider, else the last proof of
    life: the agent's destroy record or heartbeat, the ledger's last event).

    "Gone" must come from the row's own account: an instance our key cannot see (``inst`` None) on
    a row of another account, or of no recorded account, is ``unknown`` and the row stays open."""
    from gpuops.ownership import HELD

    if inst is None and ctx.standing(row) != HELD:
        ctx.event(row.id, EventKind.UNKNOWN, {"by": ctx.by, "detail": "instance not visible to the key held here"})
        return Action(
            row.id,
            "unknown",
            f"{row.provider} instance {row.instance_id} is not visible to this key "
            f"(row account {row.account or 'not recorded'}); left open for its owner ({row.owner or 'unknown'})",
        )
    mine = ours(row, inst)
    status = status if mine is not None else None
    reason = gone_reason(ctx, row, mine, status)
    proofs = [
        float(t) for t in (((status or {}).get("destroy") or {}).get("done_at"), (status or {}).get("heartbeat")) if t
    ]
    exit_code = status_exit_code(status)
    if exit_code is None:
        exit_code = seen_exit_code(ctx.ledger, row.id)
    _keep_log(ctx, row, provider, mine)
    ended = end_rental(
        ctx.ledger,
        provider,
        row.id,
        reason,
        by=ctx.by,
        instance=inst or Instance(id=row.instance_id, label=row.label, status=InstanceStatus.GONE),
        detail="instance gone",
        exit_code=exit_code,
        last_seen_at=max(proofs) if proofs else None,
        clock=ctx.clock,
        tokens=_tokens_to_book(ctx, row, provider, mine),
    )
    close_run_of(ctx, row, ended)
    return _ended_action(row, ended, "instance gone")


def destroy_and_close(
    ctx: Context,
    row,
    provider: Provider,
    reason: str,
    detail: str,
    exit_code: int | None = None,
) -> Action:
    """Destroy the row's instance and close the row (``lifecycle.end_rental``).

    The end time is ``lifecycle.end_time``'s one rule: at the confirmed destroy of a box just seen
    running; a box the provider shows stopped (a preempted spot instance, an on-demand box its
    agent's key could only stop) at its newest proof of life. ``exit_code``: the job's, when the
    caller read it from the box (``status_exit_code``); None: the ledger's ``job_exited`` event
    (``end_rental``)."""
    inst = None
    if row.instance_id:
        try:
            inst = provider.get(row.instance_id)
        except ProviderError:
            inst = None
    mine = ours(row, inst)
    _keep_log(ctx, row, provider, mine)
    ended = end_rental(
        ctx.ledger,
        provider,
        row.id,
        reason,
        by=ctx.by,
        detail=detail,
        clock=ctx.clock,
        instance=inst,
        exit_code=exit_code,
        tokens=_tokens_to_book(ctx, row, provider, mine),
    )
    close_run_of(ctx, row, ended)
    return _ended_action(row, ended, detail)


def close_run_of(ctx: Context, row, ended: Ended) -> bool:
    """Close the run of a rental this process just closed when no `up` can carry the run on.

    The run (``runs`` row, m010) of a rental reconcile or the watchdog closed: its other rentals are closed and the rental's reason
    ends the run (a reason outside the run's ``recover_on``: the run ends with it, as `up` ends it),
    or it would re-rent but the attempts are spent (``attempts_spent``). A reason the run recovers
    on with attempts left leaves it open: a live `up` is renting the next box. The run's end time is
    the rental's. Returns whether it closed the run; never raises for a ledger error (the rental is
    booked; the run's close is a label on it)."""
    from onbox.vocabulary import RunEnd

    run_id = getattr(row, "run_id", None)
    if not run_id or not ended.closed:
        return False
    try:
        run = ctx.ledger.get_run(run_id)
        if (
            run is None
            or run.status == "closed"
            or any(r.status != RowStatus.CLOSED for r in ctx.ledger.run_rentals(run_id))
        ):
            return False
        reason = str(ended.reason or EndReason.ERROR)
        recovers = reason in {w for w in (run.recover_on or "").split(",") if w}
        if recovers and int(run.attempts or 0) <= int(run.recover or 0):
            return False
        end = str(RunEnd.ATTEMPTS_SPENT) if recovers else reason
        ctx.ledger.close_run(
            run_id,
            float(ended.ended_at or ctx.clock()),
            end,
            f"rental {getattr(row, 'attempt', None) or '?'} ({row.id}) ended {reason}; closed with it by {ctx.by}",
        )
    except Exception:  # noqa: BLE001
        return False
    return True


def _end_requested(ctx: Context, row) -> EndReason | None:
    """The reason of the row's newest ``end_requested`` event, or None.

    The reason of the row's newest ``end_requested`` event (a destroy that was asked for, and gave
    up or was cut short), or None."""
    import json

    for e in reversed(ctx.ledger.events(row.id)):
        if e.kind == EventKind.END_REQUESTED:
            try:
                d = json.loads(e.detail) if isinstance(e.detail, str) else e.detail
            except ValueError:
                return None
            return EndReason.parse(d.get("reason")) if isinstance(d, dict) else None
    return None


def end_asked_for(ctx: Context, row, provider: Provider, inst: Instance, status: dict | None) -> Action | None:
    """Terminate a live box of ours that should be gone, with this process's (account) key.

    None when it may live on. It should be gone when:

    * its agent asked for the end (``status["destroy"]`` with a reason) and the box is still here:
      the narrow key on the box was refused (RunPod's pod-scoped key is not documented to
      terminate), so the agent keeps trying and the laptop side ends it; booked with the agent's
      reason, at the confirmed destroy (the box billed until then). Likewise a row whose end was
      requested (``end_requested``: a destroy that gave up) and whose box is still here.
    * an on-demand box found stopped/exited (its agent's key could only stop it, or the console
      stopped it): a stopped box still bills its disk and no job runs on it; booked with the
      reason that kept (``gone_reason``), its compute ending at the last proof of life.
    (A stopped interruptible box is the watchdog's ``preempted``.)"""
    code = status_exit_code(status)  # how the job ended, as the box says (no job_exited event may exist)
    asked = EndReason.parse(((status or {}).get("destroy") or {}).get("reason"))
    if asked is not None:
        return destroy_and_close(
            ctx,
            row,
            provider,
            asked,
            f"its agent asked for the end ({asked}) and the box is still here: terminated with the account key",
            exit_code=code,
        )
    requested = _end_requested(ctx, row)
    if requested is not None:
        return destroy_and_close(
            ctx,
            row,
            provider,
            requested,
            f"its end was requested ({requested}) and the box is still here: terminated",
            exit_code=code,
        )
    if not row.spot and inst.status in (InstanceStatus.EXITED, InstanceStatus.STOPPED):
        return destroy_and_close(
            ctx,
            row,
            provider,
            gone_reason(ctx, row, inst, status),
            f"instance {inst.raw_status or inst.status.value} (stopped, still billing its disk): terminated",
            exit_code=code,
        )
    return None


# -- reconcile -------------------------------------------------------------------------------------
def _deadline(ctx: Context, row) -> float:
    """When an armed agent must have heartbeated.

    Create + the ROW's ready timeout (this process's setting only for rows written before m004) +
    ``arm_margin_s``."""
    start = row.instance_created_at or row.created_at
    ready = (
        row.ready_timeout_seconds if row.ready_timeout_seconds is not None else ctx.settings.up.ready_timeout_seconds
    )
    return start + float(ready) + ctx.arm_margin_s


def _session_of_label(label: str) -> str:
    return label[len(LABEL_PREFIX) :] if label.startswith(LABEL_PREFIX) else label


def reconcile(ctx: Context) -> list[Action]:
    """One pass over every provider and open row (module doc).

    Provider errors are reported as ``error`` actions and the pass goes on."""
    actions: list[Action] = []
    for name in ctx.provider_names():
        if (
            name not in ACCOUNTLESS
            and ctx.account(name) is None
            and all(r.account for r in ctx.ledger.open_sessions() if r.provider == name)
        ):
            continue  # no key here for this provider: every open row of it is another account's
        try:
            p = ctx.provider(name)
            insts = p.list(LABEL_PREFIX)
        except GpuopsError as e:
            actions.append(Action("", "error", f"{name}: cannot list instances: {e}"))
            continue
        actions += _reconcile_provider(ctx, name, p, insts)
    return actions


def _reconcile_provider(ctx: Context, name: str, p: Provider, insts: list[Instance]) -> list[Action]:
    actions: list[Action] = []
    now = ctx.clock()
    open_rows = [r for r in ctx.ledger.open_sessions() if r.provider == name]
    others = [r for r in open_rows if not ctx.holds(r)]
    if others:
        owners = sorted({r.owner or "?" for r in others})
        actions.append(
            Action(
                "",
                "left_to_owner",
                f"{name}: {len(others)} open session(s) of other accounts ({', '.join(owners)}); "
                "only a holder of their key closes or destroys them",
            )
        )
    open_rows = [r for r in open_rows if ctx.holds(r)]
    by_iid = {r.instance_id: r for r in open_rows if r.instance_id}
    by_label = {r.label: r for r in open_rows}
    for inst in insts:
        row = by_iid.get(inst.id) or by_label.get(inst.label)
        if row is None:
            actions.append(_orphan(ctx, p, inst))
        elif row.instance_id is None:
            with ctx.lease(row.id) as ok:
                if not ok:
                    continue
                price = inst.usd_per_hour
                ok = (
                    isinstance(price, (int, float)) and math.isfinite(price) and price >= 0
                )  # a provider's NaN is not a price
                ctx.ledger.update(
                    row.id,
                    instance_id=inst.id,
                    instance_created_at=inst.created_at or row.created_at,
                    usd_per_hour=price if ok else row.usd_per_hour,
                )
                ctx.event(row.id, EventKind.ADOPTED, {"instance_id": inst.id, "label": inst.label})
                actions.append(
                    Action(row.id, "adopted", f"instance {inst.id} (label {inst.label}) had no id in its row")
                )
    listed = {i.id: i for i in insts}
    for row in ctx.open_sessions_leased(actions, keep=lambda r: r.provider == name and ctx.holds(r)):
        if row.instance_id is None:
            if now > _deadline(ctx, row):
                ctx.event(
                    row.id, EventKind.STALE_INTENT, "no instance by the ready deadline; closed at its intent time"
                )
                ended = end_rental(ctx.ledger, None, row.id, EndReason.PROVISION_FAILED, by=ctx.by, clock=ctx.clock)
                actions.append(Action(row.id, "closed", f"{ended.reason}: never got an instance; $0.0000"))
            continue
        seen = listed.get(row.instance_id)
        if seen is None:
            try:
                seen = p.get(row.instance_id)
            except ProviderError as e:
                actions.append(Action(row.id, "error", f"{name}: get {row.instance_id}: {e}"))
                continue
        mine = ours(row, seen)
        status = agent_status(ctx, p, mine) if mine is not None else None
        if seen is None or seen.status == InstanceStatus.GONE or mine is None:  # gone, or the id another's
            actions.append(close_gone(ctx, row, p, seen, status))
            continue
        alive = bool(status and status.get("heartbeat"))
        if alive and status is not None:
            record_proof_of_life(ctx, row, status, now)
        # (a stopped interruptible box is the watchdog's: it books preempted)
        asked = (
            None
            if row.spot and seen.status in (InstanceStatus.EXITED, InstanceStatus.STOPPED)
            else end_asked_for(ctx, row, p, seen, status)
        )
        if asked is not None:
            actions.append(asked)
        elif not alive and row.last_heartbeat_at is None and now > _deadline(ctx, row):
            actions.append(
                destroy_and_close(
                    ctx,
                    row,
                    p,
                    EndReason.INTERRUPTED,
                    f"no agent heartbeat {now - (row.instance_created_at or row.created_at):.0f} s after create: `up` was interrupted before arming",
                )
            )
    return actions


def _orphan(ctx: Context, p: Provider, inst: Instance) -> Action:
    from gpuops.ownership import OTHER

    sid = _session_of_label(inst.label)
    row = ctx.ledger.get(sid)
    if row is not None and ctx.standing(row) == OTHER:
        return Action(
            "",
            "unknown_instance",
            f"{p.name} instance {inst.id} label {inst.label}: its row belongs to account "
            f"{row.account} ({row.owner}); left alone",
        )
    if row is None and not ctx.destroy_unknown:
        return Action(
            "",
            "unknown_instance",
            f"{p.name} instance {inst.id} label {inst.label}: no row in this ledger; left alone "
            "(another ledger's?); `gpuops reconcile --destroy-unknown` destroys it",
        )
    ended = end_rental(
        ctx.ledger,
        p,
        sid if row is not None else None,
        EndReason.INTERRUPTED,
        by=ctx.by,
        instance_id=inst.id,
        instance=inst,
        clock=ctx.clock,
    )
    if not ended.destroyed:
        return Action(sid if row else "", "error", f"orphan {inst.id}: destroy failed: {ended.error}")
    return Action(
        sid if row else "",
        "orphan_destroyed",
        f"{p.name} instance {inst.id} label {inst.label}: its row is {'closed' if row else 'missing'}",
    )
