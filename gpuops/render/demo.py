"""What `gpuops demo start` and `gpuops demo status` print (gpuops/demo/demo.py's state)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

TRY = (
    "gpuops offers --card rtx-4090",
    "gpuops up --provider runpod --card rtx-4090 --job job.sh    (job.sh: echo hello)",
    "gpuops ledger month",
    "gpuops check --live --rent --provider runpod --max-usd 0.5",
    "gpuops dashboard",
)


def demo_lines(state, home, started: bool) -> list[str]:
    """The running demo in lines: what runs where, how to point a shell at it, what to try, how to end it.

    ``state``: a gpuops.demo.demo.DemoState; ``home``: the demo's folder; ``started``: this call started it."""
    left_min = max(0.0, (state.deadline - time.time()) / 60)
    until = datetime.fromtimestamp(state.deadline, timezone.utc).strftime("%H:%M UTC")
    box = f"sshd on {state.box}" if state.box else "none"
    lines = [
        f"SIMULATED: gpuops demo {'started' if started else 'is running'} (pid {state.pid}); it ends itself at "
        f"{until} ({left_min:.0f} min left)",
        f"  RunPod, emulated    {state.runpod_url}",
        f"  Vast.ai, emulated   {state.vast_url}",
        f"  boxes               {box}" + (f"  ({state.box_note})" if state.box_note else ""),
        f"  data and ledger     {home}  (the demo's own; your gpuops data is not touched)",
        'Point this shell at it:  eval "$(gpuops demo env)"',
    ]
    lines += [("Then try:  " if i == 0 else "           ") + t for i, t in enumerate(TRY)]
    lines.append('End it:    gpuops demo stop; eval "$(gpuops demo env --unset)"')
    return lines
