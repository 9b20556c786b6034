"""Reports over the ledger: pure functions from session rows to plain dicts (JSON-ready).

Money rules: real spend (``cost_usd``) and simulated spend (``simulated_usd``) are never summed
together; a session that never got an instance costs 0 and is not counted; an open session has
no cost yet (it is never extended to "now"). A session belongs to the month and the day of its
intent time (``created_at``) in the report's time zone.

$/Mtoken two ways: ``usd_per_mtoken_job`` charges only the job's own seconds (``job_seconds`` x
price) of the sessions that produced tokens; ``usd_per_mtoken`` shares in everything else that was
paid for: bootstrap, idle time after the job, and sessions of the same group that produced no
tokens (failed runs). Both are USD per 1e6 tokens, None when there are no tokens.
"""

from __future__ import annotations

import calendar
from bisect import bisect_right
from operator import attrgetter
import time
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable
from zoneinfo import ZoneInfo

# Rows may be ORM ``Session`` objects or lightweight rows from ``Ledger.rows_between``: anything
# with the ``sessions`` columns as attributes.
Row = Any

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")


DAY_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


def zone(tz: str | None):
    """The tzinfo for an IANA name (``Europe/Berlin``, ``UTC``), or None for the machine's local
    zone (naive datetimes are local, DST included). Raises ValueError for an unknown name."""
    if not tz:
        return None
    try:
        return ZoneInfo(tz)
    except (KeyError, ValueError):
        raise ValueError(f"unknown time zone {tz!r}; use an IANA name such as UTC or Europe/Berlin") from None


def month_bounds(month: str, tz: str | None = None) -> tuple[float, float]:
    """[start, end) epoch seconds of ``YYYY-MM`` in time zone ``tz`` (None = local).

    Raises ValueError for any other format, a month outside 01..12, or an unknown zone.
    """
    m = MONTH_RE.match(month)
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ValueError(f"month must look like 2026-11, got {month!r}")
    year, mon = int(m.group(1)), int(m.group(2))
    z = zone(tz)
    start = datetime(year, mon, 1, tzinfo=z)
    ny, nm = (year + 1, 1) if mon == 12 else (year, mon + 1)
    end = datetime(ny, nm, 1, tzinfo=z)
    return start.timestamp(), end.timestamp()


def this_month(tz: str | None = None, now: float | None = None) -> str:
    """``YYYY-MM`` of ``now`` (epoch s, default the current time) in ``tz`` (None = local)."""
    return datetime.fromtimestamp(time.time() if now is None else now, zone(tz)).strftime("%Y-%m")


def day_start(day: str, tz: str | None = None) -> float:
    """Epoch seconds of 00:00 on ``YYYY-MM-DD`` in ``tz`` (None = local). Raises ValueError."""
    m = DAY_RE.match(day)
    if not m:
        raise ValueError(f"date must look like 2026-11-03, got {day!r}")
    try:
        return datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=zone(tz)).timestamp()
    except ValueError as e:
        raise ValueError(f"bad date {day!r}: {e}") from None


def day_of(ts: float, tz: str | None = None) -> str:
    """``YYYY-MM-DD`` of epoch seconds ``ts`` in ``tz`` (None = local)."""
    return datetime.fromtimestamp(ts, zone(tz)).strftime("%Y-%m-%d")


def got_instance(s: Row) -> bool:
    """True when the session ever had an instance (it can have cost money)."""
    return s.instance_id is not None or s.instance_created_at is not None


def job_cost(s: Row) -> float:
    """USD of the job's own seconds: ``job_seconds`` x ``usd_per_hour`` / 3600, capped at the
    session's cost; the whole cost when the job time is unknown (imported rows)."""
    cost = s.cost_usd or 0.0
    if s.job_seconds is None or not s.usd_per_hour:
        return cost
    return min(cost, s.job_seconds * s.usd_per_hour / 3600.0)




def per_mtoken(cost_usd: float, tokens: int) -> float | None:
    """USD per million tokens, None when there are no tokens."""
    return round(cost_usd / tokens * 1e6, 6) if tokens else None


def _fact(s: Row) -> tuple | None:
    """What a row adds to any group, computed once per row: (row, closed, simulated, cost USD,
    GPU-hours, tokens, job-only USD); None for a session that never got an instance."""
    if s.instance_id is None and s.instance_created_at is None:
        return None  # never rented: not a session that cost anything
    if s.status != "closed":
        return (s, False, bool(s.simulated), 0.0, 0.0, 0, 0.0)
    tokens = s.tokens or 0
    gh = (s.billed_seconds or 0.0) * max(1, s.gpu_count) / 3600.0
    return (s, True, bool(s.simulated), s.cost_usd or 0.0, gh, tokens, job_cost(s) if tokens else 0.0)


@dataclass(slots=True)
class Totals:
    """Running sums for one group (a month, an experiment, a card, a provider, a day)."""

    name: str = ""
    cost_usd: float = 0.0
    simulated_usd: float = 0.0
    gpu_hours: float = 0.0
    sessions: int = 0
    tokens: int = 0
    real_tokens: int = 0
    simulated_tokens: int = 0
    real_job_usd: float = 0.0
    simulated_job_usd: float = 0.0
    open_sessions: int = 0
    latest_at: float = 0.0
    latest_conclusion: str = ""

    def add(self, s: Row) -> None:
        f = _fact(s)
        if f is not None:
            self.add_fact(f)

    def add_fact(self, f: tuple) -> None:
        s, closed, sim, cost, gh, tokens, jc = f
        self.sessions += 1
        if s.conclusion and s.created_at >= self.latest_at:
            self.latest_at, self.latest_conclusion = s.created_at, s.conclusion
        if not closed:
            self.open_sessions += 1
            return
        self.gpu_hours += gh
        self.tokens += tokens
        if sim:
            self.simulated_usd += cost
            if tokens:
                self.simulated_tokens += tokens
                self.simulated_job_usd += jc
        else:
            self.cost_usd += cost
            if tokens:
                self.real_tokens += tokens
                self.real_job_usd += jc

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
            "usd_per_mtoken_job": per_mtoken(self.real_job_usd, self.real_tokens),
            "simulated_usd_per_mtoken": per_mtoken(self.simulated_usd, self.simulated_tokens),
            "simulated_usd_per_mtoken_job": per_mtoken(self.simulated_job_usd, self.simulated_tokens),
        }


def _facts(sessions: Iterable[Row]) -> list[tuple]:
    return [f for f in map(_fact, sessions) if f is not None]


def _group_facts(facts: list[tuple], key: Callable[[Row], str]) -> dict[str, Totals]:
    groups: dict[str, Totals] = {}
    for f in facts:
        name = key(f[0])
        g = groups.get(name)
        if g is None:
            g = groups[name] = Totals(name=name)
        g.add_fact(f)
    return groups


def _rows(groups: dict[str, Totals], conclusion: bool = False) -> list[dict]:
    rows = []
    for g in groups.values():
        j = g.as_json()
        if conclusion:
            j["latest_conclusion"] = g.latest_conclusion
        rows.append(j)
    return sorted(rows, key=lambda r: (-(r["cost_usd"] + r["simulated_usd"]), r["name"]))


def _group(sessions: Iterable[Row], key: Callable[[Row], str], conclusion: bool = False) -> list[dict]:
    return _rows(_group_facts(_facts(sessions), key), conclusion)


def card_name(s: Row) -> str:
    return f"{s.card} x{s.gpu_count}" if s.gpu_count > 1 else s.card


def month_report(sessions: list[Row], month: str, tz: str | None = None, by_day: bool = False) -> dict:
    """The month's totals and breakdowns by experiment, card and provider.

    ``sessions``: the rows whose intent time falls in the month (see ``month_bounds``).
    Shape: ``{"month","tz","total_usd","simulated_usd","gpu_hours","sessions","open_sessions",
    "tokens","usd_per_mtoken","usd_per_mtoken_job","simulated_usd_per_mtoken",
    "simulated_usd_per_mtoken_job","by_experiment","by_card","by_provider"}``, plus ``"days"``
    (``day_report``) when ``by_day``. Money in USD, ``gpu_hours`` = billed hours x GPU count.
    """
    facts = _facts(sessions)
    t = Totals(name=month)
    for f in facts:
        t.add_fact(f)
    j = t.as_json()
    out = {
        "month": month,
        "tz": tz or "local",
        "total_usd": j["cost_usd"],
        "simulated_usd": j["simulated_usd"],
        "gpu_hours": j["gpu_hours"],
        "sessions": j["sessions"],
        "open_sessions": j["open_sessions"],
        "tokens": j["tokens"],
        "usd_per_mtoken": j["usd_per_mtoken"],
        "usd_per_mtoken_job": j["usd_per_mtoken_job"],
        "simulated_usd_per_mtoken": j["simulated_usd_per_mtoken"],
        "simulated_usd_per_mtoken_job": j["simulated_usd_per_mtoken_job"],
        "by_experiment": _rows(_group_facts(facts, attrgetter("experiment"))),
        "by_card": _rows(_group_facts(facts, card_name)),
        "by_provider": _rows(_group_facts(facts, attrgetter("provider"))),
    }
    if by_day:
        out["days"] = _days(facts, month, tz)
    return out


def day_report(sessions: Iterable[Row], month: str, tz: str | None = None) -> list[dict]:
    """One row per calendar day of ``month`` in ``tz`` (days without spend included, so a plot has
    no gaps): ``{"date","cost_usd","simulated_usd","gpu_hours","sessions","tokens"}``. A session
    counts on the day of its intent time; ``sessions`` must lie in the month."""
    return _days(_facts(sessions), month, tz)


def _days(facts: list[tuple], month: str, tz: str | None) -> list[dict]:
    n_days = days_in_month(month)
    names = [f"{month}-{n:02d}" for n in range(1, n_days + 1)]
    starts = [day_start(d, tz) for d in names]  # DST-safe day edges, then bisect: no per-row datetime
    groups = [Totals(name=d) for d in names]
    for f in facts:
        i = bisect_right(starts, f[0].created_at) - 1
        if 0 <= i < n_days:
            groups[i].add_fact(f)
    out = []
    for g in groups:
        j = g.as_json()
        out.append({"date": g.name} | {k: j[k] for k in ("cost_usd", "simulated_usd", "gpu_hours", "sessions", "tokens")})
    return out


def experiments_report(sessions: Iterable[Row], since: str | None = None, until: str | None = None) -> dict:
    """Per experiment: sessions, GPU-hours, cost (real and simulated apart), tokens, $/Mtoken both
    ways and the latest non-empty conclusion. ``sessions``: rows already limited to the window
    ``since``..``until`` (``YYYY-MM-DD``, kept here only to label the report).

    Shape: ``{"since","until","experiments":[{"name","cost_usd","simulated_usd","gpu_hours",
    "sessions","open_sessions","tokens","usd_per_mtoken","usd_per_mtoken_job",
    "simulated_usd_per_mtoken","simulated_usd_per_mtoken_job","latest_conclusion"}]}``.
    """
    return {"since": since, "until": until, "experiments": _group(sessions, lambda s: s.experiment, conclusion=True)}


SESSION_FIELDS = (
    "id", "experiment", "job", "provider", "card", "gpu_count", "spot", "label", "instance_id", "offer_id",
    "usd_per_hour", "bid_usd_per_hour", "simulated", "status", "created_at", "instance_created_at", "ready_at",
    "ended_at", "end_reason", "end_source", "exit_code", "billed_seconds", "billing_increment_seconds",
    "cost_usd", "tokens", "job_seconds", "last_heartbeat_at", "conclusion", "note", "log_path", "results_path",
    "source",
    "max_hours", "ready_timeout_seconds", "idle_minutes",  # m004_session_limits
)


def iso(ts: float | None, tz: str | None = None) -> str | None:
    """ISO 8601 with offset of epoch seconds in ``tz`` (None = local), to the second."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, zone(tz) or datetime.now().astimezone().tzinfo).isoformat(timespec="seconds")


def session_detail(s: Row, steps: Iterable[Any] = (), events: Iterable[Any] = (), tz: str | None = None) -> dict:
    """Everything about one session: every column, its bootstrap steps with seconds, its events,
    and derived figures. Shape: the ``up --json`` summary keys (``session, provider, card,
    usd_per_hour, seconds, cost_usd, simulated, tokens, usd_per_mtoken, end_reason, exit_code,
    log``) plus every ``sessions`` column, ``times`` (ISO strings in ``tz``), ``bootstrap_seconds``,
    ``job_cost_usd``, ``usd_per_mtoken_job``, ``steps`` [{"name","status","seconds","detail"}]
    and ``events`` [{"at","time","kind","detail"}]. An open session has ``cost_usd`` None.
    """
    steps = list(steps)
    closed = s.status == "closed"
    tokens = s.tokens or 0
    cost = s.cost_usd if closed else None
    jc = job_cost(s) if closed and got_instance(s) else None
    out = {k: getattr(s, k, None) for k in SESSION_FIELDS}
    out.update({
        "session": s.id,
        "seconds": s.billed_seconds if closed else None,
        "cost_usd": cost,
        "usd_per_mtoken": per_mtoken(cost, tokens) if cost is not None else None,
        "usd_per_mtoken_job": per_mtoken(jc, tokens) if jc is not None else None,
        "job_cost_usd": None if jc is None else round(jc, 6),
        "log": s.log_path,
        "results": s.results_path,
        "bootstrap_seconds": round(sum(st.seconds for st in steps), 6),
        "times": {k: iso(getattr(s, k, None), tz) for k in ("created_at", "instance_created_at", "ready_at", "ended_at", "last_heartbeat_at")},
        "steps": [{"name": st.name, "status": st.status, "seconds": st.seconds, "detail": st.detail} for st in steps],
        "events": [{"at": e.at, "time": iso(e.at, tz), "kind": e.kind, "detail": e.detail} for e in events],
    })
    return out


def days_in_month(month: str) -> int:
    y, m = (int(x) for x in month.split("-"))
    return calendar.monthrange(y, m)[1]
