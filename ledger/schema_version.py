"""The names of every migration in ``ledger/migrations.py``, in order, importable without
SQLAlchemy (the fast report path checks a ledger is current with them). A test keeps the two equal:
add the name here when you add a migration there."""

MIGRATION_NAMES = ("m001_initial", "m002_cost_truth", "m003_leases_refusals", "m004_session_limits", "m005_books",
                   "m006_query_indexes", "m007_ownership", "m008_books_index", "m009_watchdog_passes")
