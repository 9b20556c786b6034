"""`gpuops watchdog --install | --uninstall | --status`, said in a few lines or one JSON object.

What the service did is ``gpuops.teardown.watchdog_service.run_service``'s ``ServiceOutcome``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from gpuops.textsafe import safe

if TYPE_CHECKING:
    from gpuops.teardown.watchdog_service import ServiceOutcome


def render(done: ServiceOutcome, settings, interval: float, health: list[str], json_out: bool) -> None:
    """Print ``done`` as lines (or, with ``json_out``, its JSON object); ``health``: a status's watchdog lines."""
    out, manager = done.out, done.manager
    if json_out:
        from gpuops.render.emit import json_text

        sys.stdout.write(json_text(out))
        return
    if done.what == "install":
        lines = [
            f"installed {'the systemd user unit' if manager == 'systemd' else 'the launchd agent'} {out['path']}: "
            f"`gpuops watchdog --interval {interval:g}` runs now and at every login, restarted if it fails",
            f"settings: {settings.source or 'defaults + the GPUOPS_* environment'}; variables and keys in {out['env_file']} (0600)",
            "logs: "
            + ("journalctl --user -u gpuops-watchdog" if manager == "systemd" else f"{done.log_dir}/watchdog.log"),
        ]
        if manager == "systemd":
            lines.append("to keep it running while you are logged out: loginctl enable-linger $USER")
    elif done.what == "uninstall":
        lines = [
            f"removed {out['path']} and stopped the service"
            if out["removed"]
            else f"no service installed ({out['path']} absent)"
        ]
    else:
        lines = [_status_line(out), *health]
    for line in lines:
        sys.stdout.write(safe(line) + "\n")


def _status_line(st: dict) -> str:
    from ledger.periods import utc_iso

    where = "systemd user unit" if st["manager"] == "systemd" else "launchd agent"
    if not st["installed"] and not st["active"]:
        return f"service: not installed ({where} {st['path']} absent); `gpuops watchdog --install` installs it"
    since = f" since {utc_iso(st['since_at'])}" if st.get("since_at") else ""
    pid = f" (pid {st['pid']})" if st.get("pid") else ""
    return f"service: {where} {st['path']}: {'running' if st['active'] else 'not running'}, {st['state']}{since}{pid}"
