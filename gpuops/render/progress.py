"""Progress on waits: what gpuops waits for and for how long, on stderr, while it waits.

``waiting("asking vast for offers")`` is a context manager: when stderr is a terminal and the
wait lasts longer than ``SHOW_AFTER_S`` (1 s), a rich status line shows the text and the seconds
elapsed, updated ``REFRESH_S`` apart, and disappears when the wait ends. When stderr is not a
terminal (pipes, CI, tests) nothing is written: machine output stays clean, and stdout is never
touched. ``note(text)`` changes the text of the innermost wait (e.g. "2 of 3 providers answered").
rich is imported only when a status is shown.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

SHOW_AFTER_S = 1.0  # shorter waits are not worth a line
REFRESH_S = 0.2


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced stderr
        return False


class _Wait:
    def __init__(self, what: str):
        self.what = what
        self.t0 = time.monotonic()
        self.stop = threading.Event()

    def text(self) -> str:
        return f"{self.what} ({time.monotonic() - self.t0:.0f} s)"

    def run(self) -> None:
        if self.stop.wait(SHOW_AFTER_S):
            return
        try:
            from rich.console import Console

            with Console(stderr=True, highlight=False, markup=False).status(self.text()) as status:
                while not self.stop.wait(REFRESH_S):
                    status.update(self.text())
        except Exception:  # a progress line never decides anything: a broken terminal loses it
            pass


_current: list[_Wait] = []


class Ticker:
    """A wait started and stopped by hand (``start(what)`` / ``stop()``).

    For a reporter whose stages end when the next one begins. Same rules as ``waiting``."""

    def __init__(self, show: bool | None = None):
        self.on = _terminal() if show is None else show
        self.wait: _Wait | None = None
        self.thread: threading.Thread | None = None

    def start(self, what: str) -> None:
        self.stop()
        if not self.on:
            return
        self.wait = _Wait(what)
        self.thread = threading.Thread(target=self.wait.run, name="gpuops-progress", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.wait is not None:
            self.wait.stop.set()
            if self.thread is not None:
                self.thread.join(timeout=1.0)
        self.wait = self.thread = None


@contextmanager
def waiting(what: str, show: bool | None = None) -> Iterator[_Wait]:
    """Show ``what`` and the elapsed seconds on stderr while the body runs (terminal only, after ``SHOW_AFTER_S``).

    ``show``: force on/off (default: stderr is a terminal)."""
    w = _Wait(what)
    on = _terminal() if show is None else show
    thread = threading.Thread(target=w.run, name="gpuops-progress", daemon=True) if on else None
    _current.append(w)
    if thread is not None:
        thread.start()
    try:
        yield w
    finally:
        _current.remove(w)
        w.stop.set()
        if thread is not None:
            thread.join(timeout=1.0)


def note(text: str) -> None:
    """Replace the text of the innermost wait (no-op outside one)."""
    if _current:
        _current[-1].what = text
