"""The `gpuops ledger ...` command bodies: open the ledger, call the pure reports in ``ledger/``,
return JSON-ready dicts (rendering is ``gpuops/ledger_view.py``). Bad input raises BadInput."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from gpuops.errors import BadInput, GpuopsError

# Columns a month report needs (loaded as plain rows, not ORM objects: 100k sessions stay fast).
REPORT_COLUMNS = (
    "id", "experiment", "provider", "card", "gpu_count", "usd_per_hour", "simulated", "status", "created_at",
    "instance_id", "instance_created_at", "billed_seconds", "cost_usd", "tokens", "job_seconds", "conclusion",
)


def _tz_checked(tz: str | None) -> str | None:
    from ledger.reports import zone

    try:
        zone(tz)
    except ValueError as e:
        raise BadInput(str(e), "pass an IANA name, e.g. --tz Europe/Berlin or --tz UTC") from None
    return tz


def month(ledger, month: str | None = None, tz: str | None = None, by: str | None = None, plot: bool = False) -> dict:
    """``ledger month``: the month report (``ledger.reports.month_report``) for ``YYYY-MM`` (default:
    this month in ``tz``), with ``days`` when ``by == "day"`` or ``plot``. Raises BadInput for a
    bad month, zone or ``by``."""
    from ledger.reports import month_bounds, month_report, this_month

    tz = _tz_checked(tz)
    if by not in (None, "day"):
        raise BadInput(f"--by must be 'day', got {by!r}", "use --by day for a day-by-day table")
    month = month or this_month(tz)
    try:
        start, end = month_bounds(month, tz)
    except ValueError as e:
        raise BadInput(str(e), "pass the month as YYYY-MM, e.g. 2026-11") from None
    rows = ledger.rows_between(start, end, REPORT_COLUMNS)
    return month_report(rows, month, tz, by_day=by == "day" or plot)


def experiments(ledger, since: str | None = None, until: str | None = None, tz: str | None = None) -> dict:
    """``ledger experiments``: per-experiment totals over [since 00:00, until 24:00) in ``tz``
    (dates ``YYYY-MM-DD``; either may be omitted). Raises BadInput for a bad date or zone."""
    from ledger.reports import day_start, experiments_report

    tz = _tz_checked(tz)
    try:
        start = day_start(since, tz) if since else None
        end = _day_after(until, tz) if until else None  # not +86400: a DST day has 23 or 25 hours
    except ValueError as e:
        raise BadInput(str(e), "pass dates as YYYY-MM-DD, e.g. --since 2026-11-01") from None
    if start is not None and end is not None and end <= start:
        raise BadInput(f"--until {until} is before --since {since}", "swap the two dates")
    return experiments_report(ledger.rows_between(start, end, REPORT_COLUMNS), since, until)


def _day_after(day: str, tz: str | None) -> float:
    from datetime import date, timedelta

    from ledger.reports import day_start

    day_start(day, tz)  # validates
    nxt = date.fromisoformat(day) + timedelta(days=1)
    return day_start(nxt.isoformat(), tz)


def show(ledger, ref: str, tz: str | None = None) -> dict:
    """``ledger show``: every field, steps, events, derived cost figures (``session_detail``)."""
    from gpuops.sessions import resolve_session
    from ledger.reports import session_detail

    tz = _tz_checked(tz)
    row = resolve_session(ledger, ref)
    return session_detail(row, ledger.steps(row.id), ledger.events(row.id), tz)


def tokens(ledger, ref: str, n: int) -> dict:
    """``ledger tokens SESSION N``: set the session's token count after the fact. Returns
    ``{"session","tokens","cost_usd","usd_per_mtoken"}``. BadInput for N < 0."""
    from gpuops.sessions import resolve_session
    from ledger.reports import per_mtoken

    if n < 0:
        raise BadInput(f"tokens must be >= 0, got {n}", "pass the number of tokens the job produced")
    row = ledger.set_tokens(resolve_session(ledger, ref).id, n)
    cost = row.cost_usd if row.status == "closed" else None
    return {"session": row.id, "tokens": row.tokens, "cost_usd": cost,
            "usd_per_mtoken": per_mtoken(cost, row.tokens) if cost is not None else None}


def note(ledger, ref: str, text: str) -> dict:
    """``ledger note SESSION TEXT``: set the one-line conclusion. Returns ``{"session","conclusion"}``."""
    from gpuops.sessions import resolve_session

    if not text.strip():
        raise BadInput("the note is empty", "pass the conclusion as one line of text")
    row = ledger.note(resolve_session(ledger, ref).id, text)
    return {"session": row.id, "conclusion": row.conclusion}


def export(ledger, out, month: str | None = None, tz: str | None = None) -> int:
    """``ledger export --csv``: write closed rentals (all, or of ``month``) as CSV to the text
    stream ``out``; returns the number of sessions written."""
    from ledger.csvio import export_csv
    from ledger.reports import month_bounds

    start = end = None
    if month:
        try:
            start, end = month_bounds(month, _tz_checked(tz))
        except ValueError as e:
            raise BadInput(str(e), "pass the month as YYYY-MM, e.g. 2026-11") from None
    return export_csv(ledger.rows_between(start, end), out)


def import_csv(ledger, path: str | Path, tz: str | None = None) -> dict:
    """``ledger import FILE.csv``: all rows or none, in one transaction. Returns
    ``{"file","imported","cost_usd","simulated_usd"}``. Any bad row raises BadInput naming every
    bad line (``errors`` attribute: [(line, message)]); nothing is written then."""
    from ledger.csvio import parse_csv
    from ledger.store import ImportRejected

    tz = _tz_checked(tz)
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"{path} is not a file", "pass the CSV file to import")
    try:
        with p.open(newline="", encoding="utf-8-sig") as f:
            rows, lines, errors = parse_csv(f, tz)
    except UnicodeDecodeError as e:
        raise BadInput(f"{path} is not UTF-8 text ({e.reason})", "save the spreadsheet as CSV UTF-8") from None
    if not errors:
        try:
            ledger.import_sessions(rows, lines)
        except ImportRejected as e:
            errors = e.errors
    if errors:
        err = BadInput(_errors_line(p, errors), "fix those lines and import again; nothing was imported")
        err.errors = errors  # type: ignore[attr-defined]
        raise err
    return {
        "file": str(p),
        "imported": len(rows),
        "cost_usd": round(sum(r["cost_usd"] for r in rows if not r["simulated"]), 6),
        "simulated_usd": round(sum(r["cost_usd"] for r in rows if r["simulated"]), 6),
    }


def _errors_line(p: Path, errors: list[tuple[int, str]]) -> str:
    shown = "; ".join(f"{p.name}:{n}: {m}" for n, m in errors[:5])
    more = f"; and {len(errors) - 5} more bad rows" if len(errors) > 5 else ""
    return f"{len(errors)} bad row(s): {shown}{more}"


def fetch_billing(settings, names: Iterable[str], since: float, until: float,
                  get_provider: Callable[[str, Any], Any] | None = None) -> tuple[list, list[str], dict[str, str]]:
    """Ask each provider in ``names`` for its billing lines over [since, until) epoch s via the
    optional ``Provider.billing(since, until) -> list[ChargeLine]``. Returns (lines, providers that
    answered, {provider: why not} for those that could not)."""
    if get_provider is None:
        from gpuops.providers import get_provider
    lines: list = []
    answered: list[str] = []
    skipped: dict[str, str] = {}
    for name in names:
        try:
            prov = get_provider(name, settings)
        except GpuopsError as e:
            skipped[name] = e.message
            continue
        fn = getattr(prov, "billing", None)
        if fn is None:
            skipped[name] = "this provider gives no billing through its API"
            continue
        try:
            lines.extend(fn(since, until))
        except GpuopsError as e:
            skipped[name] = str(e)
            continue
        answered.append(name)
    return lines, answered, skipped


def sync(ledger, settings, month: str | None = None, tz: str | None = None, providers: Iterable[str] = ("runpod", "vast"),
         get_provider: Callable[[str, Any], Any] | None = None) -> dict:
    """``ledger sync [--month]``: the providers' own billing for the month against our books
    (``ledger.billing.compare_billing``) plus ``month``, ``skipped`` {provider: reason}."""
    from ledger.billing import compare_billing
    from ledger.reports import month_bounds, this_month

    tz = _tz_checked(tz)
    month = month or this_month(tz)
    try:
        start, end = month_bounds(month, tz)
    except ValueError as e:
        raise BadInput(str(e), "pass the month as YYYY-MM, e.g. 2026-11") from None
    lines, answered, skipped = fetch_billing(settings, providers, start, end, get_provider)
    rep = compare_billing(ledger.rows_between(start, end, REPORT_COLUMNS), lines, answered)
    rep["month"] = month
    rep["skipped"] = skipped
    return rep
