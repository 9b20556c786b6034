"""`gpuops up`: parse its flags, call ``gpuops.rental.launcher.run_up``, render with the console reporter."""

from __future__ import annotations

import typer
import typer.core

from gpuops.cli.group import interrupt_note
from gpuops.cli.options import (
    CARD_HELP,
    CONFIG_OPT,
    _print_lossy,
    number,
    output_options,
    provider_help,
    spot_help,
)
from gpuops.errors import BadInput
from gpuops.rental.request import UpArgs

D = UpArgs  # the defaults, stated once (gpuops.rental.request.UpArgs)
JOB_ARGS = "gpuops.up.job_args"  # ctx.meta: the words after `--` (a tuple), absent when no `--` was typed


def split_job_args(
    command: typer.core.TyperCommand, ctx: typer.Context, args: list[str]
) -> tuple[list[str], tuple[str, ...] | None]:
    """``args`` as (what `up` parses itself, the job's argv after ``--``; None when no ``--`` ends `up`'s part).

    The separator is the first ``--`` that the parser of ``command`` (``make_parser``: typer's own
    click) takes as one: a ``--`` right after an option that wants a value is that value (``--note
    --``), as that parser reads it, so the split never disagrees with the parse of the words before it."""
    for i, word in enumerate(args):
        if word != "--":
            continue
        try:
            command.make_parser(ctx).parse_args(args=list(args[:i]))
        except Exception as e:  # noqa: BLE001  typer's click's usage errors (typer._click: no public name)
            if i and getattr(e, "option_name", None) == args[i - 1]:  # "--note" asks a value: this "--" is it
                continue
            # any other bad word before the "--": the real parse says so
        return list(args[:i]), tuple(args[i + 1 :])
    return list(args), None


class UpCommand(typer.core.TyperCommand):
    """`gpuops up`'s command: everything after ``--`` is the job's argv (``split_job_args``), kept in ``ctx.meta``."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        ours, job_args = split_job_args(self, ctx, args)
        if job_args is not None:
            ctx.meta[JOB_ARGS] = job_args
        return super().parse_args(ctx, ours)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return [*super().collect_usage_pieces(ctx), "[-- ARG...]"]


@output_options()
def up(
    ctx: typer.Context,
    task: str | None = typer.Argument(
        None,
        metavar="TASK.toml",
        help="A task file: resources, setup, run, env, results, recover, limits in one TOML (flags override it).",
    ),
    # str, not Path: typer coerces a Path through a pydantic adapter built on first use (start-up
    # before the intent row); gpuops.rental.launcher.validate checks the file.
    job: str | None = typer.Option(
        None,
        "--job",
        metavar="PATH",
        help="Script to run on the box (bash .sh, python .py, or an executable); or a task file's run.",
    ),
    interactive: bool = typer.Option(
        False,
        "--interactive",
        help="No job: a box to work on (`gpuops ssh SESSION`), ended by idle, the TTL or `gpuops down`.",
    ),
    card: str | None = typer.Option(None, "--card", help=CARD_HELP),
    experiment: str | None = typer.Option(None, "--experiment", help="Experiment name the cost is booked under."),
    provider: str | None = typer.Option(
        None,
        "--provider",
        help=provider_help(),
    ),
    spot: bool | None = typer.Option(
        None,
        "--spot/--on-demand",
        help=spot_help(),
    ),
    max_price: float | None = number(
        None, "--max-price", help="Highest price in USD per hour for the whole box.", example="2.5", unit="USD per hour"
    ),
    max_hours: float | None = number(
        None, "--max-hours", help="Hard TTL of the box in hours.", example="2", unit="hours"
    ),
    idle_minutes: str | None = typer.Option(None, "--idle-minutes", help="Idle-GPU window in minutes, or 'off'."),
    note: str = typer.Option(D.note, "--note", help="Free text stored with the session."),
    dry_run: bool = typer.Option(
        D.dry_run, "--dry-run", help="Check everything and show what would be rented; rent nothing."
    ),
    model: str | None = typer.Option(None, "--model", help="Size the box from this model first (as in `gpuops plan`)."),
    dtype: str = typer.Option(
        D.dtype,
        "--dtype",
        help="With --model: weight dtype (auto = the checkpoint's; fp32, bf16, fp16, fp8, int8, int4).",
    ),
    kv_dtype: str = typer.Option(
        D.kv_dtype, "--kv-dtype", help="With --model: KV cache dtype (auto = the model's, as vLLM)."
    ),
    seq: int = number(D.seq, "--seq", help="With --model: tokens per sequence.", example="4096", whole=True),
    batch: int = number(D.batch, "--batch", help="With --model: concurrent sequences.", example="32", whole=True),
    gpu_count: int = number(
        D.gpu_count,
        "--gpu-count",
        help="GPUs in the box (with --model: weights and KV split across them).",
        example="2",
        whole=True,
    ),
    allow_unverified: bool = typer.Option(
        D.allow_unverified, "--allow-unverified", help="With --model: rent even when nothing confirms the model's size."
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
    workdir: str | None = typer.Option(
        None,
        "--workdir",
        metavar="DIR",
        help="Upload DIR to the box before the job (<box root>/workdir, $GPUOPS_WORKDIR; .gitignore honoured).",
    ),
    workdir_exclude: list[str] | None = typer.Option(
        None,
        "--workdir-exclude",
        metavar="PATTERN",
        help="Leave out of --workdir what matches (repeatable): data, '*.ckpt'.",
    ),
    recover_on_demand: bool = typer.Option(
        False,
        "--recover-on-demand",
        help="A spot run may re-rent on an on-demand box when no spot offer is left (default: spot only).",
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

    Everything after -- is the job's argv, each word one argument, passed as typed (a task file's args
    replaced): gpuops up --job train.py -- --lr 1e-3. Arguments are booked in the ledger: secrets go in
    --env, whose values never are.

    Spot by default where the provider has it ([up] spot = true): interruptible at the offer's minimum bid, else
    on-demand (see --spot); --on-demand never rents spot."""
    from gpuops.render import emit, ui
    from gpuops.rental import launcher, request

    if exit_code not in ("gpuops", "job"):
        raise BadInput(
            f"--exit-code {exit_code!r} is not gpuops or job", "--exit-code job exits with the job's own exit code"
        )
    flags = dict(
        job=job, card=card, experiment=experiment, provider=provider, spot=spot, max_price=max_price,
        max_hours=max_hours, idle_minutes=idle_minutes, note=note, dry_run=dry_run, model=model, dtype=dtype,
        kv_dtype=kv_dtype, seq=seq, batch=batch, gpu_count=gpu_count, allow_unverified=allow_unverified,
        vendor=vendor, volume=volume, name=name, recover=recover, recover_on=recover_on, env=tuple(env), config=config,
        interactive=interactive, workdir=workdir, workdir_exclude=tuple(workdir_exclude or ()),
        recover_on_demand=recover_on_demand,
    )  # fmt: skip
    # What was typed wins over the task file, key by key; a flag left out leaves the file's value.
    given = {k: v for k, v in flags.items() if _typed(ctx, k)}
    if JOB_ARGS in ctx.meta:  # `-- ARG ...` typed (even with no word after it): the job's argv, over the file's
        given["job_args"] = ctx.meta[JOB_ARGS]
    args = UpArgs.merged(request.load_task(task) if task is not None else {}, given)
    req, settings = request.build(args)
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
    if summ.get("interactive"):  # left up for the user: the way in, and what ends it
        _print_lossy(lambda: emit.emit(summ, fmt, lambda: ui.render_interactive(summ, settings.teardown)))
        return
    _print_lossy(lambda: emit.emit(summ, fmt, lambda: ui.render_summary(summ)))
    from onbox.vocabulary import EndReason, exit_status

    # The exit status follows the row (onbox.vocabulary.EXIT_STATUS): job_end 0, interrupted
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


def _typed(ctx: typer.Context, name: str) -> bool:
    """Whether the flag of parameter ``name`` was typed (or came from click's environment), not its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")
