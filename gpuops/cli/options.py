"""What several command groups share.

The output options (one decorator), the config option, the
settings load, the ledger openers, and the one way a table is printed to a pipe that may close."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Sequence

import typer

from gpuops.errors import BadInput

# Provider names in help strings come from the registry (names only: no provider class is imported).
from gpuops.providers import ANY, MARKETPLACES, NAMES, SPOT, UP_CHOICES, choices, titles
from gpuops.rental.request import (  # noqa: F401  (re-exported: the checks of `up`'s inputs, shared by other commands' flags)
    card_count as _card_count,
    dtypes_not_blank as _dtypes_not_blank,
    not_blank_flag as _not_blank,
    parse_idle as _parse_idle,
    parse_price as _parse_price,
)


def _settings(config: str | None, overrides: dict | None = None, emergency: bool = False):
    """Settings for a command.

    ``emergency`` (ps, down, reconcile, logs, ledger, dashboard: what
    lists, reads or destroys boxes and books): a broken infra.toml key or GPUOPS_* variable is
    skipped with a one-line warning on stderr instead of refusing, so a running box can still be
    found and destroyed."""
    from gpuops.config import load_settings

    return load_settings(config, overrides, lenient=emergency)


class Number:
    """typer's ``parser=`` for a number on the command line: an ``int`` (``whole``) or a ``float``.

    Anything else is BadInput, one line naming the flag and an example, e.g.
    ``--batch must be a whole number, got 'x' (e.g. --batch 32)``. A whole number may be written
    as a float with no fraction (``1e3``, ``4096.0``). Ranges are the command's own checks."""

    def __init__(self, name: str, whole: bool = False, unit: str = "", fix: str = ""):
        self.name, self.whole, self.unit, self.fix = name, whole, unit, fix

    def __call__(self, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # a default
            return self._whole(value, value) if self.whole else float(value)
        text = str(value)
        try:
            if self.whole:
                try:
                    return int(text)
                except ValueError:
                    return self._whole(float(text), text)
            return float(text)
        except (ValueError, OverflowError):
            kind = "whole number" if self.whole else "number"
            raise BadInput(
                f"{self.name} must be a {kind}{' of ' + self.unit if self.unit else ''}, got {text!r}", self.fix
            ) from None

    def _whole(self, number: float, text) -> int:
        if isinstance(number, int):
            return number
        if not number.is_integer():
            raise ValueError(text)
        return int(number)


def number(default, *flags: str, help: str, example: str, whole: bool = False, unit: str = ""):
    """A numeric option, the one way: ``typer.Option(default, *flags, help=help)`` read by :class:`Number`.

    Annotate it ``int`` with ``whole=True``, else ``float``; ``X | None`` with a None default.
    ``example``: a value for the fix, e.g. ``"4096"`` -> ``e.g. --seq 4096``."""
    return typer.Option(default, *flags, help=help, parser=Number(flags[0], whole, unit, f"e.g. {flags[0]} {example}"))


def _print_lossy(render) -> None:
    """Print the end of a rental where the terminal may be gone.

    A closed or broken stdout/stderr
    (EPIPE, EBADF) loses the text, never the exit status; stdout is pointed at /dev/null so the
    interpreter's final flush cannot fail either."""

    try:
        render()
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError, SystemExit):  # rich raises SystemExit(1) on a broken pipe
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
        except (OSError, ValueError):
            pass


class NotBlank:
    """typer's ``parser=`` for text that may be left out but not given blank ("" or spaces).

    Blank is BadInput, one line: ``--tz is empty (pass ...)`` (see :func:`_not_blank`); other text
    is returned as given, for the command's own checks."""

    def __init__(self, flag: str, fix: str):
        self.flag, self.fix = flag, fix

    def __call__(self, value):
        if isinstance(value, str):
            _not_blank(self.flag, value, self.fix)
        return value


CONFIG_OPT = typer.Option(
    None,
    "--config",
    help="infra.toml to read (default: ./infra.toml, then the user config dir).",
    parser=NotBlank("--config", "pass the path of an infra.toml, e.g. --config infra.toml, or leave --config out"),
)


TZ_HELP = "IANA time zone for months and days, e.g. Europe/Berlin (default: local)."
TZ_FIX = "pass an IANA name, e.g. --tz Europe/Berlin or --tz UTC, or leave --tz out for this machine's zone"


def tz_option(help: str = TZ_HELP):
    """The ``--tz`` option (an IANA name; left out: local time); blank is BadInput."""
    return typer.Option(None, "--tz", help=help, parser=NotBlank("--tz", TZ_FIX))


TZ_OPT = tz_option()


def month_option(help: str, flag: str = "--month"):
    """A ``YYYY-MM`` option (``flag``; None when left out); blank is BadInput."""
    return typer.Option(
        None, flag, help=help, parser=NotBlank(flag, f"pass YYYY-MM, e.g. {flag} 2026-11, or leave it out")
    )


def day_option(flag: str, help: str):
    """A ``YYYY-MM-DD`` option (None when left out); blank is BadInput."""
    return typer.Option(
        None, flag, help=help, parser=NotBlank(flag, f"pass YYYY-MM-DD, e.g. {flag} 2026-11-01, or leave it out")
    )


FORMAT_HELP = "table (default), json or csv: JSON indent 2, times ISO-8601 UTC; CSV header first."


def output_options(
    csv: bool = False, formats: Sequence[str] = ("table", "json", "csv"), help: str = FORMAT_HELP
) -> Callable:
    """Decorator: give a command ``--format`` and ``--json`` (and ``--csv`` with ``csv=True``).

    It is called with the one format asked for as ``fmt`` (a str of ``formats``; default ``table``).

    The command declares ``fmt: str`` without a default; the options take its place in the
    signature typer reads (so ``--help`` lists them where ``fmt`` stood). Two formats at once, an
    unknown one, or one outside ``formats`` is BadInput before the command runs
    (``gpuops.render.emit.pick``, the convention of every machine output)."""
    shorthands = [("json_out", "--json", "json")] + ([("csv_out", "--csv", "csv")] if csv else [])

    def decorate(command: Callable) -> Callable:
        sig = inspect.signature(command, eval_str=True)
        params = list(sig.parameters.values())
        at = [p.name for p in params].index("fmt")
        added = [
            inspect.Parameter(
                "fmt",
                inspect.Parameter.KEYWORD_ONLY,
                annotation=str | None,
                default=typer.Option(None, "--format", help=help),
            )
        ]
        added += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=bool,
                default=typer.Option(False, flag, help=f"Shorthand for --format {value}."),
            )
            for name, flag, value in shorthands
        ]
        params[at : at + 1] = added
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]

        @functools.wraps(command)
        def run(*args, fmt: str | None = None, json_out: bool = False, csv_out: bool = False, **kwargs):
            from gpuops.render.emit import pick

            return command(*args, fmt=pick(fmt, json_out, csv_out, allowed=formats), **kwargs)

        run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]  # what inspect.signature (typer) reads
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


def _ledger(config: str | None):
    from gpuops.rental import sessions

    return sessions.open_ledger(_settings(config, emergency=True))


def _reader(config: str | None):
    """The ledger's read side for reports (no ORM import: fast on 100k sessions)."""
    from ledger.reads import LedgerReader

    return LedgerReader(_settings(config, emergency=True).ledger_url())


CARD_HELP = (
    "Card or family, e.g. a100, h100-sxm, rtx-4090; NAME:COUNT for COUNT GPUs (a100:2). `gpuops cards` lists them."
)


def provider_help() -> str:
    """`--provider`'s help (`up`, `sweep`): the registry's choices, the default, what ``any`` does."""
    return (
        f"{choices(UP_CHOICES)} (default: [up] provider, else local). {ANY}: every provider with a key, "
        "the cheapest fitting offer in stock, failing over to the next offer on any of them."
    )


def spot_help() -> str:
    """`--spot/--on-demand`'s help (`up`, `sweep`), with what each provider rents by default."""
    return (
        "Interruptible offers only, or on-demand only. Default ([up] spot = true): both, cheapest booked price "
        f"first, spot first at the same price: {_spot_by_provider()}."
    )


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
