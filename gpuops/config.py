"""Settings: infra.toml + GPUOPS_* environment + flags -> one validated ``Settings``.

Discovery: ``--config PATH``, else ``./infra.toml``, else ``<user config dir>/gpuops/infra.toml``
(platformdirs). Environment variables ``GPUOPS_<SECTION>_<KEY>`` (e.g. ``GPUOPS_LEDGER_URL``,
``GPUOPS_TEARDOWN_MAX_HOURS``, ``GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR``) override the file;
flags override both. All validation happens here, before anything is rented. Every key, with its
default and unit, is documented in ``infra.example.toml``.

The layering (init arguments from flags > environment > TOML file) is pydantic-settings'
(``BaseSettings`` with ``TomlConfigSettingsSource``, ``env_prefix="GPUOPS_"``,
``env_nested_delimiter="_"`` split once: ``GPUOPS_TEARDOWN_MAX_HOURS`` -> teardown.max_hours).
pydantic-settings is imported inside ``load_settings`` only (it costs ~0.1 s of imports, asyncio
included; `gpuops --help` does not pay it). What it does not do, done here: the file's types are
strict (``max_hours = "2"`` and ``spot = "yes"`` are refused; environment values are text and are
parsed), errors name the file and line, an unknown key gets the closest name ("did you mean
max_hours?"), a ``GPUOPS_<SECTION>_*`` variable naming no setting is refused, and ``lenient`` loads
for the emergency commands (``ps``, ``down``, ``reconcile``, ``ledger``) skip what is broken with
a one-line warning instead of refusing.

``ps``, ``watchdog --once`` and the ledger reports read a clean load back from the settings
snapshot without importing this module (gpuops/settings_snapshot.py); its values are this
module's, kept from an earlier load of the same file and variables.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from gpuops.errors import BadInput
# find_config and the path/owner rules are shared with the snapshot the read-only commands read
# without pydantic (gpuops/settings_snapshot.py).
from gpuops.settings_snapshot import data_path_of, find_config, ledger_url_of, make_private, owner_of  # noqa: F401

ENV_PREFIX = "GPUOPS_"
from bootstrap.vocabulary import PROVIDER_NAMES as PROVIDERS  # noqa: E402  (the one list, gpuops.providers.REGISTRY)
from bootstrap.vocabulary import EndReason  # noqa: E402


class _Section(BaseModel):
    # allow_inf_nan=False: "inf" parses as a float, and an infinite max_hours would switch the TTL off.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class UpSettings(_Section):
    """Defaults for `gpuops up` flags."""

    provider: Literal["local", "runpod", "vast"] = "local"
    card: str = ""  # empty: any card that fits
    experiment: str = "default"
    spot: bool = True  # prefer interruptible offers where the provider has them
    max_price: Optional[float] = Field(default=None, gt=0)  # USD/hour for the whole box
    image: str = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
    disk_gb: float = Field(default=40.0, gt=0)
    ready_timeout_seconds: float = Field(default=600.0, gt=0)  # create -> SSH answers
    ssh_key: str = ""  # private key for rented boxes; empty: gpuops' own, <data dir>/ssh/id_ed25519 (made once, 0600)


MAX_TTL_HOURS = 720.0  # 30 days: gpuops rents for jobs and experiments, not standing servers


class TeardownSettings(_Section):
    """The three layers: job end (grace), idle GPU, money (TTL, caps)."""

    # Hard TTL per box, hours. At most MAX_TTL_HOURS: a larger number would switch the TTL off in all
    # but name (``1e308`` was accepted and printed a 300-digit projected cost).
    max_hours: float = Field(default=4.0, gt=0, le=MAX_TTL_HOURS)
    idle_minutes: Union[float, Literal["off"]] = 15.0
    idle_util_percent: float = Field(default=5.0, ge=0, le=100)
    sample_seconds: float = Field(default=10.0, gt=0)
    job_end_grace_seconds: float = Field(default=30.0, ge=0)  # agent destroys this long after job exit
    kill_grace_seconds: float = Field(default=10.0, ge=0)  # local destroy: TERM, then KILL after this
    max_session_usd: Optional[float] = Field(default=None, gt=0)
    balance_floor_usd: Optional[float] = Field(default=None, ge=0)
    monthly_cap_usd: Optional[float] = Field(default=None, gt=0)
    # Whom a crossed balance floor / monthly cap refuses: "account" = the provider account whose
    # balance fell (floor) and the user whose month-to-date spend reached the cap; "team" = everyone
    # on this ledger (the floor of any account refuses that provider, the cap counts all sessions).
    limits_scope: Literal["account", "team"] = "account"

    @field_validator("idle_minutes", mode="before")
    @classmethod
    def _idle(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() == "off":
            return "off"
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError("idle_minutes must be a number of minutes or \"off\"") from None
        if f <= 0:
            raise ValueError("idle_minutes must be > 0; 0 is ambiguous, use \"off\" to disable the idle layer")
        return f


OWNER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


class UserSettings(_Section):
    """Who rents: the name booked as each session's owner on a shared ledger."""

    name: str = ""  # empty: <login>@<hostname> (gpuops.ownership.default_owner)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        v = v.strip()
        if v and not OWNER_RE.fullmatch(v):
            raise ValueError(f"user name {v!r} must be 1-64 letters, digits or . _ @ + - (starting with a letter or digit)")
        return v


class LedgerSettings(_Section):
    url: str = ""  # SQLAlchemy URL; empty: sqlite:///<user data dir>/ledger.db


class LocalProviderSettings(_Section):
    price_per_hour: Optional[float] = Field(default=None, ge=0)  # USD/h; unset: catalog reference, simulated
    keep_box_days: float = Field(default=7.0, ge=0)  # a destroyed box keeps only its logs after this many days


class RunpodSettings(_Section):
    url: str = ""  # GraphQL base; empty: the SDK default (or RUNPOD_API_BASE_URL)
    api_key: str = ""
    billing_increment_seconds: float = Field(default=1.0, gt=0)  # "billed by the second" (docs.runpod.io/pods/pricing)


class VastSettings(_Section):
    url: str = ""  # REST base; empty: the SDK default (or VAST_URL)
    api_key: str = ""
    billing_increment_seconds: float = Field(default=1.0, gt=0)  # "every second" (docs.vast.ai/billing-help)


class ProvidersSettings(_Section):
    local: LocalProviderSettings = LocalProviderSettings()
    runpod: RunpodSettings = RunpodSettings()
    vast: VastSettings = VastSettings()

    @model_validator(mode="before")
    @classmethod
    def _env_keys(cls, v: Any) -> Any:
        """pydantic-settings splits ``GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR`` once, at the section:
        ``{"local_price_per_hour": "0.5"}`` is placed under ``local`` here."""
        if not isinstance(v, dict):
            return v
        out = dict(v)
        for key in list(out):
            head, _, rest = key.partition("_")
            if key not in cls.model_fields and head in cls.model_fields and rest:
                sub = out.get(head)
                sub = dict(sub) if isinstance(sub, dict) else sub.model_dump(exclude_unset=True) if isinstance(sub, BaseModel) else {}
                sub[rest] = out.pop(key)
                out[head] = sub
        return out


class WeightsSource(_Section):
    """One weights download: ``source`` hf://org/model[@rev] | https://... | file:///...;
    ``sha256`` optional (single files); ``dest`` on-box directory (default: the cache)."""

    source: str
    sha256: str = ""
    dest: str = ""
    allow_patterns: list[str] = []  # hf:// only: the files to fetch, e.g. ["*.safetensors", "*.json"]

    @field_validator("source")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not v.startswith(("hf://", "https://", "http://", "file://")):
            raise ValueError(f"weights source {v!r} must start with hf://, https:// or file://")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        if v and not re.fullmatch(r"[0-9a-fA-F]{64}", v):
            raise ValueError("sha256 must be 64 hex digits")
        return v.lower()


class BootstrapSettings(_Section):
    """What `up` puts on the box before the job (turned into bootstrap.json by
    gpuops.agent.bootstrap_config). Paths named ``*_on_box`` are on the box; ``requirements`` is a file
    on this machine, shipped to the box."""

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
    timeout_seconds: float = Field(default=1800.0, gt=0)  # the whole bootstrap

    @field_validator("secrets")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for n in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
                raise ValueError(f"secret {n!r} must be an environment variable name (letters, digits, _)")
        return v

    @field_validator("weights", mode="before")
    @classmethod
    def _weights(cls, v: Any) -> Any:
        return [{"source": x} if isinstance(x, str) else x for x in (v or [])]


# The rental end reasons a run may re-rent on (``[job] recover_on``, ``up --recover-on``): the box
# was taken back or never became usable. A job that failed on its own (job_failed), a limit that
# ran out (ttl, session_cap, monthly_cap, balance_floor) or a person (interrupted, manual) never
# re-rents.
RECOVERABLE = tuple(str(r) for r in (EndReason.PREEMPTED, EndReason.PROVISION_FAILED, EndReason.SSH_NEVER_READY, EndReason.BOOTSTRAP_FAILED,
                                      EndReason.PROVIDER_ERROR, EndReason.DELIVERY_MISMATCH))
MAX_RECOVER = 20  # rentals after the first one run may make (a typo like 100 would rent 101 boxes)


def parse_recover_on(v: Any) -> list[str]:
    """``recover_on`` as a list of end reasons (a comma-separated string or a list); ValueError
    naming the word and the allowed ones for anything else."""
    if isinstance(v, str):
        v = [x.strip() for x in v.split(",") if x.strip()]
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"recover_on must name one or more of: {', '.join(RECOVERABLE)}")
    for r in v:
        if r not in RECOVERABLE:
            never = " (a job that fails on its own, a limit or a person never re-rents)" if isinstance(r, str) else ""
            raise ValueError(f"recover_on: {r!r} is not a reason a run re-rents on{never}; use one of: {', '.join(RECOVERABLE)}")
    return list(dict.fromkeys(v))


class JobSettings(_Section):
    results: str = "out/"  # relative to the session dir on the box; copied back before teardown
    # up --recover N: rentals after the first that a run may make when a rental ends for a reason
    # in recover_on (default: preempted only). 0: one rental, no run.
    recover: int = Field(default=0, ge=0, le=MAX_RECOVER)
    recover_on: list[str] = ["preempted"]
    # With recover: copy the results directory home this often while the job runs (seconds), so a
    # box taken back without warning leaves its last checkpoint at home for the next rental.
    checkpoint_sync_seconds: float = Field(default=60.0, gt=0)
    # Names of this machine's environment variables the job gets (local and rented boxes alike);
    # nothing else of this machine's environment reaches a job (gpuops/box/boxenv.py).
    # GPUOPS_JOB_ENV takes them comma-separated.
    env: list[str] = []

    @field_validator("env", mode="before")
    @classmethod
    def _env_names(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",") if x.strip()]
        for n in v or []:
            if not isinstance(n, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
                raise ValueError(f"job env name {n!r} must be an environment variable name (letters, digits, _)")
        return v

    @field_validator("recover_on", mode="before")
    @classmethod
    def _recover_on(cls, v: Any) -> Any:
        return parse_recover_on(v)

    @field_validator("results")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.replace("\\", "/").split("/"):
            raise ValueError("results must be a path inside the session directory (relative, no ..)")
        return v


class StorageSettings(_Section):
    """``volume``: a persistent volume to mount on every box, ``<provider>:<id or name>`` (see
    gpuops.providers.volumes); empty: none. ``results_deadline_seconds``: how long teardown waits for the
    results copy-back (gpuops.rental.results) before destroying anyway."""

    volume: str = ""
    results_deadline_seconds: float = Field(default=900.0, gt=0)


class CheckSettings(_Section):
    """`gpuops check --live --rent`: one short rental per teardown layer under one hard cap.

    ``job_seconds``: the job layer's job (the agent must destroy the box after it ends);
    ``idle_minutes`` / ``ttl_minutes``: the idle window and the TTL the idle and TTL layers are
    armed with, the smallest a real box can be proven with (the TTL counts from create, so it must
    outlast boot, arm and bootstrap); ``max_usd`` / ``max_minutes``: the cap for the whole check
    (above it `check` refuses unless ``--max-usd`` / ``--max-minutes`` lift it); ``slack_seconds``:
    how long after a layer's due time (plus the agent's job-end grace and one sample) the box may
    still show before the layer fails; ``poll_seconds``: how often the provider is asked."""

    job_seconds: float = Field(default=20.0, gt=0)
    idle_minutes: float = Field(default=1.0, gt=0)
    ttl_minutes: float = Field(default=5.0, gt=0)
    max_usd: float = Field(default=0.10, gt=0)
    max_minutes: float = Field(default=10.0, gt=0)
    slack_seconds: float = Field(default=90.0, gt=0)
    poll_seconds: float = Field(default=2.0, gt=0)


class Settings(_Section):
    data_dir: str = ""  # empty: platformdirs user data dir
    user: UserSettings = UserSettings()
    up: UpSettings = UpSettings()
    teardown: TeardownSettings = TeardownSettings()
    ledger: LedgerSettings = LedgerSettings()
    providers: ProvidersSettings = ProvidersSettings()
    bootstrap: BootstrapSettings = BootstrapSettings()
    job: JobSettings = JobSettings()
    storage: StorageSettings = StorageSettings()
    check: CheckSettings = CheckSettings()
    source: Optional[str] = None  # the file these came from, for messages

    def data_path(self) -> Path:
        return data_path_of(self.data_dir)

    def private_data_path(self) -> Path:
        """``data_path()``, created if missing and made 0700: it holds the ledger, logs, results,
        local boxes and keys, which are the user's alone."""
        return make_private(self.data_path())

    def ledger_url(self) -> str:
        return ledger_url_of(self.ledger.url, self.data_path())

    def owner(self) -> str:
        """This user's name on the ledger: ``[user] name``, else ``<login>@<hostname>``."""
        return owner_of(self.user.name)


def _line_of(text: str, loc: tuple) -> int | None:
    """Best-effort line number of the key at ``loc`` (a pydantic error location) in TOML text."""
    keys = [str(k) for k in loc if isinstance(k, str)]
    if not keys:
        return None
    for cut in range(len(keys), 0, -1):  # the key itself, else its table's header
        key, section = keys[cut - 1], ".".join(keys[:cut - 1])
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


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The settings model that holds the last key of ``loc`` (None past a list or a dict)."""
    model: type[BaseModel] = Settings
    for k in loc[:-1]:
        f = model.model_fields.get(str(k))
        ann = f.annotation if f is not None else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model = ann
    return model


def _closest(loc: tuple) -> str:
    """"did you mean max_hours? " for an unknown key at ``loc``, or ""."""
    import difflib

    model = _model_at(loc)
    if model is None or not loc:
        return ""
    names = [n for n in model.model_fields if n != "source"]
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""


def _env_names(model: type[BaseModel], prefix: str = ENV_PREFIX) -> dict[str, tuple[str, ...]]:
    """Every ``GPUOPS_*`` variable a setting answers to -> its key path, e.g.
    ``GPUOPS_TEARDOWN_MAX_HOURS -> ("teardown", "max_hours")``."""
    out: dict[str, tuple[str, ...]] = {}
    for name, f in model.model_fields.items():
        if name == "source":
            continue
        var = prefix + name.upper()
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update({v: (name, *path) for v, path in _env_names(ann, var + "_").items()})
        else:
            out[var] = (name,)
    return out


def _check_env_names(env: dict, spelled: dict | None = None) -> list[tuple[str, str]]:
    """(variable, one-line problem) for ``GPUOPS_<SECTION>_...`` variables that name no setting (a typo such
    as GPUOPS_TEARDOWN_MAX_HOUR would otherwise leave the default TTL in force, silently). ``spelled``:
    {upper-case name: the name as set}, for the message."""
    import difflib

    known = _env_names(Settings)
    sections = tuple(f"{ENV_PREFIX}{n.upper()}_" for n, f in Settings.model_fields.items()
                     if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel))
    problems = []
    for var in sorted(env):
        if var.startswith(sections) and var not in known:
            close = difflib.get_close_matches(var, list(known), n=1, cutoff=0.8)
            hint = f"did you mean {close[0]}? " if close else ""
            problems.append((var, f"environment variable {(spelled or {}).get(var, var)} names no setting ({hint}infra.example.toml lists every key; unset it)"))
    return problems


def _file_problem(e: dict, where: str, text: str) -> str:
    """One line for a validation error ``e`` of the file: ``file:line: key: message``."""
    loc = _key_path(e["loc"])
    key = ".".join(str(k) for k in loc)
    line = _line_of(text, loc)
    place = f"{where}:{line}" if line else where
    if e["type"] == "extra_forbidden":
        hint = _closest(loc).strip()
        return f"{place}: {key}: unknown key" + (f" ({hint})" if hint else "")
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"].endswith("_type") and isinstance(e.get("input"), str):
        msg += f" (got the text {e['input']!r}: write it without quotes)"
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


def _format_error(err: ValidationError, where: str, text: str | None) -> str:
    e = err.errors()[0]
    if text is not None:
        return _file_problem(e, where, text)
    key = ".".join(str(k) for k in _key_path(e["loc"]))
    return f"{where}: {key}: {e['msg'].removeprefix('Value error, ')}"


def _key_path(loc: tuple) -> tuple:
    """A pydantic error location without the union branch it names (``idle_minutes.float``,
    ``...function-after[...]``): only the settings keys a user writes."""
    return tuple(k for k in loc if not (isinstance(k, str) and (k in ("float", "int", "str", "bool") or "[" in k)))


def _read_file(path: Path, problems: list[str], lenient: bool) -> dict:
    """The file's tables, checked strictly on their own (so an error names its line). Lenient:
    broken keys are dropped and named in ``problems``; a file that is not TOML is skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:  # not UTF-8 (TOML is), a folder, no permission
        why = f"not UTF-8 text ({e.reason} at byte {e.start})" if isinstance(e, UnicodeDecodeError) else f"unreadable ({e.strerror or e})"
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
            Settings.model_validate(data, strict=True)
            return data
        except ValidationError as err:
            first = err.errors()[0]
            if not lenient:
                raise BadInput(_file_problem(first, str(path), text), "see infra.example.toml for the keys and units") from None
            problems.append(_file_problem(first, str(path), text) + "; skipped")
            if not _drop(data, tuple(first["loc"])):
                problems.append(f"{path}: skipped as a whole")
                return {}
    return {}


def _layered(path: Path | None, env: dict):
    """The pydantic-settings class for one load: init args > ``env`` (GPUOPS_*) > TOML file."""
    from pydantic import create_model
    from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, TomlConfigSettingsSource
    from pydantic_settings.sources.utils import parse_env_vars  # pydantic-settings 2.16: sources/utils.py

    class _Env(EnvSettingsSource):
        def _load_env_vars(self):
            return parse_env_vars(env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)

        def decode_complex_value(self, field_name, field, value):
            # A list/dict from the environment is JSON, or text the field's own validator reads
            # (e.g. comma-separated names): not JSON is left to the validator, never an error here.
            try:
                return super().decode_complex_value(field_name, field, value)
            except ValueError:
                return value

    class _Base(BaseSettings):
        model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="_", env_nested_max_split=1,
                                          extra="forbid", allow_inf_nan=False, toml_file=path)

        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
            sources = [init_settings, _Env(settings_cls)]
            if path is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            return tuple(sources)

    fields = {n: (f.annotation, f) for n, f in Settings.model_fields.items() if n != "source"}
    return create_model("LayeredSettings", __base__=_Base, **fields)


def load_settings(config: str | None = None, overrides: dict | None = None, env: dict | None = None,
                  lenient: bool = False, warn=None) -> Settings:
    """Read the file (if any), apply GPUOPS_* variables (``env``, default ``os.environ``), then
    ``overrides`` (from flags, nested dicts like ``{"teardown": {"max_hours": 2}}``).

    Raises BadInput naming the file and line (or the variable, or "command line"). ``lenient``
    (emergency commands: ``ps``, ``down``, ``reconcile``, ``ledger``): a broken key, a file that
    is not TOML or a misspelt variable is skipped and ``warn(line)`` is called once with one line
    saying so (default: stderr), so that a box can still be listed and destroyed."""
    path = find_config(config)
    # pydantic-settings reads GPUOPS_* names in any case (case_sensitive=False, a later spelling
    # winning); the checks here read them upper-case, and messages name them as they were set.
    spelled: dict[str, str] = {}
    given, env = (os.environ if env is None else env), {}
    for name, value in given.items():  # in order: a later spelling wins, as in pydantic-settings
        if name != name.upper() and name.upper().startswith(ENV_PREFIX):
            spelled[name.upper()] = name
            name = name.upper()
        elif name in spelled:
            del spelled[name]
        env[name] = value
    problems: list[str] = []
    data = _read_file(path, problems, lenient) if path is not None else {}
    file_skipped = bool(problems)
    env_problems = _check_env_names(env, spelled)
    if env_problems and not lenient:
        msg, _, hint = env_problems[0][1].partition(" (")
        raise BadInput(msg, hint.rstrip(")"))
    for var, problem in env_problems:
        problems.append(problem + "; ignored")
        env.pop(var)
    for _ in range(50):  # an environment value that does not validate: refused, or (lenient) left out
        # A file with skipped keys is passed as what is left of it (below the environment), not re-read.
        layered = _layered(path if path is not None and not file_skipped else None, env)
        env_data = _env_overrides(Settings, env=env)
        init = _deep_merge(_deep_merge(data, env_data), overrides or {}) if file_skipped else (overrides or {})
        try:
            built = layered(**init)
            s = Settings.model_validate({n: getattr(built, n) for n in layered.model_fields})
            break
        except ValidationError as e:
            first = e.errors()[0]
            keys = tuple(str(k) for k in first["loc"] if isinstance(k, str))
            var = ENV_PREFIX + "_".join(keys).upper()
            msg = first["msg"].removeprefix("Value error, ")
            if var not in env or _has(overrides or {}, keys):  # the file was checked alone: this is a flag
                raise BadInput(_format_error(e, "command line", None), "see `gpuops up --help`") from None
            if not lenient:
                raise BadInput(f"environment variable {spelled.get(var, var)}: {msg}", "fix or unset the variable") from None
            problems.append(f"environment variable {spelled.get(var, var)}: {msg}; ignored")
            env.pop(var)
    if problems:
        (warn or _warn_stderr)("warning: " + " | ".join(problems) + " (this command goes on without them; `gpuops up` refuses until they are fixed)")
    s.source = str(path) if path else None
    return s


def _has(d: dict, keys: tuple) -> bool:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return False
        d = d[k]
    return True


def _warn_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")


def _env_overrides(model: type[BaseModel], prefix: str = ENV_PREFIX, env: dict | None = None) -> dict:
    """The ``GPUOPS_*`` values of ``env`` as nested dicts, by the names ``_env_names`` lists (used
    to tell an environment error from a file or flag error; the values themselves are layered by
    pydantic-settings)."""
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    for name, f in model.model_fields.items():
        var = prefix + name.upper()
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            sub = _env_overrides(ann, var + "_", env)
            if sub:
                out[name] = sub
        elif var in env and name != "source":
            out[name] = env[var]
    return out


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


SECRET_KEYS = ("api_key",)


def setting_origins(settings: Settings, env: dict | None = None) -> list[tuple[str, Any, str]]:
    """Where each setting of ``settings`` came from, in declaration order: (dotted key, value,
    origin), origin ``$GPUOPS_<SECTION>_<KEY>`` (the environment wins over the file), the file's
    path (``settings.source``), or ``default``. A flag given to the command shows as the layer
    under it. ``api_key`` values show as ``(set)`` and a URL's password as ``***``: never a secret."""
    env = os.environ if env is None else env
    upper = {k.upper(): v for k, v in env.items()}
    data: dict = {}
    if settings.source:
        try:
            data = tomllib.loads(Path(settings.source).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            data = {}
    out: list[tuple[str, Any, str]] = []

    def in_file(path: tuple) -> bool:
        d: Any = data
        for k in path:
            if not isinstance(d, dict) or k not in d:
                return False
            d = d[k]
        return True

    def walk(model: BaseModel, path: tuple) -> None:
        for name in type(model).model_fields:
            if name == "source":
                continue
            value = getattr(model, name)
            here = path + (name,)
            if isinstance(value, BaseModel):
                walk(value, here)
                continue
            var = ENV_PREFIX + "_".join(here).upper()
            origin = f"${var}" if var in upper else (str(Path(settings.source).resolve()) if in_file(here) else "default")
            if name in SECRET_KEYS and value:
                value = "(set)"
            elif isinstance(value, str) and "://" in value:
                value = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", value)
            elif isinstance(value, list):
                value = [v.model_dump() if isinstance(v, BaseModel) else v for v in value]
            out.append((".".join(here), value, origin))

    walk(settings, ())
    return out
