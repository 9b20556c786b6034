"""The sweep queue in the ledger's own database (tables ``sweeps``, ``sweep_jobs``, ``sweep_blobs``; m002).

A sweep is many jobs under one budget; each job is one run of rentals (``runs.sweep_id``). Its jobs
wait here, so any number of executors on any machines share one queue with no second server:

- **claim** takes the first claimable job of a sweep in one write transaction, its sweep's row
  locked first so that its ``max_parallel`` holds across executors: on PostgreSQL the candidate
  rows are locked with ``SELECT ... FOR UPDATE SKIP LOCKED`` (SQLAlchemy's
  ``with_for_update(skip_locked=True)``), so two executors never take the same job and neither
  waits on the other; on SQLite the transaction is the single writer (the engine begins every
  write with ``BEGIN IMMEDIATE``, ``ledger/engine.py``) and the row lock clause is not rendered.
- A claim is its owner's until ``claim_expires_at``; the owner renews it while the job's run goes
  on. An expired claim is taken up again only after its run's rows are read (``run_verdict``): a
  run that ended ``job_end`` makes the job done, one that ended otherwise (not interrupted) makes
  it failed, one with a rental still open is left alone (a box may still bill: the teardown layers
  end it first), and only a run that never rented, was interrupted, or stopped between rentals
  is run again.

Times are epoch seconds (float), money USD. Every write is one ``engine.begin()`` transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

# job states
QUEUED, CLAIMED, RUNNING, DONE, FAILED, CANCELLED = "queued", "claimed", "running", "done", "failed", "cancelled"
ACTIVE = (CLAIMED, RUNNING)  # held by an executor's claim
FINAL = (DONE, FAILED, CANCELLED)
# How many expired claims one claim locks and looks at (a busy one is passed over); a queued job is taken one row at a time.
CLAIM_BATCH = 16


def _tables() -> tuple[sa.Table, sa.Table, sa.Table]:
    from ledger.models import sweep_blobs, sweep_jobs, sweeps

    return sweeps, sweep_jobs, sweep_blobs


def _runs() -> tuple[sa.Table, sa.Table]:
    from ledger.models import runs, sessions

    return runs, sessions


def enqueue(engine: Engine, sweep: dict[str, Any], jobs: list[dict[str, Any]], blobs: Iterable[dict[str, Any]]) -> None:
    """Write a sweep, its jobs and their scripts and workdirs in one transaction: all or nothing.

    ``sweep``: ``sweeps`` columns; ``jobs``: ``sweep_jobs`` columns (each ``seq`` and ``name``
    at least) and the scripts they name by hash (``sweep_blobs`` rows) in one transaction: all or nothing."""
    sweeps, sweep_jobs, sweep_blobs = _tables()
    now = time.time()
    with engine.begin() as conn:
        conn.execute(sa.insert(sweeps).values(**sweep))
        for blob in blobs:
            have = conn.execute(sa.select(sweep_blobs.c.sha256).where(sweep_blobs.c.sha256 == blob["sha256"])).first()
            if have is None:
                conn.execute(sa.insert(sweep_blobs).values(**blob))
        if jobs:
            conn.execute(sa.insert(sweep_jobs), [{"sweep_id": sweep["id"], "updated_at": now, **job} for job in jobs])


def run_verdict(conn: Connection, run_id: str | None) -> tuple[str, str | None]:
    """What an expired claim's run says of its job: (``rerun`` | ``done`` | ``failed`` | ``busy``, the run's end reason).

    ``busy``: a rental of the run is still open (its box may bill; not run beside it)."""
    if not run_id:
        return "rerun", None
    runs, sessions = _runs()
    run = conn.execute(sa.select(runs.c.status, runs.c.end_reason).where(runs.c.id == run_id)).first()
    open_rentals = conn.execute(
        sa.select(sa.func.count())
        .select_from(sessions)
        .where(sessions.c.run_id == run_id, sessions.c.status != "closed")
    ).scalar()
    if open_rentals:
        return "busy", None
    if run is None or run.status != "closed":
        return "rerun", None  # it never rented, or its executor died between rentals (none open)
    if run.end_reason == "job_end":
        return "done", run.end_reason
    if run.end_reason == "interrupted":
        return "rerun", run.end_reason
    return "failed", run.end_reason


def claim(engine: Engine, owner: str, claim_s: float, sweep_id: str, now: float | None = None) -> dict[str, Any] | None:
    """Claim the first claimable job of ``sweep_id`` for ``owner`` for ``claim_s`` seconds.

    The sweep's row is locked first (``FOR UPDATE``: claims of one sweep take turns, so its
    ``max_parallel`` holds across every executor): with that many jobs held, only an expired one may
    be taken over. Claimable: queued, or claimed/running with an expired claim whose run says so
    (``run_verdict``; done or failed ones are marked so on the way). Returns the job's row as a dict
    (state ``claimed``, ``run_id`` None), or None when nothing is claimable now (or the sweep is not open)."""
    sweeps, jobs, _ = _tables()
    now = time.time() if now is None else now
    expired = sa.and_(jobs.c.state.in_(ACTIVE), jobs.c.claim_expires_at < now)
    with engine.begin() as conn:
        held_now = (
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(jobs.c.sweep_id == sweep_id, jobs.c.state.in_(ACTIVE))
            .scalar_subquery()
        )
        sweep = conn.execute(  # the sweep's row locked, and its held jobs counted, in one round trip
            sa.select(sweeps.c.status, sweeps.c.max_parallel, held_now.label("held"))
            .where(sweeps.c.id == sweep_id)
            .with_for_update(of=sweeps)
        ).first()
        if sweep is None or sweep.status != "open":
            return None
        if int(sweep.held or 0) < int(
            sweep.max_parallel
        ):  # the common case: the next queued job, taken in one statement
            first = _candidates(sweep_id, jobs.c.state == QUEUED, 1).with_only_columns(jobs.c.id).scalar_subquery()
            took = (
                conn.execute(
                    sa.update(jobs)
                    .where(jobs.c.id == first)
                    .values(
                        state=CLAIMED,
                        claim_owner=owner,
                        claim_expires_at=now + claim_s,
                        claims=jobs.c.claims + 1,
                        run_id=None,
                        updated_at=time.time(),
                    )
                    .returning(*jobs.c)
                )
                .mappings()
                .first()
            )
            if took is not None:
                return dict(took)
        for row in conn.execute(_candidates(sweep_id, expired, CLAIM_BATCH)).mappings().all():
            if row["state"] != QUEUED:
                verdict, reason = run_verdict(conn, row["run_id"])
                if verdict == "busy":
                    continue
                if verdict in ("done", "failed"):
                    _set(
                        conn,
                        row["id"],
                        state=DONE if verdict == "done" else FAILED,
                        end_reason=reason,
                        detail=f"its run {row['run_id']} ended {reason} (claim of {row['claim_owner']} expired)",
                        claim_owner=None,
                        claim_expires_at=None,
                    )
                    continue
            _set(
                conn,
                row["id"],
                state=CLAIMED,
                claim_owner=owner,
                claim_expires_at=now + claim_s,
                claims=row["claims"] + 1,
                run_id=None,
            )
            claimed = {"state": CLAIMED, "claim_owner": owner, "claim_expires_at": now + claim_s, "run_id": None}
            return {**row, **claimed, "claims": row["claims"] + 1}
    return None


def _candidates(sweep_id: str, where: Any, limit: int) -> Any:
    """The first ``limit`` jobs of ``sweep_id`` matching ``where``, in order, locked (rows another claim holds are skipped)."""
    _, jobs, _ = _tables()
    return (
        sa.select(jobs)
        .where(jobs.c.sweep_id == sweep_id, where)
        .order_by(jobs.c.seq)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def _set(conn: Connection, job_id: int, owner: str | None = None, **fields: Any) -> bool:
    """Update job ``job_id`` (only while ``owner`` holds its claim, when given); True when a row changed."""
    _, jobs, _ = _tables()
    stmt = sa.update(jobs).where(jobs.c.id == job_id)
    if owner is not None:
        stmt = stmt.where(jobs.c.claim_owner == owner, jobs.c.state.in_(ACTIVE))
    return bool(conn.execute(stmt.values(updated_at=time.time(), **fields)).rowcount)


def start(engine: Engine, job_id: int, owner: str, run_id: str) -> bool:
    """Mark a claimed job running as run ``run_id`` (before the run's first row); False when the claim is no longer ``owner``'s."""
    with engine.begin() as conn:
        return _set(conn, job_id, owner, state=RUNNING, run_id=run_id)


def renew(engine: Engine, job_ids: Iterable[int], owner: str, claim_s: float, now: float | None = None) -> int:
    """Push the claims ``owner`` holds on ``job_ids`` to ``claim_s`` seconds from now; how many it still held."""
    _, jobs, _ = _tables()
    ids = list(job_ids)
    if not ids:
        return 0
    now = time.time() if now is None else now
    with engine.begin() as conn:
        stmt = (
            sa.update(jobs)
            .where(jobs.c.id.in_(ids), jobs.c.claim_owner == owner, jobs.c.state.in_(ACTIVE))
            .values(claim_expires_at=now + claim_s)
        )
        return int(conn.execute(stmt).rowcount)


def finish(engine: Engine, job_id: int, owner: str, state: str, end_reason: str | None, detail: str = "") -> bool:
    """End ``owner``'s claim on a job with its ``state`` (done, failed, cancelled, or queued: given back)."""
    with engine.begin() as conn:
        return _set(
            conn,
            job_id,
            owner,
            state=state,
            end_reason=end_reason,
            detail=detail,
            claim_owner=None,
            claim_expires_at=None,
        )


def cancel_queued(engine: Engine, sweep_id: str, reason: str, detail: str) -> int:
    """Mark every queued job of ``sweep_id`` cancelled with ``reason``; how many."""
    _, jobs, _ = _tables()
    with engine.begin() as conn:
        stmt = (
            sa.update(jobs)
            .where(jobs.c.sweep_id == sweep_id, jobs.c.state == QUEUED)
            .values(state=CANCELLED, end_reason=reason, detail=detail, updated_at=time.time())
        )
        return int(conn.execute(stmt).rowcount)


def end_sweep(engine: Engine, sweep_id: str, status: str, reason: str, detail: str) -> bool:
    """Set an open sweep's ``status`` (closed or cancelled) with its end reason; False when it was not open."""
    sweeps, _, _ = _tables()
    with engine.begin() as conn:
        stmt = (
            sa.update(sweeps)
            .where(sweeps.c.id == sweep_id, sweeps.c.status == "open")
            .values(status=status, end_reason=reason, detail=detail, ended_at=time.time())
        )
        return bool(conn.execute(stmt).rowcount)


def get_sweep(engine: Engine, sweep_id: str) -> dict[str, Any] | None:
    """The ``sweeps`` row, or None."""
    sweeps, _, _ = _tables()
    with engine.connect() as conn:
        row = conn.execute(sa.select(sweeps).where(sweeps.c.id == sweep_id)).mappings().first()
    return dict(row) if row is not None else None


def open_sweeps(engine: Engine, detached: bool | None = None) -> list[str]:
    """The ids of the open sweeps (only ``--detach`` ones, or only foreground ones, when ``detached`` says), oldest first."""
    sweeps, _, _ = _tables()
    stmt = sa.select(sweeps.c.id).where(sweeps.c.status == "open")
    if detached is not None:
        stmt = stmt.where(sweeps.c.detached == detached)
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(stmt.order_by(sweeps.c.created_at, sweeps.c.id))]


def find_sweeps(engine: Engine, prefix: str) -> list[str]:
    """The sweep ids that start with ``prefix`` (users type short ids), sorted."""
    sweeps, _, _ = _tables()
    escaped = prefix.replace("/", "//").replace("%", "/%").replace("_", "/_")
    with engine.connect() as conn:
        stmt = sa.select(sweeps.c.id).where(sweeps.c.id.like(escaped + "%", escape="/")).order_by(sweeps.c.id)
        return [r[0] for r in conn.execute(stmt)]


def jobs_of(engine: Engine, sweep_id: str) -> list[dict[str, Any]]:
    """The sweep's jobs in order, each with its current run's rentals' totals.

    Added keys: ``rentals``, ``cost_usd`` (None while none has a cost), ``billed_seconds``, ``tokens``,
    ``open_rentals`` (of the current run)."""
    _, jobs, _ = _tables()
    runs, sessions = _runs()
    totals = (
        sa.select(
            sessions.c.run_id,
            sa.func.count().label("rentals"),
            sa.func.sum(sessions.c.cost_usd).label("cost_usd"),
            sa.func.sum(sessions.c.billed_seconds).label("billed_seconds"),
            sa.func.coalesce(sa.func.sum(sessions.c.tokens), 0).label("tokens"),
            sa.func.sum(sa.case((sessions.c.status != "closed", 1), else_=0)).label("open_rentals"),
        )
        .where(sessions.c.run_id.in_(sa.select(runs.c.id).where(runs.c.sweep_id == sweep_id)))
        .group_by(sessions.c.run_id)
        .subquery()
    )
    stmt = (
        sa.select(
            jobs, totals.c.rentals, totals.c.cost_usd, totals.c.billed_seconds, totals.c.tokens, totals.c.open_rentals
        )
        .select_from(jobs.outerjoin(totals, totals.c.run_id == jobs.c.run_id))
        .where(jobs.c.sweep_id == sweep_id)
        .order_by(jobs.c.seq)
    )
    with engine.connect() as conn:
        return [
            {
                **r,
                "rentals": int(r["rentals"] or 0),
                "tokens": int(r["tokens"] or 0),  # PostgreSQL sums a BIGINT as NUMERIC
                "open_rentals": int(r["open_rentals"] or 0),
                "cost_usd": None if r["cost_usd"] is None else float(r["cost_usd"]),
                "billed_seconds": None if r["billed_seconds"] is None else float(r["billed_seconds"]),
            }
            for r in conn.execute(stmt).mappings()
        ]


def spend(engine: Engine, sweep_id: str) -> dict[str, float]:
    """What a sweep has spent and what its running jobs hold.

    ``usd``/``seconds`` booked by every rental of its runs (a job
    taken up again counts its earlier runs too; ``simulated_usd``: the part of ``usd`` booked by
    simulated rentals, a catalog price and no charge: the local provider, `gpuops demo`), and ``held_usd``/``held_hours``: the worst cases of
    its jobs held by a claim, less what their current runs have already booked (never below 0)."""
    _, jobs, _ = _tables()
    runs, sessions = _runs()
    with engine.connect() as conn:
        per_run = {
            r.run_id: (float(r.usd or 0.0), float(r.secs or 0.0))
            for r in conn.execute(
                sa.select(
                    sessions.c.run_id,
                    sa.func.sum(sessions.c.cost_usd).label("usd"),
                    sa.func.sum(sessions.c.billed_seconds).label("secs"),
                )
                .where(sessions.c.run_id.in_(sa.select(runs.c.id).where(runs.c.sweep_id == sweep_id)))
                .group_by(sessions.c.run_id)
            )
        }
        simulated_usd = conn.execute(
            sa.select(sa.func.sum(sessions.c.cost_usd)).where(
                sessions.c.run_id.in_(sa.select(runs.c.id).where(runs.c.sweep_id == sweep_id)),
                sessions.c.simulated.is_(True),
            )
        ).scalar()
        held = conn.execute(
            sa.select(jobs.c.run_id, jobs.c.worst_usd, jobs.c.worst_hours).where(
                jobs.c.sweep_id == sweep_id, jobs.c.state.in_(ACTIVE)
            )
        ).all()
    usd = sum(u for u, _ in per_run.values())
    secs = sum(s for _, s in per_run.values())
    held_usd = held_h = 0.0
    for run_id, worst_usd, worst_hours in held:
        u, s = per_run.get(run_id, (0.0, 0.0))
        held_usd += max(0.0, float(worst_usd or 0.0) - u)
        held_h += max(0.0, float(worst_hours or 0.0) - s / 3600.0)
    return {
        "usd": usd,
        "simulated_usd": float(simulated_usd or 0.0),
        "seconds": secs,
        "held_usd": held_usd,
        "held_hours": held_h,
    }


def sweeps(engine: Engine, limit: int | None = None) -> list[dict[str, Any]]:
    """Sweeps newest first, with their jobs by state and their rentals' totals.

    Each with its jobs counted by state (``jobs``, one key per state, and ``active``: claimed +
    running, the jobs holding a box or renting one)
    and its rentals' totals (``cost_usd``, None while none has a cost; ``tokens``; ``rentals``)."""
    sweeps_t, _, _ = _tables()
    stmt = sa.select(sweeps_t).order_by(sweeps_t.c.created_at.desc(), sweeps_t.c.id.desc())
    if limit is not None:
        stmt = stmt.limit(int(limit))
    with engine.connect() as conn:
        return _described(conn, [dict(r) for r in conn.execute(stmt).mappings()])


def live_and_finished(engine: Engine, finished: int) -> tuple[list[dict[str, Any]], int]:
    """Every live sweep, then the ``finished`` newest finished ones; and how many finished ones are left out.

    Live: open, or holding an active job (claimed or running: a cancelled sweep whose boxes are
    still being ended); finished: every other. Each part newest first, each row as ``sweeps`` gives it."""
    sweeps_t, jobs, _ = _tables()
    busy = sa.select(jobs.c.sweep_id).where(jobs.c.state.in_(ACTIVE))
    live = sa.or_(sweeps_t.c.status == "open", sweeps_t.c.id.in_(busy))
    newest = (sweeps_t.c.created_at.desc(), sweeps_t.c.id.desc())
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(sa.select(sweeps_t).where(live).order_by(*newest)).mappings()]
        seen = {r["id"] for r in rows}  # one that ended between the two reads is shown once
        done = sa.select(sweeps_t).where(sa.not_(live)).order_by(*newest).limit(int(finished))
        rows += [dict(r) for r in conn.execute(done).mappings() if r["id"] not in seen]
        total = conn.execute(sa.select(sa.func.count()).select_from(sweeps_t)).scalar() or 0
        return _described(conn, rows), max(0, int(total) - len(rows))


def _described(conn: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (``sweeps`` rows) with their jobs counted by state and their rentals' totals (``sweeps``' keys)."""
    _, jobs, _ = _tables()
    runs, sessions = _runs()
    ids = [r["id"] for r in rows]
    counts: dict[str, dict[str, int]] = {}
    for sid, state, n in conn.execute(
        sa.select(jobs.c.sweep_id, jobs.c.state, sa.func.count())
        .where(jobs.c.sweep_id.in_(ids))
        .group_by(jobs.c.sweep_id, jobs.c.state)
    ):
        counts.setdefault(sid, {})[state] = int(n)
    money = {
        r.sweep_id: r
        for r in conn.execute(
            sa.select(
                runs.c.sweep_id,
                sa.func.count(sessions.c.id).label("rentals"),
                sa.func.sum(sessions.c.cost_usd).label("cost_usd"),
                sa.func.coalesce(sa.func.sum(sessions.c.tokens), 0).label("tokens"),
            )
            .select_from(runs.join(sessions, sessions.c.run_id == runs.c.id))
            .where(runs.c.sweep_id.in_(ids))
            .group_by(runs.c.sweep_id)
        )
    }
    for r in rows:
        c = counts.get(r["id"], {})
        m = money.get(r["id"])
        r.update({s: c.get(s, 0) for s in (QUEUED, CLAIMED, RUNNING, DONE, FAILED, CANCELLED)})
        r["active"] = r[CLAIMED] + r[RUNNING]  # a claimed job is as good as running: its box is being rented
        r["jobs"] = sum(c.values())
        r["rentals"] = int(m.rentals) if m is not None else 0
        r["cost_usd"] = float(m.cost_usd) if m is not None and m.cost_usd is not None else None
        r["tokens"] = int(m.tokens) if m is not None else 0
    return rows


def blob(engine: Engine, sha256: str) -> dict[str, Any] | None:
    """The stored script or workdir tar with content hash ``sha256`` (``name``, ``data``), or None; unchecked (the caller hashes ``data``)."""
    _, _, blobs = _tables()
    with engine.connect() as conn:
        row = conn.execute(sa.select(blobs).where(blobs.c.sha256 == sha256)).mappings().first()
    return dict(row) if row is not None else None
