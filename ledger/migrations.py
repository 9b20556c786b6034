"""Schema history, llm-style: one small named function per change, applied once, recorded in ``schema_migrations``.

The schema itself is stated once, in ``ledger/models.py``. The first step (``m001_models``) creates
a new ledger from its tables' metadata; each later step alters an existing ledger toward those tables
as they are then (SQLAlchemy Core DDL, so the same step runs on SQLite and PostgreSQL). Never edit a
step that has shipped: add a new one, and change the models with it.

A ledger made before the schema was stated once holds the twelve names of ``LEGACY_NAMES``
(``m001_initial`` .. ``m012_drop_source_index``): with all of them applied its tables are the models'
(tests/books/test_schema.py builds one from that schema's SQL), so ``m001_models`` is recorded for
it without running. One that stopped part-way raises ``LedgerTooOld``. A ledger holding a name this
code does not know (a newer gpuops wrote it) raises ``LedgerTooNew`` on open.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection

MIGRATIONS: list[tuple[str, Callable[[Connection], None]]] = []


def migration(fn: Callable[[Connection], None]) -> Callable[[Connection], None]:
    MIGRATIONS.append((fn.__name__, fn))
    return fn


# What the month-range sums read (ledger.aggregate, ledger.limits.month_spend), after ``ended_at``
# (the period's index search): the sums are answered from this index alone, no table lookups.
BOOKS_INDEX_COLUMNS = (
    "ended_at",
    "created_at",
    "status",
    "simulated",
    "instance_created_at",
    "instance_id",
    "cost_usd",
    "owner",
    "experiment",
    "card",
    "gpu_count",
    "provider",
    "cost_source",
    "billed_seconds",
    "tokens",
    "job_seconds",
    "usd_per_hour",
)


@migration
def m001_models(conn: Connection) -> None:
    """Every table and index of ``ledger/models.py``, and the covering index of the month's sums.

    ``ix_sessions_books`` differs per database, so it is made here rather than on the model: SQLite
    also holds ``conclusion`` (the newest conclusion's time rides in the experiments scan);
    PostgreSQL does not (a B-tree entry must stay under 2,704 bytes and a note may be longer)."""
    from ledger.models import metadata

    metadata.create_all(conn)
    cols = BOOKS_INDEX_COLUMNS + (("conclusion",) if conn.dialect.name == "sqlite" else ())
    conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS ix_sessions_books ON sessions ({', '.join(cols)})")


@migration
def m002_sweeps(conn: Connection) -> None:
    """The sweep queue (``sweeps``, ``sweep_jobs``, ``sweep_blobs``) and ``runs.sweep_id``, as the models state them.

    A ledger that ``m001_models`` made in this same code already has them (its metadata holds
    them): each piece is made only where it is missing."""
    import sqlalchemy as sa

    from ledger.models import runs, sweep_blobs, sweep_jobs, sweeps

    for table in (sweeps, sweep_jobs, sweep_blobs):
        table.create(conn, checkfirst=True)
    if "sweep_id" not in {c["name"] for c in sa.inspect(conn).get_columns("runs")}:
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN sweep_id VARCHAR"))
    for index in runs.indexes:
        if index.name == "ix_runs_sweep_id":
            index.create(conn, checkfirst=True)


MIGRATION_NAMES = tuple(name for name, _ in MIGRATIONS)

# The steps of the ledgers made before the schema was stated once (their schema is ``m001_models``').
LEGACY_NAMES = (
    "m001_initial",
    "m002_cost_truth",
    "m003_leases_refusals",
    "m004_session_limits",
    "m005_books",
    "m006_query_indexes",
    "m007_ownership",
    "m008_books_index",
    "m009_watchdog_passes",
    "m010_runs",
    "m011_partial_indexes",
    "m012_drop_source_index",
)
KNOWN_NAMES = LEGACY_NAMES + MIGRATION_NAMES


def _migrations_table() -> Table:
    import sqlalchemy as sa

    return sa.Table(
        "schema_migrations",
        sa.MetaData(),
        sa.Column("name", sa.String, primary_key=True),
        sa.Column("applied_at", sa.Float, nullable=False),
    )


def applied(conn: Connection) -> list[str]:
    """The names of the steps the ledger on ``conn`` records, in the order applied ([] for a new one)."""
    import sqlalchemy as sa

    table = _migrations_table()
    if not sa.inspect(conn).has_table(table.name):
        return []
    return [r[0] for r in conn.execute(sa.select(table.c.name))]


def pending(done: Iterable[str]) -> list[str]:
    """The steps still to apply to a ledger that records ``done``, in order."""
    done = set(done)
    if set(LEGACY_NAMES) <= done:
        done.add(MIGRATION_NAMES[0])  # a complete legacy ledger has the models' schema
    return [n for n in MIGRATION_NAMES if n not in done]


def migrate(conn: Connection) -> list[str]:
    """Apply pending migrations in order inside the caller's transaction; returns their names.

    Raises ``LedgerTooNew`` (nothing applied) when the ledger holds a migration this code does not
    know, ``LedgerTooOld`` for a ledger made before the schema was stated once that stopped part-way."""
    table = _migrations_table()
    table.metadata.create_all(conn)
    done = set(applied(conn))
    check_known(done)  # a newer gpuops's ledger: refuse before anything is written or rented
    legacy = done & set(LEGACY_NAMES)
    if legacy and legacy != set(LEGACY_NAMES):
        raise LedgerTooOld(sorted(set(LEGACY_NAMES) - legacy))
    ran = []
    if legacy and MIGRATION_NAMES[0] not in done:  # recorded, not run: the legacy schema is the models'
        conn.execute(table.insert().values(name=MIGRATION_NAMES[0], applied_at=time.time()))
        done.add(MIGRATION_NAMES[0])
        ran.append(MIGRATION_NAMES[0])
    for name, fn in MIGRATIONS:
        if name in done:
            continue
        fn(conn)
        conn.execute(table.insert().values(name=name, applied_at=time.time()))
        ran.append(name)
    return ran


class LedgerTooNew(RuntimeError):
    """The ledger has migrations applied that this gpuops does not know: a newer gpuops wrote it.

    Nothing may be written to it (nor rented against it); the message is one line with the fix.
    ``unknown``: the unknown migration names, sorted."""

    def __init__(self, unknown: Iterable[str]) -> None:
        self.unknown = sorted(unknown)
        super().__init__(
            f"the ledger was written by a newer gpuops (schema migration {self.unknown[0]} is unknown to this one)"
        )

    fix = "upgrade gpuops (pip install -U gpuops), or point [ledger] url / GPUOPS_LEDGER_URL at another ledger"


class LedgerTooOld(LedgerTooNew):
    """A ledger made before the schema was stated once, whose migrations stopped part-way (``missing``: their names).

    Refused as ``LedgerTooNew`` is (nothing written, one line with the fix), so it is that class's kind."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = self.unknown = missing
        RuntimeError.__init__(
            self, f"the ledger's schema stopped before {missing[0]} (a gpuops from before November 2026 made it)"
        )

    fix = "open it once with the gpuops that made it (any command) to finish its migrations, then with this one"


def check_known(done: Iterable[str]) -> None:
    """Raise LedgerTooNew when the applied migration names ``done`` hold one this gpuops lacks."""
    unknown = set(done) - set(KNOWN_NAMES)
    if unknown:
        raise LedgerTooNew(unknown)
