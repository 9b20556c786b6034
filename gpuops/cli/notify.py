"""``gpuops notify test``: one message to every ``[notify]`` target, and which worked (gpuops.notify)."""

from __future__ import annotations

import typer

from gpuops.cli.group import Group
from gpuops.cli.options import CONFIG_OPT, _settings
from gpuops.errors import BadInput

notify_app = typer.Typer(cls=Group, help="Notifications ([notify]): test the targets.", no_args_is_help=True)


@notify_app.command("test")
def test(config: str | None = CONFIG_OPT) -> None:
    """Send one test message to every target and say which worked (exit 1 when none did)."""
    from gpuops.notify.notifier import try_targets
    from gpuops.render.notify import render_deliveries

    settings = _settings(config)
    if not settings.notify.urls:
        raise BadInput(
            "no notification target: nothing to test",
            "set [notify] urls in infra.toml (0600) or GPUOPS_NOTIFY_URLS to apprise URLs",
        )
    done = try_targets(settings)
    render_deliveries(done)
    if not any(d.ok for d in done):
        raise typer.Exit(1)
