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
    lines = [
        f"sweep {rep['sweep']} ({rep['name']}, {rep['experiment']}): {rep['status']}{ended}",
        f"  {limits}; spent {_usd(rep['cost_usd'])}, {rep['billed_hours']:.4f} h billed, {_usd(rep['held_usd'])} held; "
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
