"""The house's import contract (pyproject ``[tool.importlinter]``): layers point down, ledger/ and
bootstrap/ import nothing of gpuops, and no package's modules import each other in a circle.

Run in process through import-linter's own entry (what ``lint-imports`` runs), so a broken
contract fails the unit lane with import-linter's report of the offending import lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(capsys):
    from importlinter import configuration
    from importlinter.application.use_cases import lint_imports

    configuration.configure()
    kept = lint_imports(config_filename=str(REPO / "pyproject.toml"), cache_dir=None, no_logo=True)
    report = capsys.readouterr().out
    assert kept, report
    assert "4 kept, 0 broken" in report


def test_config_loads_only_the_ground_floor_and_the_light_registry():
    """The contract's one way up (``gpuops.config -> gpuops.providers``, for each provider's settings
    model) stays light: ``import gpuops.config`` loads, of gpuops, the ground floor, the registry,
    ``providers/entry.py`` and each provider folder's ``__init__.py`` and ``settings.py``, and no
    provider class, SDK or HTTP client; the registry alone (the help strings) loads no msgspec."""
    from gpuops.providers import NAMES

    code = (
        "import sys, gpuops.providers; print(' '.join(sys.modules)); import gpuops.config; print(' '.join(sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    registry_only, loaded = set(out[0].split()), set(out[1].split())
    layers = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"][
        0
    ]["layers"]
    ground = {m.strip() for layer in layers[layers.index("config") :] for m in layer.split("|")}
    light = {"gpuops.providers", "gpuops.providers.entry"} | {
        f"gpuops.providers.{n}{s}" for n in NAMES for s in ("", ".settings")
    }
    above = sorted(
        m
        for m in loaded
        if m.split(".")[0] == "ledger" or (m.startswith("gpuops.") and m not in light and m.split(".")[1] not in ground)
    )
    assert not above, above
    assert light <= loaded
    assert not {"requests", "vastai", "sqlalchemy", "paramiko"} & loaded
    assert "msgspec" not in registry_only and not any(m.endswith(".settings") for m in registry_only)
