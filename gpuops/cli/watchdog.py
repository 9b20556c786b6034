"""`gpuops watchdog` and `gpuops reconcile`: the laptop-side teardown layers, parsed and rendered."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import typer

from gpuops.cli.options import (
    CONFIG_OPT,
    _settings,
    number,
    output_options,
)
from gpuops.errors import BadInput


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

            from gpuops.render.session_history import plural
            from ledger.periods import utc_iso

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
        from gpuops.sweep.executor import Serving

        with Serving(settings, lambda text: print(f"sweep: {text}", file=sys.stderr, flush=True)):
            acts = wd.run(settings, interval=interval, once=once, emit=emit, on_pass=on_pass)
    if once and not acts:  # a quiet pass still answers: a line, or one JSON object of the actions' shape
        idle = "nothing to do: no open session needed an action (one reconcile and one tick done)"
        _emit_json(wd.Action("", "idle", idle)) if json_out else print(idle)
    if once and any(a.kind == "error" for a in acts):
        raise typer.Exit(1)


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


def _emit_json(action) -> None:
    from gpuops.render.emit import json_line, write

    write(json_line(action.as_json()))
