"""The click group class every gpuops command group uses (``typer.Typer(cls=Group)``)."""

from __future__ import annotations

import typer.core


class Group(typer.core.TyperGroup):
    """gpuops' command groups: whole first sentences in the command list, and two-word commands.

    The list of commands in ``--help`` shows each command's first sentence whole, wrapped (click
    cuts it at the terminal's width, mid-sentence, with ``...``). ``gpuops plan storage`` and
    ``gpuops plan spot`` are the hidden ``plan-storage`` / ``plan-spot`` commands, under their
    typed name (their usage line says ``gpuops plan storage``)."""

    TWO_WORD = {("plan", "storage"): "plan-storage", ("plan", "spot"): "plan-spot"}

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
        hidden = self.TWO_WORD.get(tuple(args[:2]))
        if hidden is not None:
            cmd = self.get_command(ctx, hidden)
            if cmd is not None:
                return f"{args[0]} {args[1]}", cmd, args[2:]
        return super().resolve_command(ctx, args)
