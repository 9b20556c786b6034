"""The detached job on a box.

Start it under ``onbox/jobwrap.py``, follow its log (dropping and re-attaching at will), read
its exit, copy its results back.

On the box (relative to the session directory): ``.gpuops/run/job.log`` (stdout+stderr),
``job.pid``, ``exit_code`` (``code\\nstarted\\nended``, epoch seconds) and ``exit_marker``
(present once the job has ended; see onbox/jobwrap.py).
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuops.agent.bootstrap_config import RUNNER_DIR
from gpuops.errors import GpuopsError

# The most of the job log read (and held) at once, bytes: a job printing gigabytes is streamed in
# pieces of this size, so `up`'s memory stays flat whatever the job prints.
LOG_CHUNK_BYTES = 1 << 20
JOB_DIR = ".gpuops/run"  # the wrapper's files on the box; .gpuops/job holds the job file
LOG = f"{JOB_DIR}/job.log"
# The most of the box's exit_code file read, bytes: the wrapper writes three short numbers; a job that
# fills the file is not read whole into this machine's memory.
EXIT_CODE_BYTES = 4096


@dataclass(frozen=True)
class JobExit:
    """``code``: exit status (128+N for signal N); ``started``/``ended``: epoch seconds."""

    code: int
    started: float | None
    ended: float | None


def start_job(box, command: str, *, env: dict[str, str] | None = None, python: str = "python3") -> None:
    """Start ``command`` (bash) detached on ``box`` under the job wrapper (setsid + nohup).

    It survives a dropped connection and the laptop process. ``env`` (secrets) goes through the
    Box's 0600 env file. Requires the runner shipped to ``.gpuops/onbox`` (run_bootstrap_plan
    does)."""
    q = shlex.quote
    box.run_detached(
        f"rm -rf {JOB_DIR} && mkdir -p {JOB_DIR} && exec {q(python)} {RUNNER_DIR}/jobwrap.py --dir {JOB_DIR} -- bash -c {q(command)}",
        env=env,
    )


def job_exit(box) -> JobExit | None:
    """The job's exit, or None while it runs (or before it started).

    The box's files are the other side of a trust boundary: an exit code that is not a whole
    number 0-255 (what ``onbox/jobwrap.py`` writes: 128+N for signal N) raises GpuopsError
    naming the file; a time that is not a finite number becomes None (no job seconds booked). At
    most ``EXIT_CODE_BYTES`` of the file are read, one byte of the marker."""
    if box.read_file(f"{JOB_DIR}/exit_marker", limit=1) is None:  # only whether it is there
        return None
    raw = (box.read_file(f"{JOB_DIR}/exit_code", limit=EXIT_CODE_BYTES) or b"").decode("utf-8", "replace").split()
    if not raw:
        raise GpuopsError("job exit marker present but exit_code empty", "inspect .gpuops/run on the box")
    # int() of over 4,300 digits is a ValueError (sys.get_int_max_str_digits): no code 0-255 is that long.
    code = int(raw[0]) if raw[0].isascii() and raw[0].isdigit() and len(raw[0]) <= 16 else -1
    if not 0 <= code <= 255:
        raise GpuopsError(
            f"the job's exit code on the box is not a number 0-255: {raw[0][:32]!r}",
            f"inspect {JOB_DIR}/exit_code on the box",
        )
    return JobExit(code=code, started=_finite(raw[1:2]), ended=_finite(raw[2:3]))


def job_seconds(ended: JobExit, ran_here_s: float) -> float | None:
    """The job's run time in seconds (3 decimals) by the box's clock, held to what this machine saw.

    ``ran_here_s``: seconds from starting the job to reading its exit, by this machine's monotonic
    clock, an upper bound on the job's real run time. A skewed or forged box clock never books a
    negative time, nor more than that. None when the box gave no usable times."""
    if ended.started is None or ended.ended is None:
        return None
    return round(min(max(ended.ended - ended.started, 0.0), max(ran_here_s, 0.0)), 3)


def _finite(words: list[str]) -> float | None:
    """The one word in ``words`` as a finite float, else None (missing, not a number, nan, inf)."""
    try:
        value = float(words[0]) if words else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class WrapperLost(GpuopsError):
    """The job wrapper stopped beating without writing an exit marker (killed, box rebooted)."""


def follow_log(
    box,
    write: Callable[[bytes], None],
    *,
    follow: bool = True,
    offset: int = 0,
    poll_s: float = 0.5,
    deadline: float | None = None,
    started_deadline: float | None = None,
    stale_after_s: float | None = None,
    on_poll: Callable[[], None] | None = None,
    on_seen: Callable[[float], None] | None = None,
    stop_at_exit: bool = False,
) -> tuple[int, JobExit | None]:
    """Copy the job log from byte ``offset`` to ``write``, at most ``LOG_CHUNK_BYTES`` per call.

    Raw bytes, in order, each byte once; memory stays bounded.

    With ``follow`` keep polling every ``poll_s`` seconds until the job has ended and the log is
    drained; else return after one read. ``deadline`` (``time.monotonic()``) ends following
    early. Returns (next offset, JobExit or None). A dropped connection is re-established by the
    Box (SSHBox reconnects); pass the returned offset back in to re-attach where you left off.
    ``started_deadline``: when the log has not appeared by then, raise GpuopsError.
    ``stale_after_s``: raise WrapperLost when the wrapper's heartbeat has not changed for this many
    seconds of this machine's clock (content is compared, not timestamps: no clock skew).
    ``on_poll``: called once per poll (the caller throttles it; `up` books the box's live status).
    ``on_seen(asked_at)``: called each time the box answered a poll's reads, with the wall clock
    (epoch s) at which the last of them was asked: the box was alive after that instant, which a
    clock read after the answer is not sure of (a proof of life: `up` keeps it,
    ``gpuops.teardown.lifecycle.PROOF_OF_LIFE``).
    ``stop_at_exit``: return the moment the job's exit is read, the rest of the log left on the box
    (`up`: the exit is watched apart from the log; ``gpuops.teardown.joblog.keep_log`` fetches the
    rest in bulk). The exit is read on every poll, before each log read.
    """
    beat, beat_seen = None, time.monotonic()
    while True:
        if on_poll is not None:
            on_poll()
        asked_at = time.time()
        ended = job_exit(box)  # read before the log, so the log read after it holds everything
        if stop_at_exit and ended is not None:
            if on_seen is not None:
                on_seen(asked_at)
            return offset, ended
        if stale_after_s is not None and ended is None:
            now_beat = box.read_file(f"{JOB_DIR}/heartbeat")
            if now_beat != beat:
                beat, beat_seen = now_beat, time.monotonic()
            elif time.monotonic() - beat_seen > stale_after_s:
                raise WrapperLost(
                    f"the job wrapper on the box stopped ({stale_after_s:.0f} s without a heartbeat, no exit code)",
                    "the job was killed from outside gpuops; see the job log",
                )
        asked_at = time.time()
        chunk = box.read_file(LOG, offset, LOG_CHUNK_BYTES)
        if on_seen is not None:
            on_seen(asked_at)
        if chunk is None and started_deadline is not None and time.monotonic() > started_deadline:
            raise GpuopsError("the job did not start: no log on the box", "see .gpuops/run on the box")
        if chunk:
            write(chunk)
            offset += len(chunk)
        full = chunk is not None and len(chunk) >= LOG_CHUNK_BYTES
        if ended is not None and not chunk:
            return offset, ended
        if not follow and not full:
            return offset, ended
        if deadline is not None and time.monotonic() > deadline:
            return offset, ended
        if not chunk:
            time.sleep(poll_s)


def copy_results(box, results: str, dest: Path) -> Path | None:
    """Copy the job's results (``[job] results``, relative to the box root) into ``dest``.

    Returns ``dest`` or None when the job wrote none."""
    return Path(dest) if box.get(results.rstrip("/") or ".", Path(dest)) else None


MAX_TOKENS_PER_LINE = 10**15  # far above any job; keeps the sum inside a 64-bit ledger INTEGER


def tokens_from_metrics(text: str) -> int:
    """Sum of ``tokens`` over the JSON lines a job appended to $GPUOPS_METRICS.

    Other lines ignored, and so are values that are not a finite number in [0, 1e15] (booleans, NaN,
    Infinity, 1e30)."""
    total = 0
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        n = obj.get("tokens") if isinstance(obj, dict) else None
        if (
            isinstance(n, (int, float))
            and not isinstance(n, bool)
            and math.isfinite(n)
            and 0 <= n <= MAX_TOKENS_PER_LINE
        ):
            total += int(n)
    return min(total, 2**62)
