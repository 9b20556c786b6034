"""`gpuops watchdog [--interval 30] [--once]`.

Teardown layers 2 and 3 from the laptop (or any always-on machine), for every open session in the
ledger.

Each tick, per open session (under its lease, ledger/limits.py, so several watchdogs on one
ledger do not fight): ask the provider for the instance (gone: close the row, end time from the
provider or the agent's heartbeat, never "now"; a stopped/exited spot instance: preempted); read
the agent's status through the Box (a stale heartbeat is reported and checking goes on); apply
``onbox/policy.decide`` with the session's own limits (max_hours and idle window from its ROW,
the rest from the agent's status, else this watchdog's settings) -> destroy on ttl / session_cap /
job end / idle, through ``gpuops.teardown.lifecycle.end_rental``. Then the money layer: each
provider's balance against ``balance_floor_usd`` and the ledger's month-to-date spend against
``monthly_cap_usd``; crossing one destroys every box it covers and records a refusal that `up`
checks (``gpuops.teardown.budget.assert_not_refused``); the refusal is lifted when the condition clears.
A tick with no cap refusal first sums a cheap upper bound of the spend (``ledger.limits.
month_spend_at_most``, ~half the exact sum at 100k sessions this month); only a bound at or above
the cap (or an active refusal) pays for the exact, attributed, per-user sum.
Every action is a ledger event; provider errors are reported and the daemon keeps running.
The daemon runs a reconcile (gpuops/teardown/reconcile.py) at start.

Ownership (gpuops/ownership.py): a watchdog acts only on rows of provider accounts it holds a key
for. With ``teardown.limits_scope = "account"`` (the default) a balance floor refuses and destroys
only what the fallen account rented, and the monthly cap counts, refuses and destroys only this
user's sessions; with ``"team"`` both cover everyone (still destroying only what its keys own).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpuops.errors import GpuopsError
from gpuops.providers.base import InstanceStatus, ProviderError
from gpuops.teardown.reconcile import (
    Action,
    Context,
    agent_status,
    close_gone,
    destroy_and_close,
    end_asked_for,
    exit_code_of,
    ours,
    reconcile,
    record_proof_of_life,
)
from onbox import policy
from onbox.vocabulary import Actor, EndReason, EventKind

log = logging.getLogger("gpuops.teardown.watchdog")


def _box_state(row, status: dict | None) -> policy.BoxState:
    job = (status or {}).get("job") or {}
    return policy.BoxState(
        started_at=float(row.instance_created_at or row.created_at),
        job_ended_at=job.get("ended_at"),
        job_exit_code=job.get("exit_code"),
        usd_per_hour=row.usd_per_hour,
    )


def session_limits(ctx: Context, row, status: dict | None) -> dict:
    """The teardown settings ``policy.decide`` applies to ``row``.

    This watchdog's, overlaid by the row's own limits (m004: max_hours, idle_minutes; 0 = idle off);
    the agent's status may say how it samples and may LOWER ``max_hours`` / ``max_session_usd``,
    never raise them (``agentctl.session_teardown``): a forged status cannot extend a limit or a
    bill."""
    from gpuops.agent.agentctl import session_teardown

    limits = session_teardown(status, ctx.settings.teardown, row)
    if row.idle_minutes is not None:
        limits["idle_minutes"] = "off" if row.idle_minutes == 0 else float(row.idle_minutes)
    return limits


def _job_exit_seen(ctx: Context, row, provider, inst) -> tuple[float, int | None] | None:
    """With the agent silent (stopped, dead): the job's exit marker read from the box itself.

    Booked once as ``job_exited`` at the time THIS watchdog first saw it (the laptop's clock: a box
    clock ahead or behind cannot shorten the grace); returns (first seen, exit code) or None."""
    from gpuops.teardown.lifecycle import seen_exit_code

    for e in ctx.ledger.events(row.id):
        if e.kind == EventKind.JOB_EXITED:
            return e.at, seen_exit_code(ctx.ledger, row.id)
    from gpuops.agent import jobio

    try:
        box = ctx.box(provider, inst)
        if box is None:
            return None
        try:
            ended = jobio.job_exit(box)
        finally:
            box.close()
    except Exception:  # noqa: BLE001  unreadable box: the TTL still applies
        return None
    if ended is None:
        return None
    ctx.event(row.id, EventKind.JOB_EXITED, {"exit_code": ended.code, "seen_by": ctx.owner, "from": "exit_marker"})
    return ctx.clock(), ended.code


def check_session(ctx: Context, row) -> list[Action]:
    """Layers 1-2 and the per-box money rules for one open session (caller holds its lease)."""
    from gpuops.agent.agentctl import heartbeat_stale

    now = ctx.clock()
    if row.instance_id is None:
        return []  # between intent and create: reconcile's business (deadline-based)
    try:
        p = ctx.provider(row.provider)
        inst = p.get(row.instance_id)
    except GpuopsError as e:
        return [Action(row.id, "error", f"{row.provider}: {e}")]
    mine = ours(row, inst)
    if inst is None or inst.status == InstanceStatus.GONE or mine is None:  # gone, or the id another's
        return [close_gone(ctx, row, p, inst, agent_status(ctx, p, mine) if mine is not None else None)]
    if row.spot and inst.status in (InstanceStatus.EXITED, InstanceStatus.STOPPED):
        # An interruptible box the market took back: billing for the GPU stopped at its newest proof
        # of life (lifecycle.end_time); destroy what is left (a stopped Vast instance still bills storage).
        return [
            destroy_and_close(ctx, row, p, EndReason.PREEMPTED, f"spot instance {inst.raw_status or inst.status.value}")
        ]
    status = agent_status(ctx, p, inst)
    actions: list[Action] = []
    stale = heartbeat_stale(status, now)
    if status and status.get("heartbeat"):
        record_proof_of_life(ctx, row, status, now)
    ended = end_asked_for(ctx, row, p, inst, status)
    if ended is not None:  # its agent asked for the end and could not, or it was stopped: ours to end
        return [ended]
    if status and status.get("heartbeat"):
        job = status.get("job") or {}
        if job.get("ended_at") is not None and not any(
            e.kind == EventKind.JOB_EXITED for e in ctx.ledger.events(row.id)
        ):
            # Booked now: if the box then destroys itself unseen, its row still closes as job_end.
            ctx.event(
                row.id,
                EventKind.JOB_EXITED,
                {"exit_code": job.get("exit_code"), "ended_at": job["ended_at"], "seen_by": ctx.owner},
            )
    state = _box_state(row, None if stale else status)
    if stale:
        age = f"{now - float(status['heartbeat']):.0f} s old" if status and status.get("heartbeat") else "none yet"
        actions.append(
            Action(
                row.id, "stale_heartbeat", f"agent heartbeat {age}; applying ttl/session cap and the job's exit marker"
            )
        )
        seen = _job_exit_seen(ctx, row, p, inst)
        if seen is not None:
            state.job_ended_at, state.job_exit_code = seen
    settings = session_limits(ctx, row, status)
    samples = [] if stale else ((status or {}).get("samples") or [])
    decision = policy.decide(samples, now, state, settings)
    if not stale and status:  # what `ps` shows of this box, as this tick saw it (gpuops.teardown.live)
        from gpuops.teardown.live import record_live
        from gpuops.teardown.reconcile import box_tokens

        record_live(
            ctx.ledger,
            row.id,
            tokens=box_tokens(ctx, p, inst),
            by=f"{Actor.WATCHDOG}:{ctx.owner}",
            now=now,
            idle_seconds=max(0.0, now - decision.idle_since) if decision.idle_since is not None else 0.0,
        )
    if decision.action == policy.DESTROY:
        assert decision.reason is not None  # policy.decide names why it destroys
        exit_code = exit_code_of(
            state.job_exit_code
        )  # the box's own record (status or exit marker), not only the ledger's event
        actions.append(destroy_and_close(ctx, row, p, decision.reason, decision.explanation, exit_code=exit_code))
    return actions


def _money(ctx: Context) -> list[Action]:
    """Balance floor per provider account, monthly cap per user (or both per team, see the module doc).

    Destroy covered boxes, refuse, lift."""
    from gpuops.ownership import is_mine
    from gpuops.teardown.budget import floor_unenforced, month_start_end, read_balance
    from ledger.limits import active_refusals, lift_refusal, month_spend, month_spend_at_most, set_refusal

    t = ctx.settings.teardown
    team = t.limits_scope == "team"
    actions: list[Action] = []
    tell: list[tuple[str, str, str]] = []  # posted after every destroy below: a send never holds one
    refused = {(r.scope, r.reason, r.account) for r in active_refusals(ctx.ledger)}
    now = ctx.clock()
    covered: list[tuple[str, str, str, str | None]] = []  # (scope, reason, detail, account or owner; None: everyone)
    cap_who = None if team else ctx.me
    month: tuple[float, float] | None = None  # the month to sum exactly for the cap; None: no need
    for name in ctx.provider_names():
        held = ctx.account(name)
        if held is None:
            continue  # no key here: neither its balance nor its boxes are ours to judge
        floor_who = None if team else held
        if t.balance_floor_usd is None and (name, EndReason.BALANCE_FLOOR, floor_who) not in refused:
            continue
        try:
            bal = read_balance(ctx.provider(name))
        except GpuopsError as e:
            actions.append(Action("", "error", f"{name}: balance: {e}"))
            continue
        if bal.usd is None:
            if bal.unreadable and t.balance_floor_usd is not None:  # said each tick, never a silent skip
                actions.append(
                    Action("", "note", floor_unenforced(name, t.balance_floor_usd, t.monthly_cap_usd, bal.note))
                )
            continue
        if t.balance_floor_usd is not None and bal.usd < t.balance_floor_usd:
            if _told("balance_floor"):
                tell.append(texts_balance_floor(name, bal.usd, t.balance_floor_usd, held, now))
            covered.append(
                (
                    name,
                    EndReason.BALANCE_FLOOR,
                    f"{name} balance ${bal.usd:.2f} is below the floor ${t.balance_floor_usd:.2f} (account {held})",
                    floor_who,
                )
            )
        elif (name, EndReason.BALANCE_FLOOR, floor_who) in refused and lift_refusal(
            ctx.ledger, name, EndReason.BALANCE_FLOOR, now, account=floor_who
        ):
            actions.append(Action("", "lifted", f"{name}: balance ${bal.usd:.2f} is back above the floor"))
    cap_refused = ("*", EndReason.MONTHLY_CAP, cap_who) in refused
    warn_at = CAP_WARN_SHARE if _told("monthly_cap") else 1.0  # 80 % is summed exactly only when someone is told
    if t.monthly_cap_usd is not None or cap_refused:
        month = month_start_end(now)
        if not cap_refused and _surely_under(
            month_spend_at_most(ctx.ledger, *month, now=now), t.monthly_cap_usd * warn_at
        ):
            month = None  # the common tick: under the cap even by the bound; nothing to refuse or lift (half the cost)
    if month is not None:
        spent = month_spend(ctx.ledger, *month, now=now, owner=cap_who)
        whose = "the team's" if team else f"{ctx.me}'s"
        if t.monthly_cap_usd is not None and spent == spent:
            tell += _cap_notices(spent, t.monthly_cap_usd, whose, "*" if team else ctx.me, now)
        if t.monthly_cap_usd is not None and (
            spent != spent or spent >= t.monthly_cap_usd
        ):  # NaN: a broken row, not room
            covered.append(
                (
                    "*",
                    EndReason.MONTHLY_CAP,
                    f"{whose} month-to-date spend ${spent:.2f} reached the monthly cap ${t.monthly_cap_usd:.2f}",
                    cap_who,
                )
            )
        elif ("*", EndReason.MONTHLY_CAP, cap_who) in refused and lift_refusal(
            ctx.ledger, "*", EndReason.MONTHLY_CAP, now, account=cap_who
        ):
            actions.append(Action("", "lifted", f"monthly cap: {whose} spend ${spent:.2f} is under the cap again"))
    for scope, reason, detail, who in covered:
        if set_refusal(ctx.ledger, scope, reason, detail, now, account=who):
            whom = "everyone" if who is None else who
            actions.append(
                Action(
                    "",
                    "refused",
                    f"new boxes refused for {'all providers' if scope == '*' else scope} ({whom}): {detail}",
                )
            )

        def covered_row(r, scope=scope, reason=reason, who=who) -> bool:
            if r.instance_id is None or not ctx.holds(r) or (scope != "*" and r.provider != scope):
                return False
            if reason == EndReason.MONTHLY_CAP and who is not None:
                return is_mine(r, who)
            return True

        for row in ctx.open_sessions_leased(actions, keep=covered_row):
            try:
                p = ctx.provider(row.provider)
            except GpuopsError as e:
                actions.append(Action(row.id, "error", str(e)))
                continue
            actions.append(destroy_and_close(ctx, row, p, reason, detail))
    for notice in tell:
        _post(notice)
    return actions


# The monthly cap's first warning: at this share of the cap (then again at 100 %)
CAP_WARN_SHARE = 0.8


def _told(event: str) -> bool:
    """True when this process's notifier sends ``event`` ([notify])."""
    from gpuops.notify import notifier

    told = notifier.active()
    return told is not None and told.wants(event)


def _post(notice: tuple[str, str, str]) -> None:
    from gpuops.notify import notifier

    notifier.post(notice)


def _cap_notices(spent: float, cap: float, whose: str, who: str, now: float) -> list[tuple[str, str, str]]:
    """The month's spend at 80 % or at 100 % of the cap, each once per month and owner (``who``).

    ``spent``/``cap``: USD; ``now``: epoch s (names the UTC month). [] under 80 % or when not told."""
    import datetime as dt

    from gpuops.notify import texts

    month = dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y-%m")
    if not _told("monthly_cap"):
        return []
    for share in (1.0, CAP_WARN_SHARE):
        if spent >= cap * share:  # the 100 % message says all the 80 % one would: a jump past both gets one
            return [texts.monthly_cap(round(share * 100), spent, cap, whose, month, who)]
    return []


def texts_balance_floor(provider: str, usd: float, floor: float, account: str, now: float) -> tuple[str, str, str]:
    """``texts.balance_floor`` keyed by the UTC day of ``now`` (once per account and day)."""
    import datetime as dt

    from gpuops.notify import texts

    day = dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y-%m-%d")
    return texts.balance_floor(provider, usd, floor, account, day)


def _surely_under(bound: float, cap: float) -> bool:
    """True when the spend bound ``bound`` is under ``cap`` by more than float rounding.

    True when ``bound`` (``month_spend_at_most``, USD) is below ``cap`` by more than float rounding
    (the exact sum adds the same numbers in another order): the spend is under the cap."""
    return bound == bound and bound + 1e-6 + abs(bound) * 1e-9 < cap


def tick(ctx: Context) -> list[Action]:
    """One pass over every open session, then the money layer.

    Never raises for provider errors. Sets ``ctx.checked``: how many open sessions it looked at
    under their lease."""
    actions: list[Action] = []
    ctx.checked = 0
    for row in ctx.open_sessions_leased(actions, keep=ctx.holds):  # other accounts' rows: their owners' watchdogs
        ctx.checked += 1
        try:
            actions += check_session(ctx, row)
        except (GpuopsError, ProviderError, OSError) as e:
            actions.append(Action(row.id, "error", f"{type(e).__name__}: {e}"))
    actions += _money(ctx)
    return actions


def run(
    settings,
    interval: float = 30.0,
    once: bool = False,
    emit: Callable[[Action], None] = print,
    ctx: Context | None = None,
    on_pass: Callable[[str, list[Action], float], None] | None = None,
) -> list[Action]:
    """The `gpuops watchdog` body.

    Reconcile, then one tick (``once``) or a tick every ``interval`` seconds under APScheduler until
    interrupted; each tick is booked as a watchdog pass (``record_pass``). Returns the actions of
    ``once``. ``on_pass(name, actions, seconds)``: called after each pass ("reconcile", "tick")."""
    ctx = ctx or Context(settings)
    ctx.actor = Actor.WATCHDOG
    done: list[Action] = []

    def guarded(fn) -> None:
        t0 = time.monotonic()
        try:
            acts = fn(ctx)
        except Exception as e:  # the daemon outlives any one bad tick (database hiccup, bug in a provider)
            log.exception("watchdog tick failed")
            acts = [Action("", "error", f"tick failed: {type(e).__name__}: {e}")]
        if fn is tick:
            refused = record_pass(ctx, acts, time.monotonic() - t0, interval)
            if not refused:
                _ping_deadman(ctx)  # the pass is booked: an outside service hears it
            acts += refused
        for a in acts:
            emit(a)
        done.extend(acts)
        if on_pass is not None:
            on_pass(fn.__name__, acts, time.monotonic() - t0)

    guarded(reconcile)
    if once:
        guarded(tick)
        return done
    from datetime import datetime, timezone

    from apscheduler.schedulers.blocking import BlockingScheduler

    # APScheduler's own lines ("Run time of job ... was missed", "Scheduler started") would reach
    # stderr through logging's last-resort handler: the watchdog says what it does itself (-v).
    aps = logging.getLogger("apscheduler")
    aps.addHandler(logging.NullHandler())
    aps.propagate = False

    # An explicit timezone: APScheduler's default asks tzlocal, which dies on POSIX TZ strings
    # (TZ=UTC0, TZ=CET-1CEST). Only intervals are scheduled, so UTC changes nothing else.
    sched = BlockingScheduler(timezone=timezone.utc)
    sched.add_job(
        guarded,
        "interval",
        args=[tick],
        seconds=interval,
        next_run_time=datetime.now(timezone.utc),
        max_instances=1,
        coalesce=True,
        misfire_grace_time=None,
    )
    try:
        sched.start()
    except (KeyboardInterrupt, SystemExit):
        pass
    return done


# -- watchdog passes: who looked last (read back by gpuops/teardown/watchdog_passes.py) ---------------
ENDED_KINDS = ("destroyed", "closed", "orphan_destroyed")  # Action kinds that ended a session


def record_pass(ctx: Context, acts: list[Action], seconds: float, interval: float) -> list[Action]:
    """Book this watchdog pass in the ledger; [] or one ``error`` action when the ledger refused it.

    Book this tick in the ledger (``ledger.passes.record_pass``: host, ``[user] name``, now,
    sessions checked and ended); returns [] or one ``error`` action when the ledger refused it (the
    watchdog goes on: the pass itself was done)."""
    import socket

    from ledger.passes import record_pass as book

    try:
        book(
            ctx.ledger,
            socket.gethostname(),
            ctx.me,
            at=ctx.clock(),
            seconds=seconds,
            interval_seconds=interval,
            checked=getattr(ctx, "checked", 0),
            ended=sum(a.kind in ENDED_KINDS for a in acts),
            errors=sum(a.kind == "error" for a in acts),
            actions=len(acts),
        )
    except Exception as e:  # noqa: BLE001  a database hiccup must not stop the daemon
        log.warning("watchdog pass not booked: %s", e)
        return [Action("", "error", f"watchdog pass not booked in the ledger: {type(e).__name__}: {e}")]
    return []


def _ping_deadman(ctx: Context) -> None:
    """GET ``[notify] deadman_url`` after a booked pass, in the background (an outside service notices the silence)."""
    from gpuops.notify import notifier

    url = ctx.settings.notify.deadman_url
    told = notifier.active()
    if url and told is not None:
        told.ping(url)
