"""The sweep's executor: enqueue a sweep's jobs in the ledger, then run at most K of them at once.

Each job is one run of rentals made exactly as `up` makes it: a child process
(``python -m gpuops.sweep.child``) calls ``request.build`` and ``launcher.run_up`` with the run's
id and the sweep's id (``UpRequest.run_id``/``sweep_id``), so the lifecycle, the end rule and the
teardown layers are `up`'s own; nothing here creates or destroys a box.

Money: before a job is started, its worst case (``worst_usd``: its max_hours at the dearest price
its run accepts -- a run's max_hours counts every rental's billed hours, so this bounds the run
across its recover attempts) must fit in what the sweep has left: ``max_usd`` minus what its rentals
booked minus the worst cases its running jobs still hold (``ledger.sweeps.spend``); hours likewise.
The run is then given that worst case as its own money limit (its ``max_session_usd``) and the
dearest price as its ``--max-price``, so `up`'s own run arithmetic holds it there. The monthly cap
and the balance floor are `up`'s checks, made before each of its rentals; a refusal ends the
sweep with its reason.

Signals (foreground): a first Ctrl-C rents nothing new and lets the running jobs go to their
normal end; a second one (or SIGTERM/SIGHUP) SIGTERMs every running job, which `up` ends as always
(teardown, booked). A cancelled sweep (``gpuops sweep cancel``) is seen here within a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.errors import BadInput, GpuopsError

if TYPE_CHECKING:
    from gpuops.config import Settings
    from gpuops.sweep.spec import SweepSpec
    from ledger.books import Books

# A claim lasts this long unless renewed (seconds); its owner renews it every third of it. An
# executor that dies leaves claims that lapse after this, and then another executor reads the run.
CLAIM_S = 60.0
POLL_S = 0.2  # how often the executor looks at its running jobs (seconds)
STATUS_POLL_S = 1.0  # how often it reads whether its sweep was cancelled (seconds)
SWEEP_PREFIX = "sweep-"
# How the sweep ended beyond its jobs' own reasons (sweeps.end_reason)
SWEEP_USD, SWEEP_HOURS = "sweep_usd", "sweep_hours"  # its max_usd / max_hours had no room for the next job


def new_sweep_id() -> str:
    """A new sweep id, ``sweep-YYYYMMDD-HHMMSS-xxxx`` (a session id's form)."""
    from gpuops.rental.launcher import new_session_id

    return SWEEP_PREFIX + new_session_id()


def _queued_env(entries: tuple[str, ...], params: tuple[str, ...], detach: bool, job: str) -> list[str]:
    """The env entries the queue keeps: the matrix's parameters as written, every other entry by NAME only.

    ``detach``: an entry with a value is refused (BadInput): the queue keeps no value, and a detached
    executor takes it from its own environment (the watchdog's 0600 env file)."""
    out = []
    for e in entries:
        if e in params:
            out.append(e)
            continue
        name, eq, _ = e.partition("=")
        if eq and detach:
            raise BadInput(
                f"sweep job {job}: --detach keeps no env value in the queue, and {name}= gives one",
                f"pass --env {name} (the value then comes from the watchdog's env file), or run the sweep without --detach",
            )
        out.append(name)
    return out


@dataclass
class Prepared:
    """A sweep made ready to enqueue: its row, its jobs' rows, their scripts and, for this executor, each job's full inputs."""

    sweep: dict[str, Any]
    jobs: list[dict[str, Any]]
    blobs: list[dict[str, Any]]
    args: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)  # seq -> UpArgs fields, env values in
    offers: dict[int, dict[str, Any]] = field(
        default_factory=dict
    )  # seq -> its dry run's offer: provider, card, gpu_count

    def dry_run(self) -> dict[str, Any]:
        """`sweep --dry-run`'s report: each job's name, offer and worst case (USD, hours), their total vs max_usd.

        Shape: ``{"dry_run": True, "name", "max_parallel", "max_usd", "max_hours", "worst_usd", "jobs":
        [{"seq", "name", "provider", "card", "gpu_count", "dearest_usd_per_hour", "worst_hours", "worst_usd"}]}``;
        ``worst_usd`` is the sum over the jobs (USD), what the sweep could spend with no limit of its own."""
        jobs = [
            {
                "seq": j["seq"],
                "name": j["name"],
                **self.offers.get(j["seq"], {}),
                **{k: j[k] for k in ("dearest_usd_per_hour", "worst_hours", "worst_usd")},
            }
            for j in self.jobs
        ]
        keys = ("name", "max_parallel", "max_usd", "max_hours")
        return {
            "dry_run": True,
            **{k: self.sweep[k] for k in keys},
            "worst_usd": round(sum(j["worst_usd"] for j in jobs), 6),
            "jobs": jobs,
        }


def prepare(spec: SweepSpec, ledger: Books, settings: Settings, detach: bool = False) -> Prepared:
    """Every job checked as `up --dry-run` checks it (the same ``run_up``), its worst case, and the rows to enqueue.

    A job's workdir is stored as its script is, by content (``workdir_blob.pack``: the tree `up
    --workdir` would send, one tar; the job's fields then name it by ``workdir_sha256``), so every
    executor, detached or not, runs the job on the same files. Raises BadInput, one line naming the
    fix, before anything is rented or written: a job `up` refuses, one whose worst case alone passes
    the sweep's max_usd / max_hours, an env value under ``detach``, a workdir over
    ``workdir_blob.MAX_BYTES``."""
    from gpuops.rental.launcher import Reporter, run_up
    from gpuops.rental.workdir import scan
    from gpuops.sweep import workdir_blob

    sweep_id = new_sweep_id()
    jobs, blobs, full, offers = [], {}, {}, {}
    queued_env = {j.seq: _queued_env(j.args.env, j.params, detach, j.name) for j in spec.jobs}  # before any plan
    for j in spec.jobs:
        try:
            dry = run_up(replace(j.req, dry_run=True), j.settings, Reporter(), ledger=ledger)
        except BadInput as e:
            raise BadInput(f"sweep job {j.name}: {e.message}", e.fix) from None
        hours = float(j.settings.teardown.max_hours)
        dearest = float(j.req.max_usd_per_hour or dry["dearest_usd_per_hour"])
        worst = dearest * hours
        if j.settings.teardown.max_session_usd is not None:
            worst = min(worst, float(j.settings.teardown.max_session_usd))
        if spec.max_usd is not None and worst > spec.max_usd + 1e-9:
            raise BadInput(
                f"sweep job {j.name}: its worst case ${worst:.4f} ({hours:g} h at ${dearest:.4f}/h) is more than "
                f"the sweep's max_usd ${spec.max_usd:.4f}",
                "lower its [limits] max_hours or max_price, or raise max_usd",
            )
        if spec.max_hours is not None and hours > spec.max_hours + 1e-9:
            raise BadInput(
                f"sweep job {j.name}: its max_hours {hours:g} is more than the sweep's max_hours {spec.max_hours:g}",
                "lower its [limits] max_hours, or raise the sweep's max_hours",
            )
        data = Path(j.req.job).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        blobs[sha] = {"sha256": sha, "data": data, "name": Path(j.req.job).name}
        fields = asdict(j.args)
        fields["env"] = list(j.args.env)
        fields["workdir_exclude"] = list(j.args.workdir_exclude)
        if j.req.workdir:  # the files themselves, by content; the executor unpacks them for the job's `up`
            tree = scan(j.req.workdir, j.req.workdir_exclude, int(j.settings.job.workdir_max_mb * 2**20))
            tar = workdir_blob.pack(tree, j.name)
            tar_sha = hashlib.sha256(tar).hexdigest()
            blobs[tar_sha] = {"sha256": tar_sha, "data": tar, "name": workdir_blob.BLOB_NAME}
            fields.update(workdir=None, workdir_exclude=[], workdir_sha256=tar_sha)
        worst = round(worst, 6)
        fields["max_price"] = dearest  # the run accepts no dearer offer than the one its worst case counts
        if spec.max_usd is not None:
            fields["max_session_usd"] = worst  # the run's own money limit: `up`'s run arithmetic holds it there
        full[j.seq] = dict(fields)
        offers[j.seq] = {k: dry.get(k) for k in ("provider", "card", "gpu_count")}
        queued = {**fields, "env": queued_env[j.seq], "job": None}
        jobs.append(
            {
                "seq": j.seq,
                "name": j.name,
                "args_json": json.dumps(queued),
                "script_sha256": sha,
                "dearest_usd_per_hour": dearest,
                "worst_usd": worst,
                "worst_hours": hours,
            }
        )
    sweep = {
        "id": sweep_id,
        "name": spec.name,
        "experiment": spec.experiment,
        "status": "open",
        "created_at": time.time(),
        "max_parallel": spec.max_parallel,
        "max_usd": spec.max_usd,
        "max_hours": spec.max_hours,
        "detached": detach,
        "owner": settings.owner(),
    }
    return Prepared(sweep, jobs, list(blobs.values()), full, offers)


def enqueue(prepared: Prepared, ledger: Books) -> str:
    """Write the prepared sweep and its jobs into the ledger's queue (one transaction); the sweep id."""
    from ledger import sweeps as queue

    queue.enqueue(ledger.engine, prepared.sweep, prepared.jobs, prepared.blobs)
    return str(prepared.sweep["id"])


@dataclass
class _Running:
    job: dict[str, Any]
    run_id: str
    proc: subprocess.Popen[bytes]
    result: Path
    log: Path
    terminated: bool = False
    workdir: Path | None = None  # the job's unpacked workdir, removed once it has ended


@dataclass
class Outcome:
    """How an executor's pass over a sweep ended: ``reason`` (None: jobs remain for other executors), ``detail``, per-state counts."""

    sweep_id: str
    reason: str | None
    detail: str
    counts: dict[str, int]
    cost_usd: float


class _Stop:
    """Why no new job is started (first signal, cancel, money) and whether the running ones are ended."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.detail = ""
        self.end_running = False
        self.signals = 0

    def stop(self, reason: str, detail: str, end_running: bool = False) -> None:
        if self.reason is None:
            self.reason, self.detail = reason, detail
        self.end_running = self.end_running or end_running


@contextmanager
def _signals(stop: _Stop, say: Callable[[str], None], enabled: bool) -> Iterator[None]:
    """First SIGINT: rent nothing new; a second (or SIGTERM/SIGHUP): end the running jobs as `up` ends a rental."""
    if not enabled:
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        stop.signals += 1
        if signum == signal.SIGINT and stop.signals == 1:
            stop.stop("interrupted", "Ctrl-C: no new job was started")
            say("Ctrl-C: renting nothing new; the running jobs go on to their end (Ctrl-C again ends them)")
            return
        if not stop.end_running:
            say("ending the running jobs: each box is torn down and booked")
        stop.stop("interrupted", f"{signal.Signals(signum).name}: the running jobs were ended", end_running=True)

    from gpuops.rental.launcher import stop_signals_handled

    with stop_signals_handled(handler):
        yield


def _blob(ledger: Books, sha: str, what: str) -> dict[str, Any]:
    """The ``sweep_blobs`` row of content hash ``sha`` (``what``: script or workdir, for the error), its bytes checked.

    Raises BadInput (one line): none stored, or bytes that do not hash to ``sha`` -- what we wrote
    ourselves is read like any input."""
    from ledger import sweeps as queue

    blob = queue.blob(ledger.engine, sha)
    if blob is None:
        raise BadInput(f"the sweep's {what} {sha[:12]} is not in the ledger", "enqueue the sweep again")
    data = bytes(blob["data"])
    if hashlib.sha256(data).hexdigest() != sha:
        raise BadInput(
            f"the sweep's {what} {sha[:12]} in the ledger does not hash to its sha256 (changed after it was "
            "queued); nothing was rented",
            "enqueue the sweep again",
        )
    return {**blob, "data": data}


def _script(ledger: Books, settings: Settings, sha: str) -> Path:
    """The job script stored under content hash ``sha``, written (0700 folder) where this machine keeps sweep scripts."""
    folder = settings.private_data_path() / "sweeps" / "scripts" / sha
    blob = _blob(ledger, sha, "script")
    path = folder / Path(str(blob["name"])).name
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha:
        return path
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = folder / f".{path.name}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(blob["data"])
    os.replace(tmp, path)
    return path


def _workdir(ledger: Books, sha: str) -> Path:
    """The job's stored workdir ``sha`` unpacked into a new private (0700) temp folder, every check made.

    The caller removes the folder once the job has ended. Raises BadInput or
    ``workdir_blob.WorkdirRefused`` (one line each), the folder already removed."""
    import tempfile

    from gpuops.sweep import workdir_blob

    data = _blob(ledger, sha, "workdir")["data"]
    folder = Path(tempfile.mkdtemp(prefix=f"gpuops-workdir-{sha[:12]}-"))  # 0700, this user's alone
    try:
        workdir_blob.unpack(data, sha, folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _start(
    job: dict[str, Any],
    args: dict[str, Any],
    sweep_id: str,
    run_id: str,
    settings: Settings,
    script: Path,
    workdir: Path | None = None,
) -> _Running:
    folder = settings.private_data_path() / "sweeps" / sweep_id
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = folder / f"{job['seq']:04d}-{job['claims']}.log"
    result = folder / f"{job['seq']:04d}-{job['claims']}.json"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    args = {k: v for k, v in args.items() if k != "workdir_sha256"} | {"job": str(script)}
    if workdir is not None:
        args["workdir"] = str(workdir)
    data: dict[str, Any] = {"args": args, "sweep_id": sweep_id, "run_id": run_id}
    data.update(result=str(result), parent=os.getpid())
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuops.sweep.child"],
            stdin=subprocess.PIPE,
            stdout=fd,
            stderr=fd,
            start_new_session=True,  # a terminal's Ctrl-C reaches the executor only: it decides
        )
    finally:
        os.close(fd)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(data).encode())  # env values through the pipe only
    proc.stdin.close()
    return _Running(job, run_id, proc, result, log, workdir=workdir)


def _job_end(r: _Running, ledger: Books) -> tuple[str, str | None, str, str | None]:
    """A finished job's (state, end reason, detail, money limit that refused it) from its run's row and result."""
    from ledger import sweeps as queue

    try:
        result = json.loads(r.result.read_text())
    except (OSError, ValueError):
        result = {}
    run = ledger.get_run(r.run_id)
    if run is None:  # refused before its run's row: `up`'s own checks (monthly cap, balance floor, input)
        why = str(result.get("error") or f"its up exited {r.proc.returncode} before its run began (see {r.log})")
        limit = result.get("limit")
        return (queue.CANCELLED if limit else queue.FAILED), (limit or "error"), why, limit
    reason = str(run.end_reason or "error")
    state = queue.DONE if reason == "job_end" else (queue.CANCELLED if reason == "interrupted" else queue.FAILED)
    return state, reason, f"run {r.run_id} ended {reason}: {run.detail}", None


def execute(
    sweep_id: str,
    ledger: Books,
    settings: Settings,
    say: Callable[[str], None] = lambda _t: None,
    args: dict[int, dict[str, Any]] | None = None,
    owner: str | None = None,
    claim_s: float = CLAIM_S,
    handle_signals: bool = True,
    max_jobs: int | None = None,
    wait_others: bool = True,
    halt: threading.Event | None = None,
) -> Outcome:
    """Run the queued jobs of ``sweep_id``, at most its max_parallel at once, until none is left to claim.

    ``args``: this executor's full inputs per job seq (env values in memory; ``prepare``), else the
    queue's (env by name, from this process's environment). ``owner``: the claim's owner (default
    host:pid). ``max_jobs``: start at most this many (the watchdog's share). ``wait_others``: while
    other executors hold jobs of the sweep, wait for them to end or their claims to expire (the
    watchdog passes False: its next tick looks again). ``halt``: once set, the running jobs are ended
    as a second Ctrl-C ends them (the watchdog stopping). Returns the Outcome; the
    sweep is closed when no job of it is left queued or running (or this executor stopped it)."""
    from gpuops.rental import runs
    from gpuops.rental.launcher import new_session_id
    from ledger import sweeps as queue

    engine = ledger.engine
    sweep = queue.get_sweep(engine, sweep_id)
    if sweep is None:
        raise BadInput(f"no sweep {sweep_id} in the ledger", "see `gpuops ledger sweeps`")
    owner = owner or f"{socket.gethostname()}:{os.getpid()}"
    k = int(sweep["max_parallel"])
    running: dict[int, _Running] = {}
    stop = _Stop()
    started = 0
    renewed = status_read = time.monotonic()
    wait_until = 0.0  # no claim before this (monotonic): money held by running jobs, or nothing claimable
    with _signals(stop, say, handle_signals):
        while True:
            now = time.monotonic()
            if halt is not None and halt.is_set():
                stop.stop("interrupted", "the executor was stopped", end_running=True)
            if now - status_read >= STATUS_POLL_S:
                status_read = now
                row = queue.get_sweep(engine, sweep_id)
                if row is not None and row["status"] == "cancelled":
                    stop.stop("cancelled", str(row["detail"] or "cancelled"), end_running=True)
            if stop.end_running:
                for r in running.values():
                    if not r.terminated and r.proc.poll() is None:
                        r.proc.send_signal(signal.SIGTERM)  # `up`'s handler: teardown, booked
                        r.terminated = True
            if now - renewed >= claim_s / 3:
                renewed = now
                queue.renew(engine, running, owner, claim_s)
            for job_id, r in list(running.items()):
                if r.proc.poll() is None:
                    continue
                state, reason, detail, limit = _job_end(r, ledger)
                if r.workdir is not None:
                    shutil.rmtree(r.workdir, ignore_errors=True)
                queue.finish(engine, job_id, owner, state, reason, detail)
                say(f"{r.job['name']}: {state} ({reason})")
                del running[job_id]
                wait_until = 0.0  # money and a slot may be free now
                if limit:
                    stop.stop(limit, detail)
            full = max_jobs is not None and started >= max_jobs
            if stop.reason is None and not full and len(running) < k and now >= wait_until:
                job = queue.claim(engine, owner, claim_s, sweep_id)
                if job is not None:
                    spent = queue.spend(engine, sweep_id)
                    room = _room(spent, sweep)
                    if room is not None:
                        queue.finish(engine, job["id"], owner, queue.QUEUED, None, "")  # given back, never run
                        if spent["held_usd"] <= float(job["worst_usd"] or 0.0) + 1e-9 and (
                            spent["held_hours"] <= float(job["worst_hours"] or 0.0) + 1e-9
                        ):
                            stop.stop(*room)  # nothing else holds money or hours: no room will come
                        else:
                            wait_until = now + STATUS_POLL_S  # a running job's end may make room
                        continue
                    run_id = runs.new_run_id(new_session_id())
                    if queue.start(engine, job["id"], owner, run_id):
                        fields = (args or {}).get(job["seq"]) or json.loads(job["args_json"])
                        workdir = None
                        try:
                            script = _script(ledger, settings, str(job["script_sha256"]))
                            if fields.get("workdir_sha256"):
                                workdir = _workdir(ledger, str(fields["workdir_sha256"]))
                            running[job["id"]] = _start(job, fields, sweep_id, run_id, settings, script, workdir)
                        except (OSError, GpuopsError) as e:
                            if workdir is not None:
                                shutil.rmtree(workdir, ignore_errors=True)
                            queue.finish(engine, job["id"], owner, queue.FAILED, "error", str(e))
                            say(f"{job['name']}: failed to start: {e}")
                        else:
                            started += 1
                            say(f"{job['name']}: started as {run_id}")
                    continue  # claim the next one at once while there is room
                wait_until = now + STATUS_POLL_S  # nothing claimable now: look again in a while
            if not running:
                if stop.reason is not None or full or not wait_others or not _left(engine, sweep_id):
                    break
            time.sleep(POLL_S)
    return _close(engine, sweep_id, stop)


def _left(engine: Any, sweep_id: str) -> bool:
    """Whether a job of the sweep is still queued or held by a claim (another executor's, or one that will expire)."""
    from ledger import sweeps as queue

    return any(j["state"] not in queue.FINAL for j in queue.jobs_of(engine, sweep_id))


def _room(spent: dict[str, float], sweep: dict[str, Any]) -> tuple[str, str] | None:
    """None when the sweep's money and hours hold every claimed job's worst case (the one just claimed too); else why not."""
    if sweep["max_usd"] is not None and spent["usd"] + spent["held_usd"] > sweep["max_usd"] + 1e-9:
        return SWEEP_USD, (
            f"max_usd ${sweep['max_usd']:.4f}: ${spent['usd']:.4f} booked, ${spent['held_usd']:.4f} held by the "
            "running jobs and the next one's worst case: no room for it"
        )
    if sweep["max_hours"] is not None and spent["seconds"] / 3600 + spent["held_hours"] > sweep["max_hours"] + 1e-9:
        return SWEEP_HOURS, (
            f"max_hours {sweep['max_hours']:g}: {spent['seconds'] / 3600:.4f} h billed, {spent['held_hours']:.4f} h "
            "held by the running jobs and the next one's max_hours: no room for it"
        )
    return None


def _close(engine: Any, sweep_id: str, stop: _Stop) -> Outcome:
    """Cancel what is still queued when this executor stopped the sweep; close the sweep once none of its jobs is left."""
    from ledger import sweeps as queue

    if stop.reason is not None:
        queue.cancel_queued(engine, sweep_id, stop.reason, stop.detail)
    jobs = queue.jobs_of(engine, sweep_id)
    counts: dict[str, int] = {
        s: sum(1 for j in jobs if j["state"] == s) for s in (*queue.FINAL, queue.QUEUED, *queue.ACTIVE)
    }
    cost = sum(float(j["cost_usd"] or 0.0) for j in jobs)
    left = counts[queue.QUEUED] + counts[queue.CLAIMED] + counts[queue.RUNNING]
    if left:
        return Outcome(sweep_id, None, f"{left} job(s) left to other executors", counts, cost)
    if stop.reason is not None:
        reason, detail = stop.reason, stop.detail
    elif counts[queue.FAILED] or counts[queue.CANCELLED]:
        reason = "failed"
        detail = f"{counts[queue.DONE]} done, {counts[queue.FAILED]} failed, {counts[queue.CANCELLED]} cancelled"
    else:
        reason, detail = "done", f"{counts[queue.DONE]} job(s) done"
    queue.end_sweep(engine, sweep_id, "closed", reason, detail)
    row = queue.get_sweep(engine, sweep_id) or {}
    return Outcome(sweep_id, str(row.get("end_reason") or reason), str(row.get("detail") or detail), counts, cost)


# How often the watchdog's executor looks for detached sweeps to run (seconds).
SERVE_POLL_S = 5.0
# How long a stopping watchdog waits for its sweeps' jobs to end their rentals (seconds): a
# teardown is bounded by `up`'s own destroy deadlines; past this the children end themselves when
# they see this process gone.
SERVE_STOP_S = 120.0


class Serving:
    """The watchdog's executor (``with Serving(settings, say):`` around its loop): every open ``--detach`` sweep.

    A thread per sweep runs ``execute`` (no signal handling of its own, ``wait_others`` off); its
    jobs' env values come from this process's environment (the service's 0600 env file). On exit
    every running job is ended as a second Ctrl-C ends it, each thread waited for at most
    ``SERVE_STOP_S``."""

    def __init__(self, settings: Settings, say: Callable[[str], None]) -> None:
        self.settings, self.say = settings, say
        self.halt = threading.Event()
        self.threads: dict[str, threading.Thread] = {}
        self._loop = threading.Thread(target=self._serve, name="gpuops-sweeps", daemon=True)

    def __enter__(self) -> Serving:
        self._loop.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.halt.set()
        self._loop.join(SERVE_POLL_S + 1)
        deadline = time.monotonic() + SERVE_STOP_S
        for t in list(self.threads.values()):
            t.join(max(0.0, deadline - time.monotonic()))

    def _serve(self) -> None:
        from ledger import Ledger, sweeps as queue

        ledger = None
        while not self.halt.is_set():
            try:
                ledger = ledger or Ledger(self.settings.ledger_url())
                for sweep_id in queue.open_sweeps(ledger.engine, detached=True):
                    t = self.threads.get(sweep_id)
                    if t is None or not t.is_alive():
                        kwargs = {"handle_signals": False, "wait_others": False, "halt": self.halt, "say": self.say}
                        t = threading.Thread(
                            target=self._run, args=(sweep_id, ledger), kwargs=kwargs, name=f"gpuops-{sweep_id}"
                        )
                        self.threads[sweep_id] = t
                        t.start()
            except Exception as e:  # noqa: BLE001  the teardown layers go on; the next look tries again
                self.say(f"looking for queued sweeps failed: {type(e).__name__}: {e}")
            self.halt.wait(SERVE_POLL_S)

    def _run(self, sweep_id: str, ledger: Books, **kwargs: Any) -> None:
        try:
            execute(sweep_id, ledger, self.settings, **kwargs)
        except Exception as e:  # noqa: BLE001  one sweep's failure is said, the others go on
            self.say(f"{sweep_id}: {type(e).__name__}: {e}")
