"""A sweep file (``gpuops sweep FILE``): many jobs under one budget, in the task file's shape.

TOML read as a task file is (``config.read_toml_table``: strict types, unknown keys with the closest
name, ``file:line: key: message``). Its top level is a task file (gpuops.rental.request's
docstring: experiment, run, env, args, results, recover, [resources], [setup], [limits]) that every
job starts from, plus:

    max_parallel = 2          # K: boxes at once (default 1)
    max_usd = 5.0             # the whole sweep's money, USD: its rentals' cost, every job's worst case held
    max_hours = 4             # the whole sweep's billed box hours ([limits] max_hours stays each job's TTL)
    [[jobs]]                  # a task table per job, over the top level key by key (env: added, a job's
    name = "baseline"         # entry wins by name; args: replaced); name: how `sweep status` shows it
    env = ["LR=1e-2"]
    args = ["--epochs", "3"]  # the job's argv
    [matrix]                  # every combination, for each job (or for the top level when no [[jobs]]):
    env = { LR = ["1e-3", "1e-4"] }   # env values
    args = [["--lr", "1e-3"], ["--lr", "1e-4"]]   # argv lists, each added after the job's own args
    model = ["llama-3-8b"]    # models to plan for (--model)
    card = ["a100", "h100"]   # cards (--card)

A combination's name is its job's, then each axis's value, comma-separated: ``LR=1e-3``, the args
as a shell would show them (shlex.join, control characters escaped: ``--lr 1e-3``, ``'a b'``;
``(no args)`` for an empty list), the model, the card.

Every job is made into UpArgs here and built by ``gpuops.rental.request.build``, the one set of
`up`'s input checks; nothing here rents anything.
"""

from __future__ import annotations

import itertools
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from gpuops.errors import BadInput
from gpuops.rental.task import TaskFile
from gpuops.settings_base import Section
from gpuops.textsafe import safe

if TYPE_CHECKING:
    from gpuops.config import Settings
    from gpuops.rental.launcher import UpRequest
    from gpuops.rental.request import UpArgs

SWEEP_FIX = 'see the sweep file\'s keys in README.md ("Sweeps") or examples/sweep.toml'
# Boxes one sweep may hold at once (a typo's 200 would be 200 boxes billing together).
MAX_PARALLEL = 64
# Jobs one sweep file may expand to (its matrix multiplies).
MAX_JOBS = 10_000


class _Job(TaskFile):
    """One ``[[jobs]]`` entry: a task table and its name."""


class _Matrix(Section):
    env: dict[str, list[str]] = {}
    args: list[list[str]] = []  # argv lists: one job per list, each after the job's own args
    model: list[str] = []
    card: list[str] = []


class SweepFile(TaskFile):
    """A sweep file's tables (this module's docstring shows them)."""

    max_parallel: int = 1
    max_usd: float | None = None
    max_hours: float | None = None
    jobs: list[_Job] = []
    matrix: _Matrix = msgspec.field(default_factory=_Matrix)


@dataclass
class SweepJobSpec:
    """One job of a sweep: its ``name``, its `up` inputs (``args``) and what ``build`` made of them."""

    seq: int
    name: str
    args: UpArgs
    req: UpRequest
    settings: Settings
    params: tuple[str, ...] = ()  # the matrix's env entries (NAME=VALUE): the job's parameters, not secrets


@dataclass
class SweepSpec:
    """A read sweep: its name (the file's stem unless ``name`` is set), limits and jobs (USD, hours)."""

    path: Path
    name: str
    experiment: str
    max_parallel: int
    max_usd: float | None
    max_hours: float | None
    jobs: list[SweepJobSpec] = field(default_factory=list)


def _limit(what: str, value: float | None, example: str) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise BadInput(f"sweep {what} must be a finite number > 0, got {value!r}", f"e.g. {what} = {example}")
    return float(value)


def _combos(matrix: _Matrix) -> list[tuple[str, dict]]:
    """Each combination of the matrix as (a name suffix, UpArgs fields to lay over the job)."""
    axes: list[list[tuple[str, dict]]] = []
    for key, values in matrix.env.items():
        if not values:
            raise BadInput(f"sweep matrix.env.{key} is empty", f'give it values, e.g. {key} = ["1", "2"]')
        axes.append([(f"{key}={v}", {"env": (f"{key}={v}",)}) for v in values])
    if matrix.args:
        axes.append([(safe(shlex.join(a)) if a else "(no args)", {"job_args": tuple(a)}) for a in matrix.args])
    if matrix.model:
        axes.append([(m, {"model": m}) for m in matrix.model])
    if matrix.card:
        axes.append([(c, {"card": c}) for c in matrix.card])
    out = []
    for combo in itertools.product(*axes):
        fields: dict = {}
        for _, f in combo:
            for k, v in f.items():
                fields[k] = fields.get(k, ()) + v if k == "env" else v
        out.append((",".join(n for n, _ in combo), fields))
    return out


def _over(base: dict, top: dict, add_args: bool = False) -> dict:
    """UpArgs fields ``top`` over ``base`` key by key: env added after (a later entry wins by name), setup merged.

    ``add_args``: ``top``'s job_args (a matrix's) come after ``base``'s, else they replace them."""
    out = {**base, **top}
    if add_args and "job_args" in top:
        out["job_args"] = tuple(base.get("job_args", ())) + tuple(top["job_args"])
    if base.get("env") or top.get("env"):
        out["env"] = tuple(base.get("env", ())) + tuple(top.get("env", ()))
    if base.get("setup") and top.get("setup"):
        out["setup"] = {**base["setup"], **top["setup"]}
    return out


_SWEEP_KEYS = ("max_parallel", "max_usd", "max_hours", "jobs", "matrix")


def load_sweep(path: str | Path, given: dict | None = None) -> SweepSpec:
    """The sweep file at ``path``, every job built by ``request.build`` (flags ``given`` over each job, key by key).

    Raises BadInput, one line naming the fix (a job's own error names the job), before anything
    is rented: a missing file, bad TOML or key, a limit that is not a number > 0, no job, two jobs of
    one name, a job `up` would refuse."""
    from gpuops.config import read_toml_table
    from gpuops.rental.request import UpArgs, build, task_fields

    p = Path(path)
    if not p.is_file():
        raise BadInput(f"sweep file {p} not found", "pass a sweep file, e.g. gpuops sweep examples/sweep.toml")
    sweep, raw = read_toml_table(p, SweepFile, SWEEP_FIX)
    if not 1 <= sweep.max_parallel <= MAX_PARALLEL:
        raise BadInput(
            f"sweep max_parallel must be a whole number from 1 to {MAX_PARALLEL}, got {sweep.max_parallel}",
            "e.g. max_parallel = 2 (two boxes at once)",
        )
    max_usd = _limit("max_usd", sweep.max_usd, "5")
    max_hours = _limit("max_hours", sweep.max_hours, "4")
    base = task_fields(p, sweep, {k: v for k, v in raw.items() if k not in _SWEEP_KEYS})
    entries = [(e.name or "", task_fields(p, e, r)) for e, r in zip(sweep.jobs, raw.get("jobs", []))] or [("", {})]
    m = sweep.matrix
    combos = _combos(m) if m.env or m.args or m.model or m.card else [("", {})]
    if len(entries) * len(combos) > MAX_JOBS:
        raise BadInput(
            f"the sweep expands to {len(entries) * len(combos):,} jobs, more than {MAX_JOBS:,}",
            "split it into several sweep files, or narrow [matrix]",
        )
    stem = sweep.name or p.stem
    spec = SweepSpec(p, stem, "", sweep.max_parallel, max_usd, max_hours)
    names: set[str] = set()
    for e_i, (e_name, e_fields) in enumerate(entries):
        for suffix, m_fields in combos:
            head = e_name or (f"job{e_i + 1}" if len(entries) > 1 or not suffix else "")
            name = ",".join(x for x in (head, suffix) if x)
            if name in names:
                raise BadInput(f"sweep {p}: two jobs are named {name!r}", "give each [[jobs]] entry its own name")
            names.add(name)
            fields = _over(_over(_over(base, e_fields), m_fields, add_args=True), given or {})
            fields.pop("name", None)  # a job's name names the job; its rentals are named by its run
            args = UpArgs(**fields)
            if args.interactive:
                raise BadInput(f"sweep job {name}: interactive = true", "a sweep runs jobs: give it a run script")
            if args.dry_run:
                args.dry_run = False  # `sweep --dry-run` is the executor's
            try:
                req, settings = build(args)
            except BadInput as e:
                raise BadInput(f"sweep job {name}: {e.message}", e.fix) from None
            params = tuple(m_fields.get("env", ()))
            spec.jobs.append(SweepJobSpec(len(spec.jobs), name, args, req, settings, params))
    spec.experiment = spec.jobs[0].req.experiment
    return spec
