"""`gpuops completion SHELL [--install]`: the shell completion script of bash, zsh or fish, printed or installed.

typer writes the scripts and installs them (``typer.completion``: the files typer's own
``--install-completion`` writes, https://typer.tiangolo.com/tutorial/options-autocompletion/);
gpuops names the shell instead of guessing it from the parent process. At a Tab the shell runs
``gpuops`` with ``COMPLETE_VAR`` set; ``gpuops.cli.app.main`` then registers typer's completion
classes (``shell_completion_setup``) and click answers from the app's commands and options.
"""

from __future__ import annotations

import typer

PROG_NAME = "gpuops"
COMPLETE_VAR = "_GPUOPS_COMPLETE"  # click's rule: _<PROG_NAME>_COMPLETE, upper case
SHELLS = ("bash", "zsh", "fish")
INSTALL_NOTE = {  # what typer's install writes, and what makes it take effect
    "bash": "sourced from ~/.bashrc; open a new shell",
    "zsh": "~/.zfunc on fpath and compinit in ~/.zshrc; open a new shell",
    "fish": "fish loads it from there; open a new shell",
}


def shell_completion_setup() -> None:
    """Register typer's completion classes with click (what typer does when ``add_completion`` is on)."""
    from typer.completion import completion_init

    completion_init()


def completion(
    shell: str = typer.Argument(..., metavar="SHELL", help="bash, zsh or fish."),
    install: bool = typer.Option(
        False, "--install", help="Write the script where the shell loads it (its rc file or completions folder)."
    ),
) -> None:
    """Print the shell completion script for bash, zsh or fish (--install: install it).

    `gpuops completion bash >> ~/.bashrc`, or `gpuops completion zsh --install`."""
    from gpuops.errors import BadInput

    if shell not in SHELLS:
        raise BadInput(f"no completion for shell {shell!r}", f"name one of: {', '.join(SHELLS)}")
    from typer.completion import get_completion_script, install as install_script

    if install:
        _, path = install_script(shell=shell, prog_name=PROG_NAME, complete_var=COMPLETE_VAR)
        print(f"{shell} completion installed in {path} ({INSTALL_NOTE[shell]})")
        return
    print(get_completion_script(prog_name=PROG_NAME, complete_var=COMPLETE_VAR, shell=shell))
