"""Reports over the ledger: pure functions from session rows to plain dicts (JSON-ready).

Money rules: real spend (``cost_usd``) and simulated spend (``simulated_usd``) are never summed
together; a session that never got an instance costs 0 and is not counted; an open session has
no cost yet (it is never extended to "now").
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable
from zoneinfo import ZoneInfo

from ledger.models import Session

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")


def month_bounds(month: str, tz: str | None = None) -> tuple[float, float]:
    """[start, end) epoch seconds of ``YYYY-MM`` in time zone ``tz`` (None = local).

    Raises ValueError for any other format or a month outside 01..12.
    """
    m = MONTH_RE.match(month)
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ValueError(f"month must look like 2026-11, got {month!r}")
    year, mon = int(m.group(1)), int(m.group(2))
    zone = ZoneInfo(tz) if tz else datetime.now().astimezone().tzinfo
    start = datetime(year, mon, 1, tzinfo=zone)
    ny, nm = (year + 1, 1) if mon == 12 else (year, mon + 1)
    end = datetime(ny, nm, 1, tzinfo=zone)
    return start.timestamp(), end.timestamp()


def per_mtoken(cost_usd: float, tokens: int) -> float | None:
    """USD per million tokens, None when there are no tokens."""
    return round(cost_usd / tokens * 1e6, 6) if tokens else None


@dataclass
class Totals:
    name: str = ""
    cost_usd: float = 0.0
    simulated_usd: float = 0.0
    gpu_hours: float = 0.0
    sessions: int = 0
    tokens: int = 0
    real_tokens: int = 0
    simulated_tokens: int = 0
    open_sessions: int = 0
    _names: list = field(default_factory=list)

    def add(self, s: Session) -> None:
        if s.instance_id is None and s.instance_created_at is None:
            return  # never rented: not a session that cost anything
        self.sessions += 1
        if s.status != "closed":
            self.open_sessions += 1
            return
        self.gpu_hours += (s.billed_seconds or 0.0) * max(1, s.gpu_count) / 3600.0
        self.tokens += s.tokens or 0
        if s.simulated:
            self.simulated_usd += s.cost_usd or 0.0
            self.simulated_tokens += s.tokens or 0
        else:
            self.cost_usd += s.cost_usd or 0.0
            self.real_tokens += s.tokens or 0

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "cost_usd": round(self.cost_usd, 6),
            "simulated_usd": round(self.simulated_usd, 6),
            "gpu_hours": round(self.gpu_hours, 6),
            "sessions": self.sessions,
            "open_sessions": self.open_sessions,
            "tokens": self.tokens,
            "usd_per_mtoken": per_mtoken(self.cost_usd, self.real_tokens),
            "simulated_usd_per_mtoken": per_mtoken(self.simulated_usd, self.simulated_tokens),
        }


def _group(sessions: Iterable[Session], key) -> list[dict]:
    groups: dict[str, Totals] = {}
    for s in sessions:
        name = key(s)
        groups.setdefault(name, Totals(name=name)).add(s)
    rows = [g.as_json() for g in groups.values() if g.sessions]
    return sorted(rows, key=lambda r: (-(r["cost_usd"] + r["simulated_usd"]), r["name"]))


def month_report(sessions: list[Session], month: str) -> dict:
    """The month's totals and breakdowns by experiment, card and provider.

    ``sessions``: the rows whose intent time falls in the month (see ``month_bounds``).
    Shape: ``{"month","total_usd","simulated_usd","gpu_hours","sessions","open_sessions","tokens",
    "usd_per_mtoken","simulated_usd_per_mtoken","by_experiment","by_card","by_provider"}``.
    """
    t = Totals(name=month)
    for s in sessions:
        t.add(s)
    j = t.as_json()
    return {
        "month": month,
        "total_usd": j["cost_usd"],
        "simulated_usd": j["simulated_usd"],
        "gpu_hours": j["gpu_hours"],
        "sessions": j["sessions"],
        "open_sessions": j["open_sessions"],
        "tokens": j["tokens"],
        "usd_per_mtoken": j["usd_per_mtoken"],
        "simulated_usd_per_mtoken": j["simulated_usd_per_mtoken"],
        "by_experiment": _group(sessions, lambda s: s.experiment),
        "by_card": _group(sessions, lambda s: f"{s.card} x{s.gpu_count}" if s.gpu_count > 1 else s.card),
        "by_provider": _group(sessions, lambda s: s.provider),
    }


def days_in_month(month: str) -> int:
    y, m = (int(x) for x in month.split("-"))
    return calendar.monthrange(y, m)[1]
