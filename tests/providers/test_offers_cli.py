"""`gpuops offers` as a user runs it: a subprocess pointed at both emulators by environment variables."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import gpuops_cmd


def run(env, *args):
    return subprocess.run(gpuops_cmd("offers", *args), capture_output=True, text=True, env=env, timeout=120)


def test_offers_json_merges_both(emulator_env, cli_env, tmp_path):  # emulator_env first: cli_env copies os.environ
    cli_env["HOME"] = str(tmp_path / "home")
    out = run(cli_env, "--card", "4090", "--on-demand", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["provider"], r["offer_id"]) for r in rows] == [
        ("vast", "1002"),
        ("vast", "1001"),
        ("runpod", "community:NVIDIA GeForce RTX 4090"),
        ("runpod", "secure:NVIDIA GeForce RTX 4090"),
    ]
    assert set(rows[0]) == {
        "provider",
        "offer_id",
        "card",
        "gpu_count",
        "vram_bytes",
        "price_usd_per_hour",
        "on_demand_usd_per_hour",
        "usd_per_hour",
        "spot",
        "min_bid",
        "reliability",
        "region",
        "simulated",
    }
    assert not any(r["simulated"] for r in rows)  # real accounts' offers (the emulators, outside gpuops demo)
    assert emulator_env["runpod"].market.api_key not in out.stdout + out.stderr


def test_offers_spot_on_runpod_says_why(emulator_env, cli_env):
    out = run(cli_env, "--provider", "runpod", "--spot")
    assert out.returncode == 1
    assert (
        out.stderr.startswith("error: RunPod's REST API v2 has no interruptible (spot) pods")
        and "--provider vast" in out.stderr
    )
    assert out.stderr.count("\n") == 1


def test_offers_bad_flag_exit_2(cli):
    out = cli("offers", "--max-price", "cheap")
    assert out.returncode == 2 and "--max-price" in out.stderr


def test_offers_model_flags_need_a_model(cli):
    out = cli("offers", "--seq", "8192")
    assert out.returncode == 2 and "add --model" in out.stderr
