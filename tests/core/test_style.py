"""The tree passes ruff's lint and is in ruff's format (pyproject ``[tool.ruff]``).

Run as CI runs it, through the installed ruff binary (a subprocess, so the e2e lane). By hand:
``ruff check .`` (``--fix`` applies the safe fixes) and ``ruff format .``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUFF_DEADLINE_S = 120.0  # ruff takes well under a second on this tree; the rest is a loaded machine


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUFF_DEADLINE_S,
    )


def test_ruff_check_passes():
    out = _ruff("check", "--output-format", "concise")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_check_passes():
    out = _ruff("format", "--check")
    assert out.returncode == 0, out.stdout + out.stderr
