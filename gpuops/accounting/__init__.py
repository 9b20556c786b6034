"""The services of `gpuops ledger ...`: month, export, import, sync, over the books (the top-level ``ledger`` package)."""
