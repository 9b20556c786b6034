"""infra.example.toml shows each setting with the default gpuops runs with (a documentation check).

The example is documentation a user copies to infra.toml: a value shown there that is not the
default would be copied as a silent override, and a changed default would leave it stale. The
defaults of the layers the box runs are stated once, in onbox/policy.py, and the laptop's
settings (``gpuops.config.TeardownSettings``) read them from there; this test reads the example
and compares what it shows with those sources.
"""

import re
import sys
from pathlib import Path

import msgspec
import pytest

from gpuops.config import Settings
from onbox import policy

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXAMPLE = Path(__file__).resolve().parents[2] / "infra.example.toml"


def _shown() -> dict:
    return tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))


def _leaves(d: dict, path: tuple = ()) -> list[tuple[tuple, object]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _leaves(v, path + (k,))
        else:
            out.append((path + (k,), v))
    return out


def _default(path: tuple) -> object:
    d = msgspec.to_builtins(Settings())
    for k in path:
        d = d[k]
    return d


@pytest.mark.parametrize("path,shown", _leaves(_shown()), ids=lambda x: ".".join(x) if isinstance(x, tuple) else None)
def test_each_value_the_example_shows_is_the_default(path, shown):
    assert shown == _default(path), (
        f"infra.example.toml: {'.'.join(path)} = {shown!r}, but the default is {_default(path)!r}"
    )


# The [teardown] keys whose defaults onbox/policy.py states (the agent on the box falls back to them).
POLICY = {
    "max_hours": "MAX_HOURS",
    "idle_minutes": "IDLE_MINUTES",
    "idle_util_percent": "IDLE_UTIL_PERCENT",
    "sample_seconds": "SAMPLE_SECONDS",
    "job_end_grace_seconds": "JOB_END_GRACE_SECONDS",
    "kill_grace_seconds": "KILL_GRACE_SECONDS",
}


@pytest.mark.parametrize("key", sorted(POLICY))
def test_the_teardown_defaults_shown_are_the_boxs_own(key):
    assert _shown()["teardown"][key] == getattr(policy, POLICY[key])
    assert getattr(Settings().teardown, key) == getattr(policy, POLICY[key])  # the laptop reads the same one


def test_every_setting_is_in_the_example():
    """Each key of each section is shown, set to its default or (no default to show) commented out."""
    text = EXAMPLE.read_text(encoding="utf-8")
    sections = {(): text.split("\n[", 1)[0]}
    for m in re.finditer(r"^\[([a-z_.]+)\][^\n]*\n(.*?)(?=^\[|\Z)", text, re.M | re.S):
        sections[tuple(m.group(1).split("."))] = m.group(2)
    missing = []
    for path, _ in _leaves({k: v for k, v in msgspec.to_builtins(Settings()).items() if k != "source"}):
        body = sections.get(path[:-1], "")
        if not re.search(rf"^#? ?{re.escape(path[-1])} = ", body, re.M):
            missing.append(".".join(path))
    assert not missing, f"infra.example.toml does not show {missing}"
