"""What a user asks `up` for, from any door: flags, a task file, the Python API.

Made into one ``UpRequest`` and its ``Settings`` (``build``), with the one set of checks and their
one-line errors.

A task file (``gpuops up task.toml``) is TOML read as infra.toml is (``config.read_toml_table``:
strict types, unknown keys with the closest name, ``file:line: key: message``). Its shape, which a
sweep reuses (a list of these):

    experiment = "bench"           # --experiment; also name (--name) and note (--note)
    run = "bench.sh"               # --job: the script, relative to the task file
    env = ["TOKENS=50", "HF_TOKEN"]  # --env entries (before the flags' own: a flag wins by name)
    results = "out/"               # [job] results
    recover = 2                    # --recover; recover_on = ["preempted"] (--recover-on)
    workdir = "."                  # --workdir: uploaded to the box, relative to the task file;
    workdir_exclude = ["data"]     # --workdir-exclude patterns; interactive = true: no run (--interactive)
    args = ["--lr", "1e-3"]        # the job's argv (`up ... -- ARG ...`, which replaces it); not secrets
    [resources]                    # card (--card), count (--gpu-count), model (--model) and its
    card = "a100"                  # dtype, kv_dtype, seq, batch, allow_unverified; provider, spot,
    count = 1                      # vendor, volume
    [setup]                        # the keys of infra.toml's [bootstrap] (packages, requirements,
    packages = ["numpy"]           # repo, commands, ...), over the file's
    [limits]                       # max_hours (--max-hours), max_price (--max-price, USD/h),
    max_hours = 1                  # max_session_usd, idle_minutes (--idle-minutes, or "off")

Flags given on the command line override the file key by key. Nothing here rents anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from gpuops.config import Settings
    from gpuops.rental.launcher import UpRequest
    from gpuops.rental.task import TaskFile

TASK_FIX = 'see the task file\'s keys in README.md ("A task file") or examples/task.toml'


def not_blank_flag(flag: str, value: str | None, fix: str) -> None:
    """BadInput ``{flag} is empty`` (``fix`` says what to pass) when ``value`` is given but blank.

    A blank flag (``--model "$MODEL"`` with MODEL unset) is bad input, not the flag left out
    (gpuops.config.blank_text, the check the settings file and GPUOPS_* variables get too)."""
    from gpuops.config import blank_text

    if blank_text(value):
        raise BadInput(f"{flag} is empty", fix)


def card_count(card: str | None, gpu_count: int, default: int = 1, most: int | None = None) -> tuple[str | None, int]:
    """``--card NAME:COUNT`` (SkyPilot's ``--gpus A100:2``) as (card, gpu count).

    A plain ``--card`` passes through. BadInput when COUNT is not a whole number >= 1, is above
    ``most`` (`up`: the GPUs of one box) or ``--gpu-count`` says another count, or when ``--card``
    is empty (``--card "$CARD"`` with CARD unset is not "no card")."""
    not_blank_flag(
        "--card",
        card,
        "pass a card, e.g. --card a100 (`gpuops cards` lists them), or leave --card out for the cheapest card that fits",
    )
    if not card or ":" not in card:
        return card, gpu_count
    name, _, count = card.rpartition(":")
    if not name or not count.isdigit() or int(count) < 1:
        raise BadInput(
            f"--card {card!r} is not NAME or NAME:COUNT", "e.g. --card a100 or --card a100:2 (2 GPUs in one box)"
        )
    if most is not None and int(count) > most:  # else refused as "--gpu-count must be <= 16", a flag not given
        raise BadInput(
            f"--card {card} asks for {int(count):,} GPUs, more than the {most} of one box",
            "e.g. --card a100:8 (8 GPUs in one box)",
        )
    if gpu_count != default and gpu_count != int(count):
        raise BadInput(
            f"--card {card} asks for {int(count)} GPUs and --gpu-count for {gpu_count}", "give the count once"
        )
    return name, int(count)


def parse_price(price: float | None) -> float | None:
    """``--max-price`` (a float or None) checked finite and > 0 (USD per hour): BadInput otherwise."""
    if price is not None and not math.isfinite(price):
        raise BadInput(
            f"--max-price must be a finite number of USD per hour, got {str(price)!r}", "e.g. --max-price 2.5"
        )
    if price is not None and price <= 0:
        raise BadInput(f"--max-price must be > 0 USD per hour, got {price:g}", "e.g. --max-price 2.5")
    return price


IDLE_FIX = "e.g. --idle-minutes 15, or --idle-minutes off to switch the idle layer off"


def parse_idle(text: str | None) -> float | str | None:
    """``--idle-minutes`` (text, minutes or ``off``) as minutes > 0 or ``"off"``; None stays None.

    BadInput for anything else, one line each: not a number, not finite, negative, and 0 (which
    could mean "never idle" or "off": ``off`` says it)."""
    if text is None:
        return None
    if text.strip().lower() == "off":
        return "off"
    try:
        minutes = float(text)
    except ValueError:
        raise BadInput(f"--idle-minutes must be a number of minutes or off, got {text!r}", IDLE_FIX) from None
    if not math.isfinite(minutes):
        raise BadInput(f"--idle-minutes must be a finite number of minutes, got {text!r}", IDLE_FIX)
    if minutes < 0:
        raise BadInput(f"--idle-minutes must be > 0 minutes, got {minutes:g}", IDLE_FIX)
    if minutes == 0:
        raise BadInput("--idle-minutes 0 is ambiguous: an idle window needs minutes > 0", IDLE_FIX)
    return minutes


def dtypes_not_blank(dtype: str, kv_dtype: str) -> None:
    """BadInput for a blank ``--dtype`` or ``--kv-dtype`` (the flag left out is ``auto``)."""
    not_blank_flag(
        "--dtype", dtype, "pass a dtype, e.g. --dtype bf16, or leave --dtype out for the checkpoint's (auto)"
    )
    not_blank_flag(
        "--kv-dtype", kv_dtype, "pass a dtype, e.g. --kv-dtype fp8, or leave --kv-dtype out for the model's (auto)"
    )


def plan_args(card: str | None, gpu_count: int, **rest: Any) -> dict[str, Any]:
    """`gpuops plan`'s inputs checked, as the keyword arguments of ``planning.sizing.plan``.

    The one check of `plan` (the command and ``gpuops.api.plan``); ``rest``: the planner's other
    arguments as given (``dtype``, ``kv_dtype``, ``batch``, ``seq``, ``mode``, ``engine``,
    ``headroom``, ``max_num_seqs``, ``max_num_batched_tokens``, ``vendor``). A blank ``--dtype``,
    ``--kv-dtype``, ``--engine`` or ``--vendor`` is BadInput (None: left out, ``auto`` for the two
    dtypes), and ``--card NAME:COUNT`` becomes the card and its GPU count (``card_count``)."""
    dtype, kv_dtype = rest.get("dtype"), rest.get("kv_dtype")
    dtypes_not_blank("auto" if dtype is None else dtype, "auto" if kv_dtype is None else kv_dtype)
    not_blank_flag("--engine", rest.get("engine"), "pass vllm, hf or train, or leave --engine out for vllm")
    not_blank_flag("--vendor", rest.get("vendor"), "pass nvidia, amd or any, or leave --vendor out")
    card, gpu_count = card_count(card, gpu_count)
    return {"card": card, "gpu_count": gpu_count, **rest}


@dataclass
class UpArgs:
    """Everything `up` can be told; each field a flag of `gpuops up` (the name without ``--``).

    Its default is the flag's (stated here once: the CLI's options read them). None: not given, the
    settings decide. ``env``: ``--env`` entries; ``setup``: [bootstrap] keys over the settings'
    (a task file's [setup]); ``results``, ``max_session_usd``: [job] results, [teardown]
    max_session_usd; ``workdir``/``workdir_exclude``: `up --workdir` (uploaded before the job);
    ``interactive``: no job, a box to work on; ``recover_on_demand``: a spot run may re-rent on
    an on-demand box; ``job_args``: the job's argv (`up ... -- ARG ...`, a task file's ``args``),
    each passed to it as one argument, byte for byte, and booked (never a secret: those go in ``env``)."""

    job: str | None = None
    card: str | None = None
    experiment: str | None = None
    provider: str | None = None
    spot: bool | None = None
    max_price: float | None = None  # USD per hour, the whole box
    max_hours: float | None = None  # the box's hard TTL, hours
    idle_minutes: str | None = None  # minutes, or "off"
    note: str = ""
    dry_run: bool = False
    model: str | None = None
    dtype: str = "auto"
    kv_dtype: str = "auto"
    seq: int = 4096  # tokens per sequence
    batch: int = 1  # concurrent sequences
    gpu_count: int = 1
    allow_unverified: bool = False
    vendor: str | None = None
    volume: str | None = None
    name: str | None = None
    recover: int | None = None
    recover_on: str | None = None  # comma-separated end reasons
    env: tuple[str, ...] = field(default=(), repr=False)  # NAME=VALUE entries: a value may be a secret
    config: str | None = None
    setup: dict | None = None
    results: str | None = None
    max_session_usd: float | None = None
    workdir: str | None = None
    workdir_exclude: tuple[str, ...] = ()
    interactive: bool = False
    recover_on_demand: bool = False
    job_args: tuple[str, ...] = ()

    @classmethod
    def merged(cls, task: dict, given: dict) -> UpArgs:
        """A task file's fields (``load_task``) with the flags ``given`` over them, key by key.

        ``env``: the file's entries, then the flags' (a flag wins by name)."""
        out = {**task, **given}
        if task.get("env") or given.get("env"):
            out["env"] = tuple(task.get("env", ())) + tuple(given.get("env", ()))
        return cls(**out)


# task file key (table, key) -> UpArgs field
_TASK_FIELDS = {
    ("", "experiment"): "experiment",
    ("", "name"): "name",
    ("", "note"): "note",
    ("", "results"): "results",
    ("", "recover"): "recover",
    ("", "interactive"): "interactive",
    ("resources", "card"): "card",
    ("resources", "count"): "gpu_count",
    ("resources", "model"): "model",
    ("resources", "dtype"): "dtype",
    ("resources", "kv_dtype"): "kv_dtype",
    ("resources", "seq"): "seq",
    ("resources", "batch"): "batch",
    ("resources", "allow_unverified"): "allow_unverified",
    ("resources", "provider"): "provider",
    ("resources", "spot"): "spot",
    ("resources", "vendor"): "vendor",
    ("resources", "volume"): "volume",
    ("limits", "max_hours"): "max_hours",
    ("limits", "max_price"): "max_price",
    ("limits", "max_session_usd"): "max_session_usd",
}


def load_task(path: str | Path) -> dict:
    """The task file at ``path`` as ``UpArgs`` fields (only the keys it holds).

    ``run`` is resolved against the task file's folder. Raises BadInput (one line, ``file:line:
    key: message``) for a file that is missing, not TOML, holds an unknown key or a wrong type.
    ``run`` and ``workdir`` are resolved against the task file's folder."""
    from gpuops.config import read_toml_table
    from gpuops.rental.task import TaskFile

    p = Path(path)
    if not p.is_file():
        raise BadInput(f"task file {p} not found", "pass a task file, e.g. gpuops up examples/task.toml")
    task, raw = read_toml_table(p, TaskFile, TASK_FIX)
    return task_fields(p, task, raw)


def task_fields(p: Path, task: TaskFile, raw: dict) -> dict:
    """A read task table (``task``: its TaskFile, ``raw``: what the file said) as ``UpArgs`` fields.

    ``p``: the file it came from (paths are resolved against its folder; errors name it). A sweep
    file's base and each of its jobs go through here too (gpuops.sweep.spec)."""
    if raw.get("setup"):  # [bootstrap]'s own table checks the keys, with this file's line numbers
        _check_setup(p, raw["setup"])
    out: dict = {}
    for (table, key), name in _TASK_FIELDS.items():
        here = raw.get(table, {}) if table else raw
        if key in here:
            value = getattr(getattr(task, table) if table else task, key)
            out[name] = value
    if task.run is not None:
        out["job"] = str(p.parent / task.run) if not Path(task.run).is_absolute() else task.run
    if task.workdir is not None:
        out["workdir"] = str(p.parent / task.workdir) if not Path(task.workdir).is_absolute() else task.workdir
    if task.workdir_exclude:
        out["workdir_exclude"] = tuple(task.workdir_exclude)
    if task.env:
        out["env"] = tuple(task.env)
    if task.recover_on is not None:
        out["recover_on"] = ",".join(task.recover_on)
    if task.args is not None:
        out["job_args"] = tuple(task.args)
    if "idle_minutes" in raw.get("limits", {}):
        out["idle_minutes"] = str(raw["limits"]["idle_minutes"])  # as written; parse_idle reads it as the flag
    if raw.get("setup"):
        out["setup"] = dict(raw["setup"])
    return out


def _check_setup(path: Path, data: dict) -> None:
    """BadInput naming ``path`` for a ``[setup]`` table that ``cls`` ([bootstrap]) refuses."""
    from gpuops.config import settings_from

    try:
        settings_from({"bootstrap": data})
    except BadInput as e:
        raise BadInput(f"{path}: setup.{e.message.removeprefix('bootstrap.')}", TASK_FIX) from None


def build(args: UpArgs) -> tuple[UpRequest, Settings]:
    """``args`` checked and made into the launcher's request and its settings.

    The settings: files, GPUOPS_* variables, then ``args``. Raises BadInput, one line naming the fix, before anything is rented."""
    from gpuops.providers import UP_CHOICES
    from gpuops.rental import launcher

    job = args.job
    if job is None and not args.interactive:
        raise BadInput(
            "no job: pass --job PATH, a task file with run, or --interactive",
            "e.g. gpuops up --job examples/bench.sh, or --interactive for a box to work on",
        )
    if job is not None and args.interactive:
        raise BadInput("--job and --interactive exclude each other", "an interactive box runs no job: drop one of them")
    not_blank_flag("--job", job, "pass the path of a script, e.g. --job examples/bench.sh")
    job_args = _job_args(args.job_args, job, args.interactive)
    not_blank_flag("--workdir", args.workdir, "pass the folder to upload, e.g. --workdir ., or leave --workdir out")
    if args.workdir_exclude and args.workdir is None:
        raise BadInput("--workdir-exclude narrows --workdir", "add --workdir DIR, or drop --workdir-exclude")
    not_blank_flag(
        "--experiment", args.experiment, "pass a name, e.g. --experiment llama-sweep, or leave --experiment out"
    )
    not_blank_flag(
        "--name", args.name, "pass a session id, e.g. --name llama-sweep-1, or leave --name out for a generated one"
    )
    not_blank_flag("--model", args.model, "pass a model, e.g. --model llama-3-8b, or leave --model out")
    not_blank_flag("--vendor", args.vendor, "pass nvidia, amd or any, or leave --vendor out")
    dtypes_not_blank(args.dtype, args.kv_dtype)
    card, gpu_count = card_count(args.card, args.gpu_count, most=launcher.MAX_GPUS_PER_BOX)
    price = parse_price(args.max_price)
    if args.provider is not None and args.provider not in UP_CHOICES:
        raise BadInput(f"unknown provider {args.provider!r}", f"use one of: {', '.join(UP_CHOICES)}")
    max_hours = args.max_hours
    if max_hours is not None and not math.isfinite(max_hours):
        raise BadInput(
            f"--max-hours must be a finite number of hours, got {max_hours}",
            "it is the box's hard TTL, e.g. --max-hours 2",
        )
    if max_hours is not None and max_hours <= 0:
        raise BadInput(
            f"--max-hours must be > 0, got {max_hours:g}", "pass the box's time limit in hours, e.g. --max-hours 2"
        )
    from gpuops.config import MAX_TTL_HOURS, load_settings

    if max_hours is not None and max_hours > MAX_TTL_HOURS:
        shown = f"{max_hours:g}" if float(f"{max_hours:g}") == max_hours else repr(max_hours)  # never "got 720"
        raise BadInput(
            f"--max-hours must be at most {MAX_TTL_HOURS:g} ({MAX_TTL_HOURS / 24:g} days), got {shown}",
            "a TTL is the box's hard time limit; pass the hours the job needs, e.g. --max-hours 48",
        )
    over: dict = {"up": {}, "teardown": {}, "job": {}}
    for key, val in (
        ("provider", args.provider),
        ("card", card),
        ("experiment", args.experiment),
        ("spot", args.spot),
        ("max_price", price),
    ):
        if val is not None:
            over["up"][key] = val
    if max_hours is not None:
        over["teardown"]["max_hours"] = max_hours
    if args.max_session_usd is not None:
        over["teardown"]["max_session_usd"] = args.max_session_usd
    idle = parse_idle(args.idle_minutes)
    if idle is not None:
        over["teardown"]["idle_minutes"] = idle
    if args.volume is not None:
        over["storage"] = {"volume": args.volume}
    if args.recover is not None or args.recover_on is not None:
        over["job"].update(recover_flags(args.recover, args.recover_on))
    if args.results is not None:
        over["job"]["results"] = args.results
    if args.setup:
        over["bootstrap"] = dict(args.setup)
    settings = load_settings(args.config, over)
    if args.recover_on_demand and not settings.job.recover:
        raise BadInput(
            "--recover-on-demand widens a run's re-rentals, and this up has none",
            "add --recover N (e.g. --recover 2), or drop --recover-on-demand",
        )
    if card:
        from gpuops.catalog import resolve_cards

        resolve_cards(card)  # unknown card: BadInput with suggestions, before anything else
    req = launcher.UpRequest(
        job=Path(job or ""),
        interactive=args.interactive,
        workdir=args.workdir or "",
        workdir_exclude=tuple(args.workdir_exclude),
        card=settings.up.card,
        experiment=settings.up.experiment,
        provider=settings.up.provider,
        spot=settings.up.spot,
        spot_explicit=args.spot is not None,
        max_usd_per_hour=settings.up.max_price,
        max_hours=settings.teardown.max_hours,
        note=args.note,
        dry_run=args.dry_run,
        volume=settings.storage.volume,
        vendor=args.vendor or "",
        name=args.name or "",
        recover=settings.job.recover,
        recover_on=tuple(settings.job.recover_on),
        env=tuple(args.env),
        recover_on_demand=args.recover_on_demand,
        job_args=job_args,
    )
    from gpuops.planning.sizing import parse_positive_int

    req.gpu_count = parse_positive_int(gpu_count, "--gpu-count", "2")
    defaults = {f.name: f.default for f in fields(UpArgs)}
    if args.model:
        req.model, req.dtype, req.kv_dtype = args.model, args.dtype, args.kv_dtype
        req.seq, req.batch = (
            parse_positive_int(args.seq, "--seq", "4096"),
            parse_positive_int(args.batch, "--batch", "32"),
        )
        req.allow_unverified = args.allow_unverified
    elif any(getattr(args, k) != defaults[k] for k in ("dtype", "kv_dtype", "seq", "batch", "allow_unverified")):
        raise BadInput(
            "--dtype, --kv-dtype, --seq, --batch and --allow-unverified size the box from a model",
            "add --model, e.g. --model llama-3-8b",
        )
    return req, settings


ARGS_FIX = "pass it in a file instead (--workdir DIR carries it) and give the job the file's path"


def _job_args(given: Any, job: str | None, interactive: bool) -> tuple[str, ...]:
    """The job's argv (``up ... -- ARG ...``, a task file's ``args``) checked, as a tuple of str.

    ``given``: a sequence of str (a bare str is refused, not read as its characters). BadInput, one
    line naming the fix, before anything is rented: arguments with ``interactive`` (no job to give
    them to), an argument that is not text, holds a NUL byte (no command line carries one) or is
    not UTF-8, and a job line over ``launcher.MAX_JOB_LINE_BYTES`` bytes as the box's shell
    receives it (``launcher.job_line_bytes``)."""
    from gpuops.rental.launcher import MAX_JOB_LINE_BYTES, job_line_bytes

    if isinstance(given, str):
        raise BadInput(
            f"job arguments must be a list of strings, got the string {given[:40]!r}",
            "give each argument apart, e.g. args = ['--lr', '1e-3']",
        )
    out = tuple(given)
    if not out:
        return out
    if interactive:
        raise BadInput(
            "job arguments and --interactive exclude each other",
            "an interactive box runs no job: drop the arguments after --, or drop --interactive",
        )
    for i, a in enumerate(out, 1):
        if not isinstance(a, str):
            raise BadInput(f"job argument {i} is a {type(a).__name__}, not text", "write it as text, e.g. '1e-3'")
        if "\0" in a:
            raise BadInput(f"job argument {i} holds a NUL byte, which no command line can carry", ARGS_FIX)
        try:
            a.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(f"job argument {i} is not UTF-8 text", ARGS_FIX) from None
    size = job_line_bytes(Path(job or "").name, out)
    if size > MAX_JOB_LINE_BYTES:
        raise BadInput(
            f"the job's arguments make a command line of {size:,} bytes on the box (quoted), "
            f"more than {MAX_JOB_LINE_BYTES:,}",
            ARGS_FIX,
        )
    return out


def recover_flags(recover: int | None, recover_on: str | None) -> dict:
    """``--recover N`` / ``--recover-on R,R`` as [job] settings.

    BadInput (one line) for a count
    that is not a whole number in [0, MAX_RECOVER] or a reason a run never re-rents on."""
    from gpuops.config import MAX_RECOVER, parse_recover_on

    out: dict = {}
    if recover is not None:
        if not 0 <= recover <= MAX_RECOVER:
            raise BadInput(
                f"--recover must be a whole number of re-rentals from 0 to {MAX_RECOVER}, got {str(recover)!r}",
                "e.g. --recover 3 (a run of at most 4 rentals)",
            )
        out["recover"] = recover
    if recover_on is not None:
        try:
            out["recover_on"] = parse_recover_on(recover_on)
        except ValueError as e:
            raise BadInput(f"--recover-on: {e}", "e.g. --recover-on preempted,provision_failed") from None
    return out
