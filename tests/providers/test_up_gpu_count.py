"""`up --model` refuses with "try --gpu-count N"; `up` must then accept --gpu-count."""

from __future__ import annotations

import json
import re

import pytest


@pytest.mark.e2e  # local offers start the containment probe (a onbox/contain.py process)
def test_the_gpu_count_that_up_suggests_is_a_flag_up_takes(gpuops_home, cli, tmp_path):
    # Seen: "fits no --card rtx-4090 (...; try --gpu-count 8 on rtx-4090)", then
    # `up --gpu-count 8` answered "No such option: --gpu-count".
    job = tmp_path / "ok.sh"
    job.write_text("true\n")
    refused = cli("up", "--job", str(job), "--model", "llama-3-70b", "--card", "rtx-4090", "--dry-run")
    assert refused.returncode == 2
    n = re.search(r"try --gpu-count (\d+) on rtx-4090", refused.stderr).group(1)
    ok = cli(
        "up", "--job", str(job), "--model", "llama-3-70b", "--card", "rtx-4090", "--gpu-count", n, "--dry-run", "--json"
    )
    assert ok.returncode == 0, ok.stderr
    plan = json.loads(ok.stdout)
    assert plan["card"] == "rtx-4090" and plan["gpu_count"] == int(n)
    assert plan["usd_per_hour"] == round(0.34 * int(n), 6)  # the catalog reference price per GPU


def test_gpu_count_must_be_a_whole_number(gpuops_home, cli, tmp_path):
    job = tmp_path / "ok.sh"
    job.write_text("true\n")
    for bad in ("0", "two", "-1"):
        out = cli("up", "--job", str(job), "--gpu-count", bad)
        assert out.returncode == 2 and "--gpu-count" in out.stderr, out.stderr
    assert not (gpuops_home / "ledger.db").exists()


@pytest.mark.e2e  # local offers start the containment probe (a onbox/contain.py process)
def test_gpu_count_beyond_one_host_is_refused_before_anything_is_rented(gpuops_home, cli, tmp_path):
    # Seen: `up --card a100 --gpu-count 99999` on the local provider "rented" an a100 x99999 and
    # booked $59999.40/h (simulated), exit 0.
    job = tmp_path / "ok.sh"
    job.write_text("true\n")
    out = cli("up", "--card", "a100", "--job", str(job), "--gpu-count", "99999")
    assert out.returncode == 2, out.stderr
    assert "--gpu-count must be <= 16" in out.stderr and "Traceback" not in out.stderr
    assert not (gpuops_home / "ledger.db").exists()
    ok = cli("up", "--card", "a100", "--job", str(job), "--gpu-count", "16", "--dry-run", "--json")
    assert ok.returncode == 0, ok.stderr
