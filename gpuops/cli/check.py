"""`gpuops check`: the self-check, parsed and rendered."""

from __future__ import annotations

import math
import sys

import typer

from gpuops.cli.options import (
    CONFIG_OPT,
    _settings,
    number,
    output_options,
)
from gpuops.errors import BadInput
from gpuops.providers import MARKETPLACES, NAMES, choices, titles


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
