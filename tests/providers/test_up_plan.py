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


def test_a_missing_vastai_is_one_line_naming_the_extra_before_anything_is_rented(
    emulator_env, cli, tmp_path, monkeypatch
):
    import sys

    monkeypatch.setitem(sys.modules, "vastai", None)  # as if the vast extra was never installed
    vast = emulator_env["vast"]
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    out = cli("up", "--job", str(job), "--provider", "vast", "--card", "4090")
    assert out.returncode == 2, out
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert "vast: vastai is not installed (the vast extra)" in err[-1] and "pip install 'gpuops[vast]'" in err[-1]
    assert vast.market.requests == [] and vast.market.instances == {}  # not one call: nothing asked, nothing rented


def test_check_reports_a_missing_extra_with_its_fix_and_never_says_fine(emulator_env, cli, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vastai", None)
    out = cli("check", "--format", "json")
    c = {f["check"]: f for f in json.loads(out.stdout)["checks"]}
    vast = c["routes.vast"]
    assert (vast["verdict"], vast["fix"]) == ("fail", "pip install 'gpuops[vast]'")  # a key is set: it cannot work
    assert "vastai not installed" in vast["detail"] and vast["data"]["missing"] == ["vastai"]
    assert c["routes.runpod"]["verdict"] == "ok" and c["routes.runpod"]["data"]["missing"] == []
    assert out.returncode != 0
    monkeypatch.delitem(sys.modules, "vastai")
    monkeypatch.setitem(sys.modules, "requests", None)  # the runpod extra's one package
    out = cli("check", "--format", "json", "--provider", "runpod")
    runpod = {f["check"]: f for f in json.loads(out.stdout)["checks"]}["routes.runpod"]
    assert (runpod["verdict"], runpod["fix"]) == ("fail", "pip install 'gpuops[runpod]'")
    assert out.returncode != 0
