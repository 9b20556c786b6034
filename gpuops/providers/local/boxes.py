"""Retention of destroyed local boxes: keep the logs, prune the rest.

A destroyed local box (``<data dir>/boxes/<session>/``) still holds the copy of ``onbox/``,
the job file, bootstrap state, caches and whatever the job wrote (about 176 KB for
``examples/bench.sh``, more for a job that writes). Results were already copied to
``<data dir>/results/<session>`` by ``up``; the logs are worth keeping. After
``[providers.local] keep_box_days`` days (default 7; 0: at once) a destroyed box keeps only:

* ``instance.json``, ``destroyed.json`` and ``pruned.json`` (what was freed, when),
* every ``*.log`` file (the job's ``.gpuops/run/job.log``, the agent's, bootstrap's),
* the small state files under ``.gpuops/`` (``*.json``) and ``.gpuops/run/`` (exit code, marker),
  which reconcile reads to date a box's end.

Cheap by construction: nothing runs at CLI start-up. ``sweep`` runs when the local provider
destroys a box, looks at destroyed boxes oldest first (session ids sort by date), skips those
already pruned (one ``stat``), and prunes at most ``limit`` per call. Symlinks are removed as
links, never followed: a job's link to a folder outside its box leaves that folder alone.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

DAY_S = 86400.0
PRUNED = "pruned.json"
DESTROYED = "destroyed.json"
KEEP_TOP = {"instance.json", DESTROYED, PRUNED}
SWEEP_LIMIT = 20  # boxes pruned per destroy, at most


def _keep(rel: str) -> bool:
    """True for a file (path relative to the box, with /) that pruning keeps."""
    if rel in KEEP_TOP or rel.endswith(".log"):
        return True
    head, _, name = rel.rpartition("/")
    if head == ".gpuops" and name.endswith(".json"):
        return True
    return head == ".gpuops/run"


def prune_box(box: Path, now: float | None = None) -> int:
    """Remove everything in a destroyed box but what ``_keep`` keeps; write ``pruned.json``.

    Returns the bytes freed. Best effort: a file that cannot be removed stays (it is counted as
    kept). Never follows a symlink out of the box."""
    freed = 0
    root = str(box)
    for dirpath, dirnames, filenames in os.walk(root, topdown=False, followlinks=False):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if _keep(rel) and not os.path.islink(path):
                continue
            try:
                size = os.lstat(path).st_size
                os.unlink(path)
                freed += size
            except OSError:
                pass
        if dirpath != root:
            try:
                os.rmdir(dirpath)  # only when empty: kept logs keep their folders
            except OSError:
                pass
    (box / PRUNED).write_text(json.dumps({"pruned_at": time.time() if now is None else now, "freed_bytes": freed}))
    return freed


def destroyed_at(box: Path) -> float | None:
    """When the box was destroyed (epoch s), None while it is alive or the record is unreadable."""
    try:
        v = json.loads((box / DESTROYED).read_text())["destroyed_at"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def sweep(boxes_dir: Path, keep_days: float, now: float | None = None, limit: int = SWEEP_LIMIT) -> list[str]:
    """Prune up to ``limit`` boxes destroyed more than ``keep_days`` days ago; returns their names.

    Prune up to ``limit`` destroyed boxes under ``boxes_dir`` destroyed more than ``keep_days`` days
    ago (0: any destroyed box), oldest first. Returns the pruned box names. Never raises for a
    file-system error (a destroy must not fail because of housekeeping)."""
    now = time.time() if now is None else now
    pruned: list[str] = []
    try:
        names = sorted(e.name for e in os.scandir(boxes_dir) if e.is_dir(follow_symlinks=False))
    except OSError:
        return pruned
    for name in names:
        if len(pruned) >= limit:
            break
        box = Path(boxes_dir) / name
        if (box / PRUNED).exists():
            continue
        ended = destroyed_at(box)
        if ended is None or now - ended < keep_days * DAY_S:
            continue
        try:
            prune_box(box, now)
        except OSError:
            continue
        pruned.append(name)
    return pruned
