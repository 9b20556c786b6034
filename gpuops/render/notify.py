"""What `gpuops notify test` did: one line per target, redacted (``Target.shown``), delivered or not."""

from __future__ import annotations

from typing import Any


def render_deliveries(done: list[Any]) -> None:
    """Print one line per ``gpuops.notify.notifier.Delivery``, then the count delivered."""
    for d in done:
        print(f"{'ok    ' if d.ok else 'FAILED'} {d.target.shown}" + ("" if d.ok else f": {d.why}"))
    print(f"{sum(d.ok for d in done)} of {len(done)} target(s) took the message")
