"""Leaving an SQLite ledger checkpointed.

The CLI exits through ``os._exit``, so SQLite's own checkpoint on the last close never runs and a
big write would leave a big ``-wal`` file that every later opener pays for (~40 ms per connection).
The engine's BEGIN IMMEDIATE hook (``ledger/engine.py``) names each file it writes in ``WRITTEN``
with its engine; the CLI calls ``checkpoint_written`` on its way out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# SQLite files this process opened for writing (BEGIN IMMEDIATE), with the engine that wrote them.
WRITTEN: dict[str, Engine] = {}
# How long the exit checkpoint waits on another process's lock before settling for less (ms).
CHECKPOINT_WAIT_MS = 250


def checkpoint_written(wait_ms: int = CHECKPOINT_WAIT_MS) -> dict[str, str]:
    """Checkpoint every SQLite ledger this process wrote and truncate its ``-wal`` file.

    Fold the WAL of every SQLite ledger this process wrote into the database file and truncate the
    ``-wal`` file to 0 bytes (``PRAGMA wal_checkpoint(TRUNCATE)``, on a DB-API connection of the
    ledger's engine outside any transaction), for a process that leaves without closing its
    connections (SQLite checkpoints on the last close only).

    Waits at most ``wait_ms`` milliseconds (SQLite's busy handler) for another process's write lock
    or read transaction; when still busy it runs a PASSIVE checkpoint (copies what it can, never
    waits) and leaves the file for that process. Returns {path: "truncated" | "busy" | "error: ..."};
    never raises (it runs on the way out). See https://sqlite.org/pragma.html#pragma_wal_checkpoint."""
    out: dict[str, str] = {}
    for path, engine in sorted(WRITTEN.items()):
        try:
            con = engine.raw_connection()
            try:
                cur = con.cursor()
                cur.execute(f"PRAGMA busy_timeout={int(wait_ms)}")
                busy = cur.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                if busy:
                    cur.execute("PRAGMA wal_checkpoint(PASSIVE)")
                cur.close()
                out[path] = "busy" if busy else "truncated"
            finally:
                con.invalidate()  # its busy timeout is this function's: never handed back to the pool
        except Exception as e:  # noqa: BLE001  the way out: say it, never raise
            out[path] = f"error: {e}"
    WRITTEN.clear()
    return out
