"""Writing the providers' own billing into the books (``ledger sync --apply``).

``compare_billing`` (ledger/billing.py) says what differs; this module books it, in ONE transaction:
- a closed session's GPU-time charge (every non-storage line of its instance) becomes its cost:
  ``cost_usd`` = ``charged_usd`` = the charge, ``cost_source`` = ``charged``, and our own estimate
  stays in ``estimated_usd`` (set once: re-applying keeps the first estimate), plus a ``charged``
  event with both figures;
- its storage lines (a stopped instance's disk) become ``cost_lines`` rows of kind ``storage``;
- account-level storage (RunPod network volumes) becomes ``cost_lines`` rows without a session;
- charges of instances that match no row (someone else's, or made before gpuops) are never booked.
Applying twice books nothing new: a cost line is keyed by (provider, instance, kind, period start).
SQLAlchemy Core only; imports nothing of ``gpuops``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from ledger.billing import ChargeLine
from onbox.vocabulary import EventKind


def _tables() -> tuple[sa.Table, sa.Table, sa.Table]:
    """The ``sessions``, ``cost_lines`` and ``events`` tables (``ledger/models.py``)."""
    from ledger.models import cost_lines, events, sessions

    return sessions, cost_lines, events


def line_key(c: ChargeLine) -> str:
    """The identity of a booked line: provider, instance (or ``account``), kind, period start."""
    return f"{c.provider}:{c.instance_id or 'account'}:{c.kind}:{(c.start or 0.0):.3f}"


def booked_storage(engine, session_ids: Iterable[str]) -> dict[str, float]:
    """{session id: USD of storage lines booked from provider billing}."""
    _sessions, _lines, _events = _tables()
    ids = list(session_ids)
    out: dict[str, float] = {}
    with engine.connect() as conn:
        for i in range(0, len(ids), 900):
            q = (
                sa.select(_lines.c.session_id, sa.func.sum(_lines.c.usd))
                .where(_lines.c.session_id.in_(ids[i : i + 900]))
                .where(_lines.c.source == "provider")
                .group_by(_lines.c.session_id)
            )
            out.update({sid: float(usd or 0.0) for sid, usd in conn.execute(q)})
    return out


def known_instances(engine, keys: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which (provider, instance id) pairs belong to some ledger row (indexed ``instance_id``)."""
    _sessions, _lines, _events = _tables()
    keys = list(keys)
    found: set[tuple[str, str]] = set()
    ids = sorted({k[1] for k in keys})
    with engine.connect() as conn:
        for i in range(0, len(ids), 900):
            q = sa.select(_sessions.c.provider, _sessions.c.instance_id).where(
                _sessions.c.instance_id.in_(ids[i : i + 900])
            )
            found.update((p, str(iid)) for p, iid in conn.execute(q))
    return found & set(keys)


def apply_charges(engine, report: dict, charges: Iterable[ChargeLine], now: float | None = None) -> dict:
    """Book ``report``'s provider charges and the account-level lines; idempotent.

    Book ``report`` (``compare_billing``'s, with its ``lines``: {session id: [ChargeLine]}) and the
    account-level lines among ``charges``. Only closed sessions are booked (an open one has no cost
    yet). Idempotent: a session already booked at the same charge is left as it is (counted in
    ``unchanged``), and a storage line already booked is replaced, not counted again. Returns
    ``{"sessions": n booked, "storage_lines": n new, "account_lines": n new, "storage_usd": USD of
    the new lines, "unchanged": n sessions already at their charge}``."""
    _sessions, _lines, _events = _tables()
    now = time.time() if now is None else now
    by_id = {r["session"]: r for r in report["sessions"]}
    booked = lines_n = account_n = unchanged = 0
    rows: list[dict] = []
    with engine.begin() as conn:
        for sid, lines in report.get("lines", {}).items():
            r = by_id.get(sid)
            if r is None or r["status"] == "open":
                continue
            gpu = round(sum(c.usd for c in lines if c.kind != "storage"), 6)
            cur = conn.execute(
                sa.select(
                    _sessions.c.cost_usd, _sessions.c.estimated_usd, _sessions.c.cost_source, _sessions.c.charged_usd
                ).where(_sessions.c.id == sid)
            ).first()
            if cur is None:
                continue
            storage = [c for c in lines if c.kind == "storage"]
            if cur.cost_source == "charged" and cur.charged_usd is not None and abs(cur.charged_usd - gpu) < 1e-9:
                unchanged += 1  # booked at this very charge by an earlier --apply
                rows.extend(_row(c, sid, now) for c in storage)
                continue
            estimate = cur.estimated_usd if cur.estimated_usd is not None else cur.cost_usd
            conn.execute(
                sa.update(_sessions)
                .where(_sessions.c.id == sid)
                .values(cost_usd=gpu, charged_usd=gpu, estimated_usd=estimate, cost_source="charged")
            )
            conn.execute(
                sa.insert(_events).values(
                    session_id=sid,
                    at=now,
                    kind=EventKind.CHARGED.value,
                    detail=json.dumps(
                        {
                            "charged_usd": gpu,
                            "estimated_usd": estimate,
                            "storage_usd": round(sum(c.usd for c in storage), 6),
                            "provider": r["provider"],
                        },
                        sort_keys=True,
                    ),
                )
            )
            booked += 1
            rows.extend(_row(c, sid, now) for c in storage)
        for c in charges:
            if c.instance_id is None and not c.label and c.kind == "storage":
                rows.append(_row(c, None, now))
        keys = [r["line_key"] for r in rows]
        had: set = set()
        for i in range(0, len(keys), 900):
            had.update(
                k for (k,) in conn.execute(sa.select(_lines.c.line_key).where(_lines.c.line_key.in_(keys[i : i + 900])))
            )
            conn.execute(sa.delete(_lines).where(_lines.c.line_key.in_(keys[i : i + 900])))
        if rows:
            conn.execute(sa.insert(_lines), rows)
        new = [r for r in rows if r["line_key"] not in had]
        account_n = sum(1 for r in new if r["session_id"] is None)
        lines_n = len(new) - account_n
        storage_usd = sum(r["usd"] for r in new if r["session_id"] is not None)
    return {
        "sessions": booked,
        "storage_lines": lines_n,
        "account_lines": account_n,
        "storage_usd": round(storage_usd, 6),
        "unchanged": unchanged,
    }


def _row(c: ChargeLine, session_id: str | None, now: float) -> dict[str, Any]:
    start = c.start if c.start is not None else now
    return {
        "session_id": session_id,
        "provider": c.provider,
        "instance_id": c.instance_id,
        "kind": "storage",
        "start_at": start,
        "end_at": c.end if c.end is not None else start,
        "usd": round(c.usd, 9),
        "simulated": False,
        "source": "provider",
        "description": c.description,
        "booked_at": now,
        "line_key": line_key(c),
    }
