"""Each notification's one line: what happened, the session or run, the money, what to do.

Pure functions over plain data (a session row, figures): they read no books and send nothing.
Each returns ``(event, key, text)``: the event (one of ``gpuops.config.NOTIFY_EVENTS``), the key
that makes it once only (``notifier.Notifier.post`` claims it in the ledger), the line.
"""

from __future__ import annotations

from typing import Any

from gpuops.units import money
from onbox.vocabulary import EndReason

# The teardown layers that end a box on their own (idle GPU, TTL, the session's cap, no job ever)
LAYER_REASONS = (EndReason.IDLE, EndReason.TTL, EndReason.SESSION_CAP, EndReason.NO_JOB)
# What each ending asks the user to do (none: nothing to do)
_TODO: dict[str, str] = {
    EndReason.JOB_FAILED: "read `gpuops logs {sid}`",
    EndReason.BOOTSTRAP_FAILED: "read `gpuops logs {sid}`",
    EndReason.ERROR: "read `gpuops logs {sid}`",
    EndReason.SSH_NEVER_READY: "try another offer (`gpuops offers`)",
    EndReason.PROVIDER_ERROR: "check the provider's status page, then `gpuops up` again",
    EndReason.IDLE: "raise [teardown] idle_minutes if the job was still working",
    EndReason.TTL: "raise max_hours if the job needs longer",
    EndReason.SESSION_CAP: "raise max_session_usd if the job needs more",
    EndReason.NO_JOB: "nothing ran: check the job file",
}


Notice = tuple[str, str, str]  # (event, once-only key, one line)


def duration(seconds: float | None) -> str:
    """Seconds as ``2h 05m``, ``4m 10s`` or ``12s``; ``-`` for None."""
    if seconds is None or seconds != seconds:
        return "-"
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def per_mtoken(cost_usd: float | None, tokens: int | None) -> float | None:
    """USD per million tokens (all-in: the rental's whole cost over its tokens); None without tokens."""
    if cost_usd is None or not tokens or tokens <= 0:
        return None
    return cost_usd / tokens * 1e6


def _figures(row: Any) -> str:
    """``exit 0, 4m 10s, $0.0123, $0.4100/Mtoken (30,000 tokens)`` from a closed session row."""
    start = getattr(row, "instance_created_at", None) or getattr(row, "created_at", None)
    end = getattr(row, "ended_at", None)
    took = duration(end - start) if start is not None and end is not None else "-"
    cost, simulated = getattr(row, "cost_usd", None), bool(getattr(row, "simulated", False))
    tokens = getattr(row, "tokens", None) or 0
    code = getattr(row, "exit_code", None)
    parts = [f"exit {code}" if code is not None else "no exit code", took, money(cost, simulated)]
    rate = per_mtoken(cost, tokens)
    if rate is not None:
        parts.append(f"{money(rate)}/Mtoken ({tokens:,} tokens)")
    return ", ".join(parts)


def rental_ended(row: Any, by: str) -> Notice:
    """The line for a closed rental: a job's end, a layer's, reconcile's, a spot box taken back.

    ``row``: the closed session row (``id``, ``experiment``, ``end_reason``, ``exit_code``,
    ``instance_created_at``/``created_at`` and ``ended_at`` epoch s, ``cost_usd`` USD, ``tokens``,
    ``run_id``, ``provider``); ``by``: who ended it (an ``Actor`` value, ``actor:host:pid``)."""
    sid, reason = row.id, str(row.end_reason or "")
    what = f"gpuops: {sid} ({getattr(row, 'experiment', '') or 'default'}, {getattr(row, 'provider', '')})"
    figures = _figures(row)
    todo = _TODO.get(reason, "").format(sid=sid)
    tail = f"; {todo}" if todo else ""
    if reason == EndReason.PREEMPTED:
        run = getattr(row, "run_id", None)
        nxt = f"; run {run} re-rents if attempts and money remain" if run else "; `gpuops up` again to resume"
        return "preempted", f"{sid}:ended", f"{what}: spot box taken back after {figures}{nxt}"
    if by.split(":", 1)[0] == "reconcile":
        return "reconciled", f"{sid}:ended", f"{what}: reconcile found the box and ended it ({reason}): {figures}{tail}"
    if reason in LAYER_REASONS:
        return "layer_ended", f"{sid}:ended", f"{what}: the {reason} layer ended the box: {figures}{tail}"
    return "job_end", f"{sid}:ended", f"{what} ended ({reason}): {figures}{tail}"


def destroy_failed(row: Any, error: str) -> Notice:
    """The line for a destroy that gave up: the row stays open, the box may still bill.

    ``row``: the session row (``id``, ``provider``, ``instance_id``, ``usd_per_hour`` USD/h);
    ``error``: why (a provider's message, already free of keys)."""
    sid = row.id
    rate = getattr(row, "usd_per_hour", None)
    bills = f" at {money(rate)}/h" if rate else ""
    return (
        "destroy_failed",
        f"{sid}:destroy_failed",
        f"gpuops: destroying {sid} ({getattr(row, 'provider', '')} {getattr(row, 'instance_id', '') or ''}) failed and"
        f" is being retried; the box may still bill{bills}: {error[:200]}; run `gpuops down {sid}` or `gpuops reconcile`",
    )


def run_ended(run: Any, spent_usd: float | None) -> Notice:
    """The line for a closed run (`up --recover`): finished, or out of attempts or money.

    ``run``: the runs row (``id``, ``end_reason``, ``attempts``, ``detail``); ``spent_usd``: its
    rentals' cost, USD."""
    reason = str(run.end_reason or "")
    out_of = {"attempts_spent": "ran out of attempts", "no_offer": "found no offer to re-rent"}
    money_ends = (EndReason.SESSION_CAP, EndReason.MONTHLY_CAP, EndReason.BALANCE_FLOOR, EndReason.TTL)
    if reason in out_of:
        how = out_of[reason]
    elif reason in money_ends:
        how = f"ran out of money or time ({reason})"
    else:
        how = f"finished ({reason})"
    detail = f"; {run.detail}" if getattr(run, "detail", "") else ""
    return (
        "run_end",
        f"{run.id}:ended",
        f"gpuops: run {run.id} {how} after {run.attempts} rental(s), {money(spent_usd)}{detail}",
    )


def rerented(
    run_id: str, attempt: int, of: int, after: str, usd_per_hour: float | None, usd_left: float | None
) -> Notice:
    """The line for a run renting again after a rental ended ``after`` (a spot box taken back).

    ``attempt`` of ``of``: the new rental's number and the run's most; ``usd_per_hour``: the new
    offer's price, USD/h; ``usd_left``: what the run may still spend, USD (None: no cap)."""
    left = f", {money(usd_left)} left to spend" if usd_left is not None else ""
    return (
        "preempted",
        f"{run_id}:rerented:{attempt}",
        f"gpuops: run {run_id} re-rented after its rental ended {after}: attempt {attempt} of {of}"
        f" at {money(usd_per_hour)}/h{left}",
    )


def monthly_cap(percent: int, spent_usd: float, cap_usd: float, whose: str, month: str, who: str) -> Notice:
    """The line for the month's spend reaching ``percent`` (80 or 100) of the monthly cap.

    ``spent_usd``/``cap_usd``: USD; ``whose``: "the team's" or "<owner>'s"; ``month``: ``YYYY-MM``;
    ``who``: the cap's owner key (``*``: the team)."""
    todo = (
        "new boxes are refused and open ones destroyed until the month ends or the cap is raised"
        if percent >= 100
        else "boxes are destroyed at 100 %"
    )
    return (
        "monthly_cap",
        f"monthly_cap_{percent}:{who}:{month}",
        f"gpuops: {whose} spend in {month} is {money(spent_usd)}, {percent} % of the monthly cap"
        f" {money(cap_usd)}; {todo}",
    )


def balance_floor(provider: str, balance_usd: float, floor_usd: float, account: str, day: str) -> Notice:
    """The line for a provider balance under the floor (once per account and day).

    ``balance_usd``/``floor_usd``: USD; ``account``: the key's fingerprint; ``day``: ``YYYY-MM-DD``."""
    return (
        "balance_floor",
        f"balance_floor:{provider}:{account}:{day}",
        f"gpuops: {provider} balance {money(balance_usd)} is below the floor {money(floor_usd)}:"
        f" its boxes are destroyed and new ones refused; top the account up",
    )


def watchdog_silent(last_at: float | None, silent_s: float, limit_minutes: float) -> Notice:
    """The line for no watchdog pass in longer than ``limit_minutes`` (once per silence).

    ``last_at``: the newest pass, epoch s (None: none ever); ``silent_s``: seconds since it."""
    since = "no watchdog has ever passed" if last_at is None else f"no watchdog pass for {duration(silent_s)}"
    key = f"watchdog_silent:{int(last_at) if last_at is not None else 'never'}"
    return (
        "watchdog_silent",
        key,
        f"gpuops: {since} (limit {limit_minutes:g} min): the balance floor and the monthly cap are not"
        f" enforced; start one (`gpuops watchdog --install`)",
    )
