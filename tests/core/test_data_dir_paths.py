"""Paths gpuops books are absolute, whatever the data dir was given as."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import gpuops_cmd


def test_relative_data_dir_books_absolute_log_paths(gpuops_home, cli_env, tmp_path):
    # Seen: GPUOPS_DATA_DIR=reldata booked "log": "reldata/logs/<id>.log", a path that means
    # nothing once the user is in another directory.
    job = tmp_path / "ok.sh"
    job.write_text("echo hi\n")
    env = dict(cli_env, GPUOPS_DATA_DIR="reldata")
    env.pop("GPUOPS_LEDGER_URL")
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--json"),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    log = json.loads(out.stdout)["log"]
    assert log == str(tmp_path / "reldata" / "logs" / (json.loads(out.stdout)["session"] + ".log"))
