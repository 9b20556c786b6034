"""The terminal reporter of `up` (a renderer that plugs into the launcher's Reporter, so it sits with the command).

Its own module, so that the commands that only render tables never import
``gpuops.rental.launcher``."""

from __future__ import annotations

import sys
import time

from gpuops.render.ui import _esc, console
from gpuops.rental.launcher import Reporter

# What a stage waits for, as its live line says it on a terminal (gpuops.render.progress).
WAITING_FOR = {
    "validate": "validate: checking the job, the settings and the keys",
    "plan": "plan: waiting for the provider's offers, its balance and a quick reconcile",
    "intent": "intent: writing the ledger row",
    "create": "create: waiting for the provider to create the instance",
    "ready": "ready: waiting for the box to answer (SSH, or the local box)",
    "arm": "arm: putting the agent on the box",
    "bootstrap": "bootstrap: waiting for the bootstrap steps",
    "job": "job running, no output yet",
    "collect": "collect: copying the results home",
    "teardown": "teardown: waiting for the provider to destroy the box",
}


class ConsoleReporter(Reporter):
    """Stages with elapsed time on stderr; the job's output on stdout (stderr with --json).

    On a terminal, a stage that lasts over a second shows a live line with its seconds
    (``gpuops.render.progress``) until the next line is printed; ``close()`` ends it."""

    def __init__(self, json_mode: bool = False):
        from gpuops.render.progress import Ticker

        self.err = console(stderr=True)
        self.json_mode = json_mode
        self.t0 = time.monotonic()
        self.last = self.t0
        self.ticker = Ticker()

    def close(self) -> None:
        self.ticker.stop()

    def _elapsed(self) -> str:
        now = time.monotonic()
        return f"{now - self.t0:6.1f}s"

    def stage(self, name: str, detail: str = "") -> None:
        self.ticker.stop()
        self.err.print(f"[bold cyan]{self._elapsed()}[/] [bold]{name}[/] {_esc(detail)}", markup=True)
        self.ticker.start(WAITING_FOR.get(name, f"{name}: waiting"))
        if name == "job" and not self.json_mode:  # the summary's table, imported while the job runs
            from gpuops.rental.launcher import import_meanwhile

            import_meanwhile(("gpuops.render.tables", "rich.table"))

    def step(self, line: dict) -> None:
        self.ticker.stop()
        status = line.get("status", "")
        color = {"done": "green", "skipped": "dim", "failed": "red"}.get(status, "white")
        self.err.print(
            f"         step {_esc(str(line.get('step')))}: [{color}]{_esc(str(status))}[/] {line.get('seconds', 0):.2f}s",
            markup=True,
        )

    def job_line(self, text: str) -> None:
        self.ticker.stop()
        stream = sys.stderr if self.json_mode else sys.stdout
        stream.write(text + "\n")
        stream.flush()

    def warn(self, text: str) -> None:
        self.ticker.stop()
        self.err.print(f"[yellow]warning:[/] {_esc(text)}", markup=True)
