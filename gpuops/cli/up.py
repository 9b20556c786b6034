"""`gpuops up`: parse its flags, call ``gpuops.rental.launcher.run_up``, render with the console reporter."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from gpuops.cli.group import interrupt_note
from gpuops.cli.options import (
    CARD_HELP,
    CONFIG_OPT,
    _card_count,
    _dtypes_not_blank,
    _not_blank,
    _parse_idle,
    _parse_price,
    _print_lossy,
    _settings,
    _spot_by_provider,
    number,
    output_options,
)
from gpuops.errors import BadInput
from gpuops.providers import NAMES, choices


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
    env: list[str] = typer.Option(
        [],
        "--env",
        metavar="KEY[=VAL]",
        help=(
            "A variable for the job, repeatable: KEY=VAL, or KEY for this shell's value (a secret: KEY keeps it off "
            "the process list). Wins over [job] env by name; the value goes to the job alone."
        ),
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
        env=tuple(env),
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
    from gpuops.cli.up_reporter import ConsoleReporter

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
