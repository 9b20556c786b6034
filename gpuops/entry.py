"""The `gpuops` console script: imports the CLI, then runs it.

Importing the CLI (typer, click) takes ~50 ms; a Ctrl-C inside it printed Python's traceback, since
``gpuops.cli.app.main`` (which turns an interrupt into one line and exit 130) was not running yet.
Nothing is rented or booked before the import ends, so an interrupt there only says so and exits.
After it, a Ctrl-C that no command handled prints the command group's line for it
(``gpuops.cli.group``) and exits 130: never a traceback.
"""

from __future__ import annotations

import os
import sys

from gpuops.errors import INTERRUPTED, STARTING


def main() -> None:
    """``gpuops.cli.app.main`` behind an import that a Ctrl-C ends with one line and exit 130."""
    try:
        from gpuops.cli.app import main as run
    except KeyboardInterrupt:
        try:
            sys.stderr.write(STARTING + "\n")
            sys.stderr.flush()
        finally:
            os._exit(INTERRUPTED)
    try:
        run()
    except KeyboardInterrupt:  # outside the command group's own catch (before it parses, or at exit)
        from gpuops.cli.group import current_note

        try:
            sys.stderr.write(current_note() + "\n")
            sys.stderr.flush()
        finally:
            os._exit(INTERRUPTED)
