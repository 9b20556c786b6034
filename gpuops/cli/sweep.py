"""`gpuops sweep FILE`, `sweep status|cancel|resume SWEEP`: parse, call gpuops.sweep, render."""

from __future__ import annotations

import sys

import typer

from gpuops.cli.options import CONFIG_OPT, _ledger, _settings, output_options, provider_help, spot_help
from gpuops.sweep.executor import CLAIM_S


def _say(text: str) -> None:
    try:
        print(f"sweep: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # output never decides a job's fate
        pass


@output_options(formats=("table", "json"))
def sweep(
    file: str = typer.Argument(
        ...,
        metavar="SWEEP.toml",
        help="A sweep file: a task file's keys, [[jobs]], [matrix], max_parallel, max_usd, max_hours.",
    ),
    detach: bool = typer.Option(
        False, "--detach", help="Only enqueue: the watchdog services run the jobs (the laptop may close)."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Check every job and print its offer and worst case, the total vs max_usd; rent and queue nothing.",
    ),
    claim_seconds: float = typer.Option(
        CLAIM_S, "--claim-seconds", hidden=True, help="How long a claim lasts unless renewed (seconds)."
    ),
    env: list[str] = typer.Option(
        [], "--env", metavar="KEY[=VAL]", help="A variable for every job (as `up --env`); --detach takes KEY alone."
    ),
    provider: str | None = typer.Option(
        None, "--provider", help="Every job's provider, over the file's. " + provider_help()
    ),
    spot: bool | None = typer.Option(None, "--spot/--on-demand", help="Every job's, over the file's. " + spot_help()),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Run many jobs under one budget: at most max_parallel boxes at once, each job a run as `up` makes it.

    A first Ctrl-C rents nothing new and lets the running jobs end; a second ends them (teardown, booked).
    --provider and --spot/--on-demand are laid over every job as `up`'s flags over a task file."""
    from gpuops.render import emit
    from gpuops.render.sweep import dry_run_text, status_text
    from gpuops.sweep import executor, service
    from gpuops.sweep.spec import load_sweep

    # What was typed over every job, key by key, as `up`'s flags over a task file (a flag left out leaves the file's).
    typed = {"env": tuple(env), "provider": provider, "spot": spot}
    given = {"config": config, **{k: v for k, v in typed.items() if v not in (None, ())}}
    spec = load_sweep(file, given)
    settings = spec.jobs[0].settings
    ledger = _ledger(config)
    prepared = executor.prepare(spec, ledger, settings, detach=detach)
    if dry_run:
        dry = prepared.dry_run()
        emit.emit(dry, fmt, lambda: emit.write(dry_run_text(dry)))
        return
    sweep_id = executor.enqueue(prepared, ledger)
    _say(f"{sweep_id}: {len(prepared.jobs)} job(s) queued, at most {spec.max_parallel} at once")
    if detach:
        rep = service.status(ledger, sweep_id)
        emit.emit(
            rep,
            fmt,
            lambda: emit.write(
                status_text(rep) + "the watchdog services run it: `gpuops sweep status " + sweep_id + "`\n"
            ),
        )
        return
    out = executor.execute(sweep_id, ledger, settings, _say, args=prepared.args, claim_s=claim_seconds)
    rep = service.status(ledger, sweep_id)
    emit.emit(rep, fmt, lambda: emit.write(status_text(rep)))
    if out.reason != "done":
        raise typer.Exit(130 if out.reason == "interrupted" else 1)


@output_options(formats=("table", "json"))
def sweep_status(
    sweep_ref: str = typer.Argument(..., metavar="SWEEP", help="Sweep id (or a unique prefix)."),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """A sweep's jobs: state, run, rentals, cost, tokens and $/Mtoken; its limits and spend."""
    from gpuops.render import emit
    from gpuops.render.sweep import status_text
    from gpuops.sweep import service

    rep = service.status(_ledger(config), sweep_ref)
    emit.emit(rep, fmt, lambda: emit.write(status_text(rep)))


@output_options(formats=("table", "json"))
def sweep_cancel(
    sweep_ref: str = typer.Argument(..., metavar="SWEEP", help="Sweep id (or a unique prefix)."),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Cancel a sweep: rent nothing more for it and end its boxes (as `gpuops down` ends them)."""
    from gpuops.render import emit
    from gpuops.sweep import service

    settings = _settings(config, emergency=True)
    out = service.cancel(settings, _ledger(config), sweep_ref)
    lines = [f"{out['sweep']}: cancelled; {out['cancelled_queued']} queued job(s) will not run"]
    lines += [
        f"  {d['session']}: {'destroyed' if d.get('destroyed') else 'closed'} ({d['end_reason']})" for d in out["ended"]
    ]
    emit.emit(out, fmt, lambda: emit.write("\n".join(lines) + "\n"))


@output_options(formats=("table", "json"))
def sweep_resume(
    sweep_ref: str = typer.Argument(..., metavar="SWEEP", help="Sweep id (or a unique prefix)."),
    claim_seconds: float = typer.Option(
        CLAIM_S, "--claim-seconds", hidden=True, help="How long a claim lasts unless renewed (seconds)."
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Run a queued sweep's jobs here, in the foreground (beside any other executor of the same queue)."""
    from gpuops.render import emit
    from gpuops.render.sweep import status_text
    from gpuops.sweep import executor, service

    settings = _settings(config)
    ledger = _ledger(config)
    sweep_id = service.resolve(ledger, sweep_ref)
    out = executor.execute(sweep_id, ledger, settings, _say, claim_s=claim_seconds)
    rep = service.status(ledger, sweep_id)
    emit.emit(rep, fmt, lambda: emit.write(status_text(rep)))
    if out.reason not in ("done", None):
        raise typer.Exit(130 if out.reason == "interrupted" else 1)
