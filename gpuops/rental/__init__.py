"""Services of a rental: `up`'s stages, lifecycle (the one end_rental), reconcile, watchdog, budget, results, the ledger commands."""
