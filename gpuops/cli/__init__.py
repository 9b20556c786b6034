"""The command line (top floor): the typer app, one module per command group; parse, call one service, render."""
