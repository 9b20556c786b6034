"""The core install stays light, and the CLI starts without loading heavy or provider modules.

The dependency closure is read from the installed distributions' metadata (importlib.metadata),
so the test needs no network: start from pyproject's core ``dependencies`` (no extras), follow
each installed distribution's ``Requires-Dist`` whose marker holds without extras.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
HEAVY = {"torch", "numpy", "pandas", "transformers"}
PROVIDER_AND_HEAVY_MODULES = ("runpod", "vastai", "paramiko", "torch", "numpy")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def core_closure(core: list[str] | None = None) -> dict[str, list[str]]:
    """{distribution: [the chain that pulls it in]} for the core install (no extras), or for the
    requirement strings ``core``."""
    if core is None:
        core = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    seen: dict[str, list[str]] = {}
    done: dict[str, set[str]] = {}
    todo = [(Requirement(r), ["gpuops"]) for r in core]
    todo = [(r, c) for r, c in todo if r.marker is None or r.marker.evaluate({"extra": ""})]
    while todo:
        req, chain = todo.pop()
        name = _norm(req.name)
        extras = done.setdefault(name, set())
        if name in seen and set(req.extras) <= extras:
            continue  # already walked with these extras
        extras |= set(req.extras)
        seen.setdefault(name, chain + [name])
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise AssertionError(
                f"core dependency {req.name} (via {' -> '.join(chain)}) is not installed; "
                "install requirements.lock first"
            ) from None
        wanted = set(req.extras)
        for sub in dist.requires or []:
            r = Requirement(sub)
            if r.marker is not None and not any(r.marker.evaluate({"extra": e}) for e in (wanted or {""})):
                continue
            todo.append((r, seen[name]))
    return seen


def test_core_install_pulls_no_heavy_packages():
    closure = core_closure()
    assert {"typer", "rich", "sqlalchemy", "pydantic"} <= set(closure)
    heavy = {n: " -> ".join(closure[n]) for n in HEAVY if n in closure}
    assert not heavy, f"the core install pulls heavy packages: {heavy}"


def test_the_closure_follows_requirements_and_extras():
    # the walk really follows metadata: an SDK extra brings its own dependencies with it
    via_vastai = core_closure(["vastai"])
    assert "requests" in via_vastai and via_vastai["requests"][:2] == ["gpuops", "vastai"]
    assert "psycopg-binary" in core_closure(["psycopg[binary]"])
    assert "psycopg-binary" not in core_closure(["psycopg"])


def test_extras_are_not_in_the_core():
    closure = core_closure()
    # requests is in the core install since [notify]: apprise (a core dependency, imported only
    # when a message is sent) depends on it; the runpod extra names it too
    assert closure["requests"][:2] == ["gpuops", "apprise"]
    for extra_only in ("vastai", "psycopg"):
        assert extra_only not in closure, f"{extra_only} belongs in an extra, not the core install"


def test_import_cli_loads_no_provider_sdk():
    code = (
        "import sys, json; import gpuops.cli.app; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {list(PROVIDER_AND_HEAVY_MODULES)!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
