"""The `gpuops` console script: imports the CLI, then runs it.

Importing the CLI (typer, click) takes ~50 ms; a Ctrl-C inside it printed Python's traceback, since
``gpuops.cli.app.main`` (which turns an interrupt into one line and exit 130) was not running yet.
Nothing is rented or booked before the import ends, so an interrupt there only says so and exits.
"""

from __future__ import annotations

import os
import sys

INTERRUPTED = 130  # 128 + SIGINT, as shells report it (gpuops.cli.app: typer.Abort)


def main() -> None:
    """``gpuops.cli.app.main`` behind an import that a Ctrl-C ends with one line and exit 130."""
    try:
        from gpuops.cli.app import main as run
    except KeyboardInterrupt:
        try:
            sys.stderr.write("interrupted while starting: nothing was rented or booked\n")
            sys.stderr.flush()
        finally:
            os._exit(INTERRUPTED)
    run()
