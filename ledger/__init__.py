"""The books: one row per rental session, its bootstrap steps and events, and the reports.

This package imports nothing of ``gpuops``; any SQLAlchemy URL works (SQLite by default). The
rental code is written against ``ledger.books.Books``; ``Ledger`` is its one implementation. Names
load on first use so the report path (``ledger.reads``, ``ledger.reports``) starts without SQLModel
(about 0.4 s to import): reads are SQLAlchemy Core alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.models import BootstrapStep, Event, Run, Session
    from ledger.store import Ledger

__all__ = ["BootstrapStep", "Event", "Ledger", "Run", "Session"]


def __getattr__(name: str):
    if name in ("BootstrapStep", "Event", "Run", "Session"):
        from ledger import models

        return getattr(models, name)
    if name == "Ledger":
        from ledger.store import Ledger

        return Ledger
    raise AttributeError(f"module 'ledger' has no attribute {name!r}")
