"""Ledger tables (SQLModel): the schema, stated once. Times are epoch seconds UTC (float); money in USD; prices USD/hour.

Columns, their types, defaults and indexes live here only: ``ledger/migrations.py`` creates a new
ledger from this metadata (``m001_models``); a change here needs a later migration there that
alters an existing ledger to match (tests/books/test_schema.py compares a migrated ledger with it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from sqlalchemy import BigInteger, Index, text
from sqlmodel import Field, SQLModel

from ledger.attribution import OPEN_SESSIONS_WHERE

if TYPE_CHECKING:
    from sqlalchemy import Table


def _partial(name: str, *columns: str, where: str | None = None) -> Index:
    """The index ``name`` on ``columns`` over the rows matching ``where`` (default: the first column has a value).

    A partial index answers only a query whose predicate implies ``where`` (SQLite and PostgreSQL
    alike): one that names a value of the column, or the literal predicate itself."""
    cond = text(where or f"{columns[0]} IS NOT NULL")
    return Index(name, *columns, sqlite_where=cond, postgresql_where=cond)


class Session(SQLModel, table=True):
    """One rental session: intent, instance, money, time, outcome, work."""

    __tablename__ = "sessions"
    if TYPE_CHECKING:  # set by SQLAlchemy at class creation; SQLModel's annotations do not declare it
        __table__: ClassVar[Table]
    __table_args__ = (
        # the open sessions (a handful among a million), ordered by intent time
        _partial("ix_sessions_open", "created_at", where=OPEN_SESSIONS_WHERE),
        # an imported row (no instance, owner, account or run) enters none of these four
        _partial("ix_sessions_instance_id", "instance_id"),
        _partial("ix_sessions_owner", "owner"),
        _partial("ix_sessions_account", "account"),
        _partial("ix_sessions_run_id", "run_id"),
    )

    id: str = Field(primary_key=True)  # e.g. "20261129-1632-3f9a"; label is "gpuops-" + id
    experiment: str = Field(default="default", index=True)
    job: str = ""
    provider: str = ""
    card: str = ""
    gpu_count: int = 1
    spot: bool = False
    label: str = ""
    instance_id: str | None = None  # m011: indexed where not NULL (``__table_args__``)
    offer_id: str | None = None
    usd_per_hour: float | None = None  # price really charged (create response / instance)
    bid_usd_per_hour: float | None = None
    simulated: bool = False  # True when the price is a catalog reference, not a charge
    status: str = "provisioning"  # onbox.vocabulary.RowStatus (m005: open rows have the partial index ix_sessions_open)
    created_at: float = Field(index=True)  # the intent row (before create)
    instance_created_at: float | None = None  # create returned: billing starts
    ready_at: float | None = None
    ended_at: float | None = None  # confirmed destroy (billing stops)
    end_reason: str | None = None  # onbox.vocabulary.EndReason
    exit_code: int | None = None
    billed_seconds: float | None = None
    cost_usd: float | None = None
    tokens: int = Field(
        default=0, sa_type=BigInteger
    )  # BIGINT as the migration made it (psycopg binds a plain int as ::INTEGER)
    job_seconds: float | None = None
    conclusion: str = ""
    note: str = ""
    log_path: str = ""
    results_path: str = ""
    # m002_cost_truth
    billing_increment_seconds: float | None = None  # provider rounds billed time up to this; None = 1 s
    last_heartbeat_at: float | None = None  # the on-box agent's last heartbeat (epoch s)
    end_source: str | None = None  # destroy|provider|heartbeat|import: where ended_at came from
    source: str = Field(
        default="gpuops", sa_column_kwargs={"server_default": "gpuops"}
    )  # gpuops|import; never searched: not indexed
    # m004_session_limits: the session's own limits (None on older rows: the actor's settings apply)
    max_hours: float | None = None  # hard TTL from create, hours
    ready_timeout_seconds: float | None = None  # create -> SSH ready deadline, seconds
    idle_minutes: float | None = None  # idle window, minutes; 0 = idle layer off; None = not recorded
    # m005_books
    estimated_usd: float | None = None  # our estimate, kept when the provider's charge is booked
    charged_usd: float | None = None  # the provider's own charge for the GPU time (ledger sync --apply)
    cost_source: str | None = None  # estimated (or None) | charged: what cost_usd is
    # m006_ownership: who rented it and under which provider account (None: before m006, or imported)
    owner: str | None = None  # [user] name, default user@host
    account: str | None = None  # provider account fingerprint (gpuops.ownership)
    # m010_runs: the run this rental is an attempt of (None: a rental outside any run)
    run_id: str | None = None  # runs.id, "run-..."
    attempt: int | None = None  # 1 for the run's first rental, 2 after its first recovery, ...
    max_session_usd: float | None = None  # the run's money left when this rental was made (its own cap), USD


class Run(SQLModel, table=True):
    """The user's job across rentals (m010).

    ``up --recover N`` makes one, and one rental per
    attempt (``sessions.run_id``). Its cost is its rentals' (never booked twice)."""

    __tablename__ = "runs"
    __table_args__ = (_partial("ix_runs_sweep_id", "sweep_id"),)

    id: str = Field(primary_key=True)  # "run-YYYYMMDD-HHMMSS-xxxx"
    experiment: str = "default"
    job: str = ""
    provider: str = ""
    status: str = "open"  # open | closed
    created_at: float = Field(index=True)
    ended_at: float | None = None
    end_reason: str | None = None  # the last rental's reason, or what the run ran out of (onbox.vocabulary.RUN_ENDS)
    detail: str = ""  # one line: why it ended
    recover: int = 0  # rentals allowed after the first
    recover_on: str = ""  # comma-separated end reasons that re-rent
    attempts: int = 0  # rentals made so far
    max_hours: float | None = None  # the whole run's billed hours
    max_usd: float | None = None  # the whole run's money, USD (max_session_usd)
    note: str = ""
    owner: str | None = Field(default=None, index=True)
    account: str | None = None
    # m002_sweeps: the sweep this run is a job of (None: a run outside any sweep)
    sweep_id: str | None = None  # sweeps.id, "sweep-..."; indexed where not NULL (``__table_args__``)


class Sweep(SQLModel, table=True):
    """Many jobs under one budget (m002): `gpuops sweep FILE`, its limits and how it ended.

    ``max_usd`` (USD) and ``max_hours`` (billed hours) hold over every rental of every job; None:
    no such limit. ``status``: open | cancelled | closed. Its cost is its runs' rentals' (never
    booked twice)."""

    __tablename__ = "sweeps"

    id: str = Field(primary_key=True)  # "sweep-YYYYMMDD-HHMMSS-xxxx"
    name: str = ""  # the sweep file's stem
    experiment: str = "default"
    status: str = "open"  # open | cancelled | closed
    created_at: float = Field(index=True)
    ended_at: float | None = None
    end_reason: str | None = (
        None  # done | failed | cancelled | interrupted | sweep_usd | sweep_hours | monthly_cap | ...
    )
    detail: str = ""  # one line: why it ended
    max_parallel: int = 1  # K: boxes at once
    max_usd: float | None = None  # the whole sweep's money, USD
    max_hours: float | None = None  # the whole sweep's billed hours
    detached: bool = False  # --detach: executed by the watchdog services
    owner: str | None = Field(default=None, index=True)


class SweepJob(SQLModel, table=True):
    """One job of a sweep, queued in the ledger (m002): claimed with a row lock, run as one run.

    ``state``: queued | claimed | running | done | failed | cancelled. A claim is ``claim_owner``'s
    until ``claim_expires_at`` (epoch s), renewed while its run goes on. ``args_json``: the job's
    `up` inputs (gpuops.rental.request.UpArgs fields) with env NAMES only, never a value, and
    ``workdir_sha256`` (its workdir's tar in ``sweep_blobs``, gpuops/sweep/workdir_blob.py) in
    place of a workdir path; ``script_sha256``: the job script's content (``sweep_blobs``). ``worst_usd``: its worst case
    (USD: its max_hours at the dearest price its run accepts), ``worst_hours``: its max_hours."""

    __tablename__ = "sweep_jobs"
    __table_args__ = (
        Index("ix_sweep_jobs_claim", "sweep_id", "state", "seq"),
        _partial("ix_sweep_jobs_run_id", "run_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    sweep_id: str = Field(foreign_key="sweeps.id")
    seq: int  # the job's place in the sweep, from 0
    name: str
    state: str = "queued"
    args_json: str = "{}"
    script_sha256: str | None = None
    dearest_usd_per_hour: float | None = None  # the dearest price its run accepts, USD/h
    worst_usd: float | None = None
    worst_hours: float = 0.0
    claim_owner: str | None = None
    claim_expires_at: float | None = None
    run_id: str | None = None  # runs.id of its current (or last) run
    claims: int = 0  # how many times it was claimed
    end_reason: str | None = None  # its run's end reason, or why it was not run
    detail: str = ""
    updated_at: float = 0.0


class SweepBlob(SQLModel, table=True):
    """A queued job's script or workdir tar by content (m002): what an executor fetches (``sha256`` of ``data``)."""

    __tablename__ = "sweep_blobs"

    sha256: str = Field(primary_key=True)
    data: bytes
    name: str = ""  # the script's file name (its suffix says how it runs); "workdir.tar" for a workdir


class BootstrapStep(SQLModel, table=True):
    """One bootstrap step of a session, with its wall seconds."""

    __tablename__ = "bootstrap_steps"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(foreign_key="sessions.id", index=True)
    name: str
    status: str  # done|skipped|failed
    seconds: float
    detail: str = ""


class Event(SQLModel, table=True):
    """A state transition or action on a session (stage entered, destroy called, ...)."""

    __tablename__ = "events"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(foreign_key="sessions.id", index=True)
    at: float
    kind: str
    detail: str = ""


class SessionLease(SQLModel, table=True):
    """Who acts on a session now (a watchdog, a reconcile), until ``expires_at`` (epoch s) (m003)."""

    __tablename__ = "session_leases"
    if TYPE_CHECKING:  # set by SQLAlchemy at class creation; SQLModel's annotations do not declare it
        __table__: ClassVar[Table]

    session_id: str = Field(primary_key=True)  # sessions.id
    owner: str
    expires_at: float


class Refusal(SQLModel, table=True):
    """A money limit crossed: new boxes in ``scope`` (a provider name, or "*") are refused until lifted.

    Refused while ``lifted_at`` is None. ``reason`` is balance_floor or monthly_cap (m003)."""

    __tablename__ = "refusals"
    __table_args__ = (_partial("ix_refusals_active", "scope", "reason", where="lifted_at IS NULL"),)

    id: int | None = Field(default=None, primary_key=True)
    scope: str = Field(index=True)
    reason: str
    detail: str = ""
    set_at: float
    lifted_at: float | None = None
    # m006_ownership: whom the refusal covers: the provider account (balance_floor) or the owner
    # (monthly_cap); None covers everyone (teardown.limits_scope = "team", or a refusal from before m006)
    account: str | None = None


class CostLine(SQLModel, table=True):
    """Money that is not a session's GPU time (m005).

    ``kind`` storage (a stopped instance's disk,
    a network volume), over [``start_at``, ``end_at``) epoch s, ``usd`` USD. ``session_id`` None:
    an account-level line. ``source``: provider (its billing) or estimate."""

    __tablename__ = "cost_lines"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str | None = Field(default=None, index=True)
    provider: str
    instance_id: str | None = None
    kind: str
    start_at: float
    end_at: float = Field(index=True)
    usd: float
    simulated: bool = False
    source: str = "provider"
    description: str = ""
    booked_at: float
    line_key: str = Field(unique=True)


class WatchdogPass(SQLModel, table=True):
    """One pass of a `gpuops watchdog` (``ledger/passes.py``: the newest ``KEEP_PER_HOST`` per host are kept).

    Who (``owner``, the ``[user] name``), where (``host``), when (``at``, epoch s; ``seconds`` it
    took), what it did (``checked``: open sessions looked at under their lease, ``ended``: sessions
    destroyed or closed, ``errors``, ``actions``) and how often it runs (``interval_seconds``: a pass
    older than three intervals means that watchdog is gone)."""

    __tablename__ = "watchdog_passes"
    __table_args__ = (Index("ix_watchdog_passes_host", "host", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    host: str
    owner: str
    at: float
    seconds: float
    interval_seconds: float
    checked: int
    ended: int
    errors: int
    actions: int
