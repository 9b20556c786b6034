"""QA: --max-hours is the box's TTL, counted from create (when billing starts), not from job start."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import gpuops_cmd


def test_ttl_counts_bootstrap_time(gpuops_home, cli_env, tmp_path):
    # Seen: --max-hours 0.0003 (1.08 s) with a 6 s bootstrap: the box lived 10 s and the job still
    # ran, because the TTL clock started at the job. Worst case with defaults: 4 h + 30 min of
    # bootstrap timeout + 10 min of ready timeout, while dry-run projected 4 h.
    (tmp_path / "infra.toml").write_text('[bootstrap]\ncommands = ["sleep 3"]\n')
    ran = tmp_path / "job-ran"
    job = tmp_path / "job.sh"
    job.write_text(f"touch {ran}\nsleep 30\n")
    env = dict(cli_env, GPUOPS_TEARDOWN_KILL_GRACE_SECONDS="0.5")
    out = subprocess.run(gpuops_cmd("up", "--job", str(job), "--max-hours", "0.0003", "--json"), env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    summ = json.loads(out.stdout)
    assert summ["end_reason"] == "ttl"
    assert not ran.exists(), "the job started after the TTL had run out"
