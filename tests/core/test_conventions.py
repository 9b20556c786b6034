"""What users of SkyPilot, runpodctl and vastai type: NAME:COUNT cards, a list of cards, `status`
and `ls` for `ps`, and the spot default per provider stated in --help."""

from __future__ import annotations

import json

import pytest


@pytest.mark.e2e  # local offers start the containment probe (a onbox/contain.py process)
def test_card_name_colon_count_is_card_and_gpu_count(cli, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("echo hi\n")
    plan = json.loads(cli("up", "--job", str(job), "--card", "a100-80gb-sxm:2", "--dry-run", "--json").stdout)
    assert (plan["card"], plan["gpu_count"]) == ("a100-80gb-sxm", 2)
    offers = json.loads(cli("offers", "--provider", "local", "--card", "h100-sxm:4", "--json").stdout)
    assert {(o["card"], o["gpu_count"]) for o in offers} == {("h100-sxm", 4)}
    same = cli("up", "--job", str(job), "--card", "a100:2", "--gpu-count", "2", "--dry-run")
    assert same.returncode == 0, same.stderr
    for card in ("a100:0", "a100:x", ":2"):
        out = cli("up", "--job", str(job), "--card", card, "--dry-run")
        assert out.returncode == 2 and "is not NAME or NAME:COUNT" in out.stderr, out.stderr
    clash = cli("up", "--job", str(job), "--card", "a100:2", "--gpu-count", "4", "--dry-run")
    assert clash.returncode == 2 and "asks for 2 GPUs and --gpu-count for 4" in clash.stderr


@pytest.mark.parametrize("args", [["cards"], ["plan", "--card", "list"]])
def test_a_list_of_cards(cli, args):
    from gpuops.catalog import cards

    out = cli(*args, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["name"] for r in rows] == [c.name for c in cards()]
    h100 = next(r for r in rows if r["name"] == "h100-sxm")
    assert h100["vram_gib"] == 80 and h100["family"] and h100["reference_usd_per_hour"] > 0
    for width in (80, 120):
        table = cli(*args, env={"COLUMNS": str(width)}).stdout
        assert "h100-sxm" in table and "rtx-4090" in table and max(len(line) for line in table.splitlines()) <= width


def test_the_unknown_card_error_points_at_the_list(cli):
    out = cli("offers", "--card", "a1000")
    assert out.returncode == 2 and "`gpuops cards` lists them" in out.stderr and "--model list" not in out.stderr
    out = cli("offers", "--card", "zzzzzz")
    assert out.returncode == 2 and "`gpuops cards` lists the cards" in out.stderr


@pytest.mark.parametrize("alias", ["status", "ls"])
def test_status_and_ls_are_ps(cli, alias):
    ps = cli("ps", "--format", "csv")
    got = cli(alias, "--format", "csv")
    assert got.returncode == 0 and got.stdout == ps.stdout
    assert cli(alias).stdout == cli("ps").stdout
    assert alias not in cli("--help").stdout.split("Commands")[-1].split()  # hidden: the help lists ps once


def test_help_states_the_spot_default_per_provider(cli):
    text = " ".join(cli("up", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "Vast.ai bids the offer's minimum" in text and "RunPod has no spot, so on-demand" in text
    offers = " ".join(cli("offers", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "Interruptible offers only (Vast.ai; RunPod has none)" in offers


@pytest.mark.e2e  # a real `up` on the local provider: it starts the box's agent
def test_up_name_is_the_session_id(cli, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("echo named\n")
    out = cli("up", "--job", str(job), "--name", "llama-sweep-1", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["session"] == "llama-sweep-1"
    assert json.loads(cli("ledger", "show", "llama-sweep-1", "--json").stdout)["label"] == "gpuops-llama-sweep-1"
    again = cli("up", "--job", str(job), "--name", "llama-sweep-1", "--dry-run")
    assert again.returncode == 2 and "session llama-sweep-1 is already in the ledger" in again.stderr
    bad = cli("up", "--job", str(job), "--name", "Llama Sweep")
    assert bad.returncode == 2 and "is not a session name" in bad.stderr
