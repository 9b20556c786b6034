"""`gpuops ledger sessions`: past sessions, newest first, with their cost and conclusion.

The read is ``ledger.history.recent_rows`` (newest first, LIMIT in the database); the rows are
``ledger.history.session_row`` dicts, the same ones the dashboard's session table shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from ledger.books import Books

DEFAULT_LIMIT = 20


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 session"``, ``"2 sessions"``: ``n`` with ``word`` in the number that fits."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def sessions(
    reader, since: str | None = None, experiment: str | None = None, limit: int = DEFAULT_LIMIT, tz: str | None = None
) -> dict:
    """Past sessions since ``since``, of ``experiment`` when given, newest first, at most ``limit``.

    ``since``: ``YYYY-MM-DD``, from 00:00 in ``tz`` (None: the local zone); no date: all.

    Returns ``{"since","experiment","limit","tz","more","sessions":[session_row...]}``; ``more``
    is True when older sessions matched beyond ``limit``. Raises BadInput for a bad date, zone
    or a limit < 1.
    """
    from gpuops.rental.ledger_service import _tz_checked
    from ledger.history import recent_rows, session_rows
    from ledger.reports import day_start

    tz = _tz_checked(tz)
    if limit < 1:
        raise BadInput(f"--limit must be >= 1, got {limit}", "e.g. --limit 50")
    try:
        start = day_start(since, tz) if since else None
    except ValueError as e:
        raise BadInput(str(e), "pass the date as YYYY-MM-DD, e.g. --since 2026-11-01") from None
    rows = recent_rows(reader, start, None, experiment, limit + 1)
    return {
        "since": since,
        "experiment": experiment,
        "limit": limit,
        "tz": tz or "local",
        "more": len(rows) > limit,
        "sessions": session_rows(rows[:limit], tz),
    }


# Columns of the sessions table, and the order in which they are left out when the terminal is too
# narrow (gpuops.views.tables: numbers and ids are never cut; the conclusion folds).
COLUMNS = ("session", "run", "started", "experiment", "card", "provider", "hours", "cost USD", "end", "conclusion")
# Moved to the continuation table (keyed by the session) first to last when the terminal is too
# narrow: nothing the table is for is left out (when, what, on which card, the cost, how it ended);
# the session, its card and its cost stay in the first table.
DROP_ORDER = ("provider", "run", "hours", "conclusion", "started", "end", "experiment")


def zone_words(tz: str) -> str:
    """``UTC`` -> "UTC"; ``local`` -> "this machine's time zone (CET)"."""
    if tz != "local":
        return tz
    from datetime import datetime

    return f"this machine's time zone, {datetime.now().astimezone().tzname()}"


def _cells(r: dict) -> dict:
    from gpuops.textsafe import safe_tree

    r = safe_tree(r)  # experiment, card, conclusion: shown escaped, never run by the terminal
    from gpuops.views import money

    cost = "open" if r["cost_usd"] is None else money.rental(r["cost_usd"]) + (" sim" if r["simulated"] else "")
    return {
        "session": r["session"],
        "run": r.get("run") or "-",
        "started": r["started"][:16].replace("T", " "),
        "experiment": r["experiment"],
        "card": r["card"],
        "provider": r["provider"],
        "hours": "-" if r["hours"] is None else f"{r['hours']:.3f}",
        "cost USD": cost,
        "end": r["end_reason"] or r["status"],
        "conclusion": r["conclusion"] or (f"note: {r['note']}" if r.get("note") else ""),
    }  # `up --note` where no conclusion is set


def render(rep: dict, console=None) -> None:
    """The sessions as a table (``gpuops.views.tables``).

    Numbers and ids are never cut: when the terminal is too narrow, columns move to a continuation
    table keyed by the session, in ``DROP_ORDER``."""
    from rich.console import Console

    c = console or Console(highlight=False, soft_wrap=False, markup=False)
    rows = rep["sessions"]
    if not rows:
        what = f" of experiment {rep['experiment']!r}" if rep["experiment"] else ""
        c.print(f"no sessions{what}" + (f" since {rep['since']}" if rep["since"] else ""))
        return
    from gpuops.views.tables import ID, NAME, NUM, TEXT, Col, print_table, ranked

    kinds = {
        "session": ID,
        "run": ID,
        "started": ID,
        "experiment": NAME,
        "card": NAME,
        "provider": ID,
        "hours": NUM,
        "cost USD": NUM,
        "end": ID,
        "conclusion": TEXT,
    }
    cols = ranked([Col(h, kinds[h]) for h in COLUMNS], DROP_ORDER)
    cells = [_cells(r) for r in rows]
    print_table(
        c,
        f"sessions, newest first (times in {zone_words(rep['tz'])})",
        cols,
        [[cell[h] for h in COLUMNS] for cell in cells],
        fold=True,
    )
    if rep["more"]:
        c.print(f"showing the newest {plural(rep['limit'], 'session')}; older ones: --limit N or --since YYYY-MM-DD")


def runs(ledger: Books, since: str | None = None, limit: int = DEFAULT_LIMIT, tz: str | None = None) -> dict:
    """``ledger sessions --runs``.

    Runs (``up --recover``) newest first, each with its rentals' count, billed hours and cost (their
    sum: the month still counts the rentals). Returns
    ``{"since","limit","tz","more","runs":[ledger.history.run_row...]}``. BadInput as ``sessions``."""
    from gpuops.rental.ledger_service import _tz_checked
    from ledger.history import run_row
    from ledger.reports import day_start

    tz = _tz_checked(tz)
    if limit < 1:
        raise BadInput(f"--limit must be >= 1, got {limit}", "e.g. --limit 50")
    try:
        start = day_start(since, tz) if since else None
    except ValueError as e:
        raise BadInput(str(e), "pass the date as YYYY-MM-DD, e.g. --since 2026-11-01") from None
    rows = ledger.runs(start, limit + 1)
    return {
        "since": since,
        "limit": limit,
        "tz": tz or "local",
        "more": len(rows) > limit,
        "runs": [run_row(r, tz) for r in rows[:limit]],
    }


RUN_COLUMNS = ("run", "started", "experiment", "rentals", "hours", "cost USD", "end", "detail")
RUN_DROP_ORDER = ("started", "hours", "experiment")


def render_runs(rep: dict, console=None) -> None:
    """The runs as a table: a run's cost is its rentals' sum; ``end`` the run's outcome."""
    from rich.console import Console

    from gpuops.textsafe import safe_tree
    from gpuops.views.tables import ID, NAME, NUM, TEXT, Col, print_table, ranked

    c = console or Console(highlight=False, soft_wrap=False, markup=False)
    if not rep["runs"]:
        c.print("no runs" + (f" since {rep['since']}" if rep["since"] else "") + " (a run is `gpuops up --recover N`)")
        return
    kinds = {
        "run": ID,
        "started": ID,
        "experiment": NAME,
        "rentals": NUM,
        "hours": NUM,
        "cost USD": NUM,
        "end": ID,
        "detail": TEXT,
    }
    cols = ranked([Col(h, kinds[h]) for h in RUN_COLUMNS], RUN_DROP_ORDER)
    cells = []
    for r in safe_tree(rep["runs"]):
        cost = "open" if r["cost_usd"] is None else f"{r['cost_usd']:,.4f}" + (" sim" if r["simulated"] else "")
        cells.append(
            [
                r["run"],
                r["started"][:16].replace("T", " "),
                r["experiment"],
                str(r["rentals"]),
                f"{r['hours']:.3f}",
                cost,
                r["end_reason"] or r["status"],
                r["detail"],
            ]
        )
    print_table(c, f"runs, newest first (times in {zone_words(rep['tz'])})", cols, cells)
    if rep["more"]:
        c.print(f"showing the newest {plural(rep['limit'], 'run')}; older ones: --limit N or --since YYYY-MM-DD")


def render_run(d: dict, console=None) -> None:
    """``ledger show run-...``: the run, then one line per rental with why it ended."""
    from rich.console import Console

    from gpuops.textsafe import safe_tree
    from gpuops.views.tables import ID, NAME, NUM, TEXT, Col, print_table

    c = console or Console(highlight=False, soft_wrap=False, markup=False)
    d = safe_tree(d)
    run = d["run"]
    fields = [[k, "-" if run[k] is None or run[k] == "" else str(run[k])] for k in run]
    fields += [
        ["cost_usd", f"{d['cost_usd']:.6f} (its rentals' sum)"],
        ["seconds", f"{d['seconds']:.3f}"],
        ["tokens", str(d["tokens"])],
    ]
    print_table(c, f"run {run['id']}", [Col("field", ID, style="bold"), Col("value", TEXT)], fields, header=False)
    rows = [
        [
            str(r["attempt"]),
            r["session"],
            r["card"],
            "-" if r["seconds"] is None else f"{r['seconds']:.3f}",
            "open" if r["cost_usd"] is None else f"{r['cost_usd']:.6f}",
            r["why"],
        ]
        for r in d["rentals"]
    ]
    print_table(
        c,
        "rentals",
        [
            Col("attempt", NUM),
            Col("session", ID),
            Col("card", NAME),
            Col("seconds", NUM),
            Col("cost USD", NUM),
            Col("why it ended", TEXT),
        ],
        rows,
    )
