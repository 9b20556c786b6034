"""The version of gpuops (pyproject.toml's [project] version).

On the ground floor, so that any floor reads it without importing the package's root, whose lazy
attributes are the Python API (gpuops.api)."""

__version__ = "0.1.0"
