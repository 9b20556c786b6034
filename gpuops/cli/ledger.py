"""`gpuops ledger ...`: the books' commands.

Month, experiments, sessions, show, note, tokens, export, import, sync, replay. Parse, call
gpuops.accounting.ledger_service, render through gpuops.render.ledger."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuops.cli.group import Group
from gpuops.cli.options import (
    CONFIG_OPT,
    TZ_OPT,
    NotBlank,
    Number,
    _ledger,
    _reader,
    _settings,
    day_option,
    month_option,
    number,
    output_options,
    tz_option,
)
from gpuops.errors import BadInput

if TYPE_CHECKING:
    from ledger.books import Books
    from ledger.reads import LedgerReader

ledger_app = typer.Typer(cls=Group, help="The books: what each session and month cost.", no_args_is_help=True)


@ledger_app.command("month")
@output_options(csv=True)
def ledger_month(
    month: str | None = typer.Argument(
        None,
        help="YYYY-MM (default: this month).",
        parser=NotBlank("the month", "pass YYYY-MM, e.g. gpuops ledger month 2026-11, or leave it out for this month"),
    ),
    tz: str | None = TZ_OPT,
    by: str | None = typer.Option(None, "--by", help="'day': add a day-by-day table."),
    plot: bool = typer.Option(False, "--plot", help="Bar chart of daily spend in the terminal (table format only)."),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """What the month cost: totals, by experiment, by card, by provider.

    $/Mtok all-in: every dollar paid per million tokens (bootstrap, idle time after the job and the
    group's failed runs included). $/Mtok job: only the job's own seconds x the price, per million
    tokens. Real and simulated money are never added together."""
    from gpuops.accounting import ledger_service as books
    from gpuops.render import ledger as ledger_view

    if plot and fmt != "table":
        raise BadInput(
            f"--plot draws a chart in the terminal; --format {fmt} has no place for it",
            "drop --plot, or drop --format/--json/--csv (the days are in the output with --by day)",
        )
    rep = books.month(_reader(config), month, tz, by, plot, watchdogs=True)
    ledger_view.emit("month", rep, fmt, plot=plot, days_table=by == "day")


@ledger_app.command("experiments")
@output_options(csv=True)
def ledger_experiments(
    since: str | None = day_option("--since", "First day, YYYY-MM-DD."),
    until: str | None = day_option("--until", "Last day (included), YYYY-MM-DD."),
    tz: str | None = TZ_OPT,
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Per experiment: sessions, GPU-hours, cost, tokens, $/Mtoken, latest conclusion.

    $/Mtok all-in: every dollar paid per million tokens (bootstrap, idle time, failed runs
    included). $/Mtok job: only the job's own seconds x the price, per million tokens."""
    from gpuops.accounting import ledger_service as books
    from gpuops.render import ledger as ledger_view

    ledger_view.emit("experiments", books.experiments(_reader(config), since, until, tz), fmt)


@ledger_app.command("sessions")
@output_options(csv=True)
def ledger_sessions(
    since: str | None = day_option("--since", "Only sessions started on or after this day, YYYY-MM-DD."),
    experiment: str | None = typer.Option(None, "--experiment", help="Only this experiment."),
    limit: int = number(
        20, "--limit", help="Show at most this many sessions (newest first).", example="20", whole=True
    ),
    runs: bool = typer.Option(False, "--runs", help="List runs (up --recover) with their rentals' total instead."),
    tz: str | None = TZ_OPT,
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Past sessions, newest first: when, run, experiment, card, hours, cost, end reason, conclusion."""
    from gpuops.accounting import history as books_history
    from gpuops.render import emit, session_history as history

    if runs:
        if experiment is not None:
            raise BadInput("--experiment filters sessions; --runs lists runs", "drop one of them")
        rep = books_history.runs(_ledger(config), since, limit, tz)
        from ledger.history import RUN_ROW_COLUMNS

        emit.emit(rep, fmt, lambda: history.render_runs(rep), csv_records=rep["runs"], csv_columns=RUN_ROW_COLUMNS)
        return
    rep = books_history.sessions(_reader(config), since, experiment, limit, tz)
    from ledger.history import SESSION_ROW_COLUMNS

    emit.emit(rep, fmt, lambda: history.render(rep), csv_records=rep["sessions"], csv_columns=SESSION_ROW_COLUMNS)


@ledger_app.command("show")
@output_options(csv=True)
def ledger_show(
    session: str = typer.Argument(
        ..., help="Session id (or a unique prefix), a run id (run-...) or a sweep id (sweep-...)."
    ),
    tz: str | None = TZ_OPT,
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Every field of one session: its bootstrap steps, its events, where logs and results are.

    For a run (run-...): its rentals and why each ended. For a sweep (sweep-...): its jobs' runs, state, cost
    and $/Mtoken."""
    from gpuops.accounting import ledger_service as books
    from gpuops.render import ledger as ledger_view
    from gpuops.rental.runs import RUN_PREFIX
    from gpuops.sweep.executor import SWEEP_PREFIX

    if session.startswith(SWEEP_PREFIX):  # a sweep: its runs, their state, cost and $/Mtoken
        from gpuops.render import emit
        from gpuops.render.sweep import status_text
        from gpuops.sweep import service

        rep = service.status(_ledger(config), session)
        emit.emit(
            rep, fmt, lambda: emit.write(status_text(rep)), csv_records=rep["jobs"], csv_columns=SWEEP_JOB_COLUMNS
        )
        return
    if session.startswith(RUN_PREFIX):
        from gpuops.render import emit, session_history as history

        rep = books.show_run(_ledger(config), session, tz)
        emit.emit(
            rep,
            fmt,
            lambda: history.render_run(rep),
            csv_records=rep["rentals"],
            csv_columns=(
                "session",
                "attempt",
                "started",
                "card",
                "usd_per_hour",
                "seconds",
                "cost_usd",
                "tokens",
                "end_reason",
                "why",
            ),
        )
        return
    ledger_view.emit("show", books.show(_ledger(config), session, tz), fmt)


SWEEP_JOB_COLUMNS = ("seq", "name", "state", "run", "end_reason", "rentals", "cost_usd", "tokens", "usd_per_mtoken")


@ledger_app.command("sweeps")
@output_options(csv=True)
def ledger_sweeps(
    limit: int = number(20, "--limit", help="Show at most this many sweeps (newest first).", example="20", whole=True),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Sweeps, newest first: their jobs by state, cost and $/Mtoken."""
    from gpuops.render import emit
    from gpuops.render.sweep import listing_text
    from gpuops.sweep import service

    rows = service.listing(_ledger(config), limit)
    columns = (
        "sweep",
        "name",
        "status",
        "end_reason",
        "jobs",
        "done",
        "failed",
        "running",
        "queued",
        "cost_usd",
        "tokens",
        "usd_per_mtoken",
    )
    emit.emit(rows, fmt, lambda: emit.write(listing_text(rows)), csv_columns=columns)


@ledger_app.command("note")
@output_options()
def ledger_note(
    session: str = typer.Argument(...),
    text: str = typer.Argument(..., help="One-line conclusion."),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Record a session's one-line conclusion."""
    from gpuops.accounting import ledger_service as books
    from gpuops.render import emit, ui

    r = books.note(_ledger(config), session, text)
    emit.emit(r, fmt, lambda: print(f"{r['session']}: {ui.safe(r['conclusion'])}"))


@ledger_app.command("tokens")
@output_options()
def ledger_tokens(
    session: str = typer.Argument(...),
    n: int = typer.Argument(
        ...,
        help="Tokens the job produced (replaces the booked count).",
        parser=Number("the token count", whole=True, fix="e.g. gpuops ledger tokens SESSION 2100000"),
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Set a session's token count after the fact (for $/Mtoken)."""
    from gpuops.accounting import ledger_service as books
    from gpuops.render import emit
    from gpuops.render.ui import money

    r = books.tokens(_ledger(config), session, n)
    per = r["usd_per_mtoken"]
    emit.emit(
        r,
        fmt,
        lambda: print(
            f"{r['session']}: {r['tokens']:,} tokens"
            + (f", {money(per, r['simulated'])}/Mtoken" if per is not None else "")
        ),
    )


@ledger_app.command("export")
def ledger_export(
    month: str | None = month_option("Only this month, YYYY-MM (default: everything)."),
    tz: str | None = TZ_OPT,
    config: str | None = CONFIG_OPT,
    fmt: str | None = typer.Option(None, "--format", help="csv (the only format: what `ledger import` reads)."),
    csv_out: bool = typer.Option(True, "--csv", help="CSV on stdout (the only format).", show_default=False),
) -> None:
    """Closed rentals as CSV: date, experiment, provider, card, gpu_count, usd_per_hour, hours, cost_usd, tokens, conclusion, simulated, session."""
    import io

    from gpuops.accounting import ledger_service as books
    from gpuops.render.emit import pick

    if fmt is not None:  # the export is the import's format: CSV only (`ledger sessions --format json` for JSON)
        pick(fmt, allowed=("csv",))

    # Our own 1 MiB buffer: with PYTHONUNBUFFERED (or a pipe) every CSV row would be a write(2).
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, io.UnsupportedOperation):  # stdout replaced in-process (tests)
        books.export(_reader(config), sys.stdout, month, tz)
        return
    sys.stdout.flush()
    out = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(fd, "w", closefd=False), 1 << 20),
        encoding=sys.stdout.encoding or "utf-8",
        newline="",
    )
    try:
        books.export(_reader(config), out, month, tz)
    finally:
        out.flush()
        out.detach()


@ledger_app.command("import")
@output_options()
def ledger_import(
    file: str = typer.Argument(
        ...,
        help="CSV with the export's columns (simulated and session optional).",
        parser=NotBlank("the file name", "pass the CSV file to import, e.g. gpuops ledger import rentals.csv"),
    ),
    tz: str | None = tz_option("Time zone of dates without an offset (default: local)."),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="Refuse rows naming an unknown provider or card, or whose cost is not price x hours within a cent (a misspelt provider and a rental ending in the future are refused always).",
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Import a spreadsheet of past rentals: every row or none; bad rows are named by line."""
    from gpuops.accounting import ledger_service as books
    from gpuops.render import emit
    from gpuops.render.session_history import plural

    r = books.import_csv(_ledger(config), file, tz, strict=strict)
    for line, msg in r["warnings"]:
        sys.stderr.write(f"warning: {Path(file).name}:{line}: {msg}\n")
    emit.emit(
        r,
        fmt,
        lambda: print(
            f"imported {plural(r['imported'], 'session')} from {r['file']}: ${r['cost_usd']:,.4f}"
            + (f" + ${r['simulated_usd']:,.4f} simulated" if r["simulated_usd"] else "")
        ),
    )


@ledger_app.command("replay")
@output_options()
def ledger_replay(
    lines: list[str] | None = typer.Argument(
        None, help="Lines `up` printed when no spool could hold them (default: replay the spool)."
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Apply writes the ledger refused.

    The spool (what `ps`, `watchdog` and `reconcile` also do), or
    the lines `up` printed when its spools could not be written either."""
    from gpuops.render import emit

    led = _ledger(config)
    if lines:
        from ledger.spool import BadLine

        for i, line in enumerate(lines):  # each line checked like every spooled write, then applied
            try:
                led.replay_line(line)
            except BadLine as e:
                raise BadInput(
                    f"line {i + 1} is not a spooled ledger write of this ledger ({e}); {i} line(s) before it applied",
                    "pass the quoted text `gpuops up` printed after `gpuops ledger replay`, unchanged",
                ) from None
        r = {"applied": len(lines), "waiting": len(led.spooled())}
    else:
        r = {"applied": led.replay_spool(), "waiting": len(led.spooled())}
    emit.emit(r, fmt, lambda: print(f"applied {r['applied']} ledger write(s); {r['waiting']} still waiting"))


@ledger_app.command("sync")
@output_options(csv=True)
def ledger_sync(
    month: str | None = month_option("YYYY-MM (default: this month)."),
    tz: str | None = TZ_OPT,
    config: str | None = CONFIG_OPT,
    apply: bool = typer.Option(
        False,
        "--apply",
        help="Book each closed session's provider charge as its cost (our estimate kept beside it) and storage as its own lines.",
    ),
    fmt: str = "table",
) -> None:
    """Fetch the providers' own billing and show the difference to our books, per session and in total.

    Exit status: 0 compared, 4 nothing compared (no provider's billing could be read: no API key,
    or every provider refused)."""
    from gpuops.accounting import ledger_service as books
    from gpuops.render import ledger as ledger_view

    settings = _settings(config, emergency=not apply)  # --apply books: it needs a sound config
    led: Books | LedgerReader
    if apply:
        from gpuops.rental.sessions import open_ledger

        led = open_ledger(settings)  # its replay of a spooled close tells ([notify])
    else:
        from ledger.reads import LedgerReader

        led = LedgerReader(settings.ledger_url())
    from gpuops.render.progress import waiting

    with waiting("ledger sync: asking the providers for their billing"):
        rep = books.sync(led, settings, month, tz, apply=apply)
    ledger_view.emit("sync", rep, fmt)
    if not rep["providers"]:  # checked nothing: never exit 0 (cron and CI would read it as success)
        from gpuops.errors import NOTHING_CHECKED

        raise typer.Exit(NOTHING_CHECKED)
