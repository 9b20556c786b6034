"""The click group class every gpuops command group uses (``typer.Typer(cls=Group)``)."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
import typer.core

from gpuops.errors import INTERRUPTED, STARTING

# What a Ctrl-C that reaches the group means, one line: STARTING until a command is named, then the
# command's START_NOTE (else "interrupted"), then what the command says (`up`, once its rental ended).
_note: list[str] = [STARTING]


def current_note() -> str:
    """The line a Ctrl-C now prints (``interrupt_note``)."""
    return _note[0]


def interrupt_note(text: str) -> None:
    """Set the line a Ctrl-C that ends this command prints (``Group.invoke``); one per invocation."""
    _note[0] = text


def _say_interrupted() -> NoReturn:
    """Print the line of ``interrupt_note`` on stderr and exit 130 (``typer.Exit``)."""
    try:
        sys.stderr.write(_note[0] + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a closed stderr loses the line, never the exit status
    raise typer.Exit(INTERRUPTED) from None


class Group(typer.core.TyperGroup):
    """gpuops' command groups: whole first sentences in the command list, and two-word commands.

    The list of commands in ``--help`` shows each command's first sentence whole, wrapped (click
    cuts it at the terminal's width, mid-sentence, with ``...``). ``gpuops plan storage`` and
    ``gpuops plan spot`` are the hidden ``plan-storage`` / ``plan-spot`` commands, under their
    typed name (their usage line says ``gpuops plan storage``). A Ctrl-C that no command turned into
    its own outcome prints one line (``interrupt_note``) and exits 130, never a traceback or silence
    (typer turns it into a silent exit 130)."""

    TWO_WORD = {
        ("plan", "storage"): "plan-storage",
        ("plan", "spot"): "plan-spot",
        ("sweep", "status"): "sweep-status",
        ("sweep", "cancel"): "sweep-cancel",
        ("sweep", "resume"): "sweep-resume",
    }
    # The line a Ctrl-C prints from the moment a command is named, before it parses its options:
    # `up` rents nothing until its run arms its own signal handling (at the intent row).
    START_NOTE = {"up": "interrupted before anything was rented: nothing to tear down"}

    def make_context(self, info_name, args, parent=None, **extra):
        # The root group reads its own options here, before `invoke` (typer imports its value
        # adapters, ~0.2 s): a Ctrl-C then was typer's silent exit 130.
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt:
            _say_interrupted()

    def invoke(self, ctx):
        if ctx.parent is None:
            _note[0] = STARTING
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _say_interrupted()

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))  # the first sentence, whole
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(self, ctx, args):
        if ctx.parent is None and args:
            _note[0] = self.START_NOTE.get(args[0], "interrupted")
        hidden = self.TWO_WORD.get(tuple(args[:2]))
        if hidden is not None:
            cmd = self.get_command(ctx, hidden)
            if cmd is not None:
                return f"{args[0]} {args[1]}", cmd, args[2:]
        return super().resolve_command(ctx, args)
