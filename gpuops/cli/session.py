"""`gpuops ps`, `down` and `logs`: the open sessions, parsed and rendered."""

from __future__ import annotations

import sys

import typer

from gpuops.cli.options import (
    CONFIG_OPT,
    _settings,
    output_options,
)


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
    from gpuops.teardown.watchdog_passes import tell_if_silent

    tell_if_silent(settings, ledger)  # a dead watchdog cannot say so: the `ps` that sees it does ([notify])
    for n in ledger.notices:  # a spool folder refused, a spool line quarantined
        sys.stderr.write(f"warning: {ui.safe(n)}\n")


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


def ssh(
    session: str = typer.Argument(..., help="Session id (or a unique prefix) of a live box of yours."),
    command: list[str] | None = typer.Argument(None, help="After --: a command to run instead of a shell."),
    forward: list[str] | None = typer.Option(
        None,
        "-L",
        help="LOCAL:REMOTE: localhost:LOCAL reaches the box's 127.0.0.1:REMOTE while open (repeatable).",
    ),
    config: str | None = CONFIG_OPT,
) -> None:
    """Open a shell on a live box, or run a command there (`-- CMD`); `-L` forwards a port."""
    from gpuops.rental import access, sessions

    settings = _settings(config, emergency=True)
    rc = access.ssh(settings, sessions.open_ledger(settings), session, list(command or []), list(forward or []))
    raise typer.Exit(rc)


def exec_(
    session: str = typer.Argument(..., help="Session id (or a unique prefix) of a live box of yours."),
    command: list[str] = typer.Argument(..., help="The command and its arguments (each quoted for the box)."),
    config: str | None = CONFIG_OPT,
) -> None:
    """Run a command on a live box and stream its output; exits with its exit code."""
    from gpuops.rental import access, sessions

    def line(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    settings = _settings(config, emergency=True)
    argv = list(command)
    if argv[:1] == ["--"]:  # `exec SESSION -- CMD`: everything after SESSION is the command, so `--` arrives in it
        argv = argv[1:]
    rc = access.exec_(settings, sessions.open_ledger(settings), session, argv, line)
    raise typer.Exit(rc)
