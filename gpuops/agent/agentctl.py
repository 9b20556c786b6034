"""The laptop's side of the on-box agent: write its config, start it (the `arm` stage), read its status.

The agent itself is ``onbox/agent.py`` (stdlib, runs on the box); the rules it applies are
``onbox/policy.py``, which ``gpuops.teardown.watchdog`` applies too.

Paths on the box, relative to the box root (``Box.root``):

* ``.gpuops/onbox/``         this repository's ``onbox/`` folder, shipped byte for byte
* ``.gpuops/agent.json``         the agent's config (``agent_config``)
* ``.gpuops/agent-status.json``  its status: heartbeat, last samples, last decision, destroy
* ``.gpuops/agent.log``          its log
* ``.gpuops/bootstrap.pid``      written by ``bootstrap_config.bootstrap_command``: bootstrap is running while alive
* ``.gpuops/run/``               the job's run dir (``jobwrap.py --dir .gpuops/run``, as the launcher runs it)
* ``.gpuops/laptop-presence``    the laptop's presence lease (``hold_presence``): while fresh, the agent
                                 does not destroy for job end / idle / no job (TTL and caps still apply)
* ``.gpuops/activity/<id>``      one lease per open `gpuops ssh` / `exec` / `-L` (``hold_activity``): while
                                 fresh, the agent counts it as an SSH session (the box is not idle)

Trust: the status is written by the box. ``read_status`` clamps its heartbeat (and any time in it)
to this machine's now, and ``session_teardown`` lets it only tighten a limit, never extend one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.agent.bootstrap_config import BOOTSTRAP_PIDFILE, RUNNER_DIR, RUNNER_SOURCE
from gpuops.agent.jobio import JOB_DIR

if TYPE_CHECKING:
    from gpuops.config import Settings, TeardownSettings

AGENT_CONFIG = ".gpuops/agent.json"
AGENT_STATUS = ".gpuops/agent-status.json"
AGENT_LOG = ".gpuops/agent.log"
PRESENCE = ".gpuops/laptop-presence"  # onbox/agent.py PRESENCE_FILE, in its state dir
RUN_DIR = JOB_DIR  # where the job wrapper writes exit_code / exit_marker (gpuops/agent/jobio.py)

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
        "fetch_deadline_seconds": t.fetch_deadline_seconds,
        "max_session_usd": t.max_session_usd,
    }


# Limits a box's status may lower but never raise (they decide when billing stops).
TIGHTEN_ONLY = ("max_hours", "max_session_usd")


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
    max_hours: float | None = None,
    no_job_seconds: float | None = None,
    armed_at: float | None = None,
) -> dict:
    """The agent.json document for one session.

    ``started_at``: the instance's create time as the provider reported it (epoch s; TTL and spend
    count from it: ``limits_left`` turns it into what is left when ``arm`` ships the config);
    ``usd_per_hour``: the price really charged (session cap); ``max_hours``: the session's own TTL
    in hours (default ``teardown.max_hours``, which `up --max-hours` sets); ``no_job_seconds``: how
    long an armed box waits for a job, a bootstrap or the laptop's presence before it destroys
    itself (default ``onbox.policy.NO_JOB_SECONDS``); ``armed_at``: this machine's epoch
    second now (default ``time.time()``; ``arm`` sets it again): the agent counts every duration
    from it with the box's monotonic clock, never reading the box's wall clock. ``destroy.url`` is the endpoint the
    laptop uses (``[providers.<name>] url``, else ``RUNPOD_API_BASE_URL`` / ``VAST_URL``, else the
    public API). ``GPUOPS_AGENT_SSH_USERS`` (comma list) limits which users' SSH sessions
    count (default: any); ``GPUOPS_AGENT_ENVIRON_FILE`` replaces ``/proc/1/environ`` as the place
    the box's own key is read from (tests, images whose PID 1 is not the provider's). No credential
    is written: the box reads its own scoped key there. ``extra``: more agent.json keys, as the
    agent reads them: ``worker_stale_seconds`` (s without a pulse before the supervisor SIGKILLs the
    worker; default max(90, 3 x sample + 30)), ``status_heartbeat_seconds`` (s, default 5),
    ``presence_max_seconds`` (how long presence may hold a due destroy; default 3600),
    ``poll_seconds`` (exit-marker poll, default 1), ``nvidia_smi`` (argv), ``gpu_source``
    ("auto" | "nvidia-smi"), ``interactive`` (true: `up --interactive`, no job comes: no
    armed-no-job wait).
    """
    from gpuops.providers import MARKETPLACES, REGISTRY, agent_destroy_kind

    destroy: dict[str, Any] = {"kind": agent_destroy_kind(provider)}  # the registry's one table
    if settings is not None and provider in MARKETPLACES:
        from gpuops.providers.keys import resolve_url

        destroy["url"] = resolve_url(
            REGISTRY[provider].key_source, getattr(settings.providers, REGISTRY[provider].section).url
        )
    users = [u for u in os.environ.get("GPUOPS_AGENT_SSH_USERS", "").split(",") if u]
    td = teardown_dict(teardown)
    if max_hours is not None:
        td["max_hours"] = float(max_hours)
    if no_job_seconds is not None:
        td["no_job_seconds"] = float(no_job_seconds)
    cfg = {
        "session": session_id,
        "provider": provider,
        "instance_id": instance_id,
        "root": root,
        "run_dir": RUN_DIR,
        "bootstrap_pidfile": BOOTSTRAP_PIDFILE,
        "armed_at": time.time() if armed_at is None else float(armed_at),
        "started_at": started_at,
        "max_hours": td["max_hours"],
        "usd_per_hour": usd_per_hour,
        "teardown": td,
        "destroy": destroy,
        "ssh_users": users,
    }
    if os.environ.get("GPUOPS_AGENT_ENVIRON_FILE"):
        cfg["environ_file"] = os.environ["GPUOPS_AGENT_ENVIRON_FILE"]
    cfg.update(extra or {})
    return cfg


def limits_left(config: dict, now: float) -> dict:
    """The money limits the agent is armed with: what is left of them at ``now`` (epoch s, this machine's).

    ``ttl_seconds_left``: the TTL (``config["max_hours"]``, h) less the seconds billed since the
    instance's create (``config["started_at"]``, the provider's; None: counted from ``now``), at
    least 0. ``session_usd_left``: ``teardown.max_session_usd`` less those seconds at
    ``usd_per_hour``, at least 0 (None: no cap, or no price). The agent counts them down on the
    box's monotonic clock from the moment it is armed (onbox/agent.py, Clocks)."""
    created = config.get("started_at")
    billed_s = max(0.0, now - float(created)) if created is not None else 0.0
    cap = (config.get("teardown") or {}).get("max_session_usd")
    price = config.get("usd_per_hour")
    return {
        "ttl_seconds_left": max(0.0, float(config["max_hours"]) * 3600.0 - billed_s),
        "session_usd_left": None if cap is None or not price else max(0.0, float(cap) - billed_s / 3600.0 * price),
    }


def armed_config(config: dict, now: float) -> dict:
    """``config`` as ``arm`` ships it at ``now`` (this machine's epoch s): ``armed_at`` and ``limits_left``."""
    return dict(config, armed_at=now, **limits_left(config, now))


def arm(box, config: dict, python: str = "python3") -> None:
    """Ship ``onbox/`` and the agent config to ``box`` and start the agent detached.

    Ships ``armed_config`` at this machine's now, just before the config is copied. Idempotent: a
    second arm rewrites the config (its limits left counted from its own ``armed_at``) and the
    start is a no-op while the supervisor runs (it holds a lock). ``box``: a ``gpuops.box.base.Box``. Raises what the box raises.
    """
    import tempfile

    box.put(RUNNER_SOURCE, RUNNER_DIR)
    # As late as possible: the agent counts what is left from its start (the copy and the start's latency unseen).
    config = armed_config(config, time.time())
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "agent.json"
        p.write_text(json.dumps(config, indent=1))
        box.put(p, AGENT_CONFIG)
    q = shlex.quote
    box.run_detached(f"exec {q(python)} {RUNNER_DIR}/agent.py --config {q(AGENT_CONFIG)} >>{q(AGENT_LOG)} 2>&1")


def _clamp_times(obj: Any, now: float) -> Any:
    """Every time in the status limited to ``now``: a box cannot report the future.

    Every number under a key that names a time (``t``, ``t_last``, ``*_at``, ``heartbeat``,
    ``until``) limited to ``now``: a box cannot report the future."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if (
                isinstance(v, (int, float))
                and not isinstance(v, bool)
                and (k in ("t", "t_last", "heartbeat") or k.endswith("_at"))
            ):
                out[k] = min(float(v), now) if v == v else None
            else:
                out[k] = _clamp_times(v, now)
        return out
    if isinstance(obj, list):
        return [_clamp_times(v, now) for v in obj]
    return obj


def read_status(box, now: float | None = None) -> dict | None:
    """The agent's status document from ``box``, made safe to act on.

    None when absent or unreadable (no agent, no marker either).

    ``now``: this machine's epoch seconds (default ``time.time()``). Every time in the document
    (heartbeat, samples, job end, destroy) is clamped to ``now``. When the heartbeat is stale
    (``heartbeat_stale``) or the status says the job still runs, the job's own exit marker on the
    box is read (``gpuops.agent.jobio.job_exit``) and, when present, sets ``job`` (``"source":
    "exit_marker"``, its end clamped to ``now``): a dead agent does not hide a finished job.
    Raises what the box raises for a dropped connection."""
    now = time.time() if now is None else now
    raw = box.read_file(AGENT_STATUS)
    status: dict | None = None
    if raw:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        status = _clamp_times(doc, now) if isinstance(doc, dict) else None
    job = (status or {}).get("job") or {}
    if status is None or heartbeat_stale(status, now) or job.get("ended_at") is None:
        from gpuops.agent.jobio import job_exit
        from gpuops.errors import GpuopsError

        try:
            ended = job_exit(box)
        except (GpuopsError, ValueError, IndexError):
            ended = None
        if ended is not None:
            status = dict(status or {})
            end = min(float(ended.ended), now) if ended.ended is not None else now
            status["job"] = {"ended_at": end, "exit_code": ended.code, "source": "exit_marker"}
    return status


def session_teardown(status: dict | None, trusted: Any, row: Any = None) -> dict:
    """The teardown settings to judge one session by, as ``onbox.policy.decide`` reads them.

    ``trusted``: this machine's settings (a TeardownSettings or a dict); ``row``: the session's ledger
    row, whose own limits (attributes ``max_hours`` / ``max_session_usd`` when it has them) win over
    ``trusted``. The box's status may fill the rest (idle window, sample interval) but may only
    LOWER ``max_hours`` and ``max_session_usd``: a forged ``max_hours=1000`` changes nothing."""
    base = dict(trusted) if isinstance(trusted, dict) else teardown_dict(trusted) if trusted is not None else {}
    for k in TIGHTEN_ONLY:
        v = getattr(row, k, None) if row is not None else None
        if isinstance(v, (int, float)) and v > 0:
            base[k] = float(v)
    raw = (status or {}).get("teardown")
    claimed = raw if isinstance(raw, dict) else {}

    def number(v: Any) -> float | None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and 0 < v < float("inf")
        return float(v) if ok else None

    out = dict(base)
    # What the box may say about how it samples (a value that is not a finite positive number is ignored).
    for k in ("sample_seconds", "idle_util_percent", "job_end_grace_seconds"):
        if number(claimed.get(k)) is not None:
            out[k] = number(claimed[k])
    idle = claimed.get("idle_minutes")
    if idle == "off" or number(idle) is not None:
        out["idle_minutes"] = idle
    for k in TIGHTEN_ONLY:
        c = number(claimed.get(k))
        if c is not None:
            out[k] = c if out.get(k) is None else min(float(out[k]), c)
    return out


def write_presence(box, hold_seconds: float, *, released: bool = False, seq: int = 0) -> None:
    """Write the laptop's presence lease on ``box`` (over exec, so a box without SFTP works too).

    ``hold_seconds``: how long this refresh keeps the agent from destroying for job end / idle / no
    job, counted on the box's monotonic clock from when it sees the change (the agent caps it at 600
    s). ``released``: the laptop is done; the agent stops waiting at once."""
    body = json.dumps({"hold_seconds": float(hold_seconds), "released": bool(released), "seq": int(seq)})
    q = shlex.quote
    tmp = f"{PRESENCE}.tmp"
    box.run(f"printf %s {q(body)} > {q(tmp)} && mv -f {q(tmp)} {q(PRESENCE)}", timeout=30)


@contextlib.contextmanager
def hold_presence(box, hold_seconds: float = 60.0, refresh_seconds: float | None = None) -> Iterator[None]:
    """Hold the box while the block runs: the agent does not destroy it for job end, idle or no job.

    While the block runs (results copy-back, anything that needs the box after its job), keep the
    on-box agent from destroying it for job end, idle or no job: the lease is written at entry,
    refreshed every ``refresh_seconds`` (default ``hold_seconds / 4``) by a daemon thread, and
    released at exit. A refresh that fails (connection dropped, disk full) is skipped: the lease
    then lapses after ``hold_seconds`` and the agent goes on. TTL and money limits are never held.

    Use: ``with agentctl.hold_presence(box): box.get(results, dest)``."""

    def put(seq: int, released: bool) -> None:
        write_presence(box, hold_seconds, released=released, seq=seq)

    with _refreshed(box, put, hold_seconds, refresh_seconds):
        yield


ACTIVITY_DIR = ".gpuops/activity"  # onbox/agent.py ACTIVITY_DIR, in its state dir


@contextlib.contextmanager
def hold_activity(box, hold_seconds: float = 60.0, refresh_seconds: float | None = None) -> Iterator[str]:
    """Count the block as an SSH session on the box: the agent's idle and no-job rules see it busy.

    One lease file per holder, ``.gpuops/activity/<random id>`` (written over ``box.run``, so a box
    without SFTP and a local box work alike), refreshed like ``hold_presence`` and removed at exit;
    a holder that dies leaves a file that lapses ``hold_seconds`` after its last refresh, judged on
    the box's monotonic clock (``onbox/agent.py: LeaseFile``). Job end, TTL and the money limits
    are not held. Yields the lease's path on the box (relative to its root)."""
    path = f"{ACTIVITY_DIR}/{os.urandom(8).hex()}"
    q = shlex.quote

    def put(seq: int, released: bool) -> None:
        if released:
            box.run(f"rm -f {q(path)}", timeout=30)
            return
        body = json.dumps({"hold_seconds": float(hold_seconds), "seq": int(seq)})
        box.run(
            f"mkdir -p {q(ACTIVITY_DIR)} && printf %s {q(body)} > {q(path + '.tmp')} && mv -f {q(path + '.tmp')} {q(path)}",
            timeout=30,
        )

    with _refreshed(box, put, hold_seconds, refresh_seconds):
        yield path


@contextlib.contextmanager
def _refreshed(box, put, hold_seconds: float, refresh_seconds: float | None) -> Iterator[None]:
    """A lease kept fresh while the block runs: ``put(seq, released)`` calls on a daemon thread.

    ``put(seq, False)`` at entry and every ``refresh_seconds`` (default ``hold_seconds / 4``),
    ``put(seq, True)`` at exit; a failed call is skipped (the lease then lapses)."""
    refresh = refresh_seconds if refresh_seconds is not None else max(0.5, hold_seconds / 4.0)
    stop = threading.Event()
    seq = [0]

    def call(released: bool = False, refresh: bool = False) -> None:
        seq[0] += 1
        connected = getattr(box, "is_connected", None)
        if refresh and connected is not None and not connected():
            return  # never reconnect from this thread (the caller's work owns the connection)
        try:
            put(seq[0], released)
        except Exception:  # a failed refresh only shortens the lease; the caller's work goes on
            pass

    call()

    def loop() -> None:
        while not stop.wait(refresh):
            call(refresh=True)

    t = threading.Thread(target=loop, name="gpuops-lease", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=refresh + 30)
        call(released=True)


def heartbeat_stale(status: dict | None, now: float | None = None) -> bool:
    """True when there is no status or its heartbeat is older than STALE_SAMPLES intervals + slack."""
    if not status or not status.get("heartbeat"):
        return True
    now = time.time() if now is None else now
    return (
        now - min(float(status["heartbeat"]), now)
        > STALE_SAMPLES * float(status.get("sample_seconds") or 10.0) + STALE_SLACK_S
    )
