"""`gpuops sweep FILE`: many jobs under one budget, queued in the ledger and run as `up` runs them."""
