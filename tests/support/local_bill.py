"""The local provider's own record of a box, read as its bill: the test's expected money for a local box.

A local box has no provider invoice; its files (``instance.json``'s ``created_at`` and
``destroyed.json``'s ``destroyed_at``, written by the provider, not by the ledger) are the record the
books must equal. The billing rule is written here, in the test's own arithmetic: every begun second
is billed (RunPod's and Vast.ai's per-second billing, README "The books")."""

from __future__ import annotations

import json
import math
from pathlib import Path


def local_bill(boxes_dir: Path, instance_id: str, usd_per_hour: float) -> tuple[float, float]:
    """``(billed seconds, USD)`` of the local box ``instance_id`` by its own files under ``boxes_dir``.

    Raises FileNotFoundError / KeyError when the box has no such record (never destroyed)."""
    d = Path(boxes_dir) / instance_id
    created = json.loads((d / "instance.json").read_text())["created_at"]
    destroyed = json.loads((d / "destroyed.json").read_text())["destroyed_at"]
    seconds = float(math.ceil(round(destroyed - created, 6)))
    return seconds, seconds * usd_per_hour / 3600
