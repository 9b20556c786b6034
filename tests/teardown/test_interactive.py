"""`gpuops up --interactive` on the local provider: a box with no job, left up after bootstrap with the
`gpuops ssh` line printed, reached by `gpuops exec`, then ended by the idle layer (short windows) and
booked by reconcile like any rental."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gpuops.config import load_settings
from gpuops.rental.sessions import endpoint
from ledger import Ledger
from tests.conftest import gpuops_cmd
from tests.teardown.rig import STAGE_TIMEOUT_S, wait_for


def test_an_interactive_box_is_left_up_reached_by_exec_and_ended_by_idle(fake_smi, cli_env, gpuops_home, tmp_path):
    fake_smi.util(97)  # busy while the test looks: never idle, however slow this machine is
    (tmp_path / "infra.toml").write_text(
        "[teardown]\nsample_seconds = 0.3\nidle_minutes = 0.05\njob_end_grace_seconds = 1\nkill_grace_seconds = 1\n"
    )
    p = subprocess.run(
        gpuops_cmd("up", "--interactive", "--card", "rtx-4090"),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    ledger = Ledger(load_settings().ledger_url())
    (row,) = ledger.open_sessions()  # left open: the box is the user's now
    assert row.job == "(interactive)"
    assert p.stdout.splitlines()[-1] == f"gpuops exec {row.id} CMD..."  # a local box: `gpuops ssh` refuses it
    assert "3 min" not in p.stdout and "0.05 min with no GPU busy" in p.stdout
    root = Path(endpoint(ledger, row.id)["root"])
    ex = subprocess.run(
        gpuops_cmd("exec", row.id, "--", "bash", "-c", "echo from-the-box; exit 4"),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert (ex.returncode, ex.stdout) == (4, "from-the-box\n"), ex.stderr
    assert not (root / "destroyed.json").exists()
    fake_smi.util(0)  # the GPU goes quiet, no session open: the idle window runs
    wait_for(lambda: (root / "destroyed.json").exists(), STAGE_TIMEOUT_S)  # the agent's idle rule
    status = json.loads((root / ".gpuops" / "agent-status.json").read_text())
    assert status["destroy"]["reason"] == "idle"
    rc = subprocess.run(gpuops_cmd("reconcile"), env=cli_env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert rc.returncode == 0, rc.stderr
    closed = ledger.get(row.id)
    assert (closed.status, closed.end_reason) == ("closed", "idle")
    assert closed.cost_usd is not None and closed.cost_usd > 0
