"""`gpuops ledger sessions` (and ``--runs``): past sessions and runs, newest first, read from the books.

The read is ``ledger.history.recent_rows`` (newest first, LIMIT in the database); the rows are
``ledger.history.session_row`` dicts, the same ones the dashboard's session table shows;
``gpuops.render.session_history`` prints them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from ledger.books import Books

DEFAULT_LIMIT = 20


def sessions(
    reader, since: str | None = None, experiment: str | None = None, limit: int = DEFAULT_LIMIT, tz: str | None = None
) -> dict:
    """Past sessions since ``since``, of ``experiment`` when given, newest first, at most ``limit``.

    ``since``: ``YYYY-MM-DD``, from 00:00 in ``tz`` (None: the local zone); no date: all.

    Returns ``{"since","experiment","limit","tz","more","sessions":[session_row...]}``; ``more``
    is True when older sessions matched beyond ``limit``. Raises BadInput for a bad date, zone
    or a limit < 1.
    """
    from gpuops.accounting.ledger_service import _tz_checked
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


def runs(ledger: Books, since: str | None = None, limit: int = DEFAULT_LIMIT, tz: str | None = None) -> dict:
    """``ledger sessions --runs``.

    Runs (``up --recover``) newest first, each with its rentals' count, billed hours and cost (their
    sum: the month still counts the rentals). Returns
    ``{"since","limit","tz","more","runs":[ledger.history.run_row...]}``. BadInput as ``sessions``."""
    from gpuops.accounting.ledger_service import _tz_checked
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
