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
    assert {"requests", "vastai", "psycopg", "psycopg-binary", "msgspec", "python-dotenv", "apscheduler"} <= set(
        runtime
    )
    assert "runpod" not in runtime  # RunPod is spoken over requests (docs/sdks.md)


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


def image_env() -> dict[str, str]:
    """The ``ENV`` the Dockerfile sets, as {name: value}."""
    out: dict[str, str] = {}
    for i, a in instructions(REPO / "Dockerfile"):
        if i == "ENV":
            for word in a.split():
                k, _, v = word.partition("=")
                out[k] = v
    return out


def test_the_image_keeps_its_spool_and_books_on_the_data_volume():
    env = image_env()
    assert env["GPUOPS_DATA_DIR"] == "/data"
    assert env["GPUOPS_SPOOL_DIR"].startswith("/data/")  # not HOME's cache, lost with the container
    assert "GPUOPS_LEDGER_URL" not in env  # the team's URL comes from the run; without it: /data/ledger.db
    volumes = [json.loads(a) for i, a in instructions(REPO / "Dockerfile") if i == "VOLUME"]
    assert volumes == [["/data"]]


def test_a_spooled_close_survives_a_container_restart(tmp_path):
    """The image's entry point with the image's environment (``/data`` a folder here, HOME a new
    one per container): a close spooled in one container, the container killed and its HOME
    gone, the next container's watchdog applies the close from the volume."""
    import os
    import shutil
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from tests.teardown.conftest import wait_for

    volume = tmp_path / "data"
    volume.mkdir(mode=0o700)

    def container_env(home: Path) -> dict[str, str]:
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUOPS_", "XDG_"))}
        for k, v in image_env().items():
            env[k] = str(volume) + v[len("/data") :] if v == "/data" or v.startswith("/data/") else v
        env.update(HOME=str(home), PYTHONPATH=str(REPO), GPUOPS_USER_NAME="watch@team")
        return env

    url = f"sqlite:///{volume / 'ledger.db'}"
    t0 = float(int(time.time()) - 600)
    spool_it = (
        "import sys, time\n"
        "from ledger import Ledger\n"
        f"led = Ledger({url!r})\n"
        "print(led.spool_path, flush=True)\n"
        "sys.stdin.readline()\n"  # the test holds the ledger's write lock now
        "with led.bounded(0.2):\n"
        f"    assert led.close('s1', {t0 + 300}, 'job_end', exit_code=0) is None\n"
        "print('spooled', flush=True)\n"
        "time.sleep(600)\n"  # killed here, as a container is
    )
    from ledger import Ledger

    Ledger(url).add_session(
        dict(
            id="s1",
            provider="local",
            label="gpuops-s1",
            instance_id="gpuops-s1",
            status="running",
            created_at=t0,
            instance_created_at=t0 + 10,
            usd_per_hour=3.6,
        )
    )
    home_a = tmp_path / "home-a"
    a = subprocess.Popen(
        [sys.executable, "-c", spool_it],
        env=container_env(home_a),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    b = None
    try:
        spool = Path(a.stdout.readline().strip())
        assert spool.is_relative_to(volume), spool  # the spool is on the volume
        con = sqlite3.connect(str(volume / "ledger.db"), isolation_level=None, timeout=10)
        con.execute("BEGIN IMMEDIATE")
        a.stdin.write("\n")
        a.stdin.flush()
        assert a.stdout.readline().strip() == "spooled"
        a.send_signal(signal.SIGKILL)  # the container is killed ...
        a.wait(30)
        con.execute("ROLLBACK")
        con.close()
        shutil.rmtree(home_a)  # ... and everything outside the volume goes with it
        assert spool.exists()
        (entry,) = [json.loads(x) for i, x in instructions(REPO / "Dockerfile") if i == "ENTRYPOINT"]
        (cmd,) = [json.loads(x) for i, x in instructions(REPO / "Dockerfile") if i == "CMD"]
        b = subprocess.Popen(
            [sys.executable, "-m", "gpuops", *entry[1:], *cmd],  # the image's entry point and command
            env=container_env(tmp_path / "home-b"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        row = wait_for(lambda: (r := Ledger(url).get("s1")) is not None and r.status == "closed" and r, 120)
        assert (row.ended_at, row.end_reason, row.exit_code) == (t0 + 300, "job_end", 0)
        assert not spool.exists()
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(30)
