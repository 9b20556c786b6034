"""`gpuops ledger sessions`: past sessions, newest first, with their cost and conclusion.

The report is ``gpuops.accounting.history.sessions`` (``runs`` for ``--runs``); the rows are
``ledger.history.session_row`` dicts, the same ones the dashboard's session table shows.
"""

from __future__ import annotations

from ledger.periods import zone_minute


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 session"``, ``"2 sessions"``: ``n`` with ``word`` in the number that fits."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


# Columns of the sessions table, and the order in which they are left out when the terminal is too
# narrow (gpuops.render.tables: numbers and ids are never cut; the conclusion folds).
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


def _cells(r: dict, tz: str | None) -> dict:
    from gpuops.textsafe import safe_tree

    r = safe_tree(r)  # experiment, card, conclusion: shown escaped, never run by the terminal
    from gpuops.render import money

    cost = "open" if r["cost_usd"] is None else money.rental(r["cost_usd"]) + (" sim" if r["simulated"] else "")
    return {
        "session": r["session"],
        "run": r.get("run") or "-",
        "started": zone_minute(r["started"], tz),  # JSON says UTC; the table, the report's zone
        "experiment": r["experiment"],
        "card": r["card"],
        "provider": r["provider"],
        "hours": "-" if r["hours"] is None else f"{r['hours']:.3f}",
        "cost USD": cost,
        "end": r["end_reason"] or r["status"],
        "conclusion": r["conclusion"] or (f"note: {r['note']}" if r.get("note") else ""),
    }  # `up --note` where no conclusion is set


def render(rep: dict, console=None) -> None:
    """The sessions as a table (``gpuops.render.tables``).

    Numbers and ids are never cut: when the terminal is too narrow, columns move to a continuation
    table keyed by the session, in ``DROP_ORDER``."""
    from rich.console import Console

    c = console or Console(highlight=False, soft_wrap=False, markup=False)
    rows = rep["sessions"]
    if not rows:
        what = f" of experiment {rep['experiment']!r}" if rep["experiment"] else ""
        c.print(f"no sessions{what}" + (f" since {rep['since']}" if rep["since"] else ""))
        return
    from gpuops.render.tables import ID, NAME, NUM, TEXT, Col, print_table, ranked

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
    cells = [_cells(r, rep["tz"]) for r in rows]
    print_table(
        c,
        f"sessions, newest first (times in {zone_words(rep['tz'])})",
        cols,
        [[cell[h] for h in COLUMNS] for cell in cells],
        fold=True,
    )
    if rep["more"]:
        c.print(f"showing the newest {plural(rep['limit'], 'session')}; older ones: --limit N or --since YYYY-MM-DD")


RUN_COLUMNS = ("run", "started", "experiment", "rentals", "hours", "cost USD", "end", "detail")
RUN_DROP_ORDER = ("started", "hours", "experiment")


def render_runs(rep: dict, console=None) -> None:
    """The runs as a table: a run's cost is its rentals' sum; ``end`` the run's outcome."""
    from rich.console import Console

    from gpuops.render.tables import ID, NAME, NUM, TEXT, Col, print_table, ranked
    from gpuops.textsafe import safe_tree

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
                zone_minute(r["started"], rep["tz"]),
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

    from gpuops.render.tables import ID, NAME, NUM, TEXT, Col, print_table
    from gpuops.textsafe import safe_tree

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
