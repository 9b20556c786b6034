"""`gpuops plan` and `gpuops up --model` from the command line (subprocesses, as a user runs them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuops.config import load_settings
from gpuops.errors import BadInput
from gpuops.planning.models import model_catalog
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger import Ledger
from tests.conftest import REPO, cli_in_process, gpuops_cmd

TOP_KEYS = [
    "model",
    "params",
    "active_params",
    "dtype",
    "kv_dtype",
    "batch",
    "seq",
    "weights_bytes",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "activation_bytes",
    "overhead_bytes",
    "total_bytes",
    "cards",
    "engine",
    "unverified",
    "weights_verified",
    "kv_layout_verified",
    "vllm_version",
    "weights_source",
    "quantization",
]
CARD_KEYS = [
    "card",
    "vram_bytes",
    "fits",
    "max_batch",
    "decode_tok_s",
    "ridge_flop_per_byte",
    "usd_per_mtoken",
    "engine",
    "budget_bytes",
    "kv_pool_bytes",
    "max_concurrency",
    "unverified",
    "engine_command",
    "vendor",
    "note",
]


def run(cli_env, *args, **kw):
    """``gpuops *args`` with ``cli_env`` and ``kw`` as its whole environment, in this process: planning
    and a dry run start nothing, and a process of their own would pay the imports for each."""
    return cli_in_process(*args, env={**cli_env, **kw}, whole_env=True)


def run_fresh(cli_env, *args, **kw):
    """``gpuops *args`` in a process of its own: for the Hugging Face Hub cases, since huggingface_hub
    reads ``HF_HUB_OFFLINE`` and ``HF_HOME`` once, at its import (it would keep this test's values
    in the worker for every later test)."""
    return subprocess.run(gpuops_cmd(*args), env={**cli_env, **kw}, capture_output=True, text=True, timeout=60)


def test_plan_json_has_the_issue_shape(cli_env):
    out = run(cli_env, "plan", "--model", "llama-2-7b", "--dtype", "fp16", "--batch", "32", "--seq", "2048", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert list(d) == TOP_KEYS
    # NVIDIA cards only: an AMD card is planned when asked (--vendor amd, or --card mi300x)
    assert len(d["cards"]) == 16 and all(list(c) == CARD_KEYS and c["vendor"] == "nvidia" for c in d["cards"])
    for k in TOP_KEYS[7:13]:
        assert isinstance(d[k], int), k
    # vLLM reserves whole 16-token blocks: 2048 tokens = 128 blocks, so 32 x 2048 x 512 KiB exactly
    assert d["weights_bytes"] == 13_476_831_232 and d["kv_cache_bytes"] == 32 * 2**30 and d["engine"] == "vllm"
    sxm = next(c for c in d["cards"] if c["card"] == "a100-80gb-sxm")
    assert sxm["fits"] and isinstance(sxm["vram_bytes"], int) and round(sxm["decode_tok_s"]) == 154
    assert sxm["budget_bytes"] == int(0.9 * int(79.15 * 2**30)) and sxm["unverified"] is False
    # 0.9 x 79.15 GiB - 12.55 weights - 0.25 non-torch - 0.25 activations (2048 tokens, 256 seqs) - 0.8 graphs
    assert sxm["kv_pool_bytes"] / 2**30 == pytest.approx(57.38, abs=0.01) and sxm["max_concurrency"] == pytest.approx(
        57.38 / 1, abs=0.02
    )
    assert sxm["engine_command"] == (
        "vllm serve meta-llama/Llama-2-7b-hf --max-model-len 2048 --gpu-memory-utilization 0.9 "
        "--max-num-seqs 256 --kv-cache-dtype auto --tensor-parallel-size 1"
    )
    assert set(sxm["usd_per_mtoken"]) == {"ceiling", "batch_1", "max_batch"}
    assert d["vllm_version"] == "0.33.0" and (d["unverified"], d["weights_verified"], d["kv_layout_verified"]) == (
        False,
        True,
        True,
    )


def test_a_card_that_does_not_fit_shows_no_speed_and_no_price(cli_env):
    # Llama-3-70B in bf16 is 141 GB of weights: it cannot fit one A100 80GB, so no tok/s and no $/Mtok for it
    out = run(cli_env, "plan", "--model", "llama-3-70b", "--card", "a100-80gb-sxm", "--json")
    assert out.returncode == 0, out.stderr
    card = json.loads(out.stdout)["cards"][0]
    assert (card["fits"], card["decode_tok_s"], card["usd_per_mtoken"]) == (False, None, None)
    table = run(cli_env, "plan", "--model", "llama-3-70b", "--card", "a100-80gb-sxm", COLUMNS="300").stdout
    row = next(line for line in table.splitlines() if line.startswith("│ A100 80GB SXM"))
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[5].startswith("no")
    # decode b1, ridge, compute-bound batch, tok/s @max batch, USD/h, $/Mtok ceiling, b1, max batch
    assert [cells[9], cells[11], cells[12], cells[14], cells[15], cells[16]] == ["-"] * 6
    assert cells[10] == "153" and cells[13] == "1.49"  # the card's own figures stay: 312 TFLOP/s / 2039 GB/s, its price


def test_plan_table_names_units_and_formulas(cli_env):
    # wide enough that the formulas stand on one line (the layout at 80 columns: tests/core/test_tables.py)
    out = run(cli_env, "plan", "--model", "llama-2-7b", "--dtype", "fp16", "--card", "a100", COLUMNS="250")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "13.48 GB" in text and "12.55 GiB" in text and "6,738,415,616 params x 2 B" in text
    assert "vllm serve meta-llama/Llama-2-7b-hf" in text and "follows vLLM 0.33.0" in text
    assert "2 x 32 layers x 32 kv_heads x 128 head_dim x 2 B" in text
    assert "A100 80GB SXM" in text and "A100 40GB" in text and "H100" not in text


def test_plan_every_model_on_every_card_in_one_table(cli_env):
    out = run(cli_env, "plan", "--model", "all", "--json")
    assert out.returncode == 0, out.stderr
    plans = json.loads(out.stdout)
    assert len(plans) == len(model_catalog()) and all(len(p["cards"]) == 16 for p in plans)
    table = run(cli_env, "plan", "--model", "all")
    assert table.returncode == 0 and "deepseek-v3" in table.stdout and "mi300x" not in table.stdout
    amd = json.loads(run(cli_env, "plan", "--model", "llama-3-8b", "--vendor", "amd", "--json").stdout)
    assert [c["card"] for c in amd["cards"]] == ["mi300x"] and amd["cards"][0]["vendor"] == "amd"


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--model", "llama-3-8b", "--dtype", "fp4"], "unknown --dtype 'fp4'"),
        (["--model", "llama-3-8b", "--batch", "-1"], "--batch must be >= 1"),
        (["--model", "llama-3-8b", "--batch", "x"], "--batch must be a whole number"),
        (["--model", "llama-3-8b", "--card", "z100"], "unknown card 'z100'"),
        (["--model", "nosuch-model"], "unknown model 'nosuch-model'"),
    ],
)
def test_plan_bad_input_is_one_line_exit_2(cli_env, args, msg):
    out = run(cli_env, "plan", *args)
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and msg in out.stderr and out.stderr.count("\n") == 1
    assert out.stdout == ""


def test_plan_config_missing_keys_exit_2(cli_env, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    out = run(cli_env, "plan", "--model", str(tmp_path))
    assert (
        out.returncode == 2
        and "lacks num_hidden_layers, num_attention_heads, intermediate_size, vocab_size" in out.stderr
    )


def test_plan_seq_beyond_context_warns_and_answers(cli_env):
    out = run(cli_env, "plan", "--model", "llama-2-7b", "--seq", "16384", "--card", "h100-sxm", "--json")
    assert out.returncode == 0
    assert "warning: --seq 16384 is beyond the model's context (4096 tokens, max_position_embeddings)" in out.stderr
    assert json.loads(out.stdout)["seq"] == 16384


def test_plan_hf_repo_offline_says_pass_a_local_config(cli_env, tmp_path):
    out = run_fresh(
        cli_env, "plan", "--model", "someorg/not-cached-model", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf")
    )
    assert out.returncode == 2
    assert "offline" in out.stderr and "pass the path" in out.stderr and out.stderr.count("\n") == 1


def test_cli_import_does_not_load_the_planner():
    code = "import sys, gpuops.cli.app; bad = [m for m in ('gpuops.planning.sizing', 'gpuops.render.sizing', 'huggingface_hub') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


# -- up --model -----------------------------------------------------------------------------------
def test_up_model_dry_run_picks_the_cheapest_card_that_fits(cli_env, tmp_path, gpuops_home):
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    out = run(cli_env, "up", "--job", str(job), "--model", "llama-3-70b", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    # 70B bf16 needs 144 GB per GPU: only B200 and MI300X hold it; MI300X is cheaper at reference prices,
    # but a CUDA job (the default image) never lands on an AMD card unless asked
    assert d["card"] == "b200" and d["need_bytes_per_gpu"] > 141 * 10**9
    amd = json.loads(
        run(cli_env, "up", "--job", str(job), "--model", "llama-3-70b", "--dry-run", "--json", "--vendor", "amd").stdout
    )
    assert amd["card"] == "mi300x"
    rocm = tmp_path / "rocm.toml"
    rocm.write_text('[up]\nimage = "rocm/vllm:latest"\n')
    named = json.loads(
        run(
            cli_env, "up", "--job", str(job), "--model", "llama-3-70b", "--dry-run", "--json", "--config", str(rocm)
        ).stdout
    )
    assert named["card"] == "mi300x"  # a ROCm image asks for AMD
    small = json.loads(run(cli_env, "up", "--job", str(job), "--model", "tinyllama-1.1b", "--dry-run", "--json").stdout)
    assert small["card"] == "t4"  # fits the cheapest card
    assert not (gpuops_home / "boxes").exists()


def test_up_model_seq_beyond_the_context_warns_as_plan_does(cli_env, tmp_path, gpuops_home):
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    line = "warning: --seq 16384 is beyond the model's context (4096 tokens, max_position_embeddings)"
    out = run(cli_env, "up", "--job", str(job), "--model", "llama-2-7b", "--seq", "16384", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    assert line in out.stderr  # the same line `plan` prints (test_plan_seq_beyond_context_warns_and_answers)
    # Llama-3.1's rope_scaling (llama3) keeps 131,072 tokens: beyond it `up` refuses, before anything is rented
    out = run(cli_env, "up", "--job", str(job), "--model", "llama-3.1-8b", "--seq", "262144", "--dry-run")
    assert out.returncode == 2 and "extends it only to 131072 tokens" in out.stderr
    assert "pass --seq 131072 or less" in out.stderr
    assert not (gpuops_home / "boxes").exists()


def test_up_model_that_fits_no_card_rents_and_books_nothing(cli_env, tmp_path, gpuops_home):
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    out = run(cli_env, "up", "--job", str(job), "--model", "llama-3-70b", "--card", "a100")
    assert out.returncode == 2
    err = out.stderr.strip().splitlines()[-1]
    assert "fits no --card a100" in err and "short" in err and "--gpu-count 2" in err
    # an A100 has no fp8 tensor cores: the advice is int8, never fp8
    assert "--dtype int8" in err and "fp8" not in err.split("try ")[1]
    assert not (gpuops_home / "boxes").exists()
    assert (
        not (gpuops_home / "ledger.db").exists()
        or Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").open_sessions() == []
    )


def test_up_model_refuses_an_unverified_plan_without_the_flag(cli_env, tmp_path, gpuops_home):
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    model = tmp_path / "brandnew"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "model_type": "brandnew",
                "hidden_size": 2048,
                "num_hidden_layers": 22,
                "num_attention_heads": 32,
                "intermediate_size": 5632,
                "vocab_size": 32000,
            }
        )
    )
    out = run(cli_env, "up", "--job", str(job), "--model", str(model), "--dry-run", "--json")
    assert out.returncode == 2 and "unverified" in out.stderr and "--allow-unverified" in out.stderr
    assert (
        not (gpuops_home / "ledger.db").exists()
        or Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").open_sessions() == []
    )
    ok = run(cli_env, "up", "--job", str(job), "--model", str(model), "--allow-unverified", "--dry-run", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["card"] == "t4"
    plan = run(cli_env, "plan", "--model", str(model), "--card", "t4", "--json")
    assert (
        plan.returncode == 0
        and json.loads(plan.stdout)["cards"][0]["unverified"] is True
        and "unverified" in plan.stderr
    )


def test_plan_engine_hf_and_vllm_flags(cli_env):
    out = run(cli_env, "plan", "--model", "llama-3-8b", "--card", "h100-sxm", "--engine", "hf", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["cards"][0]["engine_command"] is None
    out = run(
        cli_env,
        "plan",
        "--model",
        "llama-3-8b",
        "--card",
        "h100-sxm",
        "--gpu-memory-utilization",
        "0.8",
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "4096",
        "--json",
    )
    c = json.loads(out.stdout)["cards"][0]
    assert c["engine"] == "vllm" and "--gpu-memory-utilization 0.8 --max-num-seqs 64" in c["engine_command"]
    assert "--max-num-batched-tokens 4096" in c["engine_command"]
    bad = run(cli_env, "plan", "--model", "llama-3-8b", "--engine", "tgi")
    assert bad.returncode == 2 and "--engine must be one of vllm, hf, train" in bad.stderr


def test_up_model_in_process_filters_by_vram(gpuops_home, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    settings = load_settings(None, {})
    summ = run_up(UpRequest(job=job, model="llama-3-8b", card="a100", dry_run=True), settings, Reporter())
    assert summ["card"] == "a100-40gb-pcie" and summ["need_bytes_per_gpu"] > 16 * 10**9  # the cheapest A100 that fits
    with pytest.raises(BadInput, match="unknown --dtype"):
        run_up(UpRequest(job=job, model="llama-3-8b", dtype="fp5", dry_run=True), settings, Reporter())


def test_up_sizing_flags_without_model_are_refused(cli_env, tmp_path, gpuops_home):
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    out = run(cli_env, "up", "--job", str(job), "--seq", "8192", "--dry-run")
    assert out.returncode == 2 and "add --model" in out.stderr


def test_plan_hf_repo_from_the_local_hub_cache(cli_env, tmp_path):
    # the real huggingface_hub, offline, reading the cache layout it writes: refs/main -> snapshot
    rev = "0" * 40
    repo = tmp_path / "hf" / "hub" / "models--someorg--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 2048,
                "num_hidden_layers": 22,
                "num_attention_heads": 32,
                "num_key_value_heads": 4,
                "intermediate_size": 5632,
                "vocab_size": 32000,
            }
        )
    )
    out = run_fresh(
        cli_env,
        "plan",
        "--model",
        "someorg/tiny",
        "--card",
        "t4",
        "--json",
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["model"] == "someorg/tiny" and d["params"] == 1_100_048_384
