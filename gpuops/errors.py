"""Error types that carry a user-facing message and the fix.

Every error that reaches the CLI is one of these; the CLI prints ``error: <message>`` (and the fix
on the same line) and exits with ``exit_code``.
"""

from __future__ import annotations

# Exit status of a command that was asked to check or compare something and checked nothing (no
# provider key, no provider answered): never 0, so cron and CI do not read it as success.
NOTHING_CHECKED = 4
# Exit status of an interrupted command: 128 + SIGINT, as shells report it (gpuops.cli.app: typer.Abort).
INTERRUPTED = 130
# What a Ctrl-C before a command is named says (gpuops.entry, gpuops.cli.group).
STARTING = "interrupted while starting: nothing was rented or booked"


class GpuopsError(Exception):
    """Base error: ``message`` says what is wrong, ``fix`` what the user should do."""

    exit_code = 1

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} ({self.fix})" if self.fix else self.message


class BadInput(GpuopsError):
    """Input that cannot work; raised before anything is rented or booked. Exit code 2."""

    exit_code = 2
    # a budget refusal (gpuops.teardown.budget): the end reason a run stops with (gpuops.rental.launcher)
    limit: str | None = None
    # a refused `ledger import` (gpuops.accounting.ledger_service): each bad line, (line number, why)
    errors: list[tuple[int, str]] | None = None


class JobFailed(GpuopsError):
    """The job ran and exited non-zero (exit code 1 for the CLI)."""
