"""`gpuops sweep status|cancel SWEEP`, `ledger sweeps`, `ledger show SWEEP`: a sweep's state and its end, as data.

Money is what the sweep's runs' rentals booked (``sessions.cost_usd``: the month report counts the
same rows, once); $/Mtoken = cost / tokens x 1e6 (None without tokens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from gpuops.config import Settings
    from ledger.books import Books


def resolve(ledger: Books, ref: str) -> str:
    """The sweep id ``ref`` names (whole, or a unique prefix); BadInput when none or several."""
    from ledger import sweeps as queue

    if not ref or not ref.strip():
        raise BadInput("name a sweep", "see `gpuops ledger sweeps`")
    if queue.get_sweep(ledger.engine, ref) is not None:
        return ref
    found = queue.find_sweeps(ledger.engine, ref)
    if not found:
        raise BadInput(f"no sweep {ref!r} in the ledger", "see `gpuops ledger sweeps`")
    if len(found) > 1:
        raise BadInput(f"{ref!r} names {len(found)} sweeps: {', '.join(found[:5])}", "give more of the sweep id")
    return found[0]


def per_mtoken(cost: float | None, tokens: int) -> float | None:
    """USD per million tokens (``cost`` USD over ``tokens``), None without tokens or cost."""
    if cost is None or not tokens:
        return None
    return round(cost / tokens * 1e6, 6)


def status(ledger: Books, ref: str) -> dict[str, Any]:
    """A sweep's row, its jobs (state, run, rentals, cost USD, tokens, $/Mtoken) and its totals, JSON-ready."""
    from ledger import sweeps as queue

    sweep_id = resolve(ledger, ref)
    row = queue.get_sweep(ledger.engine, sweep_id) or {}
    jobs = []
    for j in queue.jobs_of(ledger.engine, sweep_id):
        jobs.append(
            {
                "seq": j["seq"],
                "name": j["name"],
                "state": j["state"],
                "run": j["run_id"],
                "end_reason": j["end_reason"],
                "rentals": j["rentals"],
                "open_rentals": j["open_rentals"],
                "cost_usd": j["cost_usd"],
                "tokens": j["tokens"],
                "usd_per_mtoken": per_mtoken(j["cost_usd"], j["tokens"]),
                "worst_usd": j["worst_usd"],
                "detail": j["detail"],
            }
        )
    spent = queue.spend(ledger.engine, sweep_id)
    tokens = sum(j["tokens"] for j in jobs)
    counts = {
        s: sum(1 for j in jobs if j["state"] == s)
        for s in ("queued", "claimed", "running", "done", "failed", "cancelled")
    }
    return {
        "sweep": sweep_id,
        **{k: row.get(k) for k in ("name", "experiment", "status", "created_at", "ended_at", "end_reason", "detail")},
        **{k: row.get(k) for k in ("max_parallel", "max_usd", "max_hours", "detached", "owner")},
        "jobs": jobs,
        "counts": counts,
        "cost_usd": round(spent["usd"], 6),
        "simulated_usd": round(spent["simulated_usd"], 6),
        "billed_hours": round(spent["seconds"] / 3600, 6),
        "held_usd": round(spent["held_usd"], 6),
        "tokens": tokens,
        "usd_per_mtoken": per_mtoken(spent["usd"], tokens),
    }


def listing(ledger: Books, limit: int | None = None) -> list[dict[str, Any]]:
    """`ledger sweeps`: every sweep newest first, its jobs by state, cost (USD), tokens and $/Mtoken."""
    from ledger import sweeps as queue

    out = []
    for r in queue.sweeps(ledger.engine, limit):
        out.append(
            {
                "sweep": r["id"],
                "name": r["name"],
                "status": r["status"],
                "end_reason": r["end_reason"],
                "created_at": r["created_at"],
                "jobs": r["jobs"],
                "done": r["done"],
                "failed": r["failed"],
                "running": r["active"],
                "queued": r["queued"],
                "cancelled": r["cancelled"],
                "max_parallel": r["max_parallel"],
                "max_usd": r["max_usd"],
                "cost_usd": r["cost_usd"],
                "tokens": r["tokens"],
                "usd_per_mtoken": per_mtoken(r["cost_usd"], r["tokens"]),
            }
        )
    return out


def cancel(settings: Settings, ledger: Books, ref: str) -> dict[str, Any]:
    """Cancel a sweep: nothing more is rented for it, and its boxes are ended.

    Its queued jobs are cancelled, and every open rental of its runs is ended through `gpuops down`'s path (``rental.sessions.down``: the destroy that checks ownership).

    Its executors see the cancel within a second and end their running jobs too. Returns the sweep
    id, how many queued jobs were cancelled and what each down did."""
    from gpuops.rental import sessions
    from ledger import sweeps as queue

    sweep_id = resolve(ledger, ref)
    queue.end_sweep(ledger.engine, sweep_id, "cancelled", "cancelled", "gpuops sweep cancel")
    n = queue.cancel_queued(ledger.engine, sweep_id, "cancelled", "gpuops sweep cancel")
    downs: list[dict[str, Any]] = []
    for j in queue.jobs_of(ledger.engine, sweep_id):
        if not j["run_id"]:
            continue
        for rental in ledger.run_rentals(str(j["run_id"])):
            if rental.status != "closed":
                downs.extend(sessions.down(settings, ledger, rental.id, False))
    return {"sweep": sweep_id, "cancelled_queued": n, "ended": downs}
