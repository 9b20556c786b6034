"""`gpuops ledger sessions`: past sessions, newest first, with their cost and conclusion.

The read is ``ledger.history.recent_rows`` (newest first, LIMIT in the database); the rows are
``ledger.history.session_row`` dicts, the same ones the dashboard's session table shows.
"""

from __future__ import annotations

from gpuops.errors import BadInput

DEFAULT_LIMIT = 20


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 session"``, ``"2 sessions"``: ``n`` with ``word`` in the number that fits."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def sessions(reader, since: str | None = None, experiment: str | None = None, limit: int = DEFAULT_LIMIT,
             tz: str | None = None) -> dict:
    """Past sessions whose intent time is on or after ``since`` (``YYYY-MM-DD`` 00:00 in ``tz``,
    None = local zone; no date: all), of ``experiment`` when given, newest first, at most ``limit``.

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
    return {"since": since, "experiment": experiment, "limit": limit, "tz": tz or "local",
            "more": len(rows) > limit, "sessions": session_rows(rows[:limit], tz)}


# Columns of the sessions table, and the order in which they are left out when the terminal is too
# narrow (gpuops.views.tables: numbers and ids are never cut; the conclusion folds).
COLUMNS = ("session", "started", "experiment", "card", "provider", "hours", "cost USD", "end", "conclusion")
DROP_ORDER = ("provider", "end", "card", "started", "hours", "experiment")


def zone_words(tz: str) -> str:
    """``UTC`` -> "UTC"; ``local`` -> "this machine's time zone (CET)"."""
    if tz != "local":
        return tz
    from datetime import datetime

    return f"this machine's time zone, {datetime.now().astimezone().tzname()}"


def _cells(r: dict) -> dict:
    from gpuops.textsafe import safe_tree

    r = safe_tree(r)  # experiment, card, conclusion: shown escaped, never run by the terminal
    cost = "open" if r["cost_usd"] is None else f"{r['cost_usd']:,.4f}" + (" sim" if r["simulated"] else "")
    return {"session": r["session"], "started": r["started"][:16].replace("T", " "), "experiment": r["experiment"],
            "card": r["card"], "provider": r["provider"], "hours": "-" if r["hours"] is None else f"{r['hours']:.3f}",
            "cost USD": cost, "end": r["end_reason"] or r["status"],
            "conclusion": r["conclusion"] or (f"note: {r['note']}" if r.get("note") else "")}  # `up --note` where no conclusion is set


def render(rep: dict, console=None) -> None:
    """The sessions as a table (``gpuops.views.tables``). Numbers and ids are never cut: when the
    terminal is too narrow, columns are left out in ``DROP_ORDER`` and named below the table."""
    from rich.console import Console

    c = console or Console(highlight=False, soft_wrap=False, markup=False)
    rows = rep["sessions"]
    if not rows:
        what = f" of experiment {rep['experiment']!r}" if rep["experiment"] else ""
        c.print(f"no sessions{what}" + (f" since {rep['since']}" if rep["since"] else ""))
        return
    from gpuops.views.tables import ID, NAME, NUM, TEXT, Col, print_table, ranked

    kinds = {"session": ID, "started": ID, "experiment": NAME, "card": NAME, "provider": ID, "hours": NUM,
             "cost USD": NUM, "end": ID, "conclusion": TEXT}
    cols = ranked([Col(h, kinds[h]) for h in COLUMNS], DROP_ORDER)
    cells = [_cells(r) for r in rows]
    print_table(c, f"sessions, newest first (times in {zone_words(rep['tz'])})", cols, [[cell[h] for h in COLUMNS] for cell in cells])
    if rep["more"]:
        c.print(f"showing the newest {plural(rep['limit'], 'session')}; older ones: --limit N or --since YYYY-MM-DD")
