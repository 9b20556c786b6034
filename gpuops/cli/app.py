"""The gpuops command line (typer). Parse, call one service function, render. No logic here.

Imports stay light: services, rich and provider SDKs load inside the commands that use them, so
`gpuops --help` starts fast.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import typer

from gpuops import __version__, cli_values
from gpuops.cli.group import Group, interrupt_note
from gpuops.errors import BadInput, GpuopsError

cli_values.install()  # text and number() option values without importing pydantic (see gpuops/cli_values.py)


app = typer.Typer(
    cls=Group,
    name="gpuops",
    help="Rent a GPU for one job: size it, rent the cheapest fit, bootstrap, run, always tear down, book the cost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
from gpuops.cli.ledger import ledger_app  # noqa: E402  (typer only; services load inside its commands)

app.add_typer(ledger_app, name="ledger")
from gpuops.cli.volumes import volumes_app  # noqa: E402  (typer only; SDKs load inside its commands)

app.add_typer(volumes_app, name="volumes")
from gpuops.cli.options import (  # noqa: E402
    CONFIG_OPT,
    TZ_OPT,
    _card_count,
    _not_blank,
    _parse_idle,
    _parse_price,
    _print_lossy,
    _settings,
    month_option,
    number,
    output_options,
)

# Provider names in help strings come from the registry (names only: no provider class is imported).
from gpuops.providers import MARKETPLACES, NAMES, SPOT, WITH_VOLUMES, choices, titles  # noqa: E402


def _spot_by_provider() -> str:
    """What `up` rents on each provider by default, from the registry.

    E.g. ``Vast.ai bids the offer's
    minimum (it can be taken back); RunPod has no spot, so on-demand; local: on-demand``."""
    from gpuops.providers import REGISTRY

    said = [f"{REGISTRY[n].title} bids the offer's minimum (it can be taken back)" for n in SPOT]
    said += [f"{REGISTRY[n].title} has no spot, so on-demand" for n in MARKETPLACES if n not in SPOT]
    said += [f"{n}: on-demand" for n in NAMES if n not in MARKETPLACES and n not in SPOT]
    return "; ".join(said)


def _without_spot() -> str:
    """The marketplaces without interruptible offers, for a help string: ``RunPod has``."""
    names = [n for n in MARKETPLACES if n not in SPOT]
    return f"{titles(names, ', ')} {'has' if len(names) == 1 else 'have'}"


CARD_HELP = (
    "Card or family, e.g. a100, h100-sxm, rtx-4090; NAME:COUNT for COUNT GPUs (a100:2). `gpuops cards` lists them."
)


def _version(value: bool) -> None:
    if value:
        print(f"gpuops {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """gpuops: GPU rentals that cannot be forgotten."""


@app.command()
@output_options()
def up(
    # str, not Path: typer coerces a Path through a pydantic adapter built on first use (start-up
    # before the intent row); gpuops.rental.launcher.validate checks the file.
    job: str = typer.Option(
        ..., "--job", metavar="PATH", help="Script to run on the box (bash .sh, python .py, or an executable)."
    ),
    card: str | None = typer.Option(None, "--card", help=CARD_HELP),
    experiment: str | None = typer.Option(None, "--experiment", help="Experiment name the cost is booked under."),
    provider: str | None = typer.Option(
        None, "--provider", help=f"{choices(NAMES)} (default: [up] provider, else local)."
    ),
    spot: bool | None = typer.Option(
        None,
        "--spot/--on-demand",
        help=(
            "Interruptible offers, or on-demand only. Default ([up] spot = true): prefer spot where the provider has it: "
            f"{_spot_by_provider()}."
        ),
    ),
    max_price: float | None = number(
        None, "--max-price", help="Highest price in USD per hour for the whole box.", example="2.5", unit="USD per hour"
    ),
    max_hours: float | None = number(
        None, "--max-hours", help="Hard TTL of the box in hours.", example="2", unit="hours"
    ),
    idle_minutes: str | None = typer.Option(None, "--idle-minutes", help="Idle-GPU window in minutes, or 'off'."),
    note: str = typer.Option("", "--note", help="Free text stored with the session."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check everything and show what would be rented; rent nothing."
    ),
    model: str | None = typer.Option(None, "--model", help="Size the box from this model first (as in `gpuops plan`)."),
    dtype: str = typer.Option(
        "auto",
        "--dtype",
        help="With --model: weight dtype (auto = the checkpoint's; fp32, bf16, fp16, fp8, int8, int4).",
    ),
    kv_dtype: str = typer.Option(
        "auto", "--kv-dtype", help="With --model: KV cache dtype (auto = the model's, as vLLM)."
    ),
    seq: int = number(4096, "--seq", help="With --model: tokens per sequence.", example="4096", whole=True),
    batch: int = number(1, "--batch", help="With --model: concurrent sequences.", example="32", whole=True),
    gpu_count: int = number(
        1,
        "--gpu-count",
        help="GPUs in the box (with --model: weights and KV split across them).",
        example="2",
        whole=True,
    ),
    allow_unverified: bool = typer.Option(
        False, "--allow-unverified", help="With --model: rent even when nothing confirms the model's size."
    ),
    vendor: str | None = typer.Option(
        None, "--vendor", help="nvidia | amd | any (default: nvidia; amd for a ROCm [up] image or an AMD --card)."
    ),
    volume: str | None = typer.Option(
        None, "--volume", help="Mount this persistent volume, <provider>:<id or name> ([storage] volume)."
    ),
    name: str | None = typer.Option(
        None, "--name", help="The session id to use (1-40 of a-z, 0-9, -), e.g. llama-sweep-1: `gpuops logs/down NAME`."
    ),
    exit_code: str = typer.Option(
        "gpuops",
        "--exit-code",
        help=(
            "gpuops (default: 0 job done, 1 failed, 2 bad input, 3 taken down, 130 interrupted) or job: exit with the job's own "
            "exit code when it ran (else the gpuops code)."
        ),
    ),
    recover: int | None = number(
        None,
        "--recover",
        help="A run: re-rent up to N times when a spot box is taken back ([job] recover).",
        example="3 (a run of at most 4 rentals)",
        whole=True,
        unit="re-rentals",
    ),
    recover_on: str | None = typer.Option(
        None, "--recover-on", help="End reasons that re-rent, comma-separated (default: preempted)."
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Rent a box, bootstrap it, run JOB, tear it down, book the session.

    Spot by default where the provider has it ([up] spot = true): interruptible at the offer's minimum bid, else
    on-demand (see --spot); --on-demand never rents spot."""
    from gpuops.providers import NAMES
    from gpuops.render import emit, ui
    from gpuops.rental import launcher

    if exit_code not in ("gpuops", "job"):
        raise BadInput(
            f"--exit-code {exit_code!r} is not gpuops or job", "--exit-code job exits with the job's own exit code"
        )
    _not_blank("--job", job, "pass the path of a script, e.g. --job examples/bench.sh")
    _not_blank("--experiment", experiment, "pass a name, e.g. --experiment llama-sweep, or leave --experiment out")
    _not_blank("--name", name, "pass a session id, e.g. --name llama-sweep-1, or leave --name out for a generated one")
    _not_blank("--model", model, "pass a model, e.g. --model llama-3-8b, or leave --model out")
    _not_blank("--vendor", vendor, "pass nvidia, amd or any, or leave --vendor out")
    _dtypes_not_blank(dtype, kv_dtype)
    card, gpu_count = _card_count(card, gpu_count, most=launcher.MAX_GPUS_PER_BOX)
    price = _parse_price(max_price)
    if provider is not None and provider not in NAMES:
        raise BadInput(f"unknown provider {provider!r}", f"use one of: {', '.join(NAMES)}")
    if max_hours is not None and not math.isfinite(max_hours):
        raise BadInput(
            f"--max-hours must be a finite number of hours, got {max_hours}",
            "it is the box's hard TTL, e.g. --max-hours 2",
        )
    if max_hours is not None and max_hours <= 0:
        raise BadInput(
            f"--max-hours must be > 0, got {max_hours:g}", "pass the box's time limit in hours, e.g. --max-hours 2"
        )
    from gpuops.config import MAX_TTL_HOURS

    if max_hours is not None and max_hours > MAX_TTL_HOURS:
        shown = f"{max_hours:g}" if float(f"{max_hours:g}") == max_hours else repr(max_hours)  # never "got 720"
        raise BadInput(
            f"--max-hours must be at most {MAX_TTL_HOURS:g} ({MAX_TTL_HOURS / 24:g} days), got {shown}",
            "a TTL is the box's hard time limit; pass the hours the job needs, e.g. --max-hours 48",
        )
    over: dict = {"up": {}, "teardown": {}}
    for key, val in (
        ("provider", provider),
        ("card", card),
        ("experiment", experiment),
        ("spot", spot),
        ("max_price", price),
    ):
        if val is not None:
            over["up"][key] = val
    if max_hours is not None:
        over["teardown"]["max_hours"] = max_hours
    idle = _parse_idle(idle_minutes)
    if idle is not None:
        over["teardown"]["idle_minutes"] = idle
    if volume is not None:
        over["storage"] = {"volume": volume}
    if recover is not None or recover_on is not None:
        over["job"] = _recover_flags(recover, recover_on)
    settings = _settings(config, over)
    if card:
        from gpuops.catalog import resolve_cards

        resolve_cards(card)  # unknown card: BadInput with suggestions, before anything else
    req = launcher.UpRequest(
        job=Path(job),
        card=settings.up.card,
        experiment=settings.up.experiment,
        provider=settings.up.provider,
        spot=settings.up.spot,
        spot_explicit=spot is not None,
        max_usd_per_hour=settings.up.max_price,
        max_hours=settings.teardown.max_hours,
        note=note,
        dry_run=dry_run,
        volume=settings.storage.volume,
        vendor=vendor or "",
        name=name or "",
        recover=settings.job.recover,
        recover_on=tuple(settings.job.recover_on),
    )
    from gpuops.planning.sizing import parse_positive_int

    req.gpu_count = parse_positive_int(gpu_count, "--gpu-count", "2")
    if model:
        req.model, req.dtype, req.kv_dtype = model, dtype, kv_dtype
        req.seq, req.batch = parse_positive_int(seq, "--seq", "4096"), parse_positive_int(batch, "--batch", "32")
        req.allow_unverified = allow_unverified
    elif (dtype, kv_dtype, seq, batch, allow_unverified) != ("auto", "auto", 4096, 1, False):
        raise BadInput(
            "--dtype, --kv-dtype, --seq, --batch and --allow-unverified size the box from a model",
            "add --model, e.g. --model llama-3-8b",
        )
    from gpuops.render.console_reporter import ConsoleReporter

    reporter = ConsoleReporter(json_mode=fmt != "table")
    try:
        summ = launcher.run_up(req, settings, reporter)
    finally:
        reporter.close()
    interrupt_note(  # the rental is over and booked; only its summary is lost
        f"interrupted after the rental ended; `gpuops ledger show {summ.get('session') or 'SESSION'}` has its summary"
    )
    if summ.get("dry_run"):
        emit.emit(summ, fmt, lambda: ui.render_dry_run(summ))
        return
    _print_lossy(lambda: emit.emit(summ, fmt, lambda: ui.render_summary(summ)))
    from bootstrap.vocabulary import EndReason, exit_status

    # The exit status follows the row (bootstrap.vocabulary.EXIT_STATUS): job_end 0, interrupted
    # 130, manual (`gpuops down` from elsewhere) 3, anything else 1; a job_end whose results did
    # not come back (summary "error") is 1.
    code = exit_status(summ["end_reason"])
    if code == 0 and summ.get("error"):
        code = 1
    if summ.get("interrupted") and summ["end_reason"] == EndReason.INTERRUPTED:
        code = 130
    if exit_code == "job" and summ.get("exit_code") is not None:  # scripts that want the job's own status
        code = int(summ["exit_code"]) & 0xFF
    if code:
        raise typer.Exit(code)


def _dtypes_not_blank(dtype: str, kv_dtype: str) -> None:
    """BadInput for a blank ``--dtype`` or ``--kv-dtype`` (the flag left out is ``auto``)."""
    _not_blank("--dtype", dtype, "pass a dtype, e.g. --dtype bf16, or leave --dtype out for the checkpoint's (auto)")
    _not_blank(
        "--kv-dtype", kv_dtype, "pass a dtype, e.g. --kv-dtype fp8, or leave --kv-dtype out for the model's (auto)"
    )


def _recover_flags(recover: int | None, recover_on: str | None) -> dict:
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


@app.command("offers")
@output_options()
def offers(
    card: str | None = typer.Option(None, "--card", help=CARD_HELP),
    vram_gb: float | None = number(
        None, "--vram-gb", help="Memory needed per GPU, in GB (10^9 bytes).", example="24", unit="GB"
    ),
    model: str | None = typer.Option(None, "--model", help="Size from this model instead (as in `gpuops plan`)."),
    dtype: str = typer.Option(
        "auto",
        "--dtype",
        help="With --model: weight dtype (auto = the checkpoint's; fp32, bf16, fp16, fp8, int8, int4).",
    ),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="With --model: KV cache dtype (auto = the model's)."),
    seq: int = number(4096, "--seq", help="With --model: tokens per sequence.", example="4096", whole=True),
    batch: int = number(1, "--batch", help="With --model: concurrent sequences.", example="32", whole=True),
    gpu_count: int = number(1, "--gpu-count", help="GPUs in the box.", example="2", whole=True),
    provider: str | None = typer.Option(
        None, "--provider", help=f"{choices(NAMES)} (default: every provider with a key)."
    ),
    spot: bool | None = typer.Option(
        None,
        "--spot/--on-demand",
        help=(
            f"Interruptible offers only ({titles(SPOT, ', ')}; {_without_spot()} none), or on-demand only (default: both, each at the price it rents at)."
        ),
    ),
    max_price: float | None = number(
        None, "--max-price", help="Highest price in USD per hour for the whole box.", example="2.5", unit="USD per hour"
    ),
    limit: int = number(20, "--limit", help="Show at most this many offers.", example="20", whole=True),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Offers across providers: those that fit, cheapest first, reliability as the tie-break."""
    from gpuops.planning.sizing import parse_positive_int
    from gpuops.render import emit, offers as offers_view, progress, ui
    from gpuops.rental.offers import find_offers

    _not_blank("--model", model, "pass a model, e.g. --model llama-3-8b, or leave --model out")
    _dtypes_not_blank(dtype, kv_dtype)
    card, gpu_count = _card_count(card, gpu_count)
    if not model and (dtype, kv_dtype, seq, batch) != ("auto", "auto", 4096, 1):
        raise BadInput(
            "--dtype, --kv-dtype, --seq and --batch size the box from a model", "add --model, e.g. --model llama-3-8b"
        )
    res = find_offers(
        _settings(config),
        card=card,
        vram_gb=vram_gb,
        gpu_count=gpu_count,
        provider=provider,
        spot=spot,
        max_price=_parse_price(max_price),
        limit=limit,
        model=model,
        dtype=dtype,
        kv_dtype=kv_dtype,
        seq=parse_positive_int(seq, "--seq", "4096"),
        batch=parse_positive_int(batch, "--batch", "32"),
        waiting=progress.waiting,
    )
    for n in res.notes:
        sys.stderr.write(f"note: {ui.safe(n)}\n")
    emit.emit(res.offers, fmt, lambda: offers_view.render(res))


@app.command()
@output_options()
def plan(
    model: str | None = typer.Option(
        None,
        "--model",
        help="Built-in name (e.g. llama-3-8b; 'list' shows them, 'all' plans every one), a config.json or its directory, or a HF repo id.",
    ),
    dtype: str = typer.Option(
        "auto",
        "--dtype",
        help="Weight dtype: auto (the checkpoint's, quantization_config included), fp32, bf16, fp16, fp8, int8, int4.",
    ),
    kv_dtype: str = typer.Option(
        "auto", "--kv-dtype", help="KV cache dtype: auto (the model's, as vLLM), fp32, bf16, fp16, fp8, int8."
    ),
    batch: int = number(1, "--batch", help="Concurrent sequences.", example="32", whole=True),
    seq: int = number(
        4096, "--seq", help="Tokens per sequence (prompt + output); vLLM --max-model-len.", example="4096", whole=True
    ),
    engine: str | None = typer.Option(
        None, "--engine", help="vllm (default: sizes as vLLM 0.11 does) | hf (transformers generate) | train."
    ),
    mode: str = typer.Option(
        "infer",
        "--mode",
        help="infer | train (same as --engine train: mixed-precision Adam, 16 B/param + activations).",
    ),
    gpu_count: int = number(
        1, "--gpu-count", help="GPUs per box; weights and KV split by tensor parallelism.", example="2", whole=True
    ),
    headroom: float | None = number(
        None,
        "--gpu-memory-utilization",
        "--headroom",
        example="0.9",
        help="Fraction of the engine-visible VRAM the engine takes (vLLM default 0.90).",
    ),
    max_num_seqs: int | None = number(
        None,
        "--max-num-seqs",
        help="vLLM --max-num-seqs (default: the card's, 256 or 1024).",
        example="256",
        whole=True,
    ),
    max_num_batched_tokens: int | None = number(
        None,
        "--max-num-batched-tokens",
        example="8192",
        whole=True,
        help="vLLM --max-num-batched-tokens (default: the card's, 2048 or 8192).",
    ),
    card: str | None = typer.Option(
        None,
        "--card",
        help="One card or a family, e.g. a100, h100-sxm, rtx-4090, or NAME:COUNT (default: all; 'list' shows them).",
    ),
    vendor: str | None = typer.Option(
        None, "--vendor", help="nvidia (default) | amd | any: whose cards to plan when --card names none."
    ),
    fmt: str = "table",
) -> None:
    """Size the box before renting: memory as the engine sizes it, fit, KV pool, max concurrency, decode ceiling, $/Mtoken per card, and the `vllm serve` command.

    Two other questions have their own commands: `gpuops plan storage --model M` (keep the weights on
    a volume or refetch them every run) and `gpuops plan spot --card C` (what a run on spot costs
    against one on-demand box: the break-even preemption rate)."""
    from gpuops.render.sizing import plan_command

    if card == "list":  # the catalog's cards, as `gpuops cards`
        from gpuops.render.cards import show_cards

        show_cards(fmt)
        return
    if not model:
        raise BadInput(
            "--model is required",
            "e.g. gpuops plan --model llama-3-8b (--model list shows the models, --card list the cards)",
        )
    _dtypes_not_blank(dtype, kv_dtype)
    _not_blank("--engine", engine, "pass vllm, hf or train, or leave --engine out for vllm")
    _not_blank("--vendor", vendor, "pass nvidia, amd or any, or leave --vendor out")
    card, gpu_count = _card_count(card, gpu_count)
    plan_command(
        model,
        dtype=dtype,
        kv_dtype=kv_dtype,
        batch=batch,
        seq=seq,
        mode=mode,
        gpu_count=gpu_count,
        headroom=headroom,
        card=card,
        fmt=fmt,
        engine=engine,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        vendor=vendor,
    )


@app.command("plan-spot", hidden=True)  # typed as `gpuops plan spot` (see Group)
@output_options()
def plan_spot(
    card: str | None = typer.Option(None, "--card", help="Card or family whose live offers give the two prices."),
    provider: str | None = typer.Option(None, "--provider", help="Whose offers (default: every provider with a key)."),
    gpu_count: int = number(1, "--gpu-count", help="GPUs in the box.", example="2", whole=True),
    lost_minutes: float = number(
        10,
        "--lost-minutes",
        example="10",
        unit="minutes",
        help="Minutes one preemption costs: re-rent, bootstrap, work since the last checkpoint.",
    ),
    spot_usd_per_hour: float | None = number(
        None,
        "--spot-usd-per-hour",
        help="The spot price instead of the cheapest offer's.",
        example="0.2",
        unit="USD per hour",
    ),
    on_demand_usd_per_hour: float | None = number(
        None,
        "--on-demand-usd-per-hour",
        example="0.5",
        unit="USD per hour",
        help="The on-demand price instead of the cheapest offer's.",
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """What a spot run (up --spot --recover N) costs against one on-demand box: the break-even preemption rate from the two prices."""
    from gpuops.render import emit, progress, spot as spot_view
    from gpuops.rental.spot import spot_plan

    need_offers = spot_usd_per_hour is None or on_demand_usd_per_hour is None
    rep = spot_plan(
        _settings(config) if need_offers else None,
        card=card,
        provider=provider,
        gpu_count=gpu_count,
        lost_minutes=lost_minutes,
        spot_usd_per_hour=spot_usd_per_hour,
        on_demand_usd_per_hour=on_demand_usd_per_hour,
        waiting=progress.waiting,
    )
    emit.emit(rep, fmt, lambda: spot_view.render(rep))


@app.command("plan-storage", hidden=True)  # typed as `gpuops plan storage` (see Group)
@output_options()
def plan_storage(
    model: str = typer.Option(..., "--model", help="Model, as in `gpuops plan --model`."),
    runs_per_month: int = number(
        20, "--runs-per-month", help="Boxes per month that need the weights.", example="20", whole=True
    ),
    download_gbps: float = number(
        1, "--download-gbps", help="Download rate from the box to the hub, Gbit/s.", example="1"
    ),
    provider: str = typer.Option(
        WITH_VOLUMES[0], "--provider", help=f"{choices(WITH_VOLUMES)}: whose volume price applies."
    ),
    dtype: str = typer.Option("bf16", "--dtype", help="Weight dtype when the checkpoint size is unknown."),
    card: str | None = typer.Option(
        None, "--card", help="The box whose hourly price a download burns (default: cheapest that fits)."
    ),
    usd_per_hour: float | None = number(
        None,
        "--usd-per-hour",
        help="Box price instead of the card's reference price.",
        example="2",
        unit="USD per hour",
    ),
    usd_per_gb_month: float | None = number(
        None,
        "--usd-per-gb-month",
        help="Volume price instead of the provider's.",
        example="0.07",
        unit="USD per GB-month",
    ),
    fmt: str = "table",
) -> None:
    """Keep the weights on a volume or refetch them every run: sizes, prices, break-even, recommendation."""
    from gpuops.planning.storage import storage_plan
    from gpuops.render.storage import render

    render(
        storage_plan(
            model,
            runs_per_month=runs_per_month,
            download_gbps=download_gbps,
            provider=provider,
            dtype=dtype,
            card=card,
            usd_per_hour=usd_per_hour,
            usd_per_gb_month=usd_per_gb_month,
        ),
        fmt,
    )


@app.command()
@output_options()
def ps(
    everyone: bool = typer.Option(
        False, "--all/--mine", help="Every user's open sessions, or only yours (default: yours)."
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """List open sessions (boxes that may be billing): yours by default, with their owner."""
    from gpuops.render import emit, ui
    from gpuops.rental import sessions

    settings = _settings(config, emergency=True)
    ledger = sessions.open_ledger(settings)
    me = settings.owner()
    rows = sessions.list_open(ledger, owner=None if everyone else me)

    def table() -> None:
        ui.render_sessions(rows, "open sessions" if everyone else f"open sessions of {me}")
        hidden = 0 if everyone else len(ledger.open_sessions()) - len(rows)
        if hidden:
            print(f"{hidden} open session(s) of other users not shown; `gpuops ps --all` lists them")
        from gpuops.teardown.watchdog_passes import last_passes

        ui.render_watchdogs(last_passes(ledger))

    emit.emit(rows, fmt, table, csv_columns=sessions.open_session_columns(ledger))
    for n in ledger.notices:  # a spool folder refused, a spool line quarantined
        sys.stderr.write(f"warning: {ui.safe(n)}\n")


app.command("status", hidden=True, help="Same as `gpuops ps` (SkyPilot's `sky status`).")(ps)
app.command("ls", hidden=True, help="Same as `gpuops ps` (runpodctl's `get pod`, vastai's `show instances`).")(ps)


@app.command()
@output_options()
def cards(
    fmt: str = "table",
) -> None:
    """The cards gpuops knows: names and aliases for --card, memory, bandwidth, reference price."""
    from gpuops.render.cards import show_cards

    show_cards(fmt)


@app.command()
@output_options()
def down(
    session: str | None = typer.Argument(None, help="Session id (or a unique prefix)."),
    all_open: bool = typer.Option(
        False, "--all", help="Take down every open session of yours (rented with a key you hold)."
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Destroy a session's box now and close its row (reason: manual)."""
    from gpuops.render import emit
    from gpuops.rental import sessions

    settings = _settings(config, emergency=True)
    from gpuops.render.progress import waiting

    with waiting(
        f"destroying {'every open session' if all_open else session}: waiting for the provider and the job to stop"
    ):
        out = sessions.down(settings, sessions.open_ledger(settings), session, all_open)
    if fmt != "table":
        emit.emit(out, fmt)
    else:
        for r in out:
            if r["end_reason"] == "unknown":
                print(f"{r['session']}: instance {r['instance_id']} is not visible to this key; left open (unknown)")
                continue
            if r.get("refused"):
                print(f"{r['session']}: {r.get('refused_id') or r['instance_id']} not touched: {r['refused']}")
            if r.get("error"):
                print(
                    f"{r['session']}: destroy of {r['instance_id']} not done: {r['error']}; the row stays open, "
                    "run `gpuops down` again or `gpuops reconcile`"
                )
                continue
            if r.get("refused") and not r["destroyed"]:
                print(
                    f"{r['session']}: ours is gone (nothing labelled ours is listed); the row is closed ({r['end_reason']})"
                )
                continue
            print(
                f"{r['session']}: {'destroyed ' + r['instance_id'] if r['destroyed'] else 'already closed'} ({r['end_reason']})"
            )
        if not out:
            print("no open sessions")
    if any(r.get("error") for r in out):
        raise typer.Exit(1)  # a box may still be billing: say so in the exit status too


@app.command("logs")
def logs(
    session: str = typer.Argument(..., help="Session id (or a unique prefix)."),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep streaming until the job ends (Ctrl-C detaches; the job keeps running)."
    ),
    config: str | None = CONFIG_OPT,
) -> None:
    """Print a session's job log from its box (re-attach), or the kept copy once it is gone."""
    from gpuops.rental.logs import show_logs

    def write(chunk: bytes) -> None:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()

    try:
        show_logs(_settings(config, emergency=True), session, follow=follow, write=write)
    except KeyboardInterrupt:
        sys.stderr.write("detached; the job keeps running\n")


@app.command()
@output_options(
    formats=("table", "json"), help="table (lines, default) or json: one JSON object per action, one per line."
)
def watchdog(
    interval: float = number(30.0, "--interval", help="Seconds between ticks.", example="30", unit="seconds"),
    once: bool = typer.Option(False, "--once", help="One reconcile and one tick, then exit (for cron)."),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="One line per pass on stderr: when, how long, how many actions."
    ),
    install: bool = typer.Option(
        False, "--install", help="Run it as a user service (systemd user unit / launchd agent) with these settings."
    ),
    uninstall: bool = typer.Option(False, "--uninstall", help="Stop and remove the user service."),
    service_status: bool = typer.Option(
        False, "--status", help="Whether the user service runs, since when, and each watchdog's last pass."
    ),
    env_file: str | None = typer.Option(
        None, "--env-file", help="Read variables from this 0600 file first (what --install writes)."
    ),
) -> None:
    """Watch every open session: job end, idle GPU, TTL, session cap, balance floor, monthly cap.

    With --once, --interval says how often your cron runs it (the views call a pass late after 3)."""
    json_out = fmt == "json"
    if not math.isfinite(interval) or interval <= 0:  # nan passes `<= 0`; inf is a pass never late
        raise BadInput(f"--interval must be a finite number of seconds > 0, got {interval:g}", "e.g. --interval 30")
    if install + uninstall + service_status + once > 1:
        raise BadInput("--install, --uninstall, --status and --once go one at a time", "pass one of them")
    if env_file is not None:
        from gpuops.teardown.watchdog_service import read_env_file

        os.environ.update(read_env_file(Path(env_file)))
    if install or uninstall or service_status:
        from gpuops.render import service as service_view
        from gpuops.rental.sessions import open_ledger
        from gpuops.teardown.watchdog_passes import health_lines, last_passes
        from gpuops.teardown.watchdog_service import run_service

        what = "install" if install else "uninstall" if uninstall else "status"
        # install: a full load (the service must start on these settings); the others only read the ledger
        settings = _settings(config, emergency=not install)
        done = run_service(what, settings, interval, lambda: last_passes(open_ledger(settings)))
        health = [t for t, _ in health_lines(done.out["watchdogs"])] if what == "status" else []
        return service_view.render(done, settings, interval, health, json_out)
    from gpuops.teardown import watchdog as wd

    settings = _settings(config)
    emit = _emit_json if json_out else print
    if not once:
        print(f"gpuops watchdog: every {interval:g} s; Ctrl-C stops it", file=sys.stderr)

    def on_pass(name: str, acts: list, seconds: float) -> None:
        if verbose:
            import time as _time

            from gpuops.render.emit import utc_iso
            from gpuops.render.session_history import plural

            print(
                f"{utc_iso(round(_time.time()))} {name}: {plural(len(acts), 'action')} in {seconds:.1f} s",
                file=sys.stderr,
                flush=True,
            )

    if once:
        from gpuops.render.progress import waiting

        with waiting("watchdog --once: one reconcile and one tick over the open sessions"):
            acts = wd.run(settings, interval=interval, once=once, emit=emit, on_pass=on_pass)
    else:  # the daemon says what it does per pass (-v), never a live line for hours
        acts = wd.run(settings, interval=interval, once=once, emit=emit, on_pass=on_pass)
    if once and not acts:  # a quiet pass still answers: a line, or one JSON object of the actions' shape
        idle = "nothing to do: no open session needed an action (one reconcile and one tick done)"
        _emit_json(wd.Action("", "idle", idle)) if json_out else print(idle)
    if once and any(a.kind == "error" for a in acts):
        raise typer.Exit(1)


@app.command()
@output_options()
def reconcile(
    destroy_unknown: bool = typer.Option(
        False, "--destroy-unknown", help="Also destroy gpuops- instances this ledger has no row for."
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Match provider instances labelled gpuops-* to ledger rows: destroy orphans, close gone rows."""
    from gpuops.render import emit
    from gpuops.teardown import reconcile as rec

    # --destroy-unknown trusts the ledger to hold every box of ours: a broken setting (a blank
    # ledger url) is refused, not skipped, since skipping it can make another ledger "the ledger".
    settings = _settings(config, emergency=not destroy_unknown)
    from gpuops.render.progress import waiting

    with waiting("reconcile: asking the providers for gpuops instances"):
        acts = rec.reconcile(rec.Context(settings, destroy_unknown=destroy_unknown))
    if fmt != "table":
        emit.emit([a.as_json() for a in acts], fmt, csv_columns=rec.ACTION_COLUMNS)
    else:
        for a in acts:
            print(a)
        if not acts:
            print("nothing to reconcile")
    if any(a.kind == "error" for a in acts):
        raise typer.Exit(1)


@app.command()
@output_options()
def check(
    provider: str | None = typer.Option(
        None,
        "--provider",
        help=f"{choices(NAMES)} (default: {titles(MARKETPLACES, ' and ')}; --rent: [up] provider, else the one with a key).",
    ),
    live: bool = typer.Option(
        False,
        "--live",
        help="Also ask the providers: key, balance, offers, our instances and volumes, this month's billing.",
    ),
    rent: bool = typer.Option(
        False, "--rent", help="With --live: one short rental per teardown layer, under one hard cap."
    ),
    max_usd: float | None = number(
        None,
        "--max-usd",
        help="The whole check's cap in USD (default [check] max_usd, 0.10).",
        example="0.2",
        unit="USD",
    ),
    max_minutes: float | None = number(
        None,
        "--max-minutes",
        example="15",
        unit="minutes",
        help="The whole check's wall time in minutes (default [check] max_minutes, 10).",
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """What gpuops will do with your account, one line per check with its fix; --live asks the providers; --live --rent proves every teardown layer on a real box.

    Exit status: 0 every check holds (warnings named), 1 a check failed, 4 --live checked nothing
    (no provider has an API key), 130 interrupted (after the cleanup)."""
    from gpuops.providers import NAMES
    from gpuops.render import emit

    if provider is not None and provider not in NAMES:
        raise BadInput(f"unknown provider {provider!r}", f"use one of: {', '.join(NAMES)}")
    if rent and not live:
        raise BadInput("--rent rents boxes: it needs --live", "run `gpuops check --live --rent`")
    for flag, val in (("--max-usd", max_usd), ("--max-minutes", max_minutes)):
        if val is not None and (not math.isfinite(val) or val <= 0):
            raise BadInput(
                f"{flag} must be a positive number, got {val:g}", f"e.g. {flag} {0.2 if flag == '--max-usd' else 15}"
            )
        if val is not None and not rent:
            raise BadInput(f"{flag} caps the rentals of --rent", "add --live --rent, or drop it")
    from gpuops.check import check as chk

    problems: list[str] = []
    if rent:  # rents boxes: a broken setting refuses, as `up` does
        settings = _settings(config)
    else:  # says what is broken, one line with its fix, and goes on without it
        from gpuops.config import load_settings

        settings = load_settings(config, lenient=True, warn=problems.append)
    renting = chk.rent_provider(settings, provider) if rent else provider
    findings, led = chk.offline(settings, provider or renting, problems=problems)
    if live:
        from gpuops.render.progress import waiting

        with waiting("check --live: asking the providers"):
            findings += chk.live(settings, led, renting)
    if rent and not any(f.verdict == chk.Verdict.FAIL and f.check.startswith("auth.") for f in findings):
        from gpuops.check import check_layers
        from gpuops.providers import get_provider
        from gpuops.rental.sessions import open_ledger

        led = led or open_ledger(settings)
        assert renting is not None  # rent: chk.rent_provider named it
        say = (lambda line: print(line, file=sys.stderr, flush=True)) if fmt == "table" else None
        findings += check_layers.rent(
            settings,
            led,
            get_provider(renting, settings),
            max_usd=max_usd,
            max_minutes=max_minutes,
            config=config,
            on_line=say,
        )
    doc = chk.report(findings, provider=renting, live=live, rent=rent)
    from gpuops.render import check as check_view

    emit.emit(doc, fmt, lambda: check_view.render(doc), csv_records=doc["checks"], csv_columns=chk.FINDING_COLUMNS)
    if any(c["check"] == "rent.interrupted" for c in doc["checks"]):
        raise typer.Exit(130)  # after the cleanup: every box destroyed
    if doc["exit"]:
        raise typer.Exit(doc["exit"])


def _emit_json(action) -> None:
    from gpuops.render.emit import json_line, write

    write(json_line(action.as_json()))


@app.command()
def dashboard(
    month: str | None = month_option("YYYY-MM shown first (default: this month)."),
    tz: str | None = TZ_OPT,
    port: int = number(8765, "--port", help="Port on 127.0.0.1 (0: any free port).", example="8765", whole=True),
    html: Path | None = typer.Option(
        None, "--html", help="Write the page as one self-contained offline file instead of serving it."
    ),
    config: str | None = CONFIG_OPT,
) -> None:
    """The month's costs as a read-only web page on 127.0.0.1 (needs the `dashboard` extra)."""
    from gpuops.dashboard import command

    command(_settings(config, emergency=True), month=month, tz=tz, port=port, html=html)


LEDGER_FIX = "check [ledger] url / GPUOPS_LEDGER_URL, e.g. postgresql+psycopg://user@host/db, and that its server runs"
# An SQLite file that is not a ledger (or is damaged) is fixed on this disk, not with a server URL.
SQLITE_FIX = (
    "the SQLite ledger file is damaged or not a ledger: move it aside (mv ledger.db ledger.db.bad) and "
    "restore a backup, or recover what it holds with `sqlite3 ledger.db.bad .recover | sqlite3 ledger.db`"
)
SQLITE_LOCKED_FIX = "another process holds the SQLite ledger's lock; wait for it, or find it with `fuser ledger.db`"


def _ledger_failure(e: BaseException) -> tuple[str, int] | None:
    """(one-line error, exit code) when ``e`` is the ledger database failing to open or answer, else None.

    Failing: a bad URL, a missing driver, a server that is down, a file that is not a database, an SQLite
    file that cannot be created. Passwords in URLs are masked. A bad URL, driver or data
    dir is bad input (2), the rest a failure (1)."""
    import re
    import traceback

    from ledger.migrations import LedgerTooNew

    mod = type(e).__module__ or ""
    if isinstance(e, LedgerTooNew):  # a newer gpuops wrote the ledger
        return f"error: {e} ({e.fix})", 2
    frames = [f.filename for f in traceback.extract_tb(e.__traceback__)]
    from_ledger = any("/ledger/" in f or "sqlalchemy" in f for f in frames)
    if isinstance(e, OSError) and any(f.endswith("/ledger/engine.py") for f in frames):  # its folder or file
        why = f"{e.filename}: {e.strerror}" if e.filename else str(e)
        return (
            f"error: the SQLite ledger cannot be created ({why}) "
            "(point GPUOPS_DATA_DIR (or [ledger] url) at a folder you can write)"
        ), 2
    if isinstance(e, ModuleNotFoundError) and any("sqlalchemy/dialects" in f for f in frames):
        msg, code = f"the ledger URL needs the database driver {e.name!r}, which is not installed", 2
    elif mod.startswith("sqlalchemy") or (mod in ("sqlite3", "psycopg", "psycopg.errors") and from_ledger):
        orig = getattr(e, "orig", None) or e
        first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
        code = 2 if type(e).__name__ in ("ArgumentError", "NoSuchModuleError") else 1
        msg = f"the ledger database failed: {first}"
    else:
        return None
    msg = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", msg)
    low = msg.lower()
    fix = LEDGER_FIX
    if "file is not a database" in low or "malformed" in low or "disk image" in low:
        fix = SQLITE_FIX
    elif "database is locked" in low:
        fix = SQLITE_LOCKED_FIX
    return f"error: {msg} ({fix})", code


def _err(text: str) -> None:
    """One line to stderr; a closed or broken stderr loses it, never changes the exit status."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # AttributeError: stderr is None (closed at start)
        pass


def _std_fds() -> None:
    """Point closed stdin/stdout/stderr (``>&- 2>&-``, a dead parent) at /dev/null, first.

    So no file opened later (the SQLite ledger) becomes fd 1 or 2 and receives
    what a child process writes to its stdout."""
    import os

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                got = os.open(os.devnull, os.O_RDWR)
                if got != fd:
                    os.dup2(got, fd)
                    os.close(got)
            except OSError:
                continue
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)


def _fast_exit(code: int) -> None:
    """Exit with ``code`` without tearing down every object the imports made.

    SQLAlchemy, pydantic and rich cost 0.05-0.3 s to dismantle at interpreter exit, more than `ps` itself.

    Safe for the ledger: every write is its own committed transaction before a command returns
    (SQLite's WAL or PostgreSQL has it; an unclosed connection is only a socket or a file handle).
    stdout/stderr and logging are flushed first; atexit hooks do not run (gpuops registers none).
    When another non-daemon thread still runs, Python's normal exit runs instead (it waits for it).
    A command that wrote an SQLite ledger checkpoints it first (``ledger.checkpoint``: the last
    close, which would have, never runs), bounded by a short wait on other processes."""
    import threading

    books = sys.modules.get("ledger.checkpoint")  # loaded only by a command that wrote a ledger
    if books is not None and books.WRITTEN:
        books.checkpoint_written()

    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed pipe (`gpuops ps | head`), or no stream
            pass
    if "logging" in sys.modules:
        import logging

        logging.shutdown()
    os._exit(code)


# Options other tools (SkyPilot, runpodctl, vastai, cron habits) name differently: an unknown one is
# answered with ours (click suggests only names spelled alike: `--ttl` got no hint of `--max-hours`).
OPTION_SYNONYMS = {
    "--ttl": "--max-hours",
    "--timeout": "--max-hours",
    "--hours": "--max-hours",
    "--gpus": "--card",
    "--gpu": "--card",
    "--use-spot": "--spot",
    "--bid": "--max-price",
    "--bid-price": "--max-price",
    "--cloud": "--provider",
}


def _nearest_option(e: Exception) -> str:
    """``"; did you mean --max-hours?"`` for an unknown option another tool spells so, else ``""``.

    Only an option the command has (``e.ctx.command``); click's own spelling suggestions stay as
    they are."""
    if type(e).__name__ != "NoSuchOption":
        return ""
    ours = OPTION_SYNONYMS.get(str(getattr(e, "option_name", "")).split("=", 1)[0])
    ctx = getattr(e, "ctx", None)
    has = {o for p in (ctx.command.params if ctx is not None else []) for o in getattr(p, "opts", [])}
    return f"; did you mean {ours}?" if ours in has else ""


def main(fast_exit: bool = True) -> None:
    """Entry point: run the app, ending with an exit code.

    GpuopsError -> one line on stderr and its exit code; a usage
    error -> one line naming the help to read, exit 2. ``fast_exit``: leave through ``_fast_exit``
    (pass False when calling it inside another Python program, which it would end). Files gpuops
    creates (ledger, logs, local boxes, results) are the user's alone: umask 077."""
    import os

    os.umask(0o077)
    _std_fds()
    try:
        _main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            _err(f"{e.code}\n")
        if not fast_exit:
            raise
        _fast_exit(code)


def _main() -> None:
    try:
        rv = app(standalone_mode=False)
    except GpuopsError as e:
        from gpuops.textsafe import safe

        _err(f"error: {safe(str(e))}\n")
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        _err("aborted\n")
        sys.exit(130)
    except Exception as e:
        ledger_failure = _ledger_failure(e)
        if ledger_failure is not None:
            _err(ledger_failure[0] + "\n")
            sys.exit(ledger_failure[1])
        # typer vendors its own click; its usage errors all carry format_message() and exit_code.
        if not (hasattr(e, "format_message") and hasattr(e, "exit_code")):
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # `gpuops ledger` alone: show its help
            _err(e.format_message() + "\n")
            sys.exit(2)
        ctx = getattr(e, "ctx", None)
        cmd = ctx.command_path if ctx is not None else "gpuops"
        _err(f"error: {e.format_message()}{_nearest_option(e)} (see `{cmd} --help`)\n")
        sys.exit(2)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
