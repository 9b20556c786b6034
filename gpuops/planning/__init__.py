"""Planning before renting: memory sizing from the model, storage keep-or-refetch, offer selection."""
