"""`gpuops demo`: the emulated providers and a box on this machine, from the runtime install, in a
folder of the demo's own, every command pointed at it saying SIMULATED, and nothing of it left once
it is stopped.

A user of their own (a temp HOME, their own gpuops data) starts the demo, points a shell at it,
asks for offers, rents a RunPod box for a tiny job, reads the month and the dashboard's page, and
stops the demo. Money is
judged by the emulated RunPod's own billing record (its ``/v2/billing/pods``), read over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import requests

from gpuops.emulators.sshd import SSHD

REPO = Path(__file__).resolve().parents[2]
STEP_S = 120  # each command's deadline


def _env(home: Path) -> dict[str, str]:
    """A user's environment: their own HOME and XDG folders, no gpuops or provider variable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUOPS_", "RUNPOD_", "VAST_", "XDG_", "CONTAINER_API_KEY"))
    }
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYTHONPATH=str(REPO),
        COLUMNS="120",
    )
    return env


def _run(env: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuops", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=STEP_S
    )


def _files(*roots: Path) -> dict[str, str]:
    """Every file under ``roots``: path -> sha256 (what "untouched" is compared by)."""
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")) if root.exists() else []:
            if p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _under(home: Path) -> list[int]:
    """Processes whose working directory is under ``home`` (a box's jobs and agents)."""
    where, out = str(home.resolve()), []
    for name in os.listdir("/proc"):
        try:
            cwd = os.readlink(f"/proc/{name}/cwd") if name.isdigit() else ""
        except OSError:
            continue
        if cwd == where or cwd.startswith(where + "/"):
            out.append(int(name))
    return out


def test_demo_without_an_account(tmp_path):
    assert os.access(SSHD, os.X_OK), "the demo's box is a real sshd (the suite's boxes need it too)"
    home = tmp_path / "user"
    work = tmp_path / "work"
    work.mkdir()
    env = _env(home)
    # the user's own gpuops, with a ledger, a config file and a spool folder of their own
    (home / ".config/gpuops").mkdir(parents=True)
    (home / ".config/gpuops/infra.toml").write_text('[up]\nexperiment = "mine"\n')
    assert _run(env, "ledger", "month", cwd=work).returncode == 0
    own = home / ".local/share/gpuops"
    assert (own / "ledger.db").is_file()
    before = _files(own, home / ".config", home / ".cache")

    demo = home / ".local/share/gpuops-demo"
    started = _run(env, "demo", "start", "--minutes", "10", cwd=work)
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.startswith("SIMULATED: gpuops demo started"), started.stdout
        assert f"data and ledger     {demo}" in started.stdout
        state = json.loads((demo / "demo.json").read_text())
        assert _alive(state["pid"]) and state["box"].startswith("127.0.0.1:")
        sshd_pid = int((demo / "box/sshd/sshd.pid").read_text())  # the box's sshd (it removes the file as it ends)
        assert _alive(sshd_pid)

        exported = _run(env, "demo", "env", cwd=work)
        assert exported.returncode == 0, exported.stderr
        demo_env = dict(env)
        for line in exported.stdout.splitlines():
            word, assignment = line.split(" ", 1)
            assert word == "export"
            name, _, value = assignment.partition("=")
            demo_env[name] = shlex.split(value)[0] if value else ""
        assert demo_env["GPUOPS_DATA_DIR"] == str(demo / "data")
        assert demo_env["GPUOPS_PROVIDERS_RUNPOD_URL"].startswith("http://127.0.0.1:")
        # A shell with the user's own key and ledger: `demo env` points it at the demo (twice: the
        # first record is kept), and `demo env --unset` gives back exactly what it had, nothing more.
        script = (
            'gpuops() { "$PY" -m gpuops "$@"; }\n'
            "export RUNPOD_API_KEY='rp mine $HOME \"x\"' GPUOPS_LEDGER_URL=postgresql://ann@db/books\n"
            'eval "$(gpuops demo env)" && printf "demo: %s %s\\n" "$RUNPOD_API_KEY" "$GPUOPS_DATA_DIR"\n'
            "sh -c 'echo \"child: ${_GPUOPS_DEMO_WAS_RUNPOD_API_KEY-no copy}\"'\n"
            'eval "$(gpuops demo env)"\n'
            'eval "$(gpuops demo env --unset)" && env | grep -E "^_?(GPUOPS|RUNPOD|VAST)" | sort\n'
        )
        for shell in ("sh", "bash"):
            got = subprocess.run(
                [shell, "-c", script], env=dict(env, PY=sys.executable), capture_output=True, text=True, timeout=STEP_S
            )
            assert got.returncode == 0 and got.stdout == (
                f"demo: rp_DEMO_SIMULATED {demo}/data\n"
                "child: no copy\n"  # the user's key copied into a shell variable only, never exported
                "GPUOPS_LEDGER_URL=postgresql://ann@db/books\n"
                'RUNPOD_API_KEY=rp mine $HOME "x"\n'
            ), (shell, got.stdout, got.stderr)

        offers = _run(demo_env, "offers", "--card", "rtx-4090", "--json", cwd=work)
        assert offers.returncode == 0, offers.stderr
        assert offers.stderr.startswith("SIMULATED: gpuops demo"), offers.stderr
        rows = json.loads(offers.stdout)
        assert {r["provider"] for r in rows} == {"runpod", "vast"} and all(r["simulated"] for r in rows)
        table = _run(demo_env, "offers", "--card", "rtx-4090", cwd=work)
        assert "spot (simulated)" in table.stdout and "spot (bid)" not in table.stdout

        (work / "job.sh").write_text("echo hello-from-the-demo-box\n")
        up = _run(demo_env, "up", "--provider", "runpod", "--card", "rtx-4090", "--job", "job.sh", cwd=work)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "hello-from-the-demo-box" in up.stdout and "(simulated)" in up.stdout
        assert up.stderr.startswith("SIMULATED: gpuops demo"), up.stderr

        month = _run(demo_env, "ledger", "month", "--json", cwd=work)
        assert month.returncode == 0 and month.stderr.startswith("SIMULATED: gpuops demo"), month.stderr
        books = json.loads(month.stdout)
        assert books["total_usd"] == 0 and books["sessions"] == 1
        # the emulated RunPod's own bill for that pod (its billing record, over its API)
        bill = requests.get(
            demo_env["GPUOPS_PROVIDERS_RUNPOD_URL"] + "/v2/billing/pods",
            params={"bucketSize": "day"},
            headers={"Authorization": f"Bearer {demo_env['RUNPOD_API_KEY']}"},
            timeout=10,
        ).json()["metadata"]["totals"]["totalAmount"]
        assert bill > 0 and abs(books["simulated_usd"] - bill) <= 0.34 * 2 / 3600, (books["simulated_usd"], bill)

        page = _run(demo_env, "dashboard", "--html", str(work / "page.html"), cwd=work)
        assert page.returncode == 0, page.stderr
        assert 'id="simulated">SIMULATED: gpuops demo' in (work / "page.html").read_text()

        # the demo's data directory with a real provider's API is refused before anything is asked
        real = dict(demo_env, GPUOPS_PROVIDERS_RUNPOD_URL="https://rest.runpod.invalid")
        refused = _run(real, "up", "--provider", "runpod", "--card", "rtx-4090", "--job", "job.sh", cwd=work)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "is gpuops demo's (simulated), but runpod's API is https://rest.runpod.invalid" in refused.stderr
        listed = _run(real, "offers", "--provider", "runpod", cwd=work)  # asked in threads: the same one line
        assert listed.returncode == 2, listed.stdout + listed.stderr
        assert "error: the data directory " in listed.stderr and "BadInput" not in listed.stderr
    finally:
        stopped = _run(env, "demo", "stop", cwd=work)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith("SIMULATED: gpuops demo ended"), stopped.stdout
    assert not _alive(state["pid"]) and not (demo / "demo.json").exists()
    assert _under(demo) == []  # its sshd's sessions, the box's agents and jobs: nothing runs under the demo's folder
    assert not _alive(sshd_pid)
    assert _files(own, home / ".config", home / ".cache") == before  # the user's own gpuops: untouched
    status = _run(env, "demo", "status", cwd=work)
    assert status.returncode == 1 and "not running" in status.stdout


def test_the_demo_runs_from_the_runtime_install():
    """The demo's process imports nothing of tests/ and no development-only package."""
    code = (
        "import sys, gpuops.demo.server, gpuops.emulators.box_key, gpuops.cli.demo; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'tests', 'openapi_core', 'graphql', 'pytest', 'yaml'}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    got = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stdout.strip() == "[]", got.stdout + got.stderr
