"""How a rental ends: end_rental (lifecycle), the laptop-side layers (reconcile, the watchdog, its passes and its service), the kept log, the live cost, the money guard (budget)."""
