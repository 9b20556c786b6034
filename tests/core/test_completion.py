"""`gpuops completion bash|zsh|fish [--install]`: the script is produced for each shell, installs where
typer puts it, and answers a Tab from the app's own commands and options."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import gpuops_cmd

# What each shell's script must call back with (typer's instruction style: complete_<shell>).
CALLS = {
    "bash": "$( env COMP_WORDS=",
    "zsh": "#compdef gpuops",
    "fish": "complete --command gpuops",
}


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_script_is_printed_for_each_shell(cli, shell):
    r = cli("completion", shell)
    assert r.returncode == 0 and r.stderr == ""
    assert CALLS[shell] in r.stdout and f"_GPUOPS_COMPLETE=complete_{shell}" in r.stdout


def test_an_unknown_shell_is_one_line_naming_the_ones_there_are(cli):
    r = cli("completion", "tcsh")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "error: no completion for shell 'tcsh' (name one of: bash, zsh, fish)\n"


@pytest.mark.parametrize(
    "shell,path",
    [
        ("bash", ".bash_completions/gpuops.sh"),
        ("zsh", ".zfunc/_gpuops"),
        ("fish", ".config/fish/completions/gpuops.fish"),
    ],
)
def test_install_writes_the_printed_script_where_the_shell_loads_it(cli, tmp_path, shell, path):
    home = tmp_path / "home"
    home.mkdir()
    printed = cli("completion", shell).stdout
    r = cli("completion", shell, "--install", env={"HOME": str(home)})
    assert r.returncode == 0, r
    assert r.stdout.startswith(f"{shell} completion installed in {home / path} (")
    assert (home / path).read_text().strip() == printed.strip()
    if shell == "bash":
        assert f"source '{home / path}'" in (home / ".bashrc").read_text()
    if shell == "zsh":
        assert "fpath+=~/.zfunc; autoload -Uz compinit; compinit" in (home / ".zshrc").read_text()


@pytest.mark.parametrize(
    "shell,env,want",
    [
        ("bash", {"COMP_WORDS": "gpuops comp", "COMP_CWORD": "1"}, "completion"),
        ("zsh", {"_TYPER_COMPLETE_ARGS": "gpuops up --en"}, '"--env":'),
        ("fish", {"_TYPER_COMPLETE_ARGS": "gpuops led", "_TYPER_COMPLETE_FISH_ACTION": "get-args"}, "ledger\t"),
    ],
)
def test_a_tab_is_answered_from_the_apps_commands(cli, shell, env, want):
    r = cli(env={"_GPUOPS_COMPLETE": f"complete_{shell}", **env})
    assert r.returncode == 0 and want in r.stdout, r


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_sources_the_script_and_completes_a_command(cli_env, tmp_path):
    script = tmp_path / "gpuops.sh"
    script.write_text(
        subprocess.run(
            gpuops_cmd("completion", "bash"), env=cli_env, capture_output=True, text=True, timeout=60, check=True
        ).stdout
    )
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "gpuops").write_text(f'#!/bin/sh\nexec {" ".join(gpuops_cmd())} "$@"\n')
    (shim / "gpuops").chmod(0o755)
    env = dict(cli_env, PATH=f"{shim}{os.pathsep}{cli_env['PATH']}")
    out = subprocess.run(
        [
            "bash",
            "--norc",
            "-c",
            f". {script} && COMP_WORDS=(gpuops led); COMP_CWORD=1; _gpuops_completion gpuops led gpuops && "
            'printf "%s\\n" "${COMPREPLY[@]}"',
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ledger"]
