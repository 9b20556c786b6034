"""The names of every migration in ``ledger/migrations.py``, in order, without SQLAlchemy.

The fast report path checks a ledger is current with them. A test keeps the two equal: add the name
here when you add a migration there."""

MIGRATION_NAMES = ("m001_initial", "m002_cost_truth", "m003_leases_refusals", "m004_session_limits", "m005_books",
                   "m006_query_indexes", "m007_ownership", "m008_books_index", "m009_watchdog_passes", "m010_runs")


class LedgerTooNew(RuntimeError):
    """The ledger has migrations applied that this gpuops does not know: a newer gpuops wrote it.

    Nothing may be written to it (nor rented against it); the message is one line with the fix.
    ``unknown``: the unknown migration names, sorted."""

    def __init__(self, unknown):
        self.unknown = sorted(unknown)
        super().__init__(f"the ledger was written by a newer gpuops (schema migration {self.unknown[0]} is unknown to this one)")

    fix = "upgrade gpuops (pip install -U gpuops), or point [ledger] url / GPUOPS_LEDGER_URL at another ledger"


def check_known(done) -> None:
    """Raise LedgerTooNew when the applied migration names ``done`` hold one this gpuops lacks."""
    unknown = set(done) - set(MIGRATION_NAMES)
    if unknown:
        raise LedgerTooNew(unknown)
