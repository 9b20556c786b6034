"""The books: one row per rental session, its bootstrap steps and events, and the reports.

This package imports nothing of ``gpuops``; any SQLAlchemy URL works (SQLite by default).
"""

from ledger.models import BootstrapStep, Event, Session
from ledger.store import Ledger

__all__ = ["BootstrapStep", "Event", "Ledger", "Session"]
