"""The laptop's side of the on-box agent: write its config, start it (the `arm` stage), read its status.

The agent itself is ``bootstrap/agent.py`` (stdlib, runs on the box); the rules it applies are
``bootstrap/policy.py``, which ``gpuops.watchdog`` applies too.

Paths on the box, relative to the box root (``Box.root``):

* ``.gpuops/bootstrap/``         this repository's ``bootstrap/`` folder, shipped byte for byte
* ``.gpuops/agent.json``         the agent's config (``agent_config``)
* ``.gpuops/agent-status.json``  its status: heartbeat, last samples, last decision, destroy
* ``.gpuops/agent.log``          its log
* ``.gpuops/bootstrap.pid``      written by ``bootstrap_command``: bootstrap is running while alive
* ``.gpuops/run/``               the job's run dir (``jobwrap.py --dir .gpuops/run``, as the launcher runs it)
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuops.config import Settings, TeardownSettings
from gpuops.jobio import JOB_DIR

BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "bootstrap"
BOOTSTRAP_REMOTE = ".gpuops/bootstrap"
AGENT_CONFIG = ".gpuops/agent.json"
AGENT_STATUS = ".gpuops/agent-status.json"
AGENT_LOG = ".gpuops/agent.log"
BOOTSTRAP_PIDFILE = ".gpuops/bootstrap.pid"
RUN_DIR = JOB_DIR  # where the job wrapper writes exit_code / exit_marker (gpuops/jobio.py)

# Heartbeat older than this many sample intervals (plus slack) is stale: the agent is not running.
STALE_SAMPLES = 3
STALE_SLACK_S = 15.0


def teardown_dict(t: TeardownSettings) -> dict:
    """The teardown settings as the agent/policy read them (JSON-ready)."""
    return {
        "max_hours": t.max_hours,
        "idle_minutes": t.idle_minutes,
        "idle_util_percent": t.idle_util_percent,
        "sample_seconds": t.sample_seconds,
        "job_end_grace_seconds": t.job_end_grace_seconds,
        "kill_grace_seconds": t.kill_grace_seconds,
        "max_session_usd": t.max_session_usd,
    }


def agent_config(
    *,
    session_id: str,
    provider: str,
    instance_id: str,
    root: str,
    teardown: TeardownSettings,
    started_at: float | None,
    usd_per_hour: float | None,
    settings: Settings | None = None,
    extra: dict | None = None,
) -> dict:
    """The agent.json document for one session.

    ``started_at``: the instance's create time (epoch s; TTL and spend count from it);
    ``usd_per_hour``: the price really charged (session cap). ``destroy.url`` is the endpoint the
    laptop uses (``[providers.<name>] url``, else ``RUNPOD_API_BASE_URL`` / ``VAST_URL``, else the
    public API). ``GPUOPS_AGENT_SSH_USERS`` (comma list) limits which users' SSH sessions
    count (default: any); ``GPUOPS_AGENT_ENVIRON_FILE`` replaces ``/proc/1/environ`` as the place
    the box's own key is read from (tests, images whose PID 1 is not the provider's). No credential
    is written: the box reads its own scoped key there.
    """
    from gpuops.providers import agent_destroy_kind

    destroy: dict[str, Any] = {"kind": agent_destroy_kind(provider)}  # the registry's one table
    if settings is not None and provider in ("runpod", "vast"):
        from gpuops.providers.keys import resolve_url

        destroy["url"] = resolve_url(provider, getattr(settings.providers, provider).url)
    users = [u for u in os.environ.get("GPUOPS_AGENT_SSH_USERS", "").split(",") if u]
    cfg = {
        "session": session_id,
        "provider": provider,
        "instance_id": instance_id,
        "root": root,
        "run_dir": RUN_DIR,
        "bootstrap_pidfile": BOOTSTRAP_PIDFILE,
        "started_at": started_at,
        "usd_per_hour": usd_per_hour,
        "teardown": teardown_dict(teardown),
        "destroy": destroy,
        "ssh_users": users,
    }
    if os.environ.get("GPUOPS_AGENT_ENVIRON_FILE"):
        cfg["environ_file"] = os.environ["GPUOPS_AGENT_ENVIRON_FILE"]
    cfg.update(extra or {})
    return cfg


def arm(box, config: dict, python: str = "python3") -> None:
    """Ship ``bootstrap/`` and the agent config to ``box`` and start the agent detached.

    Idempotent: a second arm rewrites the config and the start is a no-op while the supervisor
    runs (it holds a lock). ``box``: a ``gpuops.remote.Box``. Raises what the box raises.
    """
    box.put(BOOTSTRAP_DIR, BOOTSTRAP_REMOTE)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "agent.json"
        p.write_text(json.dumps(config, indent=1))
        box.put(p, AGENT_CONFIG)
    q = shlex.quote
    box.run_detached(f"exec {q(python)} {BOOTSTRAP_REMOTE}/agent.py --config {q(AGENT_CONFIG)} >>{q(AGENT_LOG)} 2>&1")


def bootstrap_command(config_path: str, state_dir: str = ".gpuops/bootstrap-state", python: str = "python3") -> str:
    """The shell command that runs bootstrap so the agent sees it running (its pid in
    ``.gpuops/bootstrap.pid``; ``exec`` keeps the pid)."""
    q = shlex.quote
    return (f"echo $$ > {q(BOOTSTRAP_PIDFILE)} && exec {q(python)} {BOOTSTRAP_REMOTE}/bootstrap.py "
            f"--config {q(config_path)} --state-dir {q(state_dir)}")


def read_status(box) -> dict | None:
    """The agent's status document from ``box`` (None when absent or unreadable)."""
    raw = box.read_file(AGENT_STATUS)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def heartbeat_stale(status: dict | None, now: float | None = None) -> bool:
    """True when there is no status or its heartbeat is older than STALE_SAMPLES intervals + slack."""
    if not status or not status.get("heartbeat"):
        return True
    now = time.time() if now is None else now
    return now - float(status["heartbeat"]) > STALE_SAMPLES * float(status.get("sample_seconds") or 10.0) + STALE_SLACK_S
