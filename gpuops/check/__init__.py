"""`gpuops check`: the self-check, offline and --live (check), and one child `up` per teardown layer (check_layers)."""
