"""Settings: infra.toml + GPUOPS_* environment + flags -> one validated ``Settings``.

Discovery: ``--config PATH``, else ``./infra.toml``, else ``<user config dir>/gpuops/infra.toml``
(platformdirs). Environment variables ``GPUOPS_<SECTION>_<KEY>`` (e.g. ``GPUOPS_LEDGER_URL``,
``GPUOPS_TEARDOWN_MAX_HOURS``, ``GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR``) override the file;
flags override both. All validation happens here, before anything is rented. Every key, with its
default and unit, is documented in ``infra.example.toml``.

The tables are msgspec ``Struct`` classes (https://jcristharif.com/msgspec/structs.html): typed
fields with ``Meta`` bounds, unknown keys refused, checked by ``msgspec.convert`` (the file with
``strict=True``: ``max_hours = "2"`` and ``spot = "yes"`` are refused; environment values are text
and are parsed). msgspec and tomllib import in a few milliseconds, so every command, ``ps`` and
``watchdog --once`` included, validates in full. What msgspec does not do, done here: the checks
marked ``@_check`` (before or after the type), numbers that must be finite, errors worded as they
have always been (``file:line: key: Input should be ...``), an unknown key with the closest name
("did you mean max_hours?"), a ``GPUOPS_<SECTION>_*`` variable naming no setting refused, and
``lenient`` loads for the emergency commands (``ps``, ``down``, ``reconcile``, ``ledger``) that
skip what is broken with a one-line warning instead of refusing.
"""

from __future__ import annotations

import math
import os
import re
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
from msgspec import Meta

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from gpuops.errors import BadInput
from gpuops.providers import REGISTRY, UP_CHOICES  # the one list of providers (see ProvidersSettings)
from gpuops.settings_base import Section as _Section, check as _check
from onbox.policy import (
    FETCH_DEADLINE_SECONDS,
    IDLE_MINUTES,
    IDLE_UTIL_PERCENT,
    JOB_END_GRACE_SECONDS,
    KILL_GRACE_SECONDS,
    MAX_HOURS,
    SAMPLE_SECONDS,
)
from onbox.vocabulary import EndReason

ENV_PREFIX = "GPUOPS_"
# The file `gpuops demo start` writes in its data directory (gpuops/demo/): every command whose data
# directory holds it says SIMULATED (``simulated_notice``), and every offer it is given is simulated,
# priced and never charged (gpuops.providers.get_provider), from providers on this machine only.
SIMULATED_MARKER = "SIMULATED"


class UpSettings(_Section):
    """Defaults for `gpuops up` flags."""

    provider: Literal[UP_CHOICES] = "local"  # type: ignore[valid-type]  # the registry's names, or "any": every one with a key
    card: str = ""  # unset: any card that fits; given, never blank (see blank_text)
    experiment: str = "default"
    spot: bool = True  # prefer interruptible offers at the same price (the cheapest booked price first)
    max_price: Annotated[float, Meta(gt=0)] | None = None  # USD/hour for the whole box
    image: str = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
    disk_gb: Annotated[float, Meta(gt=0)] = 40.0
    ready_timeout_seconds: Annotated[float, Meta(gt=0)] = 600.0  # create -> SSH answers
    ssh_key: str = ""  # private key for rented boxes; empty: gpuops' own, <data dir>/ssh/id_ed25519 (made once, 0600)

    @_check("card", before=True)
    @classmethod
    def _card(cls, v: Any) -> Any:
        return not_blank(
            v,
            "card is empty: name one, e.g. a100 (`gpuops cards` lists them), or leave it unset for the cheapest card that fits",
        )

    @_check("image", before=True)
    @classmethod
    def _image(cls, v: Any) -> Any:
        return not_blank(
            v,
            "image is empty: name one, e.g. runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04, or leave it unset",
        )

    @_check("experiment", before=True)
    @classmethod
    def _experiment(cls, v: Any) -> Any:
        return not_blank(v, "experiment is empty: name one, e.g. llama-sweep, or leave it unset for default")


def blank_text(value: Any) -> bool:
    """Whether a flag or setting given as text is blank ("" or spaces), e.g. ``--card``, ``[up] card``.

    Blank is bad input, never "unset": ``--card "$CARD"`` or ``GPUOPS_UP_CARD=$CARD`` with CARD
    unset must not rent the cheapest card. Leaving the flag or setting out is how to unset it."""
    return isinstance(value, str) and not value.strip()


def not_blank(value: Any, problem: str) -> Any:
    """``value`` itself, for a setting's check; raises ValueError(``problem``) when it is blank text."""
    if blank_text(value):
        raise ValueError(problem)
    return value


MAX_TTL_HOURS = 720.0  # 30 days: gpuops rents for jobs and experiments, not standing servers


class TeardownSettings(_Section):
    """The three layers: job end (grace), idle GPU, money (TTL, caps)."""

    # Hard TTL per box, hours. At most MAX_TTL_HOURS: a larger number would switch the TTL off in all
    # but name (``1e308`` was accepted and printed a 300-digit projected cost).
    # The defaults of the layers the agent runs on the box are stated once, in onbox/policy.py.
    max_hours: Annotated[float, Meta(gt=0, le=MAX_TTL_HOURS)] = MAX_HOURS
    idle_minutes: float | Literal["off"] = IDLE_MINUTES
    idle_util_percent: Annotated[float, Meta(ge=0, le=100)] = IDLE_UTIL_PERCENT
    sample_seconds: Annotated[float, Meta(gt=0)] = SAMPLE_SECONDS
    job_end_grace_seconds: Annotated[float, Meta(ge=0)] = (
        JOB_END_GRACE_SECONDS  # agent destroys this long after job exit
    )
    kill_grace_seconds: Annotated[float, Meta(ge=0)] = KILL_GRACE_SECONDS  # local destroy: TERM, then KILL after this
    # From the job's exit: the rest of the log, then the results come home within this, else the box is destroyed anyway
    fetch_deadline_seconds: Annotated[float, Meta(gt=0)] = FETCH_DEADLINE_SECONDS
    max_session_usd: Annotated[float, Meta(gt=0)] | None = None
    balance_floor_usd: Annotated[float, Meta(ge=0)] | None = None
    monthly_cap_usd: Annotated[float, Meta(gt=0)] | None = None
    # Whom a crossed balance floor / monthly cap refuses: "account" = the provider account whose
    # balance fell (floor) and the user whose month-to-date spend reached the cap; "team" = everyone
    # on this ledger (the floor of any account refuses that provider, the cap counts all sessions).
    limits_scope: Literal["account", "team"] = "account"

    @_check("idle_minutes", before=True)
    @classmethod
    def _idle(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() == "off":
            return "off"
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError('idle_minutes must be a number of minutes or "off"') from None
        if f == 0:
            raise ValueError('idle_minutes must be > 0; 0 is ambiguous, use "off" to disable the idle layer')
        if f < 0:
            raise ValueError(
                f'idle_minutes must be > 0 minutes, got {f:g}: e.g. 15, or "off" to disable the idle layer'
            )
        return f


OWNER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


class UserSettings(_Section):
    """Who rents: the name booked as each session's owner on a shared ledger."""

    name: str = ""  # empty: <login>@<hostname> (gpuops.ownership.default_owner)

    @_check("name")
    @classmethod
    def _name(cls, v: str) -> str:
        v = v.strip()
        if v and not OWNER_RE.fullmatch(v):
            raise ValueError(
                f"user name {v!r} must be 1-64 letters, digits or . _ @ + - (starting with a letter or digit)"
            )
        return v


class LedgerSettings(_Section):
    """Where the books are: a SQLAlchemy URL; unset: ``sqlite:///<data dir>/ledger.db``."""

    url: str = ""  # unset: the local SQLite ledger; given, never blank (see blank_text)

    @_check("url", before=True)
    @classmethod
    def _url(cls, v: Any) -> Any:
        # `GPUOPS_LEDGER_URL=$TEAM_DB` with TEAM_DB unset must not book a team's rentals into a
        # private file, where the team's monthly cap never counts them
        return not_blank(
            v,
            "url is empty: give one, e.g. postgresql+psycopg://user@host/gpuops, or leave it unset for the local ledger",
        )


# One table per provider (``[providers.<name>]``), each the settings model of its folder
# (``gpuops/providers/<name>/settings.py``), in the registry's order: adding a provider edits nothing
# here. config sits on the floor above the registry (pyproject ``[tool.importlinter]``), which
# imports nothing of config (a provider is built from ``entry.SettingsView``, this file's shape of
# ``Settings``); what the registry loads is light data (tests/core/test_import_contract.py).
_PROVIDER_MODELS = {e.section: e.settings() for e in REGISTRY.values()}
ProvidersSettings = msgspec.defstruct(
    "ProvidersSettings",
    [(name, model, msgspec.field(default_factory=model)) for name, model in _PROVIDER_MODELS.items()],
    bases=(_Section,),
    module=__name__,
    namespace={"__doc__": "One table per provider (``[providers.<name>]``), named as in the provider registry."},
)


class WeightsSource(_Section):
    """One weights download.

    ``source`` hf://org/model[@rev] | https://... | file:///...; ``sha256`` optional (single files);
    ``dest`` on-box directory (default: the cache).
    """

    source: str
    sha256: str = ""
    dest: str = ""
    allow_patterns: list[str] = []  # hf:// only: the files to fetch, e.g. ["*.safetensors", "*.json"]

    @_check("source")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not v.startswith(("hf://", "https://", "http://", "file://")):
            raise ValueError(f"weights source {v!r} must start with hf://, https:// or file://")
        return v

    @_check("sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        if v and not re.fullmatch(r"[0-9a-fA-F]{64}", v):
            raise ValueError("sha256 must be 64 hex digits")
        return v.lower()


class BootstrapSettings(_Section):
    """What `up` puts on the box before the job (turned into bootstrap.json by gpuops.agent.bootstrap_config).

    Paths named ``*_on_box`` are on the box; ``requirements`` is a file on this machine, shipped to
    the box.
    """

    requirements: str = ""  # local requirements file, shipped and installed
    packages: list[str] = []  # extra pip requirement specifiers
    installer: Literal["auto", "uv", "pip"] = "auto"  # auto: uv when present or installable, else pip
    wheelhouse: str = ""  # on-box directory of wheels (e.g. on the persistent volume): --no-index --find-links
    venv: str = ""  # on-box venv to install into (relative to the session dir); empty: the box's python3
    repo: str = ""  # git URL cloned to <session dir>/code
    ref: str = ""  # branch, tag or commit; empty: the remote's HEAD
    secrets: list[str] = []  # names of environment variables on this machine, written 0600 on the box
    weights: list[WeightsSource] = []  # "hf://org/model" or {source, sha256, dest}
    verify: bool = True  # measure bandwidth and bf16 TFLOP/s against the catalog (needs torch)
    verify_strict: bool = False  # fail the bootstrap when below 70% of nominal
    commands: list[str] = []  # extra shell commands, run last, in order
    steps: list[dict] = []  # raw steps in bootstrap.json's format, appended after everything
    cache_dir: str = ""  # on-box cache for wheels and weights; empty: the provider's volume, else ~/.cache/gpuops
    timeout_seconds: Annotated[float, Meta(gt=0)] = 1800.0  # the whole bootstrap

    @_check("secrets")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for n in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
                raise ValueError(f"secret {n!r} must be an environment variable name (letters, digits, _)")
        return v

    @_check("weights", before=True)
    @classmethod
    def _weights(cls, v: Any) -> Any:
        return [{"source": x} if isinstance(x, str) else x for x in (v or [])]


# The rental end reasons a run may re-rent on (``[job] recover_on``, ``up --recover-on``): the box
# was taken back or never became usable. A job that failed on its own (job_failed), a limit that
# ran out (ttl, session_cap, monthly_cap, balance_floor) or a person (interrupted, manual) never
# re-rents.
RECOVERABLE = tuple(
    str(r)
    for r in (
        EndReason.PREEMPTED,
        EndReason.PROVISION_FAILED,
        EndReason.SSH_NEVER_READY,
        EndReason.BOOTSTRAP_FAILED,
        EndReason.PROVIDER_ERROR,
        EndReason.DELIVERY_MISMATCH,
    )
)
MAX_RECOVER = 20  # rentals after the first one run may make (a typo like 100 would rent 101 boxes)


def parse_recover_on(v: Any) -> list[str]:
    """``recover_on`` as a list of end reasons (a comma-separated string or a list).

    Raises ValueError naming the word and the allowed ones for anything else.
    """
    if isinstance(v, str):
        v = [x.strip() for x in v.split(",") if x.strip()]
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"recover_on must name one or more of: {', '.join(RECOVERABLE)}")
    for r in v:
        if r not in RECOVERABLE:
            never = " (a job that fails on its own, a limit or a person never re-rents)" if isinstance(r, str) else ""
            raise ValueError(
                f"recover_on: {r!r} is not a reason a run re-rents on{never}; use one of: {', '.join(RECOVERABLE)}"
            )
    return list(dict.fromkeys(v))


class JobSettings(_Section):
    results: str = "out/"  # relative to the session dir on the box; copied back before teardown
    # up --recover N: rentals after the first that a run may make when a rental ends for a reason
    # in recover_on (default: preempted only). 0: one rental, no run.
    recover: Annotated[int, Meta(ge=0, le=MAX_RECOVER)] = 0
    recover_on: list[str] = msgspec.field(default_factory=lambda: ["preempted"])
    # With recover: copy the results directory home this often while the job runs (seconds), so a
    # box taken back without warning leaves its last checkpoint at home for the next rental.
    checkpoint_sync_seconds: Annotated[float, Meta(gt=0)] = 60.0
    # up --workdir DIR: the most it may upload (MiB), checked before anything is rented (gpuops/rental/workdir.py).
    workdir_max_mb: Annotated[float, Meta(gt=0)] = 512.0
    # What the job's environment holds beyond gpuops' own variables (local and rented boxes alike):
    # each entry NAME (this machine's value, when it is set) or NAME=VALUE (that value). `up --env`
    # adds entries (flags win by name). GPUOPS_JOB_ENV takes them comma-separated or as a JSON list.
    # Nothing else of this machine's environment reaches a job (gpuops/box/boxenv.py). The values
    # go only to the job, through the box's 0600 env file (resolve_job_env, gpuops.agent.jobio).
    env: list[str] = []

    @_check("env", before=True)
    @classmethod
    def _env_entries(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",") if x.strip()]
        if isinstance(v, (list, tuple)):
            for n in v:
                if isinstance(n, str):
                    env_entry(n)  # ValueError naming the name only, never a value
        return v

    @_check("recover_on", before=True)
    @classmethod
    def _recover_on(cls, v: Any) -> Any:
        return parse_recover_on(v)

    @_check("results")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.replace("\\", "/").split("/"):
            raise ValueError("results must be a path inside the session directory (relative, no ..)")
        return v


ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_ENV_PREFIX = "GPUOPS_"  # the job's own variables (GPUOPS_SESSION, GPUOPS_METRICS, ...) are gpuops'


def env_entry(text: str) -> tuple[str, str | None]:
    """One job env entry, ``NAME`` or ``NAME=VALUE``, as (name, value or None for "this machine's").

    Raises ValueError naming the name (never the value: it may be a secret) and the fix for a name
    that is not an environment variable name or is one of gpuops' own ``GPUOPS_*``."""
    name, eq, value = text.partition("=")
    if not ENV_NAME_RE.fullmatch(name):
        shown = f"{name!r}" + ("=..." if eq else "")
        raise ValueError(
            f"job env entry {shown} must be NAME or NAME=VALUE, NAME an environment variable name "
            "(letters, digits, _; not starting with a digit), e.g. TOKENS=50"
        )
    if name.upper().startswith(RESERVED_ENV_PREFIX):
        raise ValueError(
            f"job env name {name!r} is gpuops' own (GPUOPS_* are set by gpuops for the job); choose another name"
        )
    return name, (value if eq else None)


def resolve_job_env(
    configured: list[str], flags: list[str] | tuple[str, ...] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables the job gets beyond gpuops' own: {name: value}, in the order given.

    ``configured``: ``[job] env`` (infra.toml, ``GPUOPS_JOB_ENV``, a task file): a bare NAME takes
    this machine's value and is left out when it is not set (a name the job reads but nobody passed
    is neither guessed nor warned about). ``flags``: ``up --env`` entries, which win by name; a
    bare ``--env NAME`` that is not set in this shell is bad input (BadInput naming the name). A
    value never appears in any message. ``environ``: default ``os.environ``."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for origin, entries in (("[job] env", configured), ("--env", flags)):
        for text in entries:
            try:
                name, value = env_entry(text)
            except ValueError as e:
                raise BadInput(f"{origin}: {e}", "--env HF_TOKEN passes this shell's value") from None
            if value is None:
                if name not in environ:
                    if origin == "--env":
                        raise BadInput(
                            f"--env {name}: {name} is not set in this shell",
                            f"set it (export {name}=...) or pass --env {name}=VALUE",
                        )
                    continue
                value = environ[name]
            if "\x00" in value:
                raise BadInput(f"{origin} {name}: the value holds a NUL byte", "pass a value without NUL")
            out.pop(name, None)  # a later entry wins and takes its place in the order
            out[name] = value
    return out


class StorageSettings(_Section):
    """Storage: the volume every box mounts.

    ``volume``: a persistent volume to mount on every box, ``<provider>:<id or name>`` (see
    gpuops.providers.volumes); empty: none. How long teardown waits for the results is
    ``[teardown] fetch_deadline_seconds`` (one deadline for the log and the results).
    """

    volume: str = ""


class CheckSettings(_Section):
    """`gpuops check --live --rent`: one short rental per teardown layer under one hard cap.

    ``job_seconds``: the job layer's job (the agent must destroy the box after it ends);
    ``idle_minutes`` / ``ttl_minutes``: the idle window and the TTL the idle and TTL layers are
    armed with, the smallest a real box can be proven with (the TTL counts from create, so it must
    outlast boot, arm and bootstrap); ``max_usd`` / ``max_minutes``: the cap for the whole check
    (above it `check` refuses unless ``--max-usd`` / ``--max-minutes`` lift it); ``slack_seconds``:
    how long after a layer's due time (plus the agent's job-end grace and one sample) the box may
    still show before the layer fails; ``poll_seconds``: how often the provider is asked."""

    job_seconds: Annotated[float, Meta(gt=0)] = 20.0
    idle_minutes: Annotated[float, Meta(gt=0)] = 1.0
    ttl_minutes: Annotated[float, Meta(gt=0)] = 5.0
    max_usd: Annotated[float, Meta(gt=0)] = 0.10
    max_minutes: Annotated[float, Meta(gt=0)] = 10.0
    slack_seconds: Annotated[float, Meta(gt=0)] = 90.0
    poll_seconds: Annotated[float, Meta(gt=0)] = 2.0


# `[notify]`'s events, each on by default (gpuops/notify/texts.py writes each one's line):
NOTIFY_EVENTS = (
    "job_end",  # a rental ended: its reason, exit code, duration, cost, $/Mtoken
    "run_end",  # a run (`up --recover`) finished, or ran out of attempts or money
    "preempted",  # a spot box was taken back (and the run re-rents)
    "destroy_failed",  # a destroy failed and the row stays open: the box may still bill
    "reconciled",  # reconcile found a box (an orphan, a gone one, an abandoned one) and ended it
    "layer_ended",  # the idle, TTL or session-cap layer ended a box
    "monthly_cap",  # the month-to-date spend reached 80 % and 100 % of monthly_cap_usd
    "balance_floor",  # a provider balance fell under balance_floor_usd
    "watchdog_silent",  # no watchdog pass for longer than watchdog_silent_minutes
)


class NotifySettings(_Section):
    """Who is told when it matters (gpuops/notify/): apprise URLs, one per target.

    ``urls``: apprise URLs (``slack://...``, ``mailto://user:pass@host``, ``json://host/path``,
    ``ntfy://topic``, ...); they carry tokens: keep them in a 0600 infra.toml or in
    ``GPUOPS_NOTIFY_URLS`` (comma- or space-separated), never printed (`check` shows them
    redacted). ``events``: which of ``NOTIFY_EVENTS`` are sent. ``deadline_seconds``: the whole
    time one message may take to all targets, retries included; a process never waits longer at its
    exit. ``watchdog_silent_minutes``: the next `up`, `ps` or `check` that sees no watchdog pass for
    this long says so (once per silence). ``deadman_url``: an http(s) URL every watchdog pass GETs
    (healthchecks.io and the like notice the silence); empty: none."""

    urls: list[str] = []
    events: list[str] = msgspec.field(default_factory=lambda: list(NOTIFY_EVENTS))
    deadline_seconds: Annotated[float, Meta(gt=0, le=300)] = 15.0
    watchdog_silent_minutes: Annotated[float, Meta(gt=0)] = 30.0
    deadman_url: str = ""

    def __repr__(self) -> str:  # never a token in a traceback or a debug print
        urls = [redact_url(u) for u in self.urls]
        return f"NotifySettings(urls={urls!r}, events={self.events!r}, deadline_seconds={self.deadline_seconds!r})"

    @_check("urls", before=True)
    @classmethod
    def _urls(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [x for x in re.split(r"[\s,]+", v) if x]
        for u in v or []:
            if not isinstance(u, str) or not re.match(r"^[a-z][a-z0-9+.-]*://\S+$", u, re.I):
                shown = redact_url(u) if isinstance(u, str) else repr(u)
                raise ValueError(f"notify url {shown} is not an apprise URL (scheme://...); see apprise's URL list")
        return v

    @_check("events", before=True)
    @classmethod
    def _events(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",") if x.strip()]
        for e in v or []:
            if e not in NOTIFY_EVENTS:
                raise ValueError(f"notify event {e!r} is not one of: {', '.join(NOTIFY_EVENTS)}")
        return v

    @_check("deadman_url")
    @classmethod
    def _deadman(cls, v: str) -> str:
        if v and not re.match(r"^https?://\S+$", v):
            raise ValueError(f"deadman_url {redact_url(v)} must be an http:// or https:// URL")
        return v


# URL schemes whose host is a plain server name (no token in it): shown with the host
_HOST_SHOWN = ("json", "jsons", "form", "forms", "xml", "xmls", "mailto", "mailtos", "http", "https")


def redact_url(url: str) -> str:
    """A notification URL as it may be printed: its scheme, a plain host, never a token.

    ``json://user:tok@127.0.0.1:8080/hook?x=1`` -> ``json://127.0.0.1:8080/***``; a scheme whose
    host is itself a token (``slack://TokA/TokB``, ``tgram://bot/chat``) -> ``slack://***``."""
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://([^/?#]*)", url or "")
    if m is None:
        return "(not a URL)"
    scheme, authority = m.group(1).lower(), m.group(2)
    if scheme in _HOST_SHOWN:
        host = authority.rsplit("@", 1)[-1]
        if re.fullmatch(r"[A-Za-z0-9.\-\[\]:]{1,255}", host):
            return f"{scheme}://{host}/***"
    return f"{scheme}://***"


class Settings(_Section):
    """Every setting: the tables of infra.toml (``infra.example.toml`` documents each key)."""

    data_dir: str = ""  # empty: platformdirs user data dir
    user: UserSettings = msgspec.field(default_factory=UserSettings)
    up: UpSettings = msgspec.field(default_factory=UpSettings)
    teardown: TeardownSettings = msgspec.field(default_factory=TeardownSettings)
    ledger: LedgerSettings = msgspec.field(default_factory=LedgerSettings)
    providers: ProvidersSettings = msgspec.field(default_factory=ProvidersSettings)  # type: ignore[valid-type]  # a struct msgspec builds from the registry (above): its sections are read by name
    bootstrap: BootstrapSettings = msgspec.field(default_factory=BootstrapSettings)
    job: JobSettings = msgspec.field(default_factory=JobSettings)
    storage: StorageSettings = msgspec.field(default_factory=StorageSettings)
    check: CheckSettings = msgspec.field(default_factory=CheckSettings)
    notify: NotifySettings = msgspec.field(default_factory=NotifySettings)
    source: str | None = None  # the file these came from, for messages

    def data_path(self) -> Path:
        """The data directory (absolute; ``data_dir`` empty: platformdirs' user data dir)."""
        if self.data_dir:
            return Path(self.data_dir).expanduser().absolute()  # rows store log paths: never cwd-relative
        import platformdirs

        return Path(platformdirs.user_data_dir("gpuops", appauthor=False))

    def private_data_path(self) -> Path:
        """``data_path()``, created if missing and made 0700.

        It holds the ledger, logs, results, local boxes and keys, which are the user's alone.
        """
        p = self.data_path()
        p.mkdir(parents=True, exist_ok=True)
        os.chmod(p, 0o700)
        return p

    def simulated(self) -> bool:
        """True when the data directory is `gpuops demo`'s (it holds ``SIMULATED_MARKER``)."""
        return (self.data_path() / SIMULATED_MARKER).is_file()

    def ledger_url(self) -> str:
        """``[ledger] url``, else the SQLite file in the data directory."""
        return self.ledger.url or f"sqlite:///{self.data_path() / 'ledger.db'}"

    def owner(self) -> str:
        """This user's name on the ledger: ``[user] name``, else ``<login>@<hostname>``."""
        from gpuops.ownership import default_owner

        return self.user.name or default_owner()


def find_config(explicit: str | None) -> Path | None:
    """The config file to read, or None. An explicit path that does not exist is BadInput."""
    if explicit:
        p = Path(explicit).expanduser()
        if p.is_dir():
            raise BadInput(
                f"config file {explicit} is a directory", f"pass the file itself, e.g. --config {p / 'infra.toml'}"
            )
        if not p.is_file():
            raise BadInput(f"config file {explicit} not found", "pass an existing file to --config")
        return p
    here = Path("infra.toml")
    if here.is_file():
        return here
    import platformdirs

    user = Path(platformdirs.user_config_dir("gpuops", appauthor=False)) / "infra.toml"
    return user if user.is_file() else None


# -- validation: msgspec for the types and bounds, the rest here --------------------------------------


class _Problem(Exception):
    """One thing wrong with the data at ``loc`` (key path, list indexes as ints).

    ``msg``: in the words the user reads; ``kind``: "type" (a value of the wrong type), "extra" (an
    unknown key) or "".
    """

    def __init__(self, loc: tuple, msg: str, kind: str = ""):
        super().__init__(msg)
        self.loc, self.msg, self.kind = loc, msg, kind


_SECTION_INFO: dict[type, dict[str, tuple[Any, Any, Any]]] = {}


def _fields(cls: type) -> dict[str, tuple[Any, Any, Any]]:
    """{field: (its type, its before-check, its after-check)} of a section (bound classmethods or None)."""
    info = _SECTION_INFO.get(cls)
    if info is None:
        checks: dict[str, list] = {}
        for klass in reversed(cls.__mro__):
            for name, attr in vars(klass).items():
                spec = getattr(getattr(attr, "__func__", None), "_settings_check", None)
                if spec is not None:
                    for f in spec[0]:
                        checks.setdefault(f, [None, None])[0 if spec[1] else 1] = getattr(cls, name)
        info = {f.name: (f.type, *checks.get(f.name, (None, None))) for f in msgspec.structs.fields(cls)}
        _SECTION_INFO[cls] = info
    return info


def _unwrap(t: Any) -> Any:
    """The base type of a field type: Annotated's bounds and Optional stripped, a Union's first member."""
    if get_origin(t) is Annotated:
        t = get_args(t)[0]
    if get_origin(t) in (Union, types.UnionType):
        return _unwrap(next(a for a in get_args(t) if a is not type(None)))
    return t


def _section_of(t: Any) -> type | None:
    """The section class a field holds (itself, or the items of a list of sections), else None."""
    base = _unwrap(t)
    if get_origin(base) is list:
        base = get_args(base)[0]
    return base if isinstance(base, type) and issubclass(base, _Section) else None


_TRUE = {"1", "on", "t", "true", "y", "yes"}  # the words pydantic reads as booleans, as before
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _prepare(cls: type, data: Any, strict: bool, loc: tuple = ()) -> Any:
    """A copy of ``data`` for ``cls`` with the before-checks applied; raises _Problem.

    Non-finite numbers are refused. Not strict (environment text): booleans in pydantic's words,
    numbers stripped.
    """
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for key, value in data.items():
        if cls is Settings and key == "source":  # where the settings came from, not a setting
            raise _Problem(loc + (key,), "unknown key", "extra")
        if key not in _fields(cls):
            continue
        t, before, _ = _fields(cls)[key]
        here = loc + (key,)
        if before is not None:
            try:
                value = before(value)
            except ValueError as e:
                raise _Problem(here, str(e)) from None
        base = _unwrap(t)
        if not strict and isinstance(value, str):
            if base is bool and value.strip().lower() in _TRUE | _FALSE:
                value = value.strip().lower() in _TRUE
            elif base in (float, int):
                value = value.strip()
        finite = value
        if base is float and not strict and isinstance(value, str):
            try:
                finite = float(value)
            except ValueError:
                pass
        if isinstance(finite, float) and not math.isfinite(finite):
            raise _Problem(here, "Input should be a finite number")
        sub = _section_of(t)
        if sub is not None and isinstance(value, dict):
            value = _prepare(sub, value, strict, here)
        elif sub is not None and isinstance(value, list):
            value = [_prepare(sub, v, strict, here + (i,)) for i, v in enumerate(value)]
        out[key] = value
    return out


def _after(obj: Any, loc: tuple = ()) -> None:
    """Run the after-checks of ``obj`` and its sections (raises _Problem), keeping what they return."""
    for key, (t, _, after) in _fields(type(obj)).items():
        here = loc + (key,)
        value = getattr(obj, key)
        if after is not None:
            try:
                setattr(obj, key, after(value))
            except ValueError as e:
                raise _Problem(here, str(e)) from None
        if isinstance(value, _Section):
            _after(value, here)
        elif isinstance(value, list) and _section_of(t) is not None:
            for i, v in enumerate(value):
                _after(v, here + (i,))


_MSGSPEC_TYPES = {
    "float": "a valid number",
    "int": "a valid integer",
    "bool": "a valid boolean",
    "str": "a valid string",
    "array": "a valid list",
    "object": "a valid dictionary",
}
_LAX_SUFFIX = {
    "float": ", unable to parse string as a number",
    "int": ", unable to parse string as an integer",
    "bool": ", unable to interpret input",
}
_BOUNDS = {">": "greater than", ">=": "greater than or equal to", "<": "less than", "<=": "less than or equal to"}


def _problem_of(err: msgspec.ValidationError, data: Any, strict: bool, root: type | None = None) -> _Problem:
    """msgspec's one error as a _Problem in the words gpuops has always printed.

    Those are pydantic's: "Input should be a valid number", "Input should be greater than 0".
    """
    text = str(err)
    msg, _, where = text.partition(" - at `$")
    loc: tuple = tuple(k if i == "" else int(i) for k, i in re.findall(r"\.([^.\[`]+)|\[(\d+)\]", where.rstrip("`")))
    if m := re.fullmatch(r"Object contains unknown field `(.*)`", msg):
        return _Problem(loc + (m.group(1),), "unknown key", "extra")
    if m := re.fullmatch(r"Object missing required field `(.*)`", msg):
        return _Problem(loc + (m.group(1),), "Field required")
    base = _unwrap(_type_at(loc, root))
    if get_origin(base) is Literal:
        words = [repr(v) for v in get_args(base)]
        return _Problem(
            loc, "Input should be " + (", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0])
        )
    if isinstance(base, type) and issubclass(base, _Section) and msg.startswith("Expected `object`"):
        return _Problem(loc, f"Input should be a valid dictionary or instance of {base.__name__}", "type")
    if m := re.fullmatch(r"Expected `(\w+)[^`]*`, got `\w+`", msg):
        want = m.group(1)
        said = f"Input should be {_MSGSPEC_TYPES.get(want, want)}"
        given = _value_at(data, loc)
        if not strict and isinstance(given, str):
            said += _LAX_SUFFIX.get(want, "")
        elif want == "int" and isinstance(given, float) and not strict:
            said += ", got a number with a fractional part"
        return _Problem(loc, said, "type")
    if m := re.fullmatch(r"Expected `\w+` (>=|<=|>|<) (\S+)", msg):
        bound = float(m.group(2))
        return _Problem(loc, f"Input should be {_BOUNDS[m.group(1)]} {int(bound) if bound.is_integer() else bound}")
    return _Problem(loc, msg)


def _type_at(loc: tuple, root: type | None = None) -> Any:
    """The declared type at ``loc`` (a list's items for an index) under ``root`` (default Settings), or None."""
    t: Any = root or Settings
    for k in loc:
        base = _unwrap(t)
        if isinstance(k, int) and get_origin(base) is list:
            t = get_args(base)[0]
        elif isinstance(base, type) and issubclass(base, _Section) and k in _fields(base):
            t = _fields(base)[k][0]
        else:
            return None
    return t


def _value_at(data: Any, loc: tuple) -> Any:
    for k in loc:
        try:
            data = data[k]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _validate(data: dict, strict: bool) -> Settings:
    """``data`` (infra.toml's tables, or layered ones) as Settings; raises _Problem for the first error."""
    prepared = _prepare(Settings, data, strict)
    try:
        settings = msgspec.convert(prepared, Settings, strict=strict)
    except msgspec.ValidationError as err:
        raise _problem_of(err, prepared, strict) from None
    _after(settings)
    return settings


def settings_from(data: dict) -> Settings:
    """``data`` (nested dicts, as infra.toml's tables) validated strictly, as a file is.

    Raises BadInput naming the key.
    """
    try:
        return _validate(data, strict=True)
    except _Problem as p:
        raise BadInput(
            f"{'.'.join(str(k) for k in p.loc)}: {p.msg}", "see infra.example.toml for the keys and units"
        ) from None


def read_toml_table(path: Path, cls: type, fix: str) -> tuple[Any, dict]:
    """A TOML file read strictly as the table ``cls`` (a ``Section``), as infra.toml is read.

    Returns (the validated ``cls``, the file's raw tables: what it said, without defaults). Raises
    BadInput, one line: ``file:line: key: message`` (an unknown key with the closest name), the
    file unreadable or not TOML; ``fix`` is the line's fix (where the keys are documented)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = f"not UTF-8 text ({e.reason})" if isinstance(e, UnicodeDecodeError) else f"unreadable ({e.strerror or e})"
        raise BadInput(f"{path}: {why}", fix) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path}: malformed TOML: {e}", fix) from None
    try:
        prepared = _prepare(cls, data, True)
        try:
            obj: Any = msgspec.convert(prepared, cls, strict=True)
        except msgspec.ValidationError as err:
            raise _problem_of(err, prepared, True, cls) from None
        _after(obj)
    except _Problem as p:
        raise BadInput(_file_problem(p, str(path), text, data, cls), fix) from None
    return obj, data


def _line_of(text: str, loc: tuple) -> int | None:
    """Best-effort line number of the key at ``loc`` (a key path) in TOML text."""
    keys = [str(k) for k in loc if isinstance(k, str)]
    if not keys:
        return None
    for cut in range(len(keys), 0, -1):  # the key itself, else its table's header
        key, section = keys[cut - 1], ".".join(keys[: cut - 1])
        current = ""
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r"^\s*\[+([^\]]+)\]", line)
            if m:
                current = m.group(1).strip()
                if cut == len(keys) and current == ".".join(keys):
                    return n
                continue
            if current == section and re.match(rf"^\s*{re.escape(key)}\s*=", line):
                return n
    return None


# Keys that moved, old dotted path -> new dotted path: an old file is told where its key went.
MOVED_KEYS = {"storage.results_deadline_seconds": "teardown.fetch_deadline_seconds"}


def _closest(loc: tuple, root: type | None = None) -> str:
    """Say "did you mean max_hours? " (or "moved to [teardown] ...") for an unknown key, or ""."""
    import difflib

    moved = MOVED_KEYS.get(".".join(str(k) for k in loc))
    if moved:
        new_section, _, name = moved.rpartition(".")
        return f"moved: write {name} under [{new_section}] "

    section = _unwrap(_type_at(loc[:-1], root)) if loc else None
    if not (isinstance(section, type) and issubclass(section, _Section)):
        return ""
    names = [n for n in _fields(section) if n != "source"]
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""


def _env_names(cls: type | None = None, prefix: str = ENV_PREFIX) -> dict[str, tuple[str, ...]]:
    """Every ``GPUOPS_*`` variable a setting answers to -> its key path.

    E.g. ``GPUOPS_TEARDOWN_MAX_HOURS -> ("teardown", "max_hours")``.
    """
    out: dict[str, tuple[str, ...]] = {}
    for name, (t, _, _) in _fields(cls or Settings).items():
        if name == "source":
            continue
        var = prefix + name.upper()
        base = _unwrap(t)
        if isinstance(base, type) and issubclass(base, _Section):
            out.update({v: (name, *path) for v, path in _env_names(base, var + "_").items()})
        else:
            out[var] = (name,)
    return out


def _check_env_names(env: dict, known: dict, spelled: dict | None = None) -> list[tuple[str, str]]:
    """(variable, one-line problem) for ``GPUOPS_<SECTION>_...`` variables that name no setting.

    A typo such as GPUOPS_TEARDOWN_MAX_HOUR would otherwise leave the default TTL in force, silently.
    ``spelled``: {upper-case name: the name as set}, for the message.
    """
    import difflib

    sections = tuple(
        f"{ENV_PREFIX}{n.upper()}_"
        for n, (t, _, _) in _fields(Settings).items()
        if isinstance(t, type) and issubclass(t, _Section)
    )
    problems = []
    for var in sorted(env):
        if var.startswith(sections) and var not in known:
            close = difflib.get_close_matches(var, list(known), n=1, cutoff=0.8)
            hint = f"did you mean {close[0]}? " if close else ""
            problems.append(
                (
                    var,
                    f"environment variable {(spelled or {}).get(var, var)} names no setting ({hint}infra.example.toml lists every key; unset it)",
                )
            )
    return problems


def _file_problem(p: _Problem, where: str, text: str, data: dict, root: type | None = None) -> str:
    """One line for a problem ``p`` of the file: ``file:line: key: message``."""
    key = ".".join(str(k) for k in p.loc)
    line = _line_of(text, p.loc)
    place = f"{where}:{line}" if line else where
    if p.kind == "extra":
        hint = _closest(p.loc, root).strip()
        return f"{place}: {key}: unknown key" + (f" ({hint})" if hint else "")
    msg = p.msg
    given = _value_at(data, p.loc)
    if p.kind == "type" and isinstance(given, str) and "valid list" in msg:  # a list written as one text
        msg += f' (got the text {given!r}: write a list of texts, e.g. ["--lr", "1e-3"])'
    elif p.kind == "type" and isinstance(given, str):
        msg += f" (got the text {given!r}: write it without quotes)"
    return f"{place}: {key}: {msg}"


def _drop(data: dict, loc: tuple) -> bool:
    """Remove the key at ``loc`` (or the deepest part of it present) from ``data``."""
    node: Any = data
    for k in loc[:-1]:
        if not isinstance(node, dict) or k not in node:
            break
        if not isinstance(node[k], dict):
            del node[k]
            return True
        node = node[k]
    else:
        if isinstance(node, dict) and loc and loc[-1] in node:
            del node[loc[-1]]
            return True
    return False


def _read_file(path: Path, problems: list[str], lenient: bool) -> dict:
    """The file's tables, checked strictly on their own (so an error names its line).

    Lenient: broken keys are dropped and named in ``problems``; a file that is not TOML is skipped.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:  # not UTF-8 (TOML is), a folder, no permission
        why = (
            f"not UTF-8 text ({e.reason} at byte {e.start})"
            if isinstance(e, UnicodeDecodeError)
            else f"unreadable ({e.strerror or e})"
        )
        if not lenient:
            raise BadInput(f"{path}: {why}", "save it as UTF-8 text, or see infra.example.toml") from None
        problems.append(f"{path}: {why}; the whole file is skipped")
        return {}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        if not lenient:
            raise BadInput(f"{path}: malformed TOML: {e}", "fix the file, or see infra.example.toml") from None
        problems.append(f"{path}: malformed TOML: {e}; the whole file is skipped")
        return {}
    for _ in range(50):  # each round drops one broken key (lenient) or raises (strict)
        try:
            _validate(data, strict=True)
            return data
        except _Problem as p:
            if not lenient:
                raise BadInput(
                    _file_problem(p, str(path), text, data), "see infra.example.toml for the keys and units"
                ) from None
            problems.append(_file_problem(p, str(path), text, data) + "; skipped")
            if not _drop(data, p.loc):
                problems.append(f"{path}: skipped as a whole")
                return {}
    return {}


def _env_layer(env: dict, known: dict) -> dict:
    """The ``GPUOPS_*`` settings of ``env`` (upper-case names) as nested dicts of their text.

    A list or table setting given as JSON is read as JSON; other text is left to the setting's check
    (e.g. comma-separated names). A whole table as one JSON object
    (``GPUOPS_TEARDOWN='{"max_hours": 2}'``) lies under the variables of its keys.
    """
    out: dict[str, Any] = {}
    for name, (t, _, _) in _fields(Settings).items():
        var = ENV_PREFIX + name.upper()
        if var in env and isinstance(t, type) and issubclass(t, _Section):
            out[name] = _json_or_text(env[var])  # not JSON: refused as "a valid dictionary"
    for var, path in known.items():
        if var not in env:
            continue
        value: Any = env[var]
        base = _unwrap(_type_at(path))
        if get_origin(base) in (list, dict) or base in (list, dict):
            value = _json_or_text(value)
        node = out
        for k in path[:-1]:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        node[path[-1]] = value
    return out


def _json_or_text(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def _var_of(loc: tuple, env: dict) -> str | None:
    """The variable of ``env`` that set the value at ``loc``: its own, else its table's; None: none did."""
    keys = [str(k) for k in loc if isinstance(k, str)]
    for cut in range(len(keys), 0, -1):
        var = ENV_PREFIX + "_".join(keys[:cut]).upper()
        if var in env:
            return var
    return None


def load_settings(
    config: str | None = None, overrides: dict | None = None, env: dict | None = None, lenient: bool = False, warn=None
) -> Settings:
    """Settings from the file (if any), then GPUOPS_* variables, then flags.

    ``env``: the variables (default ``os.environ``); ``overrides``: from flags, nested dicts like
    ``{"teardown": {"max_hours": 2}}``.

    Raises BadInput naming the file and line (or the variable, or "command line"). ``lenient``
    (emergency commands: ``ps``, ``down``, ``reconcile``, ``ledger``): a broken key, a file that
    is not TOML or a misspelt variable is skipped and ``warn(line)`` is called once with one line
    saying so (default: stderr), so that a box can still be listed and destroyed."""
    path = find_config(config)
    overrides = _given(overrides or {})  # an empty table of flags overrides nothing (a broken GPUOPS_UP stays seen)
    # GPUOPS_* names are read in any case (a later spelling winning); the checks here read them
    # upper-case, and messages name them as they were set.
    spelled: dict[str, str] = {}
    given, env = (os.environ if env is None else env), {}
    for name, value in given.items():  # in order: a later spelling wins
        if name != name.upper() and name.upper().startswith(ENV_PREFIX):
            spelled[name.upper()] = name
            name = name.upper()
        elif name in spelled:
            del spelled[name]
        env[name] = value
    problems: list[str] = []
    data = _read_file(path, problems, lenient) if path is not None else {}
    known = _env_names()
    env_problems = _check_env_names(env, known, spelled)
    if env_problems and not lenient:
        msg, _, hint = env_problems[0][1].partition(" (")
        raise BadInput(msg, hint.rstrip(")"))
    for var, problem in env_problems:
        problems.append(problem + "; ignored")
        env.pop(var)
    for _ in range(50):  # an environment value that does not validate: refused, or (lenient) left out
        try:
            s = _validate(_deep_merge(_deep_merge(data, _env_layer(env, known)), overrides), strict=False)
            break
        except _Problem as p:
            keys = tuple(str(k) for k in p.loc if isinstance(k, str))
            bad = _var_of(p.loc, env)
            if bad is None or _has(overrides, keys):  # the file was checked alone: this is a flag
                raise BadInput(
                    f"command line: {'.'.join(str(k) for k in p.loc)}: {p.msg}", "see `gpuops up --help`"
                ) from None
            if not lenient:
                raise BadInput(
                    f"environment variable {spelled.get(bad, bad)}: {p.msg}", "fix or unset the variable"
                ) from None
            problems.append(f"environment variable {spelled.get(bad, bad)}: {p.msg}; ignored")
            env.pop(bad)
    if problems:
        (warn or _warn_stderr)(
            "warning: "
            + " | ".join(problems)
            + " (this command goes on without them; `gpuops up` refuses until they are fixed)"
        )
    s.source = str(path) if path else None
    if s.simulated():
        simulated_notice(s)
    return s


_NOTICED: set[str] = set()  # the data directories this process has said SIMULATED for


def simulated_notice(settings: Settings, say=None) -> None:
    """Say once per process, on stderr (``say(line)``), that ``settings`` point at `gpuops demo`."""
    where = str(settings.data_path())
    if where in _NOTICED:
        return
    _NOTICED.add(where)
    (say or _warn_stderr)(
        f"SIMULATED: gpuops demo ({where}): RunPod and Vast.ai are emulated on 127.0.0.1, boxes run on this "
        "machine; nothing is rented or charged (`gpuops demo stop` ends it)"
    )


def _given(over: dict) -> dict:
    """``over`` (the flags' tables) without its empty tables, at any depth.

    ``{"up": {}, "teardown": {"max_hours": 2}}`` -> ``{"teardown": {"max_hours": 2}}``: merged, an
    empty table would replace a variable's whole table (a broken ``GPUOPS_TEARDOWN`` went unseen)."""
    out = {}
    for k, v in over.items():
        if isinstance(v, dict):
            v = _given(v)
            if not v:
                continue
        out[k] = v
    return out


def _has(d: dict, keys: tuple) -> bool:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return False
        d = d[k]
    return True


def _warn_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


SECRET_KEYS = ("api_key",)


def setting_origins(settings: Settings, env: Mapping[str, str] | None = None) -> list[tuple[str, Any, str]]:
    """Where each setting of ``settings`` came from, in declaration order: (dotted key, value, origin).

    Origin: ``$GPUOPS_<SECTION>_<KEY>`` (the environment wins over the file), the file's path
    (``settings.source``), or ``default``. A flag given to the command shows as the layer under it.
    ``api_key`` values show as ``(set)`` and a URL's password as ``***``: never a secret.
    """
    env = os.environ if env is None else env
    upper = {k.upper(): v for k, v in env.items()}
    data: dict = {}
    if settings.source:
        try:
            data = tomllib.loads(Path(settings.source).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            data = {}
    out: list[tuple[str, Any, str]] = []

    source = settings.source

    def in_file(path: tuple) -> bool:
        d: Any = data
        for k in path:
            if not isinstance(d, dict) or k not in d:
                return False
            d = d[k]
        return True

    def walk(section: _Section, path: tuple) -> None:
        for name in section.__struct_fields__:
            if name == "source":
                continue
            value = getattr(section, name)
            here = path + (name,)
            if isinstance(value, _Section):
                walk(value, here)
                continue
            var = ENV_PREFIX + "_".join(here).upper()
            origin = (
                f"${var}"
                if var in upper
                else (str(Path(source).resolve()) if source is not None and in_file(here) else "default")
            )
            if name in SECRET_KEYS and value:
                value = "(set)"
            elif here == ("job", "env"):  # NAME=VALUE entries: the name only, a value may be a secret
                value = [e.partition("=")[0] + ("=(set)" if "=" in e else "") for e in value]
            elif here in (("notify", "urls"), ("notify", "deadman_url")):
                value = [redact_url(u) for u in value] if isinstance(value, list) else (value and redact_url(value))
            elif isinstance(value, str) and "://" in value:
                value = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", value)
            elif isinstance(value, list):
                value = msgspec.to_builtins(value)
            out.append((".".join(here), value, origin))

    walk(settings, ())
    return out
