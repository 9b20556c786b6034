"""The console script: a Ctrl-C while the CLI is still importing is one line and exit 130."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

INTERRUPT_THE_IMPORT = r"""
import sys

class Interrupt:  # Ctrl-C arriving while gpuops.cli.app (typer, click) is being imported
    def find_spec(self, name, path=None, target=None):
        if name == "gpuops.cli.app":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
from gpuops.entry import main
main()
"""


def test_ctrl_c_during_the_cli_import_is_one_line_and_exit_130():
    # Seen: Ctrl-C in the first ~50 ms of `gpuops ...` printed Python's traceback.
    out = subprocess.run([sys.executable, "-c", INTERRUPT_THE_IMPORT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 130
    assert out.stderr == "interrupted while starting: nothing was rented or booked\n"
    assert out.stdout == ""


def test_the_console_script_and_python_m_run_the_same_entry():
    try:
        import tomllib
    except ImportError:  # python 3.10
        import tomli as tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"gpuops": "gpuops.entry:main"}
    assert "from gpuops.entry import main" in (root / "gpuops" / "__main__.py").read_text()
    version = subprocess.run(
        [sys.executable, "-m", "gpuops", "--version"], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert version.returncode == 0 and version.stdout.startswith("gpuops ")


INTERRUPT_AT = r"""
import sys

import gpuops.cli.app as app
import gpuops.cli.up as up
from gpuops.rental import launcher, request


def interrupt(*_a, **_k):  # Ctrl-C arriving at this point
    raise KeyboardInterrupt


setattr({"app": app, "up": up, "request": request, "launcher": launcher}[sys.argv[1]], sys.argv[2], interrupt)
sys.argv[:] = ["gpuops", "up", "--card", "a100", "--job", sys.argv[3]]
from gpuops.entry import main
main()
"""


def _interrupted_at(module: str, name: str, tmp_path) -> subprocess.CompletedProcess:
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),  # this checkout's gpuops
        "HOME": str(tmp_path),
        "GPUOPS_DATA_DIR": str(tmp_path / "data"),
        "GPUOPS_LEDGER_URL": f"sqlite:///{tmp_path / 'data' / 'ledger.db'}",
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    return subprocess.run(
        [sys.executable, "-c", INTERRUPT_AT, module, name, str(job)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )


def test_ctrl_c_before_the_command_group_is_one_line_and_exit_130(tmp_path):
    """Seen: Ctrl-C at 0.5 s of `up` printed a 40-line KeyboardInterrupt traceback (rc -2)."""
    out = _interrupted_at("app", "_std_fds", tmp_path)
    assert (out.returncode, out.stderr, out.stdout) == (
        130,
        "interrupted while starting: nothing was rented or booked\n",
        "",
    )


def test_ctrl_c_in_up_before_its_run_arms_says_nothing_was_rented(tmp_path):
    """Seen: Ctrl-C at 0.6-0.9 s of `up` (options, settings, the plan) exited 130 without a word
    (typer turns a KeyboardInterrupt into a silent exit 130)."""
    for module, name in (("request", "card_count"), ("launcher", "run_up")):
        out = _interrupted_at(module, name, tmp_path)
        assert (out.returncode, out.stderr, out.stdout) == (
            130,
            "interrupted before anything was rented: nothing to tear down\n",
            "",
        ), (name, out)
        assert not (tmp_path / "data" / "boxes").exists()


INTERRUPT_THE_ROOT_PARSE = r"""
import sys

import typer.core


def interrupt(*_a, **_k):  # Ctrl-C arriving while typer reads the root group's options
    raise KeyboardInterrupt


typer.core.TyperGroup.parse_args = interrupt
sys.argv[:] = ["gpuops", "up", "--card", "a100", "--job", "job.sh"]
from gpuops.entry import main
main()
"""


def test_ctrl_c_while_the_root_group_reads_its_options_is_one_line_and_exit_130(tmp_path):
    """Seen: Ctrl-C at 0.3-0.5 s of `up` (typer importing its value adapters for the root group's
    options, before any command is named) exited 130 without a word."""
    out = subprocess.run(
        [sys.executable, "-c", INTERRUPT_THE_ROOT_PARSE],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "HOME": str(tmp_path)},
    )
    assert (out.returncode, out.stderr, out.stdout) == (
        130,
        "interrupted while starting: nothing was rented or booked\n",
        "",
    )
