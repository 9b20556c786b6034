"""The books from Python (``gpuops.books``): what `gpuops ledger month` and `ledger show` return.

The same service functions (``accounting.ledger_service``) over the same ledger the settings name,
returning the dicts that `--json` prints."""

from __future__ import annotations


def _reader(config: str | None):
    """The ledger's read side, as the ledger commands open it (settings loaded leniently)."""
    from gpuops.config import load_settings
    from ledger.reads import LedgerReader

    return LedgerReader(load_settings(config, lenient=True).ledger_url())


def month(month: str | None = None, *, tz: str | None = None, by: str | None = None, config: str | None = None) -> dict:
    """The month report for ``YYYY-MM`` (default: this month in ``tz``): `gpuops ledger month --json`.

    Totals in USD (``total_usd`` real, ``simulated_usd`` apart), ``sessions``, ``tokens``, and the
    groups ``by_experiment``, ``by_card``, ``by_provider``; ``by="day"`` adds ``days``. Raises
    BadInput for a bad month, zone or ``by``."""
    from gpuops.accounting import ledger_service

    return ledger_service.month(_reader(config), month, tz, by, watchdogs=True)


def show(session: str, *, tz: str | None = None, config: str | None = None) -> dict:
    """One session or run, as `gpuops ledger show SESSION --json` gives it.

    A session: every field, its bootstrap steps and events; a run (``run-...``): its rentals. Raises BadInput for an id the ledger does not hold."""
    from gpuops.accounting import ledger_service
    from gpuops.config import load_settings
    from gpuops.rental.runs import RUN_PREFIX
    from gpuops.rental.sessions import open_ledger

    led = open_ledger(load_settings(config, lenient=True))
    if session.startswith(RUN_PREFIX):
        return ledger_service.show_run(led, session, tz)
    return ledger_service.show(led, session, tz)
