"""Reports over the ledger: pure functions from the database's sums (``ledger.aggregate``) to plain dicts (JSON-ready).

Money rules: real spend (``cost_usd``) and simulated spend (``simulated_usd``) are never summed
together; a session that never got an instance costs 0 and is not counted; an open session has
no cost yet (it is never extended to "now"). A session's money is split across the hours, days
and months it ran in, in the report's time zone (``ledger.attribution``, the one rule); storage
lines (``cost_lines``) are reported apart from GPU time and included in totals. The sessions' money
is summed by the database (``ledger.aggregate``: the month, its days, the experiments), the one
path to a month's totals; the few cost lines are attributed here (``attribution.fraction``, ``split``).

$/Mtoken two ways: ``usd_per_mtoken_job`` charges only the job's own seconds (``job_seconds`` x
price) of the sessions that produced tokens; ``usd_per_mtoken`` shares in everything else that was
paid for: bootstrap, idle time after the job, and sessions of the same group that produced no
tokens (failed runs). Both are USD per 1e6 tokens, None when there are no tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from ledger.periods import DAY_RE, MONTH_RE, day_of, day_start, days_in_month, month_bounds, this_month, utc_iso, zone  # noqa: F401 (re-exported)

# Rows are SQLAlchemy ``Row``s from ``Books.rows_between``, or anything
# with the ``sessions`` columns as attributes.
Row = Any


def got_instance(s: Row) -> bool:
    """True when the session ever had an instance (it can have cost money)."""
    return s.instance_id is not None or s.instance_created_at is not None


def job_cost(s: Row) -> float:
    """USD of the job's own seconds.

    ``job_seconds`` x ``usd_per_hour`` / 3600, capped at the session's cost; the whole cost when the
    job time is unknown (imported rows)."""
    cost = s.cost_usd or 0.0
    if s.job_seconds is None or not s.usd_per_hour:
        return cost
    return min(cost, s.job_seconds * s.usd_per_hour / 3600.0)


def per_mtoken(cost_usd: float, tokens: float) -> float | None:
    """USD per million tokens, None when there are no tokens."""
    return round(cost_usd / tokens * 1e6, 6) if tokens else None


@dataclass(slots=True)
class Totals:
    """Running sums for one group (a month, an experiment, a card, a provider, a day).

    Money is the group's share of each session (attributed by time); ``storage_usd`` is the part of
    ``cost_usd`` that is storage lines (booked apart from GPU time, included in the total)."""

    name: str = ""
    cost_usd: float = 0.0
    simulated_usd: float = 0.0
    storage_usd: float = 0.0
    gpu_hours: float = 0.0
    sessions: int = 0
    tokens: float = 0.0
    real_tokens: float = 0.0
    simulated_tokens: float = 0.0
    real_job_usd: float = 0.0
    simulated_job_usd: float = 0.0
    open_sessions: int = 0
    charged_sessions: int = 0
    latest_at: float = 0.0
    latest_conclusion: str = ""

    def add_line(self, usd: float, simulated: bool) -> None:
        """A cost line's share (storage): in the total, and in ``storage_usd``."""
        if simulated:
            self.simulated_usd += usd
        else:
            self.cost_usd += usd
            self.storage_usd += usd

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "cost_usd": round(self.cost_usd, 6),
            "simulated_usd": round(self.simulated_usd, 6),
            "storage_usd": round(self.storage_usd, 6),
            "gpu_hours": round(self.gpu_hours, 6),
            "sessions": self.sessions,
            "open_sessions": self.open_sessions,
            "charged_sessions": self.charged_sessions,
            "tokens": int(round(self.tokens)),
            "usd_per_mtoken": per_mtoken(self.cost_usd, self.real_tokens),
            "usd_per_mtoken_job": per_mtoken(self.real_job_usd, self.real_tokens),
            "simulated_usd_per_mtoken": per_mtoken(self.simulated_usd, self.simulated_tokens),
            "simulated_usd_per_mtoken_job": per_mtoken(self.simulated_job_usd, self.simulated_tokens),
        }


def _rows(groups: dict[str, Totals], conclusion: bool = False) -> list[dict]:
    rows = []
    for g in groups.values():
        j = g.as_json()
        if conclusion:
            j["latest_conclusion"] = g.latest_conclusion
        rows.append(j)
    return sorted(rows, key=lambda r: (-(r["cost_usd"] + r["simulated_usd"]), r["name"]))


def card_name(s: Row) -> str:
    return f"{s.card} x{s.gpu_count}" if s.gpu_count > 1 else s.card


_INF = float("inf")


def day_edges(month: str, tz: str | None) -> tuple[list[float], list[str]]:
    """The day starts of ``month`` in ``tz`` (epoch s, DST-safe), then the month's end; and the days' names (``YYYY-MM-DD``).

    The buckets ``ledger.aggregate.day_rows`` sums by. Raises ValueError for a bad month or zone."""
    names = [f"{month}-{n:02d}" for n in range(1, days_in_month(month) + 1)]
    edges = [day_start(d, tz) for d in names]
    edges.append(month_bounds(month, tz)[1])
    return edges, names


def _absorb(t: Totals, g: Any) -> None:
    """Add a database group's sums (``ledger.aggregate.GroupRow``) to ``t``."""
    t.sessions += g.sessions
    t.open_sessions += g.open_sessions
    t.charged_sessions += g.charged_sessions
    t.gpu_hours += g.gpu_hours
    t.tokens += g.tokens
    if g.simulated:
        t.simulated_usd += g.cost_usd
        t.simulated_tokens += g.tokens
        t.simulated_job_usd += g.job_usd
    else:
        t.cost_usd += g.cost_usd
        t.real_tokens += g.tokens
        t.real_job_usd += g.job_usd


def _grouped(
    groups: Iterable[Any],
    lo: float,
    hi: float,
    keys: dict[str, Callable[[Any], str]],
    cost_lines: Iterable[Row],
    line_keys: dict[str, dict[str, str]],
    name: str = "",
) -> tuple[Totals, dict[str, dict[str, Totals]]]:
    from ledger.attribution import fraction

    total = Totals(name=name)
    out: dict[str, dict[str, Totals]] = {k: {} for k in keys}
    for g in groups:
        _absorb(total, g)
        for k, fn in keys.items():
            n = fn(g)
            _absorb(out[k].setdefault(n, Totals(name=n)), g)
    for ln in cost_lines:
        usd = ln.usd * fraction(ln.start_at, ln.end_at, lo, hi)
        if usd == 0:
            continue
        total.add_line(usd, bool(ln.simulated))
        known = line_keys.get(ln.session_id) if ln.session_id is not None else None
        for k in keys:
            n = known[k] if known else (ln.provider if k == "provider" else "(storage, no session)")
            out[k].setdefault(n, Totals(name=n)).add_line(usd, bool(ln.simulated))
    return total, out


def month_report(
    groups: Iterable[Any],
    month: str,
    tz: str | None = None,
    cost_lines: Iterable[Row] = (),
    line_keys: dict[str, dict[str, str]] | None = None,
    days: Iterable[Any] | None = None,
) -> dict:
    """The month's totals and breakdowns by experiment, card and provider, from the database's sums.

    ``groups``: ``ledger.aggregate.group_rows`` over the month's bounds (``month_bounds``): each
    session's money attributed by time (``ledger.attribution``), only its share of the month's
    hours. ``cost_lines``: storage lines overlapping the month, in the totals and in
    ``storage_usd``; ``line_keys``: {session id: {"experiment","card","provider"}} for the
    sessions that own them. ``days``: ``ledger.aggregate.day_rows`` over ``day_edges(month, tz)``
    (None: no ``"days"``).
    Shape: ``{"month","tz","total_usd","simulated_usd","storage_usd","gpu_hours","sessions",
    "open_sessions","charged_sessions","tokens","simulated_tokens","usd_per_mtoken","usd_per_mtoken_job",
    "simulated_usd_per_mtoken","simulated_usd_per_mtoken_job","by_experiment","by_card",
    "by_provider"}``, plus ``"days"`` (one row per calendar day, ``_day_rows``) when ``days`` is given.
    Money in USD, ``gpu_hours`` = billed hours x GPU count; ``charged_sessions`` closed sessions
    whose cost is the provider's own charge (``ledger sync --apply``), the others are our estimate.
    Raises ValueError for a bad month or zone.
    """
    lo, hi = month_bounds(month, tz)
    lines = list(cost_lines)
    total, by = _grouped(
        groups,
        lo,
        hi,
        {"experiment": attrgetter("experiment"), "card": card_name, "provider": attrgetter("provider")},
        lines,
        line_keys or {},
        month,
    )
    j = total.as_json()
    out = {
        "month": month,
        "tz": tz or "local",
        "total_usd": j["cost_usd"],
        **{
            k: j[k]
            for k in (
                "simulated_usd",
                "storage_usd",
                "gpu_hours",
                "sessions",
                "open_sessions",
                "charged_sessions",
                "tokens",
            )
        },
        # tokens of simulated sessions (the rest are real ones'): $/Mtoken divides each money by its own tokens
        "simulated_tokens": int(round(total.simulated_tokens)),
        **{
            k: j[k]
            for k in (
                "usd_per_mtoken",
                "usd_per_mtoken_job",
                "simulated_usd_per_mtoken",
                "simulated_usd_per_mtoken_job",
            )
        },
        "by_experiment": _rows(by["experiment"]),
        "by_card": _rows(by["card"]),
        "by_provider": _rows(by["provider"]),
    }
    if days is not None:
        out["days"] = _day_rows(_by_day(days, lines, *day_edges(month, tz)))
    return out


def _by_day(days: Iterable[Any], cost_lines: list[Row], edges: list[float], names: list[str]) -> list[Totals]:
    """Each day's Totals: the database's day sums (``ledger.aggregate.day_rows``) and each cost line's share of the day."""
    from ledger.attribution import split

    out = [Totals(name=n) for n in names]
    for g in days:
        _absorb(out[g.bucket], g)
    for ln in cost_lines:
        for i, share in split(ln.start_at, ln.end_at, edges):
            out[i].add_line(ln.usd * share, bool(ln.simulated))
    return out


def experiments_report(
    groups: Iterable[Any],
    conclusions: dict[str, str],
    since: str | None = None,
    until: str | None = None,
    start: float | None = None,
    end: float | None = None,
    cost_lines: Iterable[Row] = (),
    line_keys: dict[str, dict[str, str]] | None = None,
) -> dict:
    """The experiments report from database groups (``ledger.aggregate.group_rows`` by ``EXPERIMENT_KEYS``).

    Per experiment: sessions, GPU-hours, cost (real and simulated apart, storage inside), tokens,
    $/Mtoken both ways and the latest non-empty conclusion (``conclusions``: {experiment: latest
    conclusion}). Money is attributed to the window [``start``, ``end``) epoch s (None: open) by
    time (``ledger.attribution``); ``since``/``until`` (``YYYY-MM-DD``) label the report;
    ``cost_lines``/``line_keys`` as ``month_report``'s.

    Shape: ``{"since","until","experiments":[{"name","cost_usd","simulated_usd","storage_usd",
    "gpu_hours","sessions","open_sessions","charged_sessions","tokens","usd_per_mtoken",
    "usd_per_mtoken_job","simulated_usd_per_mtoken","simulated_usd_per_mtoken_job","latest_conclusion"}]}``.
    """
    _, by = _grouped(
        groups,
        -_INF if start is None else start,
        _INF if end is None else end,
        {"experiment": attrgetter("experiment")},
        cost_lines,
        line_keys or {},
    )
    for name, t in by["experiment"].items():
        t.latest_conclusion = conclusions.get(name, "")
    return {"since": since, "until": until, "experiments": _rows(by["experiment"], conclusion=True)}


def _day_rows(days: list[Totals]) -> list[dict]:
    out = []
    for g in days:
        j = g.as_json()
        out.append(
            {"date": g.name}
            | {k: j[k] for k in ("cost_usd", "simulated_usd", "storage_usd", "gpu_hours", "sessions", "tokens")}
        )
    return out


SESSION_FIELDS = (
    "id",
    "experiment",
    "job",
    "provider",
    "card",
    "gpu_count",
    "spot",
    "label",
    "instance_id",
    "offer_id",
    "usd_per_hour",
    "bid_usd_per_hour",
    "simulated",
    "status",
    "created_at",
    "instance_created_at",
    "ready_at",
    "ended_at",
    "end_reason",
    "end_source",
    "exit_code",
    "billed_seconds",
    "billing_increment_seconds",
    "cost_usd",
    "tokens",
    "job_seconds",
    "last_heartbeat_at",
    "conclusion",
    "note",
    "log_path",
    "results_path",
    "source",
    "max_hours",
    "ready_timeout_seconds",
    "idle_minutes",  # m004_session_limits
    "estimated_usd",
    "charged_usd",
    "cost_source",
    "owner",
    "account",
    "run_id",
    "attempt",
    "max_session_usd",  # m010_runs
)


def session_detail(s: Row, steps: Iterable[Any] = (), events: Iterable[Any] = (), tz: str | None = None) -> dict:
    """Everything about one session: every column, its bootstrap steps with seconds, its events, and derived figures.

    Shape: the ``up --json`` summary keys (``session, provider, card, usd_per_hour, seconds,
    cost_usd, simulated, tokens, usd_per_mtoken, end_reason, exit_code, log``) plus every
    ``sessions`` column, ``times`` (ISO 8601 UTC strings, ``periods.utc_iso``), ``bootstrap_seconds``, ``job_cost_usd``,
    ``usd_per_mtoken_job``, ``steps`` [{"name","status","seconds","detail"}] and ``events``
    [{"time" (ISO 8601 UTC, ``periods.utc_iso``),"kind","detail"}] (no epoch twin beside the time).
    An open session has ``cost_usd`` None.
    """
    steps = list(steps)
    closed = s.status == "closed"
    tokens = s.tokens or 0
    cost = s.cost_usd if closed else None
    jc = job_cost(s) if closed and got_instance(s) else None
    out = {k: getattr(s, k, None) for k in SESSION_FIELDS}
    out.update(
        {
            "session": s.id,
            "seconds": s.billed_seconds if closed else None,
            "cost_usd": cost,
            "usd_per_mtoken": per_mtoken(cost, tokens) if cost is not None else None,
            "usd_per_mtoken_job": per_mtoken(jc, tokens) if jc is not None else None,
            "job_cost_usd": None if jc is None else round(jc, 6),
            "log": s.log_path,
            "results": s.results_path,
            "bootstrap_seconds": round(sum(st.seconds for st in steps), 6),
            "times": {
                k: None if getattr(s, k, None) is None else utc_iso(getattr(s, k))
                for k in ("created_at", "instance_created_at", "ready_at", "ended_at", "last_heartbeat_at")
            },
            "steps": [
                {"name": st.name, "status": st.status, "seconds": st.seconds, "detail": st.detail} for st in steps
            ],
            "events": [{"time": utc_iso(e.at), "kind": e.kind, "detail": e.detail} for e in events],
        }
    )
    return out
