"""What several command groups share: the output and config options, the settings load, the ledger
openers, and the one way a table is printed to a pipe that may close."""

from __future__ import annotations

import math
import os
import sys
from typing import Optional

import typer

from gpuops.errors import BadInput


JSON_OPT = typer.Option(False, "--json", help="Shorthand for --format json.")
CSV_OPT = typer.Option(False, "--csv", help="Shorthand for --format csv.")
FORMAT_OPT = typer.Option(None, "--format", help="table (default), json or csv: JSON indent 2, times ISO-8601 UTC; CSV header first.")
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


def _fmt(fmt: Optional[str], json_out: bool, csv_out: bool = False) -> str:
    from gpuops.views.emit import pick

    return pick(fmt, json_out, csv_out)


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
