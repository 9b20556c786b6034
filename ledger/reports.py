"""Reports over the ledger: pure functions from session rows to plain dicts (JSON-ready).

Money rules: real spend (``cost_usd``) and simulated spend (``simulated_usd``) are never summed
together; a session that never got an instance costs 0 and is not counted; an open session has
no cost yet (it is never extended to "now"). A session's money is split across the hours, days
and months it ran in, in the report's time zone (``ledger.attribution``, the one rule); storage
lines (``cost_lines``) are reported apart from GPU time and included in totals.

$/Mtoken two ways: ``usd_per_mtoken_job`` charges only the job's own seconds (``job_seconds`` x
price) of the sessions that produced tokens; ``usd_per_mtoken`` shares in everything else that was
paid for: bootstrap, idle time after the job, and sessions of the same group that produced no
tokens (failed runs). Both are USD per 1e6 tokens, None when there are no tokens.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, cast

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


def _fact(s: Row, frac: float = 1.0) -> tuple | None:
    """What a row adds to a group, scaled by ``frac`` (its share of the period, ``ledger.attribution``).

    (row, closed, simulated, cost USD, GPU-hours, tokens, job-only USD); None for a session that
    never got an instance."""
    if s.instance_id is None and s.instance_created_at is None:
        return None  # never rented: not a session that cost anything
    if s.status != "closed":
        return (s, False, bool(s.simulated), 0.0, 0.0, 0, 0.0)
    tokens = (s.tokens or 0) * frac
    gh = (s.billed_seconds or 0.0) * max(1, s.gpu_count) / 3600.0 * frac
    return (s, True, bool(s.simulated), (s.cost_usd or 0.0) * frac, gh, tokens, job_cost(s) * frac if tokens else 0.0)


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
        if getattr(s, "cost_source", None) == "charged":
            self.charged_sessions += 1
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


class _Book:
    """One pass over streamed session rows and cost lines, attributed to [lo, hi) and grouped.

    One pass over streamed session rows and cost lines, attributing each to the period [lo, hi) (and
    to day buckets when ``day_edges``) with ``ledger.attribution``, grouped by ``keys`` (name ->
    function of a row)."""

    def __init__(
        self,
        name: str,
        lo: float,
        hi: float,
        keys: dict[str, Callable[[Row], str]],
        cost_lines: Iterable[Row] = (),
        day_edges: list[float] | None = None,
        day_names: list[str] | None = None,
        conclusion: bool = False,
    ):
        self.lo, self.hi = lo, hi
        self.total = Totals(name=name)
        self.keys = keys
        self.groups: dict[str, dict[str, Totals]] = {k: {} for k in keys}
        self.day_edges = day_edges
        self.days = [Totals(name=d) for d in (day_names or [])]
        self.lines = list(cost_lines)
        self.line_sessions = {ln.session_id for ln in self.lines if ln.session_id is not None}
        self.line_keys: dict[str, dict[str, str]] = {}

    def _group(self, key: str, name: str) -> Totals:
        g = self.groups[key].get(name)
        if g is None:
            g = self.groups[key][name] = Totals(name=name)
        return g

    def add_sessions(self, sessions: Iterable[Row]) -> None:
        from ledger.attribution import fraction, interval, overlaps, split

        lo, hi = self.lo, self.hi
        for s in sessions:
            if s.id in self.line_sessions:
                self.line_keys[s.id] = {k: fn(s) for k, fn in self.keys.items()}
            iv = interval(s)
            if iv is None or not overlaps(iv[0], iv[1], lo, hi):
                continue
            f = _fact(s, fraction(iv[0], iv[1], lo, hi) if iv[1] is not None else 0.0)
            assert f is not None  # interval(s) is None exactly when _fact(s) is (a session never rented)
            self.total.add_fact(f)
            for k, fn in self.keys.items():
                self._group(k, fn(s)).add_fact(f)
            if self.day_edges is not None:
                if iv[1] is None:
                    i = max(0, bisect_right(self.day_edges, iv[0]) - 1)
                    if i < len(self.days):
                        self.days[i].add_fact(f)
                else:
                    for i, share in split(iv[0], iv[1], self.day_edges):
                        self.days[i].add_fact(cast(tuple, _fact(s, share)))  # not None: as f above

    def add_lines(self) -> None:
        from ledger.attribution import fraction, split

        for ln in self.lines:
            usd = ln.usd * fraction(ln.start_at, ln.end_at, self.lo, self.hi)
            if usd == 0:
                continue
            sim = bool(ln.simulated)
            self.total.add_line(usd, sim)
            known = self.line_keys.get(ln.session_id) if ln.session_id is not None else None
            for k in self.keys:
                name = known[k] if known else (ln.provider if k == "provider" else "(storage, no session)")
                self._group(k, name).add_line(usd, sim)
            if self.day_edges is not None:
                for i, share in split(ln.start_at, ln.end_at, self.day_edges):
                    self.days[i].add_line(ln.usd * share, sim)


def _edges(month: str, tz: str | None) -> tuple[list[float], list[str]]:
    names = [f"{month}-{n:02d}" for n in range(1, days_in_month(month) + 1)]
    edges = [day_start(d, tz) for d in names]  # DST-safe day edges, then bisect: no per-row datetime
    edges.append(month_bounds(month, tz)[1])
    return edges, names


def month_report(
    sessions: Iterable[Row], month: str, tz: str | None = None, by_day: bool = False, cost_lines: Iterable[Row] = ()
) -> dict:
    """The month's totals and breakdowns by experiment, card and provider.

    ``sessions``: rows (streamed is fine) that may overlap the month (``LedgerReader.overlapping``);
    each is attributed by time (``ledger.attribution``): only its share of the month's hours counts.
    ``cost_lines``: storage lines overlapping the month, in the totals and in ``storage_usd``.
    Shape: ``{"month","tz","total_usd","simulated_usd","storage_usd","gpu_hours","sessions",
    "open_sessions","charged_sessions","tokens","simulated_tokens","usd_per_mtoken","usd_per_mtoken_job",
    "simulated_usd_per_mtoken","simulated_usd_per_mtoken_job","by_experiment","by_card",
    "by_provider"}``, plus ``"days"`` (one row per calendar day) when ``by_day``. Money in USD,
    ``gpu_hours`` = billed hours x GPU count; ``charged_sessions`` closed sessions whose cost is
    the provider's own charge (``ledger sync --apply``), the others are our estimate.
    """
    lo, hi = month_bounds(month, tz)
    edges = names = None
    if by_day:
        edges, names = _edges(month, tz)
    book = _Book(
        month,
        lo,
        hi,
        {"experiment": attrgetter("experiment"), "card": card_name, "provider": attrgetter("provider")},
        cost_lines,
        edges,
        names,
    )
    book.add_sessions(sessions)
    book.add_lines()
    j = book.total.as_json()
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
        "simulated_tokens": int(round(book.total.simulated_tokens)),
        **{
            k: j[k]
            for k in (
                "usd_per_mtoken",
                "usd_per_mtoken_job",
                "simulated_usd_per_mtoken",
                "simulated_usd_per_mtoken_job",
            )
        },
        "by_experiment": _rows(book.groups["experiment"]),
        "by_card": _rows(book.groups["card"]),
        "by_provider": _rows(book.groups["provider"]),
    }
    if by_day:
        out["days"] = _day_rows(book.days)
    return out


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


def month_report_groups(
    groups: Iterable[Any],
    month: str,
    tz: str | None = None,
    cost_lines: Iterable[Row] = (),
    line_keys: dict[str, dict[str, str]] | None = None,
) -> dict:
    """``month_report`` (without days) from database groups (``ledger.aggregate.group_rows`` over the month's bounds).

    The same figures, summed by the database. ``line_keys``: {session id:
    {"experiment","card","provider"}} for the sessions that own ``cost_lines``."""
    lo, hi = month_bounds(month, tz)
    total, by = _grouped(
        groups,
        lo,
        hi,
        {"experiment": attrgetter("experiment"), "card": card_name, "provider": attrgetter("provider")},
        cost_lines,
        line_keys or {},
        month,
    )
    j = total.as_json()
    return {
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


def experiments_report_groups(
    groups: Iterable[Any],
    conclusions: dict[str, str],
    since: str | None = None,
    until: str | None = None,
    start: float | None = None,
    end: float | None = None,
    cost_lines: Iterable[Row] = (),
    line_keys: dict[str, dict[str, str]] | None = None,
) -> dict:
    """``experiments_report`` from database groups; ``conclusions``: {experiment: latest conclusion}."""
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


def day_report(
    sessions: Iterable[Row], month: str, tz: str | None = None, cost_lines: Iterable[Row] = ()
) -> list[dict]:
    """One row per calendar day of ``month`` in ``tz`` (days without spend included, so a plot has no gaps).

    ``{"date","cost_usd","simulated_usd","storage_usd","gpu_hours","sessions","tokens"}``. A
    session's money is split across the days it ran in (``ledger.attribution``)."""
    return month_report(sessions, month, tz, by_day=True, cost_lines=cost_lines)["days"]


def experiments_report(
    sessions: Iterable[Row],
    since: str | None = None,
    until: str | None = None,
    start: float | None = None,
    end: float | None = None,
    cost_lines: Iterable[Row] = (),
) -> dict:
    """The experiments report: per experiment, its figures and latest conclusion.

    Per experiment: sessions, GPU-hours, cost (real and simulated apart, storage inside), tokens,
    $/Mtoken both ways and the latest non-empty conclusion. Money is attributed to the window
    [``start``, ``end``) epoch s (None: open) by time (``ledger.attribution``); ``since``/``until``
    (``YYYY-MM-DD``) label the report.

    Shape: ``{"since","until","experiments":[{"name","cost_usd","simulated_usd","storage_usd",
    "gpu_hours","sessions","open_sessions","charged_sessions","tokens","usd_per_mtoken",
    "usd_per_mtoken_job","simulated_usd_per_mtoken","simulated_usd_per_mtoken_job","latest_conclusion"}]}``.
    """
    book = _Book(
        "",
        -_INF if start is None else start,
        _INF if end is None else end,
        {"experiment": attrgetter("experiment")},
        cost_lines,
    )
    book.add_sessions(sessions)
    book.add_lines()
    return {"since": since, "until": until, "experiments": _rows(book.groups["experiment"], conclusion=True)}


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
    [{"at","time","kind","detail"}]. An open session has ``cost_usd`` None.
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
            "events": [{"at": e.at, "time": utc_iso(e.at), "kind": e.kind, "detail": e.detail} for e in events],
        }
    )
    return out
