"""gpuops from Python: the same verbs as the command line, over the same service functions.

``gpuops.plan``, ``gpuops.up``, ``gpuops.books.month`` (``import gpuops`` loads none of this: the
package's ``__getattr__`` imports it on first use). Each function is what its command calls once
the flags are parsed -- ``up``: ``rental.request.build`` then ``rental.launcher.run_up``; ``plan``:
``planning.sizing.plan``; ``books.month``: ``accounting.ledger_service.month`` -- so the checks, the
errors (``gpuops.errors.BadInput``, raised before anything is rented; ``GpuopsError`` and its
kinds) and the ledger rows are the command's own. Nothing is printed: the caller reads the result.

    >>> import gpuops
    >>> s = gpuops.up("examples/bench.sh", card="a100", env={"TOKENS": "50"})
    >>> s.end_reason, s.cost_usd, s.simulated
    ('job_end', 0.0004, True)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuops.planning.sizing import Plan
    from gpuops.rental.launcher import Reporter


@dataclass(frozen=True)
class Session:
    """One rental as `gpuops up` ended it (``up``'s summary, the fields its JSON prints).

    ``session``: the ledger's id (``gpuops ledger show SESSION``); ``usd_per_hour``: the price booked
    (USD/h, the whole box); ``seconds``: billed seconds; ``cost_usd``: what it cost in USD
    (``simulated``: priced at the catalog's reference price on the local provider, never charged);
    ``tokens`` and ``usd_per_mtoken`` (USD per million tokens) when the job wrote its tokens;
    ``end_reason``: why it ended (onbox.vocabulary.EndReason); ``exit_code``: the job's, when it
    ran; ``error``: what failed, if anything; ``log``: the kept job log's path. A dry run
    (``dry_run=True``) has no session: ``projected_cost_usd`` (USD for max_hours) and ``summary``
    say what would be rented. ``summary``: the whole dict, as `gpuops up --json` prints it."""

    session: str | None
    provider: str
    card: str
    gpu_count: int | None
    usd_per_hour: float
    simulated: bool
    end_reason: str | None = None
    cost_usd: float | None = None
    seconds: float | None = None
    tokens: int | None = None
    usd_per_mtoken: float | None = None
    exit_code: int | None = None
    error: str | None = None
    log: str | None = None
    dry_run: bool = False
    projected_cost_usd: float | None = None
    summary: dict = field(default_factory=dict, repr=False)


def up(
    job: str | Path | None = None,
    *,
    task: str | Path | None = None,
    card: str | None = None,
    gpu_count: int | None = None,
    experiment: str | None = None,
    provider: str | None = None,
    spot: bool | None = None,
    max_price: float | None = None,
    max_hours: float | None = None,
    idle_minutes: float | str | None = None,
    max_session_usd: float | None = None,
    note: str | None = None,
    name: str | None = None,
    model: str | None = None,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    seq: int | None = None,
    batch: int | None = None,
    allow_unverified: bool | None = None,
    vendor: str | None = None,
    volume: str | None = None,
    recover: int | None = None,
    recover_on: Sequence[str] | None = None,
    env: Mapping[str, str] | Sequence[str] = (),
    args: Sequence[str] | None = None,
    results: str | None = None,
    setup: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    config: str | None = None,
    reporter: Reporter | None = None,
) -> Session:
    """Rent a box, run ``job`` on it, tear it down, book it: `gpuops up`, returning the Session.

    Each keyword is the flag of the same name (``gpu_count``: --gpu-count; ``max_price``: USD per
    hour; ``max_hours``: the TTL in hours; ``idle_minutes``: minutes or "off"); None leaves it to
    the task file (``task``: a task file, as ``gpuops up TASK.toml``), then the settings
    (infra.toml, GPUOPS_*). ``env``: {NAME: value}, or --env entries (``NAME=VALUE``, ``NAME`` for
    this process's value); the values reach the job only. ``args``: the job's argv (`up ... -- ARG
    ...`; a list of str, each one argument as given; replaces a task file's ``args``; booked, so never
    a secret). ``setup``: [bootstrap] keys over the
    settings'. ``reporter``: a ``gpuops.rental.launcher.Reporter`` that hears each stage and job
    line (default: none). Call it from the main thread: a rental's signal handling (Ctrl-C ends it
    and still destroys the box) needs it.

    Raises BadInput (the command's one line, before anything is rented). A rental that failed
    after the intent row is not raised: it is booked and its Session says why (``end_reason``,
    ``error``), as the command's summary does."""
    from gpuops.rental import launcher, request

    entries = [f"{k}={v}" for k, v in env.items()] if isinstance(env, Mapping) else list(env)
    given: dict[str, Any] = dict(
        job=None if job is None else str(job), card=card, gpu_count=gpu_count, experiment=experiment,
        provider=provider, spot=spot, max_price=max_price, max_hours=max_hours,
        idle_minutes=None if idle_minutes is None else str(idle_minutes), max_session_usd=max_session_usd,
        note=note, name=name, model=model, dtype=dtype, kv_dtype=kv_dtype, seq=seq, batch=batch,
        allow_unverified=allow_unverified, vendor=vendor, volume=volume, recover=recover,
        recover_on=None if recover_on is None else ",".join(recover_on), results=results,
        setup=None if setup is None else dict(setup), config=config,
    )  # fmt: skip
    given = {k: v for k, v in given.items() if v is not None}
    if entries:
        given["env"] = tuple(entries)
    if dry_run:
        given["dry_run"] = True
    if args is not None:
        given["job_args"] = args if isinstance(args, str) else tuple(args)  # a bare str: refused by build
    req, settings = request.build(request.UpArgs.merged(request.load_task(task) if task is not None else {}, given))
    old = os.umask(0o077)  # what gpuops writes (ledger, logs, boxes, results) is the user's alone, as the CLI's
    try:
        summ = launcher.run_up(req, settings, reporter or launcher.Reporter())
    finally:
        os.umask(old)
    return _session(summ)


def _session(summ: dict) -> Session:
    """``run_up``'s summary as a Session."""
    return Session(
        session=summ.get("session"),
        provider=summ["provider"],
        card=summ["card"],
        gpu_count=summ.get("gpu_count"),
        usd_per_hour=summ["usd_per_hour"],
        simulated=bool(summ["simulated"]),
        end_reason=summ.get("end_reason"),
        cost_usd=summ.get("cost_usd"),
        seconds=summ.get("seconds"),
        tokens=summ.get("tokens"),
        usd_per_mtoken=summ.get("usd_per_mtoken"),
        exit_code=summ.get("exit_code"),
        error=summ.get("error"),
        log=summ.get("log"),
        dry_run=bool(summ.get("dry_run")),
        projected_cost_usd=summ.get("projected_cost_usd"),
        summary=summ,
    )


def plan(
    model: str,
    *,
    card: str | None = None,
    gpu_count: int = 1,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    batch: int = 1,
    seq: int = 4096,
    mode: str = "infer",
    engine: str | None = None,
    headroom: float | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    vendor: str | None = None,
) -> Plan:
    """Size ``model`` before renting: `gpuops plan --model MODEL`, as a ``planning.sizing.Plan``.

    ``card``: one card or family (``NAME:COUNT`` sets ``gpu_count``); ``batch`` sequences of ``seq``
    tokens; ``headroom``: vLLM's gpu_memory_utilization. ``Plan.cards``: what each card makes of it
    (fit, KV pool, max concurrency, decode ceiling, $/Mtoken); ``Plan.as_json()``: `plan --json`.
    Raises BadInput as the command does."""
    from gpuops.planning import sizing
    from gpuops.rental.request import plan_args

    args = plan_args(
        card=card,
        gpu_count=gpu_count,
        dtype=dtype,
        kv_dtype=kv_dtype,
        batch=batch,
        seq=seq,
        mode=mode,
        engine=engine,
        headroom=headroom,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        vendor=vendor,
    )
    return sizing.plan(model, **args)
