"""The house's import contract (pyproject ``[tool.importlinter]``): layers point down, ledger/ and
bootstrap/ import nothing of gpuops, and no package's modules import each other in a circle.

Run in process through import-linter's own entry (what ``lint-imports`` runs), so a broken
contract fails the unit lane with import-linter's report of the offending import lines.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(capsys):
    from importlinter import configuration
    from importlinter.application.use_cases import lint_imports

    configuration.configure()
    kept = lint_imports(config_filename=str(REPO / "pyproject.toml"), cache_dir=None, no_logo=True)
    report = capsys.readouterr().out
    assert kept, report
    assert "4 kept, 0 broken" in report
