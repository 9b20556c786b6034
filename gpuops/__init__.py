"""gpuops: rent a GPU for one job, size it from the model, always tear it down, book the cost."""

__version__ = "0.1.0"
