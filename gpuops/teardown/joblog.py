"""The kept copy of a job's log (``<data dir>/logs/<session>.log``), finished by whoever ends the rental.

`up` writes the job's log there as it follows the job. When `up` is killed (SIGKILL, a closed
laptop) the copy stops where `up` stopped; the box still holds the rest. Before the destroy, the
one who ends the rental (a watchdog, reconcile, `gpuops down`, or `up`'s own teardown after a
Ctrl-C) appends what the box has past the copy's end (``keep_log``). When the box cannot be read,
the copy gets one closing line that says it is incomplete and at which byte and line it stops, so
`gpuops logs` never passes a cut log off as the whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from onbox.vocabulary import EventKind

if TYPE_CHECKING:
    from gpuops.box.base import Box
    from ledger.books import Books

# The most a finishing fetch appends (bytes): the rest of a log `up` was following, not a new copy of a
# runaway one. Past it the copy is marked incomplete at that byte.
MAX_FETCH_BYTES = 256 * 2**20
INCOMPLETE = "[gpuops] this copy of the job log is incomplete"


def drained(ledger: Books, session_id: str) -> bool:
    """True when `up` followed the job's log to its end, or the copy was already finished.

    Followed: its ``job_exited`` event carries ``log_bytes``; finished: ``log_kept``."""
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


def keep_log(ledger: Books, row, open_box: Callable[[], Box | None], by: str, close: bool = True) -> dict | None:
    """Finish the kept copy of ``row``'s job log before its box is destroyed.

    Append what the box's log (``gpuops.agent.jobio.LOG``) holds past the copy's size.
    ``open_box()``: a Box on the instance, or None (no endpoint); ``close``: close it afterwards
    (False for `up`'s own box). When the box cannot be read, append one line saying the copy is
    incomplete and where it stops (byte and line). Books ``log_kept`` {"complete", "bytes",
    "fetched", "by"} and returns it; None when there is nothing to finish (no job started, no copy
    kept here, `up` drained the log, or already finished). Never raises: the destroy must still
    happen."""
    try:
        if (
            not row.log_path
            or not any(e.kind == EventKind.JOB_STARTED for e in ledger.events(row.id))
            or drained(ledger, row.id)
        ):
            return None
        path = Path(row.log_path)
        have = path.stat().st_size if path.is_file() else 0
        got, why = _fetch(open_box, have, close)
        with open(path, "ab") as f:
            if got is not None:
                f.write(got[:MAX_FETCH_BYTES])
            if got is None or len(got) > MAX_FETCH_BYTES:
                at = have + (len(got[:MAX_FETCH_BYTES]) if got is not None else 0)
                lines = _count_lines(path, at)
                if why is None:
                    why = f"the rest is over {MAX_FETCH_BYTES // 2**20} MiB"
                f.write(
                    f"\n{INCOMPLETE}: it stops at byte {at:,} (line {lines:,}), where `up` stopped following the job; {why}\n".encode()
                )
        done = {
            "complete": got is not None and len(got) <= MAX_FETCH_BYTES,
            "bytes": have + (len(got[:MAX_FETCH_BYTES]) if got else 0),
            "fetched": len(got[:MAX_FETCH_BYTES]) if got else 0,
            "by": by,
        }
        ledger.event(row.id, EventKind.LOG_KEPT, done)
        return done
    except Exception:  # noqa: BLE001  a log is never worth a box left billing
        return None


def _fetch(open_box: Callable[[], Box | None], offset: int, close: bool) -> tuple[bytes | None, str | None]:
    """(the box's job log from ``offset``, None) or (None, why it could not be read)."""
    from gpuops.agent.jobio import LOG

    try:
        box = open_box()
    except Exception as e:  # noqa: BLE001
        return None, f"the box could not be reached before it was destroyed ({type(e).__name__})"
    if box is None:
        return None, "the box was gone before the rest could be fetched"
    try:
        got = box.read_file(LOG, offset)
        return (got or b"", None) if got is not None else (None, "the box holds no job log")
    except Exception as e:  # noqa: BLE001
        return None, f"the box could not be read before it was destroyed ({type(e).__name__})"
    finally:
        if close:
            try:
                box.close()
            except Exception:  # noqa: BLE001
                pass


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
