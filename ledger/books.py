"""The books as the rental code sees them: ``Books``, one typed interface (``Ledger`` implements it).

Everything under ``gpuops/`` that books a rental, ends one, or reads the books for a report or a
limit is written against this Protocol, never against ``ledger.store.Ledger`` itself. Units: times
are epoch seconds UTC (float), durations seconds, money USD, prices USD/hour. Rows are read-only
SQLAlchemy ``Row`` objects with the table's columns as attributes (``row.cost_usd``) and
``row._mapping`` as a dict; the columns are those of ``ledger/models.py`` (``sessions``,
``runs``, ``events``, ``bootstrap_steps``, ...). A row written is a dict of columns.

A write the database refuses (a lock past its deadline, a full disk, a server down) is spooled and
replayed later (``ledger/store.py``): the writes marked "spooled" below then return None and never
raise a database error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine, Row

    from ledger.reads import Reads

T = TypeVar("T")
D = TypeVar("D")


class Books(Protocol):
    """The ledger of rentals: a session's life (intent, events, fields, end), its reads, the spool."""

    url: str  # the SQLAlchemy URL of the ledger
    spool_path: Path  # where refused writes wait (JSON lines)
    lost: list[str]  # spool lines no spool could take: print them as `gpuops ledger replay` commands
    notices: list[str]  # what the caller should tell the user (a spool refused, a ledger file that vanished)

    # -- a session's life ---------------------------------------------------------------------
    def add_session(self, row: dict[str, Any]) -> None:
        """Insert the intent row (before any create) and its ``intent`` event in one transaction.

        ``row``: its ``sessions`` columns (``id`` and ``created_at`` required; the table's defaults
        for the rest). Raises the database's error (never spooled:
        nothing is rented without its row) and ValueError for an unknown column."""
        ...

    def event(self, session_id: str, kind: str, detail: Any = "", at: float | None = None) -> None:
        """Append an event: ``kind`` a ``onbox.vocabulary.EventKind``; ``detail`` text or JSON-able; ``at`` epoch s (default now). Spooled."""
        ...

    def update(self, session_id: str, **fields: Any) -> None:
        """Set columns of a session row (``instance_id=``, ``usd_per_hour=`` USD/h, ...). Spooled; KeyError for an unknown id."""
        ...

    def add_steps(self, session_id: str, steps: Iterable[dict[str, Any]]) -> None:
        """Store bootstrap step lines ``{"step", "status", "seconds" (wall s), "detail"}``. Spooled."""
        ...

    def heartbeat(self, session_id: str, at: float) -> None:
        """Move the on-box agent's last heartbeat (epoch s) forward; an older time changes nothing. Spooled."""
        ...

    def request_end(self, session_id: str, reason: str, by: str = "", detail: str = "") -> str | None:
        """Record why a session is being ended, before its destroy (the first request wins).

        Returns the reason the row will close with, None when spooled. KeyError for an unknown id."""
        ...

    def close(
        self, session_id: str, ended_at: float, reason: str, exit_code: int | None = None, **fields: Any
    ) -> Row[Any] | None:
        """Close a session at ``ended_at`` (epoch s, the confirmed destroy): billed seconds and cost (USD) from its charged price.

        An earlier ``request_end`` reason wins over ``reason``; a closed row is not changed. Returns
        the closed row, None when spooled."""
        ...

    def set_tokens(self, session_id: str, tokens: int) -> Row[Any]:
        """Set a session's token count after the fact, with a ``tokens`` event; returns the row. ValueError below 0, KeyError for an unknown id."""
        ...

    def note(self, session_id: str, text: str) -> Row[Any]:
        """Set the session's one-line conclusion, with a ``note`` event; returns the row."""
        ...

    # -- reading sessions ---------------------------------------------------------------------
    def get(self, session_id: str) -> Row[Any] | None:
        """The ``sessions`` row, or None."""
        ...

    def held(self, session_id: str) -> Any | None:
        """The row as this process last wrote or read it (attribute access, no database read), or None."""
        ...

    def find(self, prefix: str) -> list[Row[Any]]:
        """The ``sessions`` rows whose id starts with ``prefix``, by id (users type short ids)."""
        ...

    def open_sessions(self) -> list[Row[Any]]:
        """Every session not closed, oldest intent first (spooled writes replayed first, bounded)."""
        ...

    def last_event(self, session_id: str, kind: str) -> tuple[float, Any] | None:
        """(epoch s, detail parsed from JSON, else the text) of the newest ``kind`` event, or None."""
        ...

    def events(self, session_id: str) -> list[Row[Any]]:
        """The session's ``events`` rows (``id, session_id, at, kind, detail``), oldest first."""
        ...

    def steps(self, session_id: str) -> list[Row[Any]]:
        """The session's ``bootstrap_steps`` rows (``name, status, seconds, detail``), in the order written."""
        ...

    def rows_between(
        self, start: float | None = None, end: float | None = None, columns: Iterable[str] | None = None
    ) -> list[Row[Any]]:
        """Session rows whose intent time (``created_at``) is in [start, end) epoch s (None: open), oldest first; ``columns`` default all."""
        ...

    def overlapping(
        self, start: float | None, end: float | None, columns: Iterable[str] | None = None
    ) -> Iterator[Row[Any]]:
        """Stream the session rows that may have spent money in [start, end) epoch s (intent before ``end``, not ended before ``start``)."""
        ...

    def cost_lines(self, start: float | None, end: float | None) -> list[Row[Any]]:
        """Cost lines (storage, ``usd`` USD over [``start_at``, ``end_at``) epoch s) overlapping [start, end)."""
        ...

    def active_refusals(self) -> list[Row[Any]]:
        """The money limits in force: ``refusals`` rows not lifted (``scope``, ``reason``, ``account``, ``set_at`` epoch s), oldest first."""
        ...

    def watchdog_passes(self) -> list[Row[Any]]:
        """The newest ``watchdog_passes`` row of each watchdog (host, owner), newest first (``at`` epoch s, ``interval_seconds``)."""
        ...

    # -- the reports' SQL -----------------------------------------------------------------------
    @property
    def reads(self) -> Reads:
        """The reports' reads (``ledger.reads.Reads``: SQL text with named ``:params`` on the ledger's engine)."""
        ...

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql`` (the reports' SQL differs in places)."""
        ...

    @property
    def engine(self) -> Engine:
        """The ledger's one SQLAlchemy engine (for the books' own modules: ``ledger.sync``, ``ledger.limits``, ``ledger.passes``)."""
        ...

    def iter_query(self, sql: str, params: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
        """Tuples of a read-only ``sql`` with named ``:params``, streamed (flat memory)."""
        ...

    def import_chunks(
        self,
        chunks: Iterable[tuple[Sequence[int], Sequence[tuple[Any, ...]]]],
        errors: list[tuple[int, str]] | None = None,
        columns: Iterable[str] | None = None,
        constants: dict[str, Any] | None = None,
        expected_rows: int = 0,
    ) -> int:
        """Stream (line numbers, rows) batches into ``sessions`` in ONE transaction (``ledger import``); returns the count. Raises ``ImportRejected``."""
        ...

    # -- runs: the user's job across rentals --------------------------------------------------
    def add_run(self, run: dict[str, Any]) -> None:
        """Insert a ``runs`` row (its columns; ``id`` and ``created_at`` required) before its first rental.

        ValueError for an unknown column."""
        ...

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set columns of a run. Spooled; KeyError for an unknown id."""
        ...

    def close_run(self, run_id: str, ended_at: float, reason: str, detail: str = "") -> None:
        """Close a run at ``ended_at`` (epoch s) with its outcome and one line of detail; a closed run is not changed. Spooled."""
        ...

    def get_run(self, run_id: str) -> Row[Any] | None:
        """The ``runs`` row, or None."""
        ...

    def run_rentals(self, run_id: str) -> list[Row[Any]]:
        """The ``sessions`` rows of a run, in attempt order."""
        ...

    def runs(self, since: float | None = None, limit: int | None = None) -> list[Any]:
        """Runs newest first (created at or after ``since`` epoch s), each with its rentals' ``rentals``, ``cost_usd`` USD, ``billed_seconds``, ``tokens``, ``simulated``."""
        ...

    # -- deadlines and the spool ----------------------------------------------------------------
    def bounded(self, seconds: float = ...) -> AbstractContextManager[Books]:
        """Inside: every spooled write and every ``quick`` read waits at most ``seconds`` for the database (around a destroy)."""
        ...

    @overload
    def quick(self, fn: Callable[[], T]) -> T | None: ...
    @overload
    def quick(self, fn: Callable[[], T], default: D) -> T | D: ...
    def quick(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """``fn()`` (a read of these books) bounded like a write; ``default`` when the database fails or is late."""
        ...

    def has_spool(self) -> bool:
        """True when refused writes wait in a spool."""
        ...

    def spooled(self) -> list[dict[str, Any]]:
        """The writes waiting in the spools, oldest first (``{"op", "args", "t"}``), unchecked."""
        ...

    def replay_spool(self) -> int:
        """Apply the spooled writes in order (each checked first); returns how many were applied."""
        ...

    def try_replay(self) -> int:
        """One bounded attempt to apply the spool now; returns how many writes were applied."""
        ...

    def replay_line(self, line: str) -> bool:
        """Apply one printed spool line (``gpuops ledger replay 'LINE'``) after the spool's check; raises ``ledger.spool.BadLine``."""
        ...
