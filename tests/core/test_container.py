"""The container image recipe (Dockerfile), checked without building it: it installs the runtime
lock (every pin the same as requirements.lock, no test package), its entry point is
`gpuops watchdog`, and its command line is one the CLI accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_ONLY = {"pytest", "pytest-timeout", "pytest-xdist", "graphql-core", "import-linter", "uv"}


def pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a uv lock file as {normalized name: version}."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;#]+)", line)
        if m:
            out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(3)
    return out


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            word, _, rest = buf.partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def test_runtime_lock_pins_are_the_full_locks():
    runtime, full = pins(REPO / "requirements-runtime.lock"), pins(REPO / "requirements.lock")
    assert len(runtime) > 50
    differ = {n: (v, full.get(n)) for n, v in runtime.items() if full.get(n) != v}
    assert not differ, f"requirements-runtime.lock pins differ from requirements.lock: {differ}"
    assert not TEST_ONLY & set(runtime), TEST_ONLY & set(runtime)
    assert {"runpod", "vastai", "psycopg", "psycopg-binary", "msgspec", "python-dotenv", "apscheduler"} <= set(runtime)


def test_the_image_installs_the_runtime_lock_and_runs_the_watchdog():
    steps = instructions(REPO / "Dockerfile")
    run = " ".join(a for i, a in steps if i == "RUN")
    assert "-r /tmp/requirements-runtime.lock" in run and "requirements.lock" not in run.replace(
        "requirements-runtime.lock", ""
    )
    assert ("COPY", "requirements-runtime.lock /tmp/requirements-runtime.lock") in steps
    assert any(i == "USER" and a != "root" for i, a in steps)  # not root
    (entry,) = [json.loads(a) for i, a in steps if i == "ENTRYPOINT"]  # exec form: JSON
    (cmd,) = [json.loads(a) for i, a in steps if i == "CMD"]
    assert entry == ["gpuops", "watchdog"]
    assert not any(a.startswith("--once") for a in cmd)  # the daemon, not one pass
    assert not any(i == "ENV" and re.search(r"KEY|TOKEN|SECRET|PASSWORD", a) for i, a in steps)  # no secret baked in
    assert any(i == "ENV" and "GPUOPS_DATA_DIR=/data" in a.split() for i, a in steps)  # the data dir is the volume


def test_the_image_command_is_a_real_gpuops_command(cli):
    steps = instructions(REPO / "Dockerfile")
    (entry,) = [json.loads(a) for i, a in steps if i == "ENTRYPOINT"]
    (cmd,) = [json.loads(a) for i, a in steps if i == "CMD"]
    r = cli(*entry[1:], *cmd, "--help")  # click parses every option first: an unknown one fails here
    assert r.returncode == 0, r
    assert "Watch every open session" in r.stdout
    bad = cli(*entry[1:], *cmd, "--no-such-flag", "--help")
    assert bad.returncode == 2
