"""A task file's tables (``gpuops up TASK.toml``), as msgspec structs read by ``config.read_toml_table``.

The shape and what each key stands for: ``gpuops.rental.request`` (its docstring) and README.md
("A task file"). A module of its own so that the command line's start-up imports no msgspec until
a task file is read (``request.load_task`` imports it)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gpuops.settings_base import Section, check


class _Resources(Section):
    card: str | None = None
    count: int | None = None
    model: str | None = None
    dtype: str | None = None
    kv_dtype: str | None = None
    seq: int | None = None
    batch: int | None = None
    allow_unverified: bool | None = None
    provider: str | None = None
    spot: bool | None = None
    vendor: str | None = None
    volume: str | None = None


class _Limits(Section):
    max_hours: float | None = None
    max_price: float | None = None
    max_session_usd: float | None = None
    idle_minutes: float | Literal["off"] | None = None


class TaskFile(Section):
    """A task file's tables (gpuops.rental.request's docstring shows them).

    ``setup``: [bootstrap]'s keys, checked by the settings' own table (``_check_setup``)."""

    experiment: str | None = None
    name: str | None = None
    note: str | None = None
    run: str | None = None
    env: list[str] = []
    results: str | None = None
    recover: int | None = None
    recover_on: list[str] | None = None
    workdir: str | None = None  # up --workdir, relative to the task file
    workdir_exclude: list[str] = []  # up --workdir-exclude patterns
    interactive: bool = False  # up --interactive: no run, a box to work on
    args: list[str] | None = None  # the job's argv (up ... -- ARG ...); None: not given, [] none
    resources: _Resources = msgspec.field(default_factory=_Resources)
    setup: dict[str, Any] = {}
    limits: _Limits = msgspec.field(default_factory=_Limits)

    @check("env")
    @classmethod
    def _env(cls, v: list[str]) -> list[str]:
        from gpuops.config import env_entry

        for entry in v:
            env_entry(entry)  # ValueError naming the name, never the value
        return v
