"""Month and experiment totals summed inside the database, by the attribution rule in SQL (``ledger.attribution``).

ONE statement returns a few dozen group rows instead of 100,000 session rows (a report costs about
what one SQL statement costs).

``group_rows(query, lo, hi, keys)`` runs on whatever executes SQL text with named parameters
(``ledger.reads.Reads.query``: SQL text on the ledger's engine). The groups are
``keys`` (default: experiment, card, gpu_count, provider, simulated); ``ledger.reports`` merges
them into the report's totals and breakdowns (the only path to a month's or an experiment's
money: no row-by-row twin). A group may come back once per arm: a report adds them up.
``day_rows(query, edges)`` is the same sums by calendar day (``ledger month --by day``, the
dashboard's days): one statement over the month's rows, a session across midnight split across
its days by the same rule.

The statement is arms joined by UNION ALL (``statements``), so each arm keeps its own index search
(the two ``ended_at`` arms of the period, then the open rows on their partial index
``ix_sessions_open``). Closed rows wholly inside [lo, hi) (nearly all of them) add their plain
values (``inside_sql``: a share of exactly 1, what ``fraction`` returns; an open side of the window
drops its comparisons, so all time costs one a row); only the others pay for the share
(``attribution.share_sql``); the latest conclusion's time rides along in the same scan.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence

from ledger.attribution import SQL_INSIDE, SQL_TOUCHES, share_sql, touches_sql

GroupRow = namedtuple(
    "GroupRow",
    "experiment card gpu_count provider simulated sessions open_sessions charged_sessions "
    "cost_usd gpu_hours tokens job_usd conclusion_at bucket",
    defaults=(None, None),
)

MONTH_KEYS = ("experiment", "card", "gpu_count", "provider", "simulated")
EXPERIMENT_KEYS = ("experiment", "simulated")

_JOB = (
    "(CASE WHEN job_seconds IS NULL OR usd_per_hour IS NULL OR usd_per_hour = 0 THEN COALESCE(cost_usd, 0.0)"
    " WHEN job_seconds * usd_per_hour / 3600.0 < COALESCE(cost_usd, 0.0) THEN job_seconds * usd_per_hour / 3600.0"
    " ELSE COALESCE(cost_usd, 0.0) END)"
)
_GPU_HOURS = "(COALESCE(billed_seconds, 0.0) * (CASE WHEN gpu_count > 1 THEN gpu_count ELSE 1 END) / 3600.0)"


def inside_sql(lo: float | None, hi: float | None) -> str:
    """``attribution.SQL_INSIDE`` without the comparisons an open side of the window makes always true.

    A closed row wholly inside [:lo, :hi) has a share of exactly 1. All time, a row is inside once
    it ended at or after its instance began (``ended_at >= instance_created_at``, which NULLs fail),
    so the default ``ledger experiments`` sums plain values with one comparison a row."""
    parts = (["instance_created_at >= :lo"] if lo is not None else []) + (["ended_at < :hi"] if hi is not None else [])
    return "(" + " AND ".join(parts + ["ended_at >= instance_created_at"]) + ")"


def _attributed(x: str, inside: str) -> str:
    """``x`` x the row's share of [:lo, :hi) for a CLOSED row.

    ``x`` itself when the row lies wholly inside (``inside``: share 1, as ``attribution.fraction``
    returns), else ``x * share`` (``attribution.share_sql``)."""
    return f"(CASE WHEN {inside} THEN {x} ELSE {x} * {share_sql('1.0')} END)"


_CONCLUSION_AT = ", MAX(CASE WHEN conclusion <> '' THEN created_at END)"


def _group_by(keys: Sequence[str]) -> str:
    # simulated first: no index has that order, so SQLite searches the period's rows instead of
    # walking ix_sessions_experiment over the whole history to hand the GROUP BY its order
    return ", ".join(sorted(keys, key=lambda k: k != "simulated"))


def closed_sql(keys: Sequence[str], lo: float | None, hi: float | None, ended: str, conclusion: bool) -> str:
    """The GROUP BY over closed rows that spent money in [:lo, :hi).

    ``ended``: the ``ended_at`` arm of the range search (``ended_at >= :lo`` or ``ended_at IS
    NULL``; "" without a lower bound). One scan: the rows wholly inside add their plain values, the
    others their share (measured: on PostgreSQL a second scan for the edge rows cost more than the
    CASE saves)."""
    inside = inside_sql(lo, hi)
    cols = (
        f"COUNT(*), 0, SUM(CASE WHEN cost_source = 'charged' THEN 1 ELSE 0 END),"
        f" SUM({_attributed('COALESCE(cost_usd, 0.0)', inside)}), SUM({_attributed(_GPU_HOURS, inside)}),"
        f" SUM({_attributed('COALESCE(tokens, 0) * 1.0', inside)}),"
        f" SUM(CASE WHEN tokens > 0 THEN {_attributed(_JOB, inside)} ELSE 0.0 END)"
    )
    where = (
        ([] if hi is None else ["+created_at < :hi"])
        + ([ended] if ended else [])
        + ["status = 'closed'", f"({inside} OR {SQL_TOUCHES})"]
    )
    return (
        f"SELECT {', '.join(keys)}, {cols}{_CONCLUSION_AT if conclusion else ''} FROM sessions WHERE {' AND '.join(where)}"
        f" GROUP BY {_group_by(keys)}"
    )


def open_sql(keys: Sequence[str], lo: float | None, hi: float | None, conclusion: bool) -> str:
    """The GROUP BY over open rows touching [:lo, :hi).

    Counted, no cost (``attribution``); found through the partial index ``ix_sessions_open`` (a
    handful of rows)."""
    k = ", ".join(keys)
    where = "status <> 'closed' AND created_at < :hi"  # :hi is 1e300 for an open end: still the index's search
    if lo is not None:
        where += " AND (ended_at >= :lo OR ended_at IS NULL)"
    cols = "COUNT(*), COUNT(*), 0, 0.0, 0.0, 0.0, 0.0" + (_CONCLUSION_AT if conclusion else "")
    return f"SELECT {k}, {cols} FROM sessions WHERE {where} AND {SQL_TOUCHES} GROUP BY {_group_by(keys)}"


def statements(
    lo: float | None, hi: float | None, keys: Sequence[str] = MONTH_KEYS, conclusion: bool = False
) -> list[str]:
    """The arms of ``statement``, each one index search on SQLite.

    Closed rows by ``ended_at`` on the covering index ``ix_sessions_books``, open ones on ``ix_sessions_open``."""
    arms = [""] if lo is None else ["ended_at >= :lo", "ended_at IS NULL"]
    return [closed_sql(keys, lo, hi, ended, conclusion) for ended in arms] + [open_sql(keys, lo, hi, conclusion)]


def statement(lo: float | None, hi: float | None, keys: Sequence[str] = MONTH_KEYS, conclusion: bool = False) -> str:
    """The one SQL statement ``group_rows`` runs: ``statements`` joined by UNION ALL.

    Named parameters :lo, :hi (see ``params``). A group may come back once per arm."""
    return " UNION ALL ".join(statements(lo, hi, keys, conclusion))


_INF = 1e300  # an open window side, as a number both databases compare with floats


def params(lo: float | None, hi: float | None) -> dict:
    return {"lo": -_INF if lo is None else float(lo), "hi": _INF if hi is None else float(hi)}


def group_rows(
    query: Callable[[str, dict], Iterable[tuple]],
    lo: float | None,
    hi: float | None,
    keys: Sequence[str] = MONTH_KEYS,
    conclusion: bool = False,
) -> list[GroupRow]:
    """The sums by ``keys`` of the sessions that spent money in [lo, hi), attributed by time.

    The groups (by ``keys``, a subset of ``MONTH_KEYS`` in that order that holds ``simulated``;
    the other fields are None, ``gpu_count`` 0) of
    sessions that spent money in [lo, hi) epoch s (None: open), their sums attributed by time:
    sessions, open_sessions, charged_sessions, cost_usd (USD), gpu_hours (billed hours x GPU
    count), tokens, job_usd (USD of the job's own seconds, sessions with tokens). One group may
    come back in several rows (add them up). ``conclusion``: ``conclusion_at``, the newest intent
    time (epoch s) of the group's rows with a conclusion (None: none; see ``latest_conclusions``).
    ``query(sql, params)`` runs SQL text with named parameters and returns tuples."""
    n = len(keys)
    args = params(lo, hi)
    out = []
    for r in query(statement(lo, hi, keys, conclusion), args):
        key = dict(zip(keys, r))
        out.append(
            GroupRow(
                key.get("experiment"),
                key.get("card"),
                int(key.get("gpu_count") or 0),
                key.get("provider"),
                bool(key["simulated"]),
                int(r[n]),
                int(r[n + 1] or 0),
                int(r[n + 2] or 0),
                float(r[n + 3] or 0.0),
                float(r[n + 4] or 0.0),
                float(r[n + 5] or 0.0),
                float(r[n + 6] or 0.0),
                r[n + 7] if conclusion else None,
            )
        )
    return out


def latest_conclusions(
    query: Callable[[str, dict], Iterable[tuple]], groups: Iterable[GroupRow], lo: float | None, hi: float | None
) -> dict[str, str]:
    """{experiment: its latest non-empty conclusion} among the rows of ``groups``.

    The rows of ``groups`` (``group_rows``
    with ``conclusion=True`` over [lo, hi)): the newest intent time per experiment came with the sums; only
    those few rows are read here (seeks on the created_at index). Ties: the last by id, as before."""
    newest: dict[str, float] = {}
    for g in groups:
        if g.conclusion_at is not None and (g.experiment not in newest or g.conclusion_at > newest[g.experiment]):
            newest[g.experiment] = g.conclusion_at
    times = sorted(set(newest.values()))
    out: dict[str, str] = {}
    for i in range(0, len(times), 200):  # each chunk: that many seeks on ix_sessions_created_at
        chunk = times[i : i + 200]
        marks = ", ".join(f":t{j}" for j in range(len(chunk)))
        sql = (
            f"SELECT experiment, created_at, conclusion FROM sessions WHERE created_at IN ({marks}) AND conclusion <> ''"
            f" AND {SQL_TOUCHES} ORDER BY id"
        )  # a row that spent nothing in the period (same intent time) is no candidate
        for exp, at, conclusion in query(sql, params(lo, hi) | {f"t{j}": t for j, t in enumerate(chunk)}):
            if newest.get(exp) == at:
                out[exp] = conclusion
    return out


def _bisect_sql(x: str, n: int, leaf: Callable[[int], str]) -> str:
    """SQL: ``leaf(i)`` for the bucket [:e{i}, :e{i+1}) that holds ``x`` (one of ``n``; ``x`` in [:e0, :e{n})).

    Nested CASEs halving the buckets: about log2(n) comparisons a row (5 for a month's days)."""

    def part(a: int, b: int) -> str:
        if b - a == 1:
            return leaf(a)
        m = (a + b) // 2
        return f"(CASE WHEN {x} < :e{m} THEN {part(a, m)} ELSE {part(m, b)} END)"

    return part(0, n)


_DAY_SUMS = f"SUM(COALESCE(cost_usd, 0.0)), SUM({_GPU_HOURS}), SUM(COALESCE(tokens, 0) * 1.0)"


def day_statement(n: int) -> str:
    """The one SQL statement ``day_rows`` runs over ``n`` buckets [:e{i}, :e{i+1}) (:lo = :e0, :hi = :e{n}).

    Arms joined by UNION ALL, each on the month's index searches (as ``statements``): the closed
    rows wholly inside one bucket (nearly all) add their plain values to it (found by bisection over
    the edges, ``_bisect_sql``); the other closed rows touching [:lo, :hi) (across midnight or
    the month's edge, or without the times that prove them inside) are joined with the table of
    buckets and add ``x x share`` to each bucket they touch (``attribution.share_sql`` over the
    bucket: a zero-length row wholly to the bucket holding its start); an open row counts (no
    money) in the bucket holding its start, the first one when it began before :lo. Columns:
    bucket, simulated, sessions, cost_usd, gpu_hours, tokens."""
    began = "COALESCE(instance_created_at, created_at)"
    bucket = _bisect_sql("instance_created_at", n, str)
    next_edge = _bisect_sql("instance_created_at", n, lambda i: f":e{i + 1}")
    one = f"(CASE WHEN {SQL_INSIDE} AND ended_at < {next_edge} THEN 1 ELSE 0 END)"
    table = ", ".join(f"({i}, :e{i}, :e{i + 1})" for i in range(n))
    share = (
        f"SUM({share_sql('COALESCE(cost_usd, 0.0)', 'days.lo', 'days.hi')}),"
        f" SUM({share_sql(_GPU_HOURS, 'days.lo', 'days.hi')}),"
        f" SUM({share_sql('COALESCE(tokens, 0) * 1.0', 'days.lo', 'days.hi')})"
    )
    closed = "+created_at < :hi AND {ended} AND status = 'closed'"
    whole = (
        f"SELECT {bucket} AS bucket, simulated, COUNT(*), {_DAY_SUMS} FROM sessions"
        f" WHERE {closed.format(ended='ended_at >= :lo')} AND {one} = 1 GROUP BY simulated, bucket"
    )
    split = [
        f"SELECT days.i, simulated, COUNT(*), {share} FROM sessions CROSS JOIN days"
        f" WHERE {closed.format(ended=ended)} AND {one} = 0 AND {SQL_TOUCHES}"
        f" AND {touches_sql('days.lo', 'days.hi')} GROUP BY simulated, days.i"
        for ended in ("ended_at >= :lo", "ended_at IS NULL")
    ]
    start = _bisect_sql(f"(CASE WHEN {began} < :lo THEN :lo ELSE {began} END)", n, str)
    open_ = (
        f"SELECT {start} AS bucket, simulated, COUNT(*), 0.0, 0.0, 0.0 FROM sessions"
        f" WHERE status <> 'closed' AND created_at < :hi AND (ended_at >= :lo OR ended_at IS NULL) AND {SQL_TOUCHES}"
        " GROUP BY simulated, bucket"
    )
    return f"WITH days(i, lo, hi) AS (VALUES {table}) " + " UNION ALL ".join([whole, *split, open_])


def day_rows(query: Callable[[str, dict], Iterable[tuple]], edges: Sequence[float]) -> list[GroupRow]:
    """The sums by bucket [edges[i], edges[i+1]) of the sessions that spent money in [edges[0], edges[-1]).

    ``edges``: ascending epoch s (a month's day starts in the report's zone, then the month's end;
    ``ledger.reports.day_edges``). Each a ``GroupRow`` with ``bucket`` (the index i) and
    ``simulated``, its sums attributed by time as ``group_rows``'s (sessions: those that spent in
    the bucket, an open one in the bucket holding its start; cost_usd USD, gpu_hours, tokens; the
    other fields None or 0). One bucket may come back in several rows (add them up). ``query`` as
    ``group_rows``'s. Raises ValueError for fewer than two edges."""
    n = len(edges) - 1
    if n < 1:
        raise ValueError("day_rows needs at least two edges")
    args = params(edges[0], edges[-1]) | {f"e{i}": float(e) for i, e in enumerate(edges)}
    return [
        GroupRow(
            None,
            None,
            0,
            None,
            bool(sim),
            int(count),
            0,
            0,
            float(cost or 0.0),
            float(gh or 0.0),
            float(tokens or 0.0),
            0.0,
            None,
            int(b),
        )
        for b, sim, count, cost, gh, tokens in query(day_statement(n), args)
    ]
