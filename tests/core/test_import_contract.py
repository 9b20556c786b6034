"""The house's import contract (pyproject ``[tool.importlinter]``): layers point down, ledger/ and
onbox/ import nothing of gpuops, and no package's modules import each other in a circle.

Run in process through import-linter's own entry (what ``lint-imports`` runs), so a broken
contract fails the unit lane with import-linter's report of the offending import lines. Every
import counts, ``TYPE_CHECKING`` ones included, and none is ignored: an annotation-only
``from gpuops.config import Settings`` under ``providers/`` (the old config <-> providers circle)
breaks both the layers and the no-circles contracts.
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


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def test_the_contract_counts_type_checking_imports_and_ignores_none():
    """No import is let off: ``TYPE_CHECKING`` ones count (an annotation is a dependency, and the
    config <-> providers circle was one) and no contract lists ``ignore_imports``."""
    cfg = _pyproject()
    assert cfg["exclude_type_checking_imports"] is False
    ignored = {c["id"]: c["ignore_imports"] for c in cfg["contracts"] if c.get("ignore_imports")}
    assert ignored == {}
    layers = next(c for c in cfg["contracts"] if c["id"] == "layers")["layers"]
    assert layers.index("config") < layers.index("providers")  # config reads the registry, not the reverse


def test_settings_has_the_shape_a_provider_is_built_from(tmp_path):
    """``providers.entry.SettingsView`` (what ``build`` and ``configured`` take, so that nothing under
    providers/ imports config) is met by the real ``Settings``: every member it names is there."""
    from gpuops.config import Settings
    from gpuops.providers import NAMES, REGISTRY
    from gpuops.providers.entry import SettingsView

    s = Settings(data_dir=str(tmp_path))
    assert isinstance(s, SettingsView)
    assert s.data_path() == tmp_path
    assert s.up.disk_gb > 0 and s.teardown.kill_grace_seconds > 0  # what vast's and local's build read
    assert [type(getattr(s.providers, REGISTRY[n].section)) for n in NAMES] == [REGISTRY[n].settings() for n in NAMES]
    assert not isinstance(object(), SettingsView)


def test_config_loads_only_the_ground_floor_and_the_light_registry():
    """What config loads of the floors below it (the registry, for each provider's settings model)
    stays light: ``import gpuops.config`` loads, of gpuops, the ground floor, the registry,
    ``providers/entry.py`` and each provider folder's ``__init__.py``, ``settings.py`` and ``account.py``, and no
    provider class, box, SDK or HTTP client; the registry alone (the help strings) loads no msgspec."""
    from gpuops.providers import MARKETPLACES, NAMES

    code = (
        "import sys, gpuops.providers; print(' '.join(sys.modules)); import gpuops.config; print(' '.join(sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    registry_only, loaded = set(out[0].split()), set(out[1].split())
    layers = next(c for c in _pyproject()["contracts"] if c["id"] == "layers")["layers"]
    ground = {"config"} | {m.strip() for layer in layers[layers.index("box") + 1 :] for m in layer.split("|")}
    light = (
        {"gpuops.providers", "gpuops.providers.entry"}
        | {f"gpuops.providers.{n}{s}" for n in NAMES for s in ("", ".settings")}
        | {f"gpuops.providers.{n}.account" for n in MARKETPLACES}
    )  # where a marketplace's key comes from
    above = sorted(
        m
        for m in loaded
        if m.split(".")[0] == "ledger" or (m.startswith("gpuops.") and m not in light and m.split(".")[1] not in ground)
    )
    assert not above, above
    assert light <= loaded
    assert not {"requests", "vastai", "sqlalchemy", "paramiko"} & loaded
    assert "msgspec" not in registry_only and not any(m.endswith(".settings") for m in registry_only)


def test_no_modules_import_each_other_in_a_circle():
    """No circle among the project's modules, parent packages and their children included.

    Counts imports inside functions and under ``TYPE_CHECKING`` (grimp, import-linter's graph); the
    layer contract's own circle check looks only at siblings, so a folder importing its registry
    package back (``gpuops.providers`` <-> ``gpuops.providers.keys``) would pass it."""
    import grimp

    graph = grimp.build_graph("gpuops", "ledger", "onbox", exclude_type_checking_imports=False)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(m: str) -> None:  # Tarjan's strongly connected components
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in graph.find_modules_directly_imported_by(m):
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            part = []
            while not part or part[-1] != m:
                part.append(stack.pop())
            if len(part) > 1:
                circles.append(sorted(part))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    assert not circles, "modules that import each other in a circle: " + "; ".join(" <-> ".join(c) for c in circles)
