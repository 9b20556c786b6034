"""Every ``pytest.approx`` in the tests names its tolerance. The default (relative 1e-6) is about
+-30 minutes on an epoch and would pass an end time booked as "now" instead of the provider's
record; times and money have absolute promises (an end time within 2 s, a booked end that IS the
provider's float, a cost to the micro-dollar), so outside the planner's ratios the tolerance is
``abs=``. The planner compares formulas with published figures, where ``rel=`` is the promise."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
RELATIVE_OK = {"plan"}  # tests/<dir>: model sizes, bandwidth ratios, tokens per second


def _approx_calls():
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "approx":
                yield path.relative_to(TESTS), node.lineno, {k.arg for k in node.keywords}


def calls_outside(dirs: set[str]):
    return [(p, line, kws) for p, line, kws in _approx_calls() if p.parts[0] not in dirs]


def test_every_approx_names_its_tolerance():
    calls = list(_approx_calls())
    assert len(calls) > 100  # the walk found the suite's comparisons
    bare = [f"tests/{p}:{line}" for p, line, kws in calls if not kws & {"abs", "rel"}]
    assert bare == [], "pytest.approx without abs= or rel=: " + ", ".join(bare)


def test_times_and_money_use_an_absolute_tolerance():
    relative = [f"tests/{p}:{line}" for p, line, kws in calls_outside(RELATIVE_OK) if "abs" not in kws]
    assert relative == [], "a time or an amount compared without abs=: " + ", ".join(relative)
