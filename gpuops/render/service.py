"""`gpuops watchdog --install | --uninstall | --status`.

The user service (gpuops/teardown/watchdog_service.py), said in a few lines or one JSON object."""

from __future__ import annotations

import os
import sys
from typing import Any

from gpuops.textsafe import safe


def command(what: str, settings, interval: float, json_out: bool) -> None:
    """Run ``what`` (install, uninstall, status) for the watchdog service with ``settings`` and print the result.

    Raises NoServiceManager (exit 2) where there is no user service manager, GpuopsError (exit 1)
    when the manager refuses."""
    from gpuops.teardown import watchdog_service as svc

    manager = svc.detect()
    if manager is None:
        raise svc.no_manager(interval)
    if what == "install":
        files = svc.plan_files(manager, interval, settings.source, os.environ, settings.private_data_path() / "logs")
        cmds = svc.install(files)
        out: dict[str, Any] = {
            "manager": manager,
            "path": str(files.path),
            "env_file": str(files.env_path),
            "command": files.argv,
            "ran": [" ".join(c) for c in cmds],
        }
        lines = [
            f"installed {'the systemd user unit' if manager == 'systemd' else 'the launchd agent'} {files.path}: "
            f"`gpuops watchdog --interval {interval:g}` runs now and at every login, restarted if it fails",
            f"settings: {settings.source or 'defaults + the GPUOPS_* environment'}; variables and keys in {files.env_path} (0600)",
            "logs: "
            + (
                "journalctl --user -u gpuops-watchdog"
                if manager == "systemd"
                else str(svc.render_log_dir(files)) + "/watchdog.log"
            ),
        ]
        if manager == "systemd":
            lines.append("to keep it running while you are logged out: loginctl enable-linger $USER")
    elif what == "uninstall":
        out = svc.uninstall(manager)
        out["commands"] = [" ".join(c) for c in out["commands"]]
        lines = [
            f"removed {out['path']} and stopped the service"
            if out["removed"]
            else f"no service installed ({out['path']} absent)"
        ]
    else:
        from gpuops.rental.sessions import open_ledger
        from gpuops.teardown.watchdog_passes import health_lines, last_passes

        out = svc.status(manager)
        out["watchdogs"] = last_passes(open_ledger(settings))
        lines = [_status_line(out)] + [t for t, _ in health_lines(out["watchdogs"])]
    if json_out:
        from gpuops.render.emit import json_text

        sys.stdout.write(json_text(out))
        return
    for line in lines:
        sys.stdout.write(safe(line) + "\n")


def _status_line(st: dict) -> str:
    from gpuops.render.emit import utc_iso

    where = "systemd user unit" if st["manager"] == "systemd" else "launchd agent"
    if not st["installed"] and not st["active"]:
        return f"service: not installed ({where} {st['path']} absent); `gpuops watchdog --install` installs it"
    since = f" since {utc_iso(st['since_at'])}" if st.get("since_at") else ""
    pid = f" (pid {st['pid']})" if st.get("pid") else ""
    return f"service: {where} {st['path']}: {'running' if st['active'] else 'not running'}, {st['state']}{since}{pid}"
