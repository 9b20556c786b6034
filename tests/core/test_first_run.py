"""What a new user meets first: the README's install lines and package count, a summary whose paths
copy whole at 80 columns, waits that say what for, and no internal references in output."""

from __future__ import annotations

import re

from tests.conftest import REPO


def test_readme_counts_the_locked_packages_and_says_how_to_call_gpuops():
    """A user's install is the runtime lock (seen: the first command installed the whole development
    toolchain, a 464 MB venv); the test command installs the rest (scripts/test.sh, requirements.lock)."""
    text = (REPO / "README.md").read_text()
    first = text.split("## Two commands on a fresh machine")[1].split("```")[1]
    assert "-r requirements-runtime.lock" in first and "-r requirements.lock" not in first, first
    assert "-r requirements.lock" in (REPO / "scripts" / "test.sh").read_text()
    locked = [
        line
        for line in (REPO / "requirements-runtime.lock").read_text().splitlines()
        if re.match(r"^[A-Za-z0-9_.\-\[\]]+==", line)
    ]
    said = re.search(r"installs the (\d+) pinned packages of the runtime lock", text)
    assert said and int(said.group(1)) == len(locked), (said and said.group(1), len(locked))
    assert "source .venv/bin/activate" in text and ".venv/bin/gpuops" in text
    table = text.split("## Coming from SkyPilot, runpodctl or vastai")[1].split("\n## ")[0]
    for theirs in (
        "sky launch",
        "sky status",
        "sky down",
        "runpodctl get pod",
        "vastai search offers",
        "vastai destroy instance",
    ):
        assert theirs in table, theirs


def test_the_summary_prints_paths_whole_at_80_columns(monkeypatch, capsys):
    from gpuops.render.ui import render_summary

    monkeypatch.setenv("COLUMNS", "80")
    log = "/home/someone/.local/share/gpuops/logs/20261201-093411-d643-a-rather-long-name.log"
    render_summary(
        {
            "session": "20261201-093411-d643",
            "provider": "local",
            "card": "a100-80gb-sxm",
            "usd_per_hour": 1.49,
            "seconds": 3.0,
            "cost_usd": 0.0012,
            "simulated": True,
            "tokens": 0,
            "usd_per_mtoken": None,
            "end_reason": "job_end",
            "exit_code": 0,
            "log": log,
            "results": "/tmp/r/20261201-093411-d643",
        }
    )
    out = capsys.readouterr().out
    assert f"log: {log}\n" in out and "results: /tmp/r/20261201-093411-d643\n" in out
    table = out.split("log: ")[0]
    assert max(len(line) for line in table.splitlines()) <= 80


def test_waits_say_what_for():
    from gpuops.cli.up_reporter import WAITING_FOR
    from gpuops.teardown.lifecycle import STAGES

    assert set(STAGES) <= set(WAITING_FOR)
    assert WAITING_FOR["plan"].startswith("plan: waiting for the provider's offers")
    assert all(not w.endswith(": waiting") for w in WAITING_FOR.values())


def test_no_internal_references_in_output(cli):
    out = cli("plan", "storage", "--model", "llama-3-70b", "--download-gbps", "0.1")
    assert out.returncode == 0, out.stderr
    assert "5-minute bootstrap target (boot to running GPU code)" in out.stdout  # the download alone misses it
    assert "seeds" not in out.stdout and "Day 2" not in out.stdout
