"""gpuops: rent a GPU for one job, size it from the model, always tear it down, book the cost.

From Python: ``gpuops.plan(...)``, ``gpuops.up(...)`` (a ``gpuops.Session`` with its cost),
``gpuops.books.month(...)``, ``gpuops.books.show(...)``; see ``gpuops.api``. They load on first
use (``__getattr__``): every command imports this package, and it stays this light (not even
``typing``: the type checker reads the names under this module's own ``TYPE_CHECKING``)."""

from __future__ import annotations

from gpuops.version import __version__  # the one statement of it: gpuops/version.py

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpuops.api import Session, books, plan, up

__all__ = ["Session", "__version__", "books", "plan", "up"]


def __getattr__(name: str) -> object:
    """``plan``, ``up``, ``Session`` (gpuops.api) and ``books`` (gpuops.api.books), imported on first use."""
    if name in ("plan", "up", "Session"):
        from gpuops import api

        return getattr(api, name)
    if name == "books":
        from gpuops.api import books

        return books
    raise AttributeError(f"module 'gpuops' has no attribute {name!r}")
