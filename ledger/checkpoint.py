"""Leaving an SQLite ledger checkpointed.

The CLI exits through ``os._exit``, so SQLite's own checkpoint on the last close never runs and a
big write would leave a big ``-wal`` file that every later opener pays for (~40 ms per connection).
Whatever writes the file (the engine's BEGIN IMMEDIATE hook, the standard-library writers) names it
in ``WRITTEN``; the CLI calls ``checkpoint_written`` on its way out. Standard library only: the
paths that skip SQLAlchemy use it.
"""

from __future__ import annotations

# SQLite files this process opened for writing (BEGIN IMMEDIATE), for checkpoint_written.
WRITTEN: set[str] = set()
# How long the exit checkpoint waits on another process's lock before settling for less (ms).
CHECKPOINT_WAIT_MS = 250


def checkpoint_written(wait_ms: int = CHECKPOINT_WAIT_MS) -> dict[str, str]:
    """Checkpoint every SQLite ledger this process wrote and truncate its ``-wal`` file.

    Fold the WAL of every SQLite ledger this process wrote into the database file and truncate the
    ``-wal`` file to 0 bytes (``PRAGMA wal_checkpoint(TRUNCATE)``), for a process that leaves
    without closing its connections (SQLite checkpoints on the last close only; a big ``-wal`` left
    behind costs every later opener ~40 ms per connection).

    Waits at most ``wait_ms`` milliseconds (SQLite's busy handler) for another process's write lock
    or read transaction; when still busy it runs a PASSIVE checkpoint (copies what it can, never
    waits) and leaves the file for that process. Returns {path: "truncated" | "busy" | "error: ..."};
    never raises (it runs on the way out). See https://sqlite.org/pragma.html#pragma_wal_checkpoint."""
    import sqlite3

    out: dict[str, str] = {}
    for path in sorted(WRITTEN):
        try:
            con = sqlite3.connect(path, timeout=wait_ms / 1000, isolation_level=None)
            try:
                busy = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                if busy:
                    con.execute("PRAGMA wal_checkpoint(PASSIVE)")
                out[path] = "busy" if busy else "truncated"
            finally:
                con.close()
        except sqlite3.Error as e:
            out[path] = f"error: {e}"
    WRITTEN.clear()
    return out
