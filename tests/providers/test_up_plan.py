"""`gpuops up --provider runpod|vast --dry-run` against the emulators: validate and plan on the real
SDKs, nothing rented, the CLI in process (``cli``). (The full run over SSH is tests' flow with the
sshd fixture.)"""

from __future__ import annotations

import json


def up(cli, tmp_path, *args):
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    return cli("up", "--job", str(job), "--dry-run", "--json", *args)


def test_runpod_default_spot_preference_plans_on_demand(emulator_env, cli, tmp_path):
    out = up(cli, tmp_path, "--provider", "runpod", "--card", "4090")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert (plan["provider"], plan["card"], plan["usd_per_hour"], plan["spot"]) == ("runpod", "rtx-4090", 0.34, False)
    assert emulator_env["runpod"].live() == []


def test_runpod_explicit_spot_is_refused(emulator_env, cli, tmp_path):
    out = up(cli, tmp_path, "--provider", "runpod", "--card", "4090", "--spot")
    assert (
        out.returncode == 2
        and "\nerror: RunPod's REST API v2 has no interruptible (spot) pods" in out.stderr
        and "--on-demand" in out.stderr
    )
    assert emulator_env["runpod"].live() == []


def test_vast_plans_the_cheapest_bid(emulator_env, cli, tmp_path):
    out = up(cli, tmp_path, "--provider", "vast", "--card", "4090")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert (plan["provider"], plan["card"], plan["spot"]) == ("vast", "rtx-4090", True)
    out = up(cli, tmp_path, "--provider", "vast", "--card", "4090", "--on-demand")
    assert json.loads(out.stdout)["spot"] is False
    assert emulator_env["vast"].live() == []
