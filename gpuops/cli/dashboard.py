"""`gpuops dashboard`: parsed, then ``gpuops.dashboard.command``."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuops.cli.options import (
    CONFIG_OPT,
    TZ_OPT,
    _settings,
    month_option,
    number,
)


def dashboard(
    month: str | None = month_option("YYYY-MM shown first (default: this month)."),
    tz: str | None = TZ_OPT,
    port: int = number(8765, "--port", help="Port on 127.0.0.1 (0: any free port).", example="8765", whole=True),
    html: Path | None = typer.Option(
        None, "--html", help="Write the page as one self-contained offline file instead of serving it."
    ),
    config: str | None = CONFIG_OPT,
) -> None:
    """The month's costs as a read-only web page on 127.0.0.1 (needs the `dashboard` extra)."""
    from gpuops.dashboard import command

    command(_settings(config, emergency=True), month=month, tz=tz, port=port, html=html)
