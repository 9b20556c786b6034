"""The gpuops command line (typer): the app, each command group's commands registered, and ``main``.

One module per group (up, offers, plan, session, watchdog, check, dashboard, ledger, volumes) parses
and renders; ``main`` turns every error into its one line and exit code. No logic here.

Imports stay light: services, rich and provider SDKs load inside the commands that use them, so
`gpuops --help` starts fast.
"""

from __future__ import annotations

import os
import sys

import typer

from gpuops.cli.group import Group
from gpuops.errors import GpuopsError
from gpuops.version import __version__

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
from gpuops.cli.notify import notify_app  # noqa: E402  (typer only; apprise loads when a message is sent)

app.add_typer(notify_app, name="notify")
from gpuops.cli.demo import demo_app  # noqa: E402  (typer only; the emulators load in the demo's own process)

app.add_typer(demo_app, name="demo")

# Provider names in help strings come from the registry (names only: no provider class is imported).


def _version(value: bool) -> None:
    if value:
        print(f"gpuops {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """gpuops: GPU rentals that cannot be forgotten."""


from gpuops.cli import check, completion, dashboard, offers, plan, session, sweep, up, watchdog  # noqa: E402

app.command(cls=up.UpCommand)(up.up)  # `up ... -- ARG ...`: the job's argv (UpCommand)
app.command()(sweep.sweep)
app.command("sweep-status", hidden=True)(sweep.sweep_status)  # typed as `gpuops sweep status` (see Group)
app.command("sweep-cancel", hidden=True)(sweep.sweep_cancel)
app.command("sweep-resume", hidden=True)(sweep.sweep_resume)
app.command("offers")(offers.offers)
app.command()(plan.plan)
app.command("plan-spot", hidden=True)(plan.plan_spot)  # typed as `gpuops plan spot` (see Group)
app.command("plan-storage", hidden=True)(plan.plan_storage)  # typed as `gpuops plan storage` (see Group)
app.command()(session.ps)
app.command("status", hidden=True, help="Same as `gpuops ps` (SkyPilot's `sky status`).")(session.ps)
app.command("ls", hidden=True, help="Same as `gpuops ps` (runpodctl's `get pod`, vastai's `show instances`).")(
    session.ps
)
app.command()(offers.cards)
app.command()(session.down)
app.command("logs")(session.logs)
app.command()(session.ssh)
app.command("exec", context_settings={"allow_interspersed_args": False})(session.exec_)
app.command()(watchdog.watchdog)
app.command()(watchdog.reconcile)
app.command()(check.check)
app.command()(dashboard.dashboard)
app.command()(completion.completion)


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
    if os.environ.get(completion.COMPLETE_VAR):  # the shell asks for completions (a Tab)
        completion.shell_completion_setup()
    try:
        _main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            _err(f"{e.code}\n")
        told = sys.modules.get("gpuops.notify.notifier")  # loaded only by a command that may notify
        if told is not None:
            told.drain()  # the messages in flight, each at most until its deadline; then the exit
        if not fast_exit:
            raise
        _fast_exit(code)


def _main() -> None:
    try:
        # One name however it was started (`gpuops`, `python -m gpuops`): the usage lines and the
        # variable a completion script sets (completion.COMPLETE_VAR) say gpuops.
        rv = app(prog_name=completion.PROG_NAME, complete_var=completion.COMPLETE_VAR, standalone_mode=False)
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
