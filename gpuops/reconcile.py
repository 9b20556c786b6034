"""`gpuops reconcile`: make the ledger and the providers agree.

Lists every provider instance whose label starts with ``gpuops-`` and matches it to ledger rows:

* an instance whose row is closed (a crash between create and commit, a create that errored but
  created, a destroy that did not take) is an orphan: destroyed, event ``orphan_destroyed``;
* an instance with no row in this ledger at all is reported (``unknown_instance``), not destroyed:
  it may belong to a teammate's ledger (``destroy_unknown=True`` destroys it too);
* an open row without an instance id whose label matches an instance adopts it (the crash came
  between create and the row update);
* an open row whose instance is gone is closed, with the end time from the provider, the agent's
  destroy record or its last heartbeat -- never "now" -- and the reason from the agent when it
  destroyed the box (else ``preempted`` for spot, ``interrupted`` otherwise);
* an open row whose box never got an agent heartbeat by ``ready_timeout_seconds`` + ``arm_margin_s``
  after create was abandoned by a killed `up`: destroyed, reason ``interrupted``;
* an open row that never got an instance is closed ``provision_failed`` (cost 0) once older than
  the same deadline.

Every action takes the session's lease (ledger/limits.py), so concurrent watchdogs and reconciles
do not fight, and is a ledger event. Shared by ``gpuops.watchdog``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from gpuops.errors import GpuopsError
from gpuops.providers.base import Instance, InstanceStatus, Provider, ProviderError

END_REASONS = ("job_end", "job_failed", "interrupted", "idle", "ttl", "session_cap", "balance_floor",
               "monthly_cap", "preempted", "provision_failed", "ssh_never_ready", "orphan", "manual")
LABEL_PREFIX = "gpuops-"


@dataclass
class Action:
    """One thing reconcile/watchdog did or noticed. ``kind``: e.g. closed, destroyed, adopted,
    orphan_destroyed, unknown_instance, refused, lifted, skipped_leased, stale_heartbeat, error."""

    session: str
    kind: str
    detail: str

    def as_json(self) -> dict:
        return {"session": self.session, "kind": self.kind, "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.kind:<18} {self.session or '-':<24} {self.detail}"


class Context:
    """What reconcile and the watchdog share: settings, ledger, providers, clock, lease owner.

    ``providers``: name -> Provider, used instead of building them from settings (tests);
    ``arm_margin_s``: seconds after ``ready_timeout_seconds`` by which an armed box must have
    heartbeated; ``lease_seconds``: how long one acts on a session before another may;
    ``ssh_connect_s``: how long to try reaching a box over SSH for the agent's status.
    """

    def __init__(self, settings, ledger=None, providers: dict | None = None, clock: Callable[[], float] = time.time,
                 owner: str | None = None, arm_margin_s: float = 60.0, lease_seconds: float = 120.0,
                 destroy_unknown: bool = False, ssh_connect_s: float = 10.0):
        from ledger.store import Ledger

        self.settings = settings
        self.ledger = ledger if ledger is not None else Ledger(settings.ledger_url())
        self._providers: dict = dict(providers or {})
        self._injected = set(self._providers)
        self.clock = clock
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.arm_margin_s = arm_margin_s
        self.lease_seconds = lease_seconds
        self.destroy_unknown = destroy_unknown
        self.ssh_connect_s = ssh_connect_s

    def provider(self, name: str) -> Provider:
        """The provider called ``name`` (cached). Raises GpuopsError when it cannot be built."""
        if name not in self._providers:
            from gpuops.providers import get_provider

            self._providers[name] = get_provider(name, self.settings)
        return self._providers[name]

    def provider_names(self) -> list[str]:
        """Providers to look at: injected ones, else local plus those with an account key
        configured, plus every provider an open row names."""
        names = list(self._injected) if self._injected else ["local"]
        if not self._injected:
            from gpuops.providers import configured

            names += configured(self.settings)
        for r in self.ledger.open_sessions():
            if r.provider and r.provider not in names:
                names.append(r.provider)
        return names

    def box(self, provider: Provider, inst: Instance):
        """A Box on ``inst`` to read the agent's status (the local provider's own, else SSH with
        a ``ssh_connect_s`` deadline), or None when it has no SSH endpoint. Raises what
        ``gpuops.remote.open_box`` raises (the caller treats it as "no status")."""
        opener = getattr(provider, "box", None)
        if opener is not None:
            return opener(inst)
        if inst.ssh is None:
            return None
        from gpuops import remote

        return remote.open_box(inst, data_dir=self.settings.data_path(), deadline=time.monotonic() + self.ssh_connect_s,
                               ssh_key=self.settings.up.ssh_key, reconnect_s=0.0)

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
        """Each open session row that ``keep`` accepts, re-read and yielded while this process holds
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
                if fresh is not None and fresh.status != "closed":
                    yield fresh


# -- reading the box -------------------------------------------------------------------------------
def agent_status(ctx: Context, provider: Provider, inst: Instance) -> dict | None:
    """The agent's status document (None when unreachable or absent); records its heartbeat."""
    from gpuops.agentctl import read_status

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


def _last_event_at(ctx: Context, session_id: str) -> float | None:
    evs = ctx.ledger.events(session_id)
    return max((e.at for e in evs if e.kind != "closed"), default=None)


def end_time(ctx: Context, row, provider: Provider, inst: Instance | None, status: dict | None) -> tuple[float, str]:
    """When billing stopped for a box that is gone, and where that time came from. Order: the
    provider's own record; the agent's confirmed destroy; its last heartbeat (status or ledger);
    the last ledger event; the create time. Never "now"."""
    get_end = getattr(provider, "destroyed_at", None)
    if get_end is not None and row.instance_id:
        try:
            t = get_end(row.instance_id)
        except GpuopsError:
            t = None
        if t:
            return float(t), "provider"
    if inst is not None and inst.extra.get("ended_at"):
        return float(inst.extra["ended_at"]), "provider"
    if status and (status.get("destroy") or {}).get("done_at"):
        return float(status["destroy"]["done_at"]), "destroy"
    beats = [b for b in ((status or {}).get("heartbeat"), row.last_heartbeat_at) if b]
    if beats:
        return float(max(beats)), "heartbeat"
    # No provider time and no heartbeat (the box never ran an agent): the last thing we know
    # happened to it, which still is not "now".
    last = _last_event_at(ctx, row.id)
    if last:
        return float(last), "ledger_event"
    return float(row.instance_created_at or row.created_at), "create"


def _intended_reason(ctx: Context, row) -> str | None:
    """A reason recorded before a destroy whose close never happened (a `up` killed in teardown),
    or the job's end as last seen (a box that destroyed itself while nobody watched)."""
    for e in reversed(ctx.ledger.events(row.id)):
        if e.kind == "job_exited":  # the job ended (seen by `up` or a watchdog); whoever destroyed, it was over
            try:
                code = json.loads(e.detail).get("exit_code")
            except (ValueError, AttributeError):
                code = None
            return "job_end" if code == 0 else "job_failed"
        if e.kind in ("destroy", "teardown", "destroy_requested"):
            try:
                d = json.loads(e.detail)
                r = d.get("reason") if isinstance(d, dict) else None
            except ValueError:
                r = e.detail.split()[0] if e.detail else None
            if r in END_REASONS:
                return r
    return None


def close_gone(ctx: Context, row, provider: Provider, inst: Instance | None, status: dict | None) -> Action:
    """Close the row of a box that is gone (see ``end_time``), reason from the agent when it
    destroyed the box, from a destroy event, else preempted (spot) / interrupted."""
    ended, source = end_time(ctx, row, provider, inst, status)
    reason = (status or {}).get("destroy", {}) and status["destroy"].get("reason")
    reason = reason or _intended_reason(ctx, row) or ("preempted" if row.spot else "interrupted")
    exit_code = ((status or {}).get("job") or {}).get("exit_code")
    ctx.event(row.id, "gone", {"reason": reason, "ended_at": ended, "source": source})
    closed = ctx.ledger.close(row.id, ended, reason, exit_code=exit_code, end_source=source)
    detail = f"{closed.end_reason}: instance gone; end time from {source}; billed {closed.billed_seconds:.0f} s, ${closed.cost_usd:.4f}"
    return Action(row.id, "closed", detail)


def destroy_and_close(ctx: Context, row, provider: Provider, reason: str, detail: str, ended_at: float | None = None) -> Action:
    """Destroy the row's instance (idempotent), then close the row at the confirmed destroy time
    (``ended_at`` when the box stopped billing earlier, e.g. a preempted spot instance)."""
    ctx.event(row.id, "destroy", {"reason": reason, "by": ctx.owner, "detail": detail})
    if hasattr(ctx.ledger, "request_end"):  # a crash before the close still books this reason
        ctx.ledger.request_end(row.id, reason)
    try:
        provider.destroy(row.instance_id)
    except ProviderError as e:
        ctx.event(row.id, "destroy_failed", {"reason": reason, "error": str(e)})
        return Action(row.id, "error", f"destroy failed ({reason}): {e}")
    end, source = ended_at, "heartbeat"
    if end is None:
        get_end = getattr(provider, "destroyed_at", None)
        end, source = (get_end(row.instance_id) if get_end else None) or ctx.clock(), "destroy"
    closed = ctx.ledger.close(row.id, end, reason, end_source=source)
    return Action(row.id, "destroyed", f"{reason}: {detail}; billed {closed.billed_seconds:.0f} s, ${closed.cost_usd:.4f}")


# -- reconcile -------------------------------------------------------------------------------------
def _deadline(ctx: Context, row) -> float:
    start = row.instance_created_at or row.created_at
    return start + float(ctx.settings.up.ready_timeout_seconds) + ctx.arm_margin_s


def _session_of_label(label: str) -> str:
    return label[len(LABEL_PREFIX):] if label.startswith(LABEL_PREFIX) else label


def reconcile(ctx: Context) -> list[Action]:
    """One pass over every provider and open row (module doc). Provider errors are reported as
    ``error`` actions and the pass goes on."""
    actions: list[Action] = []
    for name in ctx.provider_names():
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
                ctx.ledger.update(row.id, instance_id=inst.id, instance_created_at=inst.created_at or row.created_at,
                                  usd_per_hour=inst.usd_per_hour if inst.usd_per_hour is not None else row.usd_per_hour)
                ctx.event(row.id, "adopted", {"instance_id": inst.id, "label": inst.label})
                actions.append(Action(row.id, "adopted", f"instance {inst.id} (label {inst.label}) had no id in its row"))
    listed = {i.id: i for i in insts}
    for row in ctx.open_sessions_leased(actions, keep=lambda r: r.provider == name):
        if row.instance_id is None:
            if now > _deadline(ctx, row):
                closed = ctx.ledger.close(row.id, row.created_at, "provision_failed")
                ctx.event(row.id, "stale_intent", "no instance by the ready deadline; closed at its intent time")
                actions.append(Action(row.id, "closed", f"provision_failed: never got an instance; ${closed.cost_usd:.4f}"))
            continue
        inst = listed.get(row.instance_id)
        if inst is None:
            try:
                inst = p.get(row.instance_id)
            except ProviderError as e:
                actions.append(Action(row.id, "error", f"{name}: get {row.instance_id}: {e}"))
                continue
        status = agent_status(ctx, p, inst) if inst is not None else None
        if inst is None or inst.status == InstanceStatus.GONE:
            actions.append(close_gone(ctx, row, p, inst, status))
            continue
        if status and status.get("heartbeat"):
            ctx.ledger.heartbeat(row.id, float(status["heartbeat"]))
        elif row.last_heartbeat_at is None and now > _deadline(ctx, row):
            actions.append(destroy_and_close(
                ctx, row, p, "interrupted",
                f"no agent heartbeat {now - (row.instance_created_at or row.created_at):.0f} s after create: `up` was interrupted before arming"))
    return actions


def _orphan(ctx: Context, p: Provider, inst: Instance) -> Action:
    sid = _session_of_label(inst.label)
    row = ctx.ledger.get(sid)
    if row is None and not ctx.destroy_unknown:
        return Action("", "unknown_instance", f"{p.name} instance {inst.id} label {inst.label}: no row in this ledger; left alone "
                      "(another ledger's?); `gpuops reconcile --destroy-unknown` destroys it")
    try:
        p.destroy(inst.id)
    except ProviderError as e:
        return Action(sid if row else "", "error", f"orphan {inst.id}: destroy failed: {e}")
    if row is not None:
        ctx.event(row.id, "orphan_destroyed", {"instance_id": inst.id, "label": inst.label})
    return Action(sid if row else "", "orphan_destroyed", f"{p.name} instance {inst.id} label {inst.label}: its row is {'closed' if row else 'missing'}")
