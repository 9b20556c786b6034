"""The books: one row per rental session, its bootstrap steps and events, and the reports.

This package imports nothing of ``gpuops``; any SQLAlchemy URL works (SQLite by default). The
rental code is written against ``ledger.books.Books``; ``Ledger`` is its one implementation. The
schema is ``ledger/models.py`` (SQLAlchemy Core tables); every read and write is a Core statement.
``Ledger`` loads on first use so a command that never opens the books does not import SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.store import Ledger

__all__ = ["Ledger"]


def __getattr__(name: str):
    if name == "Ledger":
        from ledger.store import Ledger

        return Ledger
    raise AttributeError(f"module 'ledger' has no attribute {name!r}")
