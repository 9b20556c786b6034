"""`gpuops sweep status`, `ledger show SWEEP`, `ledger sweeps`, the executor's end line: data in, text out."""

from __future__ import annotations

from typing import Any


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:.4f}"


def status_text(rep: dict[str, Any]) -> str:
    """A sweep's state (``gpuops.sweep.service.status``) as lines: its limits and spend, then one line per job."""
    limits = ", ".join(
        x
        for x in (
            f"K={rep['max_parallel']}",
            f"max_usd {_usd(rep['max_usd'])}" if rep["max_usd"] is not None else "",
            f"max_hours {rep['max_hours']:g}" if rep["max_hours"] is not None else "",
        )
        if x
    )
    ended = f", {rep['end_reason']}: {rep['detail']}" if rep.get("end_reason") else ""
    c = rep["counts"]
    sim = rep.get("simulated_usd") or 0.0
    of_it = (
        "" if not sim else (" simulated" if abs(sim - (rep["cost_usd"] or 0.0)) < 5e-7 else f" ({_usd(sim)} simulated)")
    )
    lines = [
        f"sweep {rep['sweep']} ({rep['name']}, {rep['experiment']}): {rep['status']}{ended}",
        f"  {limits}; spent {_usd(rep['cost_usd'])}{of_it}, {rep['billed_hours']:.4f} h billed, {_usd(rep['held_usd'])} held; "
        f"{rep['tokens']:,} tokens, $/Mtoken {_usd(rep['usd_per_mtoken'])}",
        "  jobs: " + ", ".join(f"{n} {s}" for s, n in c.items() if n),
    ]
    for j in rep["jobs"]:
        run = j["run"] or "-"
        why = f" {j['end_reason']}" if j["end_reason"] else ""
        lines.append(
            f"  {j['seq']:>4} {j['name']:<24} {j['state']:<9}{why:<14} {run:<30} {j['rentals']} rental(s) "
            f"{_usd(j['cost_usd'])} {j['tokens']:,} tok $/Mtok {_usd(j['usd_per_mtoken'])}"
        )
    return "\n".join(lines) + "\n"


def listing_text(rows: list[dict[str, Any]]) -> str:
    """`ledger sweeps` (``gpuops.sweep.service.listing``) as one line per sweep, newest first."""
    if not rows:
        return "no sweeps in the ledger\n"
    out = []
    for r in rows:
        why = f" ({r['end_reason']})" if r["end_reason"] else ""
        out.append(
            f"{r['sweep']:<32} {r['name']:<16} {r['status']}{why}: {r['done']}/{r['jobs']} done, {r['failed']} failed, "
            f"{r['running']} running, {r['queued']} queued; {_usd(r['cost_usd'])}, $/Mtok {_usd(r['usd_per_mtoken'])}"
        )
    return "\n".join(out) + "\n"


def dry_run_text(rep: dict[str, Any]) -> str:
    """`sweep --dry-run` (``executor.Prepared.dry_run``): one line per job (offer, worst case), then the total vs max_usd."""
    lines = [f"sweep {rep['name']}: dry run, nothing rented or queued; at most {rep['max_parallel']} at once"]
    for j in rep["jobs"]:
        card = f"{j.get('gpu_count') or 1}x {j.get('card') or '-'} on {j.get('provider') or '-'}"
        lines.append(
            f"  {j['seq']:>4} {j['name']:<24} {card:<28} worst case {_usd(j['worst_usd'])} "
            f"({j['worst_hours']:g} h at {_usd(j['dearest_usd_per_hour'])}/h)"
        )
    if rep["max_usd"] is None:
        cap = "no max_usd: each job is held by its own limits only"
    elif rep["worst_usd"] <= rep["max_usd"] + 1e-9:
        cap = f"within max_usd {_usd(rep['max_usd'])}: every job can run"
    else:
        cap = f"more than max_usd {_usd(rep['max_usd'])}: the sweep stops when its money has no room for the next job"
    lines.append(f"  total worst case {_usd(rep['worst_usd'])}, {cap}")
    return "\n".join(lines) + "\n"
