"""The kept copy of a job's log (``<data dir>/logs/<session>.log``), finished by whoever ends the rental.

`up` appends the job's log there as it shows it. The job's exit is watched apart from the log: once
the exit is seen, `up` stops showing and the one who ends the rental (`up` itself at the job's
exit; a watchdog, reconcile or `gpuops down` after `up` was killed) fetches what the box holds past
the copy's end in bulk, as one transfer at the link's rate (``keep_log``, ``Box.read_into``), under
one deadline (``[teardown] fetch_deadline_seconds``, counted from the job's exit where `up` saw
it). Then the box is destroyed; `up` shows the rest from the copy afterwards. When the box cannot
be read, or the deadline passes first, the copy gets one closing line that says it is incomplete
and at which byte and line it stops, so `gpuops logs` never passes a cut log off as the whole.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from onbox.policy import FETCH_DEADLINE_SECONDS
from onbox.vocabulary import EventKind

if TYPE_CHECKING:
    from gpuops.box.base import Box
    from ledger.books import Books

INCOMPLETE = "[gpuops] this copy of the job log is incomplete"
LATE = "the [teardown] fetch_deadline_seconds ran out before the rest was home"


def drained(ledger: Books, session_id: str) -> bool:
    """True when the kept copy was finished (a ``log_kept`` event).

    Rows from before the exit was watched apart from the log also count when their ``job_exited``
    event carries ``log_bytes`` (that `up` relayed the whole log itself)."""
    for e in ledger.events(session_id):
        if e.kind == EventKind.LOG_KEPT:
            return True
        if e.kind == EventKind.JOB_EXITED:
            try:
                if "log_bytes" in json.loads(e.detail or "{}"):
                    return True
            except (ValueError, TypeError):
                continue
    return False


class _Stop(Exception):
    """Raised into a fetch whose deadline passed: nothing more is written to the copy."""


def keep_log(
    ledger: Books,
    row,
    open_box: Callable[[], Box | None],
    by: str,
    close: bool = True,
    deadline: float | None = None,
    job_started: bool = False,
) -> dict | None:
    """Finish the kept copy of ``row``'s job log before its box is destroyed.

    Append what the box's log (``gpuops.agent.jobio.LOG``) holds past the copy's size, in bulk
    (``Box.read_into``). ``open_box()``: a Box on the instance, or None (no endpoint); ``close``:
    close it afterwards (False for `up`'s own box). ``job_started``: the caller saw the job start
    (`up`), so the ledger is not asked (a ledger that is down must not leave the log behind). ``deadline``: ``time.monotonic()`` by which the
    copy must be home (default: ``FETCH_DEADLINE_SECONDS`` from now); the fetch runs on a daemon
    thread, so a box that stops answering costs the deadline and no more. When the box cannot be
    read or the deadline passes, append one line saying the copy is incomplete and where it stops
    (byte and line). Books ``log_kept`` {"complete", "bytes", "fetched", "seconds", "by"} (bytes:
    the copy's size; fetched: what this call appended; seconds: the fetch's wall time) and returns
    it; None when there is nothing to finish (no job started, no copy kept here, or already
    finished). Never raises: the destroy must still happen."""
    try:
        if (
            not row.log_path
            or not (job_started or any(e.kind == EventKind.JOB_STARTED for e in ledger.events(row.id)))
            or drained(ledger, row.id)
        ):
            return None
        if deadline is None:
            deadline = time.monotonic() + FETCH_DEADLINE_SECONDS
        path = Path(row.log_path)
        t0 = time.monotonic()
        with open(path, "ab") as f:
            have = f.tell()
            fetched, why = _fetch(open_box, have, close, f, deadline)
            if why is not None:
                at = have + fetched
                f.flush()
                lines = _count_lines(path, at)
                f.write(f"\n{INCOMPLETE}: it stops at byte {at:,} (line {lines:,}); {why}\n".encode())
        done = {
            "complete": why is None,
            "bytes": have + fetched,
            "fetched": fetched,
            "seconds": round(time.monotonic() - t0, 3),
            "by": by,
        }
        ledger.event(row.id, EventKind.LOG_KEPT, done)
        return done
    except Exception:  # noqa: BLE001  a log is never worth a box left billing
        return None


def _fetch(
    open_box: Callable[[], Box | None], offset: int, close: bool, out, deadline: float
) -> tuple[int, str | None]:
    """Append the box's job log from ``offset`` to ``out`` until ``deadline``: (bytes appended, None or why it stops).

    The transfer runs on a daemon thread; at the deadline its next piece is refused (``_Stop``)
    and nothing more is written, whatever the thread is still waiting on."""
    from gpuops.agent.jobio import LOG

    lock, stopped = threading.Lock(), threading.Event()
    fetched = [0]
    why: list[str | None] = [None]

    def sink(chunk: bytes) -> None:
        with lock:
            if stopped.is_set() or time.monotonic() >= deadline:
                raise _Stop
            out.write(chunk)
            fetched[0] += len(chunk)

    def work() -> None:
        try:
            box = open_box()
        except Exception as e:  # noqa: BLE001
            why[0] = f"the box could not be reached before it was destroyed ({type(e).__name__})"
            return
        if box is None:
            why[0] = "the box was gone before the rest could be fetched"
            return
        try:
            if not box.read_into(LOG, offset, sink):
                why[0] = "the box holds no job log"
        except _Stop:
            why[0] = LATE
        except Exception as e:  # noqa: BLE001
            why[0] = f"the box could not be read before it was destroyed ({type(e).__name__})"
        finally:
            if close:
                try:
                    box.close()
                except Exception:  # noqa: BLE001
                    pass

    if time.monotonic() >= deadline:
        return 0, LATE
    worker = threading.Thread(target=work, name="gpuops-keep-log", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    with lock:
        stopped.set()
        return fetched[0], LATE if worker.is_alive() else why[0]


def _count_lines(path: Path, upto: int) -> int:
    """Lines in the first ``upto`` bytes of ``path`` (a last line without a newline counts)."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        left = upto
        while left > 0:
            chunk = f.read(min(left, 2**20))
            if not chunk:
                break
            n += chunk.count(b"\n")
            last = chunk[-1:]
            left -= len(chunk)
    return n + (0 if last == b"\n" else 1)
