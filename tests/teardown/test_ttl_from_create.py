"""--max-hours is the box's TTL, counted from create (when billing starts), not from job start."""

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
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--max-hours", "0.0003", "--json"),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    summ = json.loads(out.stdout)
    assert summ["end_reason"] == "ttl"
    assert not ran.exists(), "the job started after the TTL had run out"


def _up(cli_env, tmp_path, toml, *args):
    (tmp_path / "infra.toml").write_text(toml)
    job = tmp_path / "job.sh"
    job.write_text(f"touch {tmp_path / 'job-ran'}\n")
    env = dict(cli_env, GPUOPS_TEARDOWN_KILL_GRACE_SECONDS="0.5")
    return subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--json", *args),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bootstrap_timeout_is_booked_as_bootstrap_failed_with_a_summary(gpuops_home, cli_env, tmp_path):
    # Seen: [bootstrap] timeout_seconds = 2 with a 10 s command ended in a TimeoutError traceback,
    # no summary, and the row closed as "job_failed" though the job never ran.
    out = _up(cli_env, tmp_path, '[bootstrap]\ntimeout_seconds = 2\ncommands = ["sleep 10"]\n')
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-1500:]
    summ = json.loads(out.stdout)
    assert summ["end_reason"] == "bootstrap_failed" and summ["status"] == "closed"
    assert "bootstrap ran past 2 s" in out.stderr
    assert not (tmp_path / "job-ran").exists()


def test_max_hours_bounds_the_bootstrap_too(gpuops_home, cli_env, tmp_path):
    out = _up(cli_env, tmp_path, '[bootstrap]\ncommands = ["sleep 20"]\n', "--max-hours", "0.0005")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-1500:]
    summ = json.loads(out.stdout)
    assert summ["end_reason"] == "ttl"
    assert summ["seconds"] < 10  # 1.8 s TTL, not the 20 s bootstrap
