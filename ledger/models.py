"""Ledger tables (SQLAlchemy Core): the schema, stated once. Times are epoch seconds UTC (float); money in USD; prices USD/hour.

Columns, their types, defaults and indexes live here only: ``ledger/migrations.py`` creates a new
ledger from this ``metadata`` (``m001_models``); a change here needs a later migration there that
alters an existing ledger to match (tests/books/test_schema.py compares a migrated ledger with it).
A default is applied by SQLAlchemy on insert (``Column(default=...)``), never by the database,
except ``sessions.source``'s server default. A row is a dict of columns on the way in and a
SQLAlchemy ``Row`` on the way out (``ledger/books.py``).

The tables are Core ``Table`` objects, not ORM classes: every read and write of the ledger is a
Core statement, and a writing process imports neither ``sqlalchemy.orm`` nor a model layer (about
0.4 s of CPU per process, measured with ``python -X importtime``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    text,
)
from sqlalchemy.types import TypeEngine

from ledger.attribution import OPEN_SESSIONS_WHERE

metadata = MetaData()

_REQUIRED = object()  # a NOT NULL column the insert must give (no default)


def _value(
    name: str, type_: type[TypeEngine[Any]], default: Any = _REQUIRED, *, references: str = "", **kw: Any
) -> Column[Any]:
    """A NOT NULL column ``name``; ``default``: the value an insert that omits it gets; ``references``: "table.column"."""
    if default is not _REQUIRED:
        kw["default"] = default
    keys = (ForeignKey(references),) if references else ()
    return Column(name, type_, *keys, nullable=False, **kw)


def _maybe(name: str, type_: type[TypeEngine[Any]], **kw: Any) -> Column[Any]:
    """A nullable column ``name`` (NULL when an insert omits it)."""
    return Column(name, type_, nullable=True, **kw)


def _id(name: str = "id") -> Column[Any]:
    """The autoincrement integer primary key."""
    return Column(name, Integer, primary_key=True)


def _key(name: str = "id") -> Column[Any]:
    """A text primary key the writer chooses (e.g. a session id)."""
    return Column(name, String, primary_key=True)


def _partial(name: str, *columns: str, where: str | None = None) -> Index:
    """The index ``name`` on ``columns`` over the rows matching ``where`` (default: the first column has a value).

    A partial index answers only a query whose predicate implies ``where`` (SQLite and PostgreSQL
    alike): one that names a value of the column, or the literal predicate itself."""
    cond = text(where or f"{columns[0]} IS NOT NULL")
    return Index(name, *columns, sqlite_where=cond, postgresql_where=cond)


# One rental session: intent, instance, money, time, outcome, work.
sessions = Table(
    "sessions",
    metadata,
    _key(),  # e.g. "20261129-1632-3f9a"; label is "gpuops-" + id
    _value("experiment", String, "default", index=True),
    _value("job", String, ""),
    _value("provider", String, ""),
    _value("card", String, ""),
    _value("gpu_count", Integer, 1),
    _value("spot", Boolean, False),
    _value("label", String, ""),
    _maybe("instance_id", String),  # m011: indexed where not NULL (below)
    _maybe("offer_id", String),
    _maybe("usd_per_hour", Float),  # price really charged (create response / instance)
    _maybe("bid_usd_per_hour", Float),
    _value("simulated", Boolean, False),  # True when the price is a catalog reference, not a charge
    _value("status", String, "provisioning"),  # onbox.vocabulary.RowStatus (m005: open rows: ix_sessions_open)
    _value("created_at", Float, index=True),  # the intent row (before create)
    _maybe("instance_created_at", Float),  # create returned: billing starts
    _maybe("ready_at", Float),
    _maybe("ended_at", Float),  # confirmed destroy (billing stops)
    _maybe("end_reason", String),  # onbox.vocabulary.EndReason
    _maybe("exit_code", Integer),
    _maybe("billed_seconds", Float),
    _maybe("cost_usd", Float),
    _value("tokens", BigInteger, 0),  # BIGINT as the migration made it (psycopg binds a plain int as ::INTEGER)
    _maybe("job_seconds", Float),
    _value("conclusion", String, ""),
    _value("note", String, ""),
    _value("log_path", String, ""),
    _value("results_path", String, ""),
    # m002_cost_truth
    _maybe("billing_increment_seconds", Float),  # provider rounds billed time up to this; None = 1 s
    _maybe("last_heartbeat_at", Float),  # the on-box agent's last heartbeat (epoch s)
    _maybe("end_source", String),  # destroy|provider|heartbeat|import: where ended_at came from
    _value("source", String, "gpuops", server_default="gpuops"),  # gpuops|import; never searched: not indexed
    # m004_session_limits: the session's own limits (None on older rows: the actor's settings apply)
    _maybe("max_hours", Float),  # hard TTL from create, hours
    _maybe("ready_timeout_seconds", Float),  # create -> SSH ready deadline, seconds
    _maybe("idle_minutes", Float),  # idle window, minutes; 0 = idle layer off; None = not recorded
    # m005_books
    _maybe("estimated_usd", Float),  # our estimate, kept when the provider's charge is booked
    _maybe("charged_usd", Float),  # the provider's own charge for the GPU time (ledger sync --apply)
    _maybe("cost_source", String),  # estimated (or None) | charged: what cost_usd is
    # m006_ownership: who rented it and under which provider account (None: before m006, or imported)
    _maybe("owner", String),  # [user] name, default user@host
    _maybe("account", String),  # provider account fingerprint (gpuops.ownership)
    # m010_runs: the run this rental is an attempt of (None: a rental outside any run)
    _maybe("run_id", String),  # runs.id, "run-..."
    _maybe("attempt", Integer),  # 1 for the run's first rental, 2 after its first recovery, ...
    _maybe("max_session_usd", Float),  # the run's money left when this rental was made (its own cap), USD
    # the open sessions (a handful among a million), ordered by intent time
    _partial("ix_sessions_open", "created_at", where=OPEN_SESSIONS_WHERE),
    # an imported row (no instance, owner, account or run) enters none of these four
    _partial("ix_sessions_instance_id", "instance_id"),
    _partial("ix_sessions_owner", "owner"),
    _partial("ix_sessions_account", "account"),
    _partial("ix_sessions_run_id", "run_id"),
)

# The user's job across rentals (m010): ``up --recover N`` makes one, and one rental per attempt
# (``sessions.run_id``). Its cost is its rentals' (never booked twice).
runs = Table(
    "runs",
    metadata,
    _key(),  # "run-YYYYMMDD-HHMMSS-xxxx"
    _value("experiment", String, "default"),
    _value("job", String, ""),
    _value("provider", String, ""),
    _value("status", String, "open"),  # open | closed
    _value("created_at", Float, index=True),
    _maybe("ended_at", Float),
    _maybe("end_reason", String),  # the last rental's reason, or what the run ran out of (onbox.vocabulary.RUN_ENDS)
    _value("detail", String, ""),  # one line: why it ended
    _value("recover", Integer, 0),  # rentals allowed after the first
    _value("recover_on", String, ""),  # comma-separated end reasons that re-rent
    _value("attempts", Integer, 0),  # rentals made so far
    _maybe("max_hours", Float),  # the whole run's billed hours
    _maybe("max_usd", Float),  # the whole run's money, USD (max_session_usd)
    _value("note", String, ""),
    _maybe("owner", String, index=True),
    _maybe("account", String),
    # m002_sweeps: the sweep this run is a job of (None: a run outside any sweep)
    _maybe("sweep_id", String),  # sweeps.id, "sweep-..."; indexed where not NULL (below)
    _partial("ix_runs_sweep_id", "sweep_id"),
)

# Many jobs under one budget (m002): `gpuops sweep FILE`, its limits and how it ended. ``max_usd``
# (USD) and ``max_hours`` (billed hours) hold over every rental of every job; NULL: no such limit.
# ``status``: open | cancelled | closed. Its cost is its runs' rentals' (never booked twice).
sweeps = Table(
    "sweeps",
    metadata,
    _key(),  # "sweep-YYYYMMDD-HHMMSS-xxxx"
    _value("name", String, ""),  # the sweep file's stem
    _value("experiment", String, "default"),
    _value("status", String, "open"),  # open | cancelled | closed
    _value("created_at", Float, index=True),
    _maybe("ended_at", Float),
    _maybe(
        "end_reason", String
    ),  # done | failed | cancelled | interrupted | sweep_usd | sweep_hours | monthly_cap | ...
    _value("detail", String, ""),  # one line: why it ended
    _value("max_parallel", Integer, 1),  # K: boxes at once
    _maybe("max_usd", Float),  # the whole sweep's money, USD
    _maybe("max_hours", Float),  # the whole sweep's billed hours
    _value("detached", Boolean, False),  # --detach: executed by the watchdog services
    _maybe("owner", String, index=True),
)

# One job of a sweep, queued in the ledger (m002): claimed with a row lock, run as one run.
# ``state``: queued | claimed | running | done | failed | cancelled. A claim is ``claim_owner``'s
# until ``claim_expires_at`` (epoch s), renewed while its run goes on. ``args_json``: the job's `up`
# inputs (gpuops.rental.request.UpArgs fields) with env NAMES only, never a value, and
# ``workdir_sha256`` (its workdir's tar in ``sweep_blobs``, gpuops/sweep/workdir_blob.py) in place
# of a workdir path; ``script_sha256``: the job script's content (``sweep_blobs``). ``worst_usd``:
# its worst case (USD: its max_hours at the dearest price its run accepts), ``worst_hours``: its
# max_hours.
sweep_jobs = Table(
    "sweep_jobs",
    metadata,
    _id(),
    _value("sweep_id", String, references="sweeps.id"),
    _value("seq", Integer),  # the job's place in the sweep, from 0
    _value("name", String),
    _value("state", String, "queued"),
    _value("args_json", String, "{}"),
    _maybe("script_sha256", String),
    _maybe("dearest_usd_per_hour", Float),  # the dearest price its run accepts, USD/h
    _maybe("worst_usd", Float),
    _value("worst_hours", Float, 0.0),
    _maybe("claim_owner", String),
    _maybe("claim_expires_at", Float),
    _maybe("run_id", String),  # runs.id of its current (or last) run
    _value("claims", Integer, 0),  # how many times it was claimed
    _maybe("end_reason", String),  # its run's end reason, or why it was not run
    _value("detail", String, ""),
    _value("updated_at", Float, 0.0),
    Index("ix_sweep_jobs_claim", "sweep_id", "state", "seq"),
    _partial("ix_sweep_jobs_run_id", "run_id"),
)

# A queued job's script or workdir tar by content (m002): what an executor fetches (``sha256`` of ``data``).
sweep_blobs = Table(
    "sweep_blobs",
    metadata,
    _key("sha256"),
    _value("data", LargeBinary),
    _value("name", String, ""),  # the script's file name (its suffix says how it runs); "workdir.tar" for a workdir
)

# One bootstrap step of a session, with its wall seconds.
bootstrap_steps = Table(
    "bootstrap_steps",
    metadata,
    _id(),
    _value("session_id", String, references="sessions.id", index=True),
    _value("name", String),
    _value("status", String),  # done|skipped|failed
    _value("seconds", Float),
    _value("detail", String, ""),
)

# A state transition or action on a session (stage entered, destroy called, ...).
events = Table(
    "events",
    metadata,
    _id(),
    _value("session_id", String, references="sessions.id", index=True),
    _value("at", Float),
    _value("kind", String),
    _value("detail", String, ""),
)

# Who acts on a session now (a watchdog, a reconcile), until ``expires_at`` (epoch s) (m003).
session_leases = Table(
    "session_leases",
    metadata,
    _key("session_id"),  # sessions.id
    _value("owner", String),
    _value("expires_at", Float),
)

# A money limit crossed: new boxes in ``scope`` (a provider name, or "*") are refused until lifted.
# Refused while ``lifted_at`` is NULL. ``reason`` is balance_floor or monthly_cap (m003).
refusals = Table(
    "refusals",
    metadata,
    _id(),
    _value("scope", String, index=True),
    _value("reason", String),
    _value("detail", String, ""),
    _value("set_at", Float),
    _maybe("lifted_at", Float),
    # m006_ownership: whom the refusal covers: the provider account (balance_floor) or the owner
    # (monthly_cap); NULL covers everyone (teardown.limits_scope = "team", or a refusal from before m006)
    _maybe("account", String),
    _partial("ix_refusals_active", "scope", "reason", where="lifted_at IS NULL"),
)

# Money that is not a session's GPU time (m005). ``kind`` storage (a stopped instance's disk, a
# network volume), over [``start_at``, ``end_at``) epoch s, ``usd`` USD. ``session_id`` NULL: an
# account-level line. ``source``: provider (its billing) or estimate.
cost_lines = Table(
    "cost_lines",
    metadata,
    _id(),
    _maybe("session_id", String, index=True),
    _value("provider", String),
    _maybe("instance_id", String),
    _value("kind", String),
    _value("start_at", Float),
    _value("end_at", Float, index=True),
    _value("usd", Float),
    _value("simulated", Boolean, False),
    _value("source", String, "provider"),
    _value("description", String, ""),
    _value("booked_at", Float),
    _value("line_key", String, unique=True),
)

# One pass of a `gpuops watchdog` (``ledger/passes.py``: the newest ``KEEP_PER_HOST`` per host are
# kept). Who (``owner``, the ``[user] name``), where (``host``), when (``at``, epoch s; ``seconds``
# it took), what it did (``checked``: open sessions looked at under their lease, ``ended``:
# sessions destroyed or closed, ``errors``, ``actions``) and how often it runs
# (``interval_seconds``: a pass older than three intervals means that watchdog is gone).
watchdog_passes = Table(
    "watchdog_passes",
    metadata,
    _id(),
    _value("host", String),
    _value("owner", String),
    _value("at", Float),
    _value("seconds", Float),
    _value("interval_seconds", Float),
    _value("checked", Integer),
    _value("ended", Integer),
    _value("errors", Integer),
    _value("actions", Integer),
    Index("ix_watchdog_passes_host", "host", "id"),
)
