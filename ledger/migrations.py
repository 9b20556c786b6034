"""Schema history, one small function per change, applied once, recorded in ``schema_migrations``.

Read top to bottom, this is every change the ledger database ever went through. Migrations use
SQLAlchemy Core DDL so the same history runs on SQLite and PostgreSQL. Never edit a migration that
has shipped: add a new one.

SQLAlchemy is imported inside the functions, so the names (``MIGRATION_NAMES``) load without it:
the read path (``ledger/reads.py``) checks a ledger is current with them before reading it with the
database's own driver. A ledger holding a migration this code does not know (a newer gpuops wrote
it) raises ``LedgerTooNew`` on open.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection

MIGRATIONS: list[tuple[str, Callable[[Connection], None]]] = []


def migration(fn: Callable[[Connection], None]) -> Callable[[Connection], None]:
    MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_initial(conn: Connection) -> None:
    import sqlalchemy as sa

    md = sa.MetaData()
    sa.Table(
        "sessions",
        md,
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("experiment", sa.String, nullable=False, index=True),
        sa.Column("job", sa.String, nullable=False),
        sa.Column("provider", sa.String, nullable=False),
        sa.Column("card", sa.String, nullable=False),
        sa.Column("gpu_count", sa.Integer, nullable=False),
        sa.Column("spot", sa.Boolean, nullable=False),
        sa.Column("label", sa.String, nullable=False),
        sa.Column("instance_id", sa.String, index=True),
        sa.Column("offer_id", sa.String),
        sa.Column("usd_per_hour", sa.Float),
        sa.Column("bid_usd_per_hour", sa.Float),
        sa.Column("simulated", sa.Boolean, nullable=False),
        sa.Column("status", sa.String, nullable=False, index=True),
        sa.Column("created_at", sa.Float, nullable=False, index=True),
        sa.Column("instance_created_at", sa.Float),
        sa.Column("ready_at", sa.Float),
        sa.Column("ended_at", sa.Float),
        sa.Column("end_reason", sa.String),
        sa.Column("exit_code", sa.Integer),
        sa.Column("billed_seconds", sa.Float),
        sa.Column("cost_usd", sa.Float),
        sa.Column("tokens", sa.BigInteger, nullable=False),
        sa.Column("job_seconds", sa.Float),
        sa.Column("conclusion", sa.String, nullable=False),
        sa.Column("note", sa.String, nullable=False),
        sa.Column("log_path", sa.String, nullable=False),
        sa.Column("results_path", sa.String, nullable=False),
    )
    sa.Table(
        "bootstrap_steps",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String, sa.ForeignKey("sessions.id"), nullable=False, index=True),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("status", sa.String, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("detail", sa.String, nullable=False),
    )
    sa.Table(
        "events",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String, sa.ForeignKey("sessions.id"), nullable=False, index=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("detail", sa.String, nullable=False),
    )
    md.create_all(conn)


@migration
def m002_cost_truth(conn: Connection) -> None:
    """Where a session's end came from, billing rounding, the last heartbeat, and the row's origin.

    Where a session's end time came from, how its provider rounds billing, the agent's last
    heartbeat (an end we never saw is taken from it, never from "now"), and whether the row was
    booked by gpuops or imported from a spreadsheet. Nullable or defaulted: old rows keep meaning."""
    for ddl in (
        "ALTER TABLE sessions ADD COLUMN billing_increment_seconds FLOAT",
        "ALTER TABLE sessions ADD COLUMN last_heartbeat_at FLOAT",
        "ALTER TABLE sessions ADD COLUMN end_source VARCHAR",
        "ALTER TABLE sessions ADD COLUMN source VARCHAR DEFAULT 'gpuops' NOT NULL",
    ):
        conn.exec_driver_sql(ddl)
    conn.exec_driver_sql("CREATE INDEX IF NOT EXISTS ix_sessions_source ON sessions (source)")


@migration
def m003_leases_refusals(conn: Connection) -> None:
    """Teardown: ``session_leases`` and ``refusals``.

    Teardown: ``session_leases`` (one watchdog acts on a session at a time; a crashed one's lease
    lapses at ``expires_at``) and ``refusals`` (a money limit crossed: new `up` calls are refused
    until the watchdog lifts it). The agent's heartbeat is m002's ``last_heartbeat_at``."""
    import sqlalchemy as sa

    md = sa.MetaData()
    sa.Table(
        "session_leases",
        md,
        sa.Column("session_id", sa.String, primary_key=True),  # sessions.id
        sa.Column("owner", sa.String, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    sa.Table(
        "refusals",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String, nullable=False, index=True),  # a provider name, or "*" for all
        sa.Column("reason", sa.String, nullable=False),  # balance_floor | monthly_cap
        sa.Column("detail", sa.String, nullable=False),
        sa.Column("set_at", sa.Float, nullable=False),
        sa.Column("lifted_at", sa.Float),
    )
    md.create_all(conn)


@migration
def m004_session_limits(conn: Connection) -> None:
    """A session's own limits, stored on its row when `up` writes the intent.

    Every process that acts on the session (reconcile, watchdog) applies these, not its own
    settings. Nullable: rows written before this migration fall back to the acting process's
    settings."""
    for ddl in (
        "ALTER TABLE sessions ADD COLUMN max_hours FLOAT",
        "ALTER TABLE sessions ADD COLUMN ready_timeout_seconds FLOAT",
        "ALTER TABLE sessions ADD COLUMN idle_minutes FLOAT",
    ):
        conn.exec_driver_sql(ddl)


@migration
def m005_books(conn: Connection) -> None:
    """Books to the cent: the provider's own charge beside our estimate, and cost lines.

    ``sessions.estimated_usd``: our estimate (price x billed seconds) kept when ``ledger sync
    --apply`` books the provider's charge; ``sessions.charged_usd``: that charge (GPU time, USD);
    ``sessions.cost_source``: ``estimated`` (NULL on old rows means the same) or ``charged``.
    ``cost_lines``: money that is not the session's GPU time: ``storage`` (a stopped instance's disk,
    network volumes) booked apart, included in totals; ``session_id`` NULL for account-level lines
    (a RunPod network volume). One line per (provider, instance, kind, start) (``line_key``).
    Indexes for the month-range predicate ``created_at < end AND (ended_at IS NULL OR ended_at >=
    start)``: ``ended_at`` (the OR's two arms are index lookups) and the cost lines' period.
    """
    import sqlalchemy as sa

    for ddl in (
        "ALTER TABLE sessions ADD COLUMN estimated_usd FLOAT",
        "ALTER TABLE sessions ADD COLUMN charged_usd FLOAT",
        "ALTER TABLE sessions ADD COLUMN cost_source VARCHAR",
        "CREATE INDEX IF NOT EXISTS ix_sessions_ended_at ON sessions (ended_at)",
    ):
        conn.exec_driver_sql(ddl)
    md = sa.MetaData()
    sa.Table(
        "cost_lines",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String, index=True),  # sessions.id; NULL: account-level (a volume)
        sa.Column("provider", sa.String, nullable=False),
        sa.Column("instance_id", sa.String),  # the provider's instance / volume id
        sa.Column("kind", sa.String, nullable=False),  # storage
        sa.Column("start_at", sa.Float, nullable=False),  # epoch s, the period the line bills
        sa.Column("end_at", sa.Float, nullable=False, index=True),
        sa.Column("usd", sa.Float, nullable=False),
        sa.Column("simulated", sa.Boolean, nullable=False),
        sa.Column("source", sa.String, nullable=False),  # provider (billing) | estimate
        sa.Column("description", sa.String, nullable=False),
        sa.Column("booked_at", sa.Float, nullable=False),
        sa.Column("line_key", sa.String, nullable=False, unique=True),
    )
    md.create_all(conn)


# The predicate ``Ledger.open_sessions`` uses, written inline (never a bound parameter) so SQLite
# and PostgreSQL both prove it implies the partial index below.
OPEN_SESSION_SQL = "status <> 'closed'"


@migration
def m006_query_indexes(conn: Connection) -> None:
    """Indexes for every query path of `up`, `ps`, `watchdog` and `reconcile`.

    The open sessions (a partial index: only rows not closed, a handful among a million, ordered by
    intent time), and the active refusals; the month range is ``m005_books``'
    ``ix_sessions_ended_at``. Partial indexes run on SQLite and PostgreSQL alike."""
    for ddl in (
        # status = 'closed' holds nearly every row: an index on it only misleads the planner (an
        # export sorted every row instead of walking created_at); open rows have their own index.
        "DROP INDEX IF EXISTS ix_sessions_status",
        f"CREATE INDEX IF NOT EXISTS ix_sessions_open ON sessions (created_at) WHERE {OPEN_SESSION_SQL}",
        "CREATE INDEX IF NOT EXISTS ix_refusals_active ON refusals (scope, reason) WHERE lifted_at IS NULL",
    ):
        conn.exec_driver_sql(ddl)


@migration
def m007_ownership(conn: Connection) -> None:
    """A team on one ledger.

    Who rented each session (``owner``: the ``[user] name`` setting, default user@host) and under
    which provider account (``account``: a non-secret fingerprint of the API key, or
    machine+user+data dir for the local provider). Only the holder of a row's account closes or
    destroys it. Refusals get the same key (``account``: the provider account for a balance floor,
    the owner for a monthly cap; NULL = everyone, the team scope). Nullable: rows from before this
    migration have no known owner or account."""
    for ddl in (
        "ALTER TABLE sessions ADD COLUMN owner VARCHAR",
        "ALTER TABLE sessions ADD COLUMN account VARCHAR",
        "ALTER TABLE refusals ADD COLUMN account VARCHAR",
    ):
        conn.exec_driver_sql(ddl)
    conn.exec_driver_sql("CREATE INDEX IF NOT EXISTS ix_sessions_owner ON sessions (owner)")
    conn.exec_driver_sql("CREATE INDEX IF NOT EXISTS ix_sessions_account ON sessions (account)")


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
def m008_books_index(conn: Connection) -> None:
    """A covering index for the month-range sums.

    ``ledger month``/``experiments`` and the monthly cap search the period's rows by ``ended_at``
    and read every column they sum from the index itself (SQLite: 0.5-0.6x the time of looking each
    row up in the table at 100k rows; about +10% on an insert). SQLite also holds ``conclusion``
    (the newest conclusion's time rides in the experiments scan); PostgreSQL does not: a B-tree
    entry must stay under 2,704 bytes and a note may be longer (the same limit already bounds
    ``experiment`` through its own index)."""
    cols = BOOKS_INDEX_COLUMNS + (("conclusion",) if conn.dialect.name == "sqlite" else ())
    conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS ix_sessions_books ON sessions ({', '.join(cols)})")


@migration
def m009_watchdog_passes(conn: Connection) -> None:
    """Every watchdog pass (``watchdog_passes``).

    Who (``owner``, the ``[user] name``), where (``host``), when (``at``, epoch s; ``seconds`` it
    took), what it did (``checked``: open sessions it looked at under their lease, ``ended``:
    sessions it destroyed or closed, ``errors``, ``actions``) and how often it runs
    (``interval_seconds``: a pass older than three intervals means that watchdog is gone). Bounded:
    each write keeps the newest passes per host (``ledger.passes.KEEP_PER_HOST``), so the table
    stays a few hundred rows."""
    import sqlalchemy as sa

    md = sa.MetaData()
    sa.Table(
        "watchdog_passes",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host", sa.String, nullable=False),
        sa.Column("owner", sa.String, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("interval_seconds", sa.Float, nullable=False),
        sa.Column("checked", sa.Integer, nullable=False),
        sa.Column("ended", sa.Integer, nullable=False),
        sa.Column("errors", sa.Integer, nullable=False),
        sa.Column("actions", sa.Integer, nullable=False),
    )
    md.create_all(conn)
    conn.exec_driver_sql("CREATE INDEX IF NOT EXISTS ix_watchdog_passes_host ON watchdog_passes (host, id)")


@migration
def m010_runs(conn: Connection) -> None:
    """A run is the user's job; a rental (a ``sessions`` row) is one box.

    ``up --recover N`` books one ``runs`` row and one rental per attempt: ``sessions.run_id`` (NULL:
    a rental outside any run), ``sessions.attempt`` (1, 2, ...) and ``sessions.max_session_usd``
    (the run's money left when the rental was made: the watchdog and the agent apply it as the
    rental's cap). Money stays on the rentals (the month counts rentals, as before); a run's cost is
    the sum of its rentals'. ``runs``: its limits (``max_hours``, ``max_usd``: the whole run), how
    many attempts it may take (``recover``: rentals after the first; ``recover_on``: the end reasons
    that re-rent), and its outcome (``end_reason``: the last rental's, or what it ran out of;
    ``detail``: one line)."""
    import sqlalchemy as sa

    for ddl in (
        "ALTER TABLE sessions ADD COLUMN run_id VARCHAR",
        "ALTER TABLE sessions ADD COLUMN attempt INTEGER",
        "ALTER TABLE sessions ADD COLUMN max_session_usd FLOAT",
        "CREATE INDEX IF NOT EXISTS ix_sessions_run_id ON sessions (run_id)",
    ):
        conn.exec_driver_sql(ddl)
    md = sa.MetaData()
    sa.Table(
        "runs",
        md,
        sa.Column("id", sa.String, primary_key=True),  # "run-" + the first rental's id form
        sa.Column("experiment", sa.String, nullable=False),
        sa.Column("job", sa.String, nullable=False),
        sa.Column("provider", sa.String, nullable=False),
        sa.Column("status", sa.String, nullable=False),  # open | closed
        sa.Column("created_at", sa.Float, nullable=False, index=True),
        sa.Column("ended_at", sa.Float),
        sa.Column("end_reason", sa.String),
        sa.Column("detail", sa.String, nullable=False),
        sa.Column("recover", sa.Integer, nullable=False),
        sa.Column("recover_on", sa.String, nullable=False),  # comma-separated end reasons
        sa.Column("attempts", sa.Integer, nullable=False),  # rentals made so far
        sa.Column("max_hours", sa.Float),
        sa.Column("max_usd", sa.Float),
        sa.Column("note", sa.String, nullable=False),
        sa.Column("owner", sa.String, index=True),
        sa.Column("account", sa.String),
    )
    md.create_all(conn)


# Nullable columns of ``sessions`` that ``ledger import`` leaves NULL (as do rows from before each
# column existed), with their indexes: m011 keeps only the rows that have a value in them. Every
# query that searches one names a value (``=``, ``IN``, a join on it), which implies IS NOT NULL on
# SQLite and PostgreSQL alike; none looks for the NULLs through them.
PARTIAL_INDEXES = (
    ("ix_sessions_instance_id", "instance_id"),
    ("ix_sessions_owner", "owner"),
    ("ix_sessions_account", "account"),
    ("ix_sessions_run_id", "run_id"),
)


@migration
def m011_partial_indexes(conn: Connection) -> None:
    """Leaner secondary indexes on ``sessions``: an imported row enters none it has no value for.

    The indexes of ``PARTIAL_INDEXES`` become partial (``WHERE col IS NOT NULL``): an imported row,
    which has no instance, owner, account or run, costs them nothing, at import or after.
    ``ix_sessions_ended_at`` (m005) goes: ``ix_sessions_books`` (m008) starts with ``ended_at``, so
    the month range's two arms (``ended_at >= start``, ``ended_at IS NULL``) search that one."""
    for name, col in PARTIAL_INDEXES:
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE INDEX {name} ON sessions ({col}) WHERE {col} IS NOT NULL")
    conn.exec_driver_sql("DROP INDEX IF EXISTS ix_sessions_ended_at")


@migration
def m012_drop_source_index(conn: Connection) -> None:
    """Drop ``ix_sessions_source`` (m002): no query searches ``sessions.source``.

    ``source`` (gpuops | import) is read with a row, never searched, filtered or sorted on: its
    index only cost every insert (a million imported rows: a third of a second to build, each
    ``up`` one more B-tree entry). ``tests/books/test_query_plans.py`` pins the hot queries' plans."""
    conn.exec_driver_sql("DROP INDEX IF EXISTS ix_sessions_source")


def _migrations_table() -> Table:
    import sqlalchemy as sa

    return sa.Table(
        "schema_migrations",
        sa.MetaData(),
        sa.Column("name", sa.String, primary_key=True),
        sa.Column("applied_at", sa.Float, nullable=False),
    )


def applied(conn: Connection) -> list[str]:
    import sqlalchemy as sa

    table = _migrations_table()
    if not sa.inspect(conn).has_table(table.name):
        return []
    return [r[0] for r in conn.execute(sa.select(table.c.name))]


def migrate(conn: Connection, upto: str | None = None) -> list[str]:
    """Apply pending migrations in order inside the caller's transaction; returns their names.

    Raises ``LedgerTooNew`` (nothing applied) when the ledger holds a
    migration this code does not know.

    ``upto``: stop after the migration of that name (tests build old-schema ledgers with it).
    """
    table = _migrations_table()
    table.metadata.create_all(conn)
    done = set(applied(conn))
    check_known(done)  # a newer gpuops's ledger: refuse before anything is written or rented
    ran = []
    names = [n for n, _ in MIGRATIONS]
    wanted = MIGRATIONS if upto is None else MIGRATIONS[: names.index(upto) + 1]
    for name, fn in wanted:
        if name in done:
            continue
        fn(conn)
        conn.execute(table.insert().values(name=name, applied_at=time.time()))
        ran.append(name)
    return ran


MIGRATION_NAMES = tuple(name for name, _ in MIGRATIONS)


class LedgerTooNew(RuntimeError):
    """The ledger has migrations applied that this gpuops does not know: a newer gpuops wrote it.

    Nothing may be written to it (nor rented against it); the message is one line with the fix.
    ``unknown``: the unknown migration names, sorted."""

    def __init__(self, unknown):
        self.unknown = sorted(unknown)
        super().__init__(
            f"the ledger was written by a newer gpuops (schema migration {self.unknown[0]} is unknown to this one)"
        )

    fix = "upgrade gpuops (pip install -U gpuops), or point [ledger] url / GPUOPS_LEDGER_URL at another ledger"


def check_known(done) -> None:
    """Raise LedgerTooNew when the applied migration names ``done`` hold one this gpuops lacks."""
    unknown = set(done) - set(MIGRATION_NAMES)
    if unknown:
        raise LedgerTooNew(unknown)
