"""The console script: a Ctrl-C while the CLI is still importing is one line and exit 130."""

from __future__ import annotations

import subprocess
import sys

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
