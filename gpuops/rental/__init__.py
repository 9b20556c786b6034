"""`gpuops up`'s stages: the launcher (the state machine), a run's arithmetic, the copy-back, the open sessions (`ps`, `down`)."""
