"""What several command groups share: the output options (one decorator), the config option, the
settings load, the ledger openers, and the one way a table is printed to a pipe that may close."""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
from typing import Callable, Optional, Sequence

import typer

from gpuops.errors import BadInput


CONFIG_OPT = typer.Option(None, "--config", help="infra.toml to read (default: ./infra.toml, then the user config dir).")


def _settings(config: Optional[str], overrides: dict | None = None, emergency: bool = False, snapshot: bool = False):
    """Settings for a command. ``emergency`` (ps, down, reconcile, logs, ledger, dashboard: what
    lists, reads or destroys boxes and books): a broken infra.toml key or GPUOPS_* variable is
    skipped with a one-line warning on stderr instead of refusing, so a running box can still be
    found and destroyed. ``snapshot`` (the commands run often, without flags: ps, watchdog --once,
    the ledger reports): read back without pydantic when the same file and variables loaded cleanly before
    (gpuops/settings_snapshot.py); the same values and errors either way."""
    if snapshot and not overrides:
        from gpuops.settings_snapshot import load

        return load(config, lenient=emergency)
    from gpuops.config import load_settings

    return load_settings(config, overrides, lenient=emergency)


def _parse_price(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        price = float(text)
    except ValueError:
        raise BadInput(f"--max-price must be a number of USD per hour, got {text!r}", "e.g. --max-price 2.5") from None
    if not math.isfinite(price):
        raise BadInput(f"--max-price must be a finite number of USD per hour, got {text!r}", "e.g. --max-price 2.5")
    return price


def _print_lossy(render) -> None:
    """Print the end of a rental where the terminal may be gone: a closed or broken stdout/stderr
    (EPIPE, EBADF) loses the text, never the exit status; stdout is pointed at /dev/null so the
    interpreter's final flush cannot fail either."""
    import os

    try:
        render()
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError, SystemExit):  # rich raises SystemExit(1) on a broken pipe
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
        except (OSError, ValueError):
            pass


TZ_OPT = typer.Option(None, "--tz", help="IANA time zone for months and days, e.g. Europe/Berlin (default: local).")


FORMAT_HELP = "table (default), json or csv: JSON indent 2, times ISO-8601 UTC; CSV header first."


def output_options(csv: bool = False, formats: Sequence[str] = ("table", "json", "csv"),
                   help: str = FORMAT_HELP) -> Callable:
    """Decorator: give a command ``--format`` and ``--json`` (and ``--csv`` with ``csv=True``) and
    call it with the one format asked for as ``fmt`` (a str of ``formats``; default ``table``).

    The command declares ``fmt: str`` without a default; the options take its place in the
    signature typer reads (so ``--help`` lists them where ``fmt`` stood). Two formats at once, an
    unknown one, or one outside ``formats`` is BadInput before the command runs
    (``gpuops.views.emit.pick``, the convention of every machine output)."""
    shorthands = [("json_out", "--json", "json")] + ([("csv_out", "--csv", "csv")] if csv else [])

    def decorate(command: Callable) -> Callable:
        sig = inspect.signature(command, eval_str=True)
        params = list(sig.parameters.values())
        at = [p.name for p in params].index("fmt")
        added = [inspect.Parameter("fmt", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                                   default=typer.Option(None, "--format", help=help))]
        added += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                    default=typer.Option(False, flag, help=f"Shorthand for --format {value}."))
                  for name, flag, value in shorthands]
        params[at:at + 1] = added
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]

        @functools.wraps(command)
        def run(*args, fmt: Optional[str] = None, json_out: bool = False, csv_out: bool = False, **kwargs):
            from gpuops.views.emit import pick

            return command(*args, fmt=pick(fmt, json_out, csv_out, allowed=formats), **kwargs)

        run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


def _ledger(config: Optional[str]):
    from gpuops.rental import sessions

    return sessions.open_ledger(_settings(config, emergency=True))


def _reader(config: Optional[str]):
    """The ledger's read side for reports (no ORM import: fast on 100k sessions)."""
    from ledger.reads import LedgerReader

    return LedgerReader(_settings(config, emergency=True, snapshot=True).ledger_url())


def _card_count(card: Optional[str], gpu_count: str, default: str = "1") -> tuple[Optional[str], str]:
    """``--card NAME:COUNT`` (SkyPilot's ``--gpus A100:2``) as (card, gpu count text); a plain
    ``--card`` passes through. BadInput when COUNT is not a whole number >= 1 or ``--gpu-count``
    says another count."""
    if not card or ":" not in card:
        return card, gpu_count
    name, _, count = card.rpartition(":")
    if not name or not count.isdigit() or int(count) < 1:
        raise BadInput(f"--card {card!r} is not NAME or NAME:COUNT", "e.g. --card a100 or --card a100:2 (2 GPUs in one box)")
    if str(gpu_count) != default and str(gpu_count) != str(int(count)):
        raise BadInput(f"--card {card} asks for {int(count)} GPUs and --gpu-count for {gpu_count}", "give the count once")
    return name, str(int(count))
