"""`gpuops plan` sizes memory the way vLLM does, within 5% of vLLM's published numbers.

Acceptance sources (the figures vLLM prints at start-up, V1 engine; log
lines of vLLM 0.8-0.10: "model weights take X GiB; non_torch_memory takes Y GiB; PyTorch activation
peak memory takes Z GiB; the rest of the memory reserved for KV Cache is K GiB", "Available KV
cache memory: K GiB", "Maximum concurrency for N tokens per request: C x", "Model loading took W GiB"):

- Llama-3.1-8B (bf16), one H100 SXM 80GB, --gpu-memory-utilization 0.95: KV pool 58.11 GiB,
  max concurrency at 16,384 tokens 29.05x.
- Qwen2.5-7B (bf16), one H100 80GB, 0.95: KV pool 58.53 GiB, max concurrency at 8,192 tokens 133.8x.
- Llama-3-8B (bf16), one A100 80GB, 0.90 (the default): KV pool 53.29 GiB.
- Llama-3.1-8B with --quantization fp8: "Model loading took 8.49 GiB".

gpuops follows vLLM 0.11's defaults and start-up arithmetic (gpuops/planning/sizing.py says which files); each
figure must be within 5%. Regression rows: models gpuops once sized wrong (mixtures of experts, AWQ checkpoints), configs in
tests/plan/data/ (public config.json values of each repository).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuops.errors import BadInput
from gpuops.planning import models, sizing as P
from gpuops.planning.architecture import architecture
from gpuops.planning.memory import FRAMEWORK_OVERHEAD_BYTES, kv_bytes_per_token
from gpuops.planning.models import ModelSource, builtin_model
from gpuops.planning.quant import quantization

GB, GIB, KIB = 10**9, 2**30, 2**10
DATA = Path(__file__).parent / "data"


def cfg(name: str) -> dict:
    return json.loads((DATA / f"{name}.config.json").read_text())


def src(name: str, **kw) -> ModelSource:
    c = cfg(name)
    return ModelSource(
        name=name, config=c, source=str(DATA / f"{name}.config.json"), stored_dtype=models._stored_dtype(c), **kw
    )


def one(model, card, **kw):
    p = P.plan(model, card=card, **kw)
    assert len(p.cards) == 1
    return p, p.cards[0]


# -- acceptance: vLLM's published numbers, within 5% -----------------------------------------------
def test_llama31_8b_h100_095_kv_pool_58_11_gib_and_29_05x_at_16k():
    p, c = one("llama-3.1-8b", "h100-sxm", headroom=0.95, seq=16384)
    assert c.budget_bytes / GIB == pytest.approx(0.95 * 79.19, abs=0.01)  # 75.23 GiB, as vLLM prints
    assert c.max_num_batched_tokens == 8192 and c.max_num_seqs == 1024  # vllm serve defaults on an H100
    assert c.kv_pool_bytes / GIB == pytest.approx(58.11, rel=0.05)
    assert c.max_concurrency == pytest.approx(29.05, rel=0.05)
    assert c.activation_bytes / GIB == pytest.approx(1.88, rel=0.05)  # the published activation peak


def test_qwen25_7b_h100_095_kv_pool_58_53_gib_and_133_8x_at_8k():
    p, c = one("qwen2.5-7b", "h100-sxm", headroom=0.95, seq=8192)
    assert p.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 56 * KIB
    assert c.kv_pool_bytes / GIB == pytest.approx(58.53, rel=0.05)
    assert c.max_concurrency == pytest.approx(133.8, rel=0.05)


def test_llama3_8b_a100_80gb_090_kv_pool_53_29_gib():
    p, c = one("llama-3-8b", "a100-80gb-sxm", seq=8192)
    assert (
        p.headroom == 0.90 and c.max_num_batched_tokens == 2048 and c.max_num_seqs == 256
    )  # A100: the smaller defaults
    assert c.kv_pool_bytes / GIB == pytest.approx(53.29, rel=0.05)


def test_llama31_8b_fp8_weights_8_49_gib():
    p = P.plan("llama-3.1-8b", dtype="fp8", card="h100-sxm")
    # only the linear layers go to fp8; embeddings and lm_head (1.05B params) stay bf16
    assert p.weights_bytes / GIB == pytest.approx(8.49, rel=0.05)
    assert p.weights_bytes / GIB == pytest.approx(8.46, abs=0.01)
    assert "--quantization fp8" in p.cards[0].engine_command


# -- models once sized wrong, as regression tests ----------------------------------------------------
def test_qwen3_30b_a3b_moe_is_30_5b_params_and_fits_no_small_card():
    a = architecture(cfg("qwen3-30b-a3b"))
    assert (
        a.params == 30_532_122_624 and a.experts == 128 and a.experts_per_tok == 8
    )  # published 30.5B, "A3B": 3.3B active
    assert a.active_params / 1e9 == pytest.approx(3.3, abs=0.1)
    p = P.plan(src("qwen3-30b-a3b"))
    assert p.weights_bytes / GB == pytest.approx(61.06, abs=0.01)
    fits = {c.card.name for c in p.cards if c.fits}
    assert "t4" not in fits and "l40s" not in fits and "h100-sxm" in fits


@pytest.mark.parametrize("key", ["num_experts", "num_local_experts", "n_routed_experts"])
def test_moe_detected_from_any_expert_key(key):
    base = {k: v for k, v in cfg("qwen3-30b-a3b").items() if k != "num_experts"}
    a = architecture({**base, "model_type": "somenew_moe", key: 128})
    # counted as a llama-style decoder: everything but Qwen3's per-head q/k norms (48 x 2 x 128)
    assert a.experts == 128 and a.params == 30_532_122_624 - 48 * 2 * 128 and not a.known


def test_moe_layout_keys_first_k_dense_sparse_step_mlp_only_shared():
    c = cfg("qwen3-30b-a3b")
    dense_first = architecture({**c, "first_k_dense_replace": 2})
    every_other = architecture({**c, "decoder_sparse_step": 2})
    only = architecture({**c, "mlp_only_layers": [0, 1]})
    per_moe_layer = 128 * 3 * 2048 * 768
    assert dense_first.expert_params == 46 * per_moe_layer == only.expert_params
    assert every_other.expert_params == 24 * per_moe_layer
    assert dense_first.breakdown["mlp"] == 2 * 3 * 2048 * 6144  # dense layers use intermediate_size
    shared = architecture({**c, "shared_expert_intermediate_size": 5632})  # Qwen2-MoE style, with its sigmoid gate
    assert shared.breakdown["mlp"] == 48 * 3 * 2048 * 5632 and shared.breakdown["router"] == 48 * (2048 * 128 + 2048)


def test_awq_checkpoint_total_size_is_never_rescaled(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(cfg("llama-3-8b-awq")))
    # the index's total_size of an AWQ GEMM checkpoint of Llama-3-8B: 5.73 GB
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 5_727_854_592}, "weight_map": {}})
    )
    for dtype in (None, "auto", "int4"):
        p = P.plan(str(tmp_path), dtype=dtype, card="rtx-4090")
        assert p.weights_bytes == 5_727_854_592 and "total_size" in p.weights_source and p.dtype == "int4"
        assert p.kv_dtype == "fp16" or p.kv_dtype == "bf16"
    # without the index the shapes give the same bytes: 4 bit + fp16 scale + 4-bit zero per 128, embeddings fp16
    assert P.plan(src("llama-3-8b-awq"), card="rtx-4090").weights_bytes == 5_727_854_592


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp16"])
def test_dtype_contradicting_a_quantized_checkpoint_is_bad_input(dtype):
    with pytest.raises(BadInput) as e:
        P.plan(src("llama-3-8b-awq"), dtype=dtype)
    assert (
        "contradicts the checkpoint" in str(e.value) and "AWQ 4-bit" in str(e.value) and "drop --dtype" in str(e.value)
    )


def test_int4_plan_of_a_bf16_model_keeps_embeddings_16_bit():
    p = P.plan("llama-3-8b", dtype="int4", card="rtx-4090")
    assert p.weights_bytes / GB == pytest.approx(5.73, abs=0.01)  # not 4.14 GB (0.5156 B for every param)
    assert "AWQ/GPTQ checkpoint" in p.cards[0].engine_command


def test_fp8_weights_do_not_imply_an_fp8_kv_cache():
    p = P.plan("llama-3-8b", dtype="fp8", card="h100-sxm")
    assert p.kv_dtype == "bf16" and p.kv_bytes_per_token == 131_072
    assert "--kv-cache-dtype auto" in p.cards[0].engine_command
    q = P.plan("llama-3-8b", dtype="fp8", kv_dtype="fp8", card="h100-sxm")
    assert q.kv_bytes_per_token == 65_536 and "--kv-cache-dtype fp8" in q.cards[0].engine_command


def test_deepseek_v3_is_the_fp8_checkpoint():
    p = P.plan("deepseek-v3", card="h200", gpu_count=8)
    assert p.dtype == "fp8" and "128x128" in p.quant.label
    assert p.weights_bytes / GB == pytest.approx(671, rel=0.01)  # not 1,342 GB of bf16
    assert p.cards[0].fits  # one 8 x H200 box, not two
    same = P.plan(src("deepseek-v3"), card="h200", gpu_count=8)
    assert same.weights_bytes == p.weights_bytes
    with pytest.raises(BadInput, match="contradicts"):
        P.plan("deepseek-v3", dtype="bf16")


def test_gemma2_9b_sliding_window_admission():
    per_layer = 2 * 8 * 256 * 2  # bytes per token per layer
    old = per_layer * 21 * (8192 + 4096)  # min(seq, window) on the 21 local layers: 1.97 GiB
    _, h100 = one(src("gemma-2-9b"), "h100-sxm", seq=8192)
    # H100: min(4096 - 1 + 2 x 8192, 8192) = 8192 -> 512 + 1 blocks on a local layer (vLLM 0.33: 2 batches in flight)
    assert h100.per_request_bytes == per_layer * 21 * (8192 + 513 * 16)
    assert h100.per_request_bytes / old == pytest.approx(1.335, abs=0.001)  # +33%
    _, a100 = one(src("gemma-2-9b"), "a100-80gb-sxm", seq=8192)
    # A100: min(4095 + 2 x 2048, 8192) = 8191 -> 512 + 1 blocks
    assert a100.per_request_bytes == per_layer * 21 * (8192 + 513 * 16)
    p = P.plan(src("gemma-2-9b"), card="h100-sxm")
    assert p.dtype == "bf16" and p.weights_bytes == 2 * 9_241_705_984  # fp32 checkpoint served in bf16


def test_gemma3_1b_text_config_and_one_global_layer_in_six():
    a = architecture(cfg("gemma-3-1b-it"))
    assert a.params == 999_885_952  # published
    assert [i for i, w in enumerate(a.layer_window) if w is None] == [5, 11, 17, 23]
    assert kv_bytes_per_token(a, "bf16") == 26 * 2 * 1 * 256 * 2
    _, c = one(src("gemma-3-1b-it"), "l4", seq=32768)
    local = -(-(512 - 1 + 2 * 2048) // 16) + 1  # 289 blocks (two batches of 2048 in flight)
    # the hybrid allocator groups 4 layers to a group: 1 full group, 22 sliding layers padded to 6 groups
    assert c.per_request_bytes == 1024 * 16 * 4 * (2048 + 6 * local)


@pytest.mark.parametrize(
    "name,params",
    [("gemma-3-4b-it", 4_300_079_472), ("gemma-3-12b-it", 12_187_325_040), ("gemma-3-27b-it", 27_432_406_640)],
)
def test_gemma3_multimodal_configs_use_the_library_defaults_and_count_the_vision_tower(name, params):
    a = architecture(cfg(name))
    assert a.params == params  # the published count, SigLIP vision tower and projector included
    assert a.vocab == 262_208 and a.breakdown["vision"] > 400e6 and any("vision tower counted" in n for n in a.notes)
    assert sum(1 for w in a.layer_window if w is None) == a.layers // 6
    p = P.plan(src(name), card="h100-sxm")
    assert p.cards[0].fits and not p.unverified


def test_non_torch_and_nccl_per_gpu():
    _, one_gpu = one("llama-3-70b", "h100-sxm", dtype="fp8")
    _, four = one("llama-3-70b", "h100-sxm", gpu_count=4)
    assert one_gpu.overhead_bytes == int(0.25 * GIB)
    assert four.overhead_bytes == int(0.25 * GIB) + int(1.85 * GIB)  # ~2.1 GiB with NCCL
    assert four.fits and four.engine_command.endswith("--tensor-parallel-size 4")
    # weights and the KV cache split 4 ways (8 KV heads), the sampler's logits do not
    assert four.fixed_bytes - four.overhead_bytes - four.activation_bytes - four.cuda_graph_bytes == -(
        -2 * 70_553_706_496 // 4
    )


def test_budget_is_the_engine_visible_total():
    _, c = one("llama-3-8b", "h100-sxm")
    assert c.budget_bytes == int(0.9 * int(79.19 * GIB))  # not 0.9 x nvidia-smi's 79.65 GiB
    _, g = one("llama-3-8b", "rtx-4090")
    assert g.budget_bytes == int(0.9 * int(23.58 * GIB))


def test_max_position_embeddings_that_would_not_fit_warns():
    p = P.plan("llama-3.1-8b", card="rtx-4090", seq=8192)
    assert p.cards[0].fits and not p.cards[0].context_fits
    w = [x for x in p.warnings if "max_position_embeddings" in x]
    assert w and "131,072" in w[0] and "rtx-4090" in w[0] and "--max-model-len 8192" in w[0]
    assert "--max-model-len 8192" in p.cards[0].engine_command
    assert not any("max_position_embeddings (" in x for x in P.plan("llama-3.1-8b", card="h100-sxm", seq=8192).warnings)


def test_engine_command_is_complete_and_quoted(tmp_path):
    d = tmp_path / "my model; rm -rf x"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({k: v for k, v in cfg("gemma-2-9b").items()}))
    c = P.plan(str(d), card="l40s", seq=4096, max_num_seqs=64).cards[0]
    assert c.engine_command.startswith("vllm serve '") and "rm -rf x'" in c.engine_command
    for flag in (
        "--max-model-len 4096",
        "--gpu-memory-utilization 0.9",
        "--max-num-seqs 64",
        "--kv-cache-dtype auto",
        "--tensor-parallel-size 1",
    ):
        assert flag in c.engine_command


def test_unknown_family_unverified_unless_the_checkpoint_counts(tmp_path):
    odd = {**cfg("gemma-3-1b-it"), "model_type": "brandnew"}
    p = P.plan(ModelSource(name="x", config=odd, source="t"), card="l4")
    assert p.unverified and all(c.unverified for c in p.cards) and any("unverified" in w for w in p.warnings)
    (tmp_path / "config.json").write_text(json.dumps(odd))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 2_000_000_000}, "weight_map": {}})
    )
    q = P.plan(str(tmp_path), card="l4")
    assert not q.unverified and q.weights_bytes == 2_000_000_000 and any("checkpoint" in w for w in q.warnings)
    with pytest.raises(BadInput, match="unverified") as e:
        P.size_for_up(_write(tmp_path / "u", odd), card="l4")
    assert "--allow-unverified" in str(e.value)
    need, fitting, plan = P.size_for_up(_write(tmp_path / "u2", odd), card="l4", allow_unverified=True)
    assert fitting == ("l4",) and plan.unverified


def _write(d: Path, config: dict) -> str:
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return str(d)


def test_decode_ceiling_reads_the_embedding_rows_a_step_touches():
    p, c = one("llama-3-8b", "h100-sxm")
    read = p.weights_bytes - 2 * 128256 * 4096 + 2 * 4096
    assert c.decode_tok_s == pytest.approx(3350e9 / read, rel=1e-9)
    g, gc = one(src("gemma-2-9b"), "h100-sxm")  # tied: the table is the lm_head, read whole
    assert gc.decode_tok_s == pytest.approx(3350e9 / g.weights_bytes, rel=1e-9)


def test_hf_engine_and_train_engine():
    hf = P.plan("llama-3-8b", engine="hf", card="a100-80gb-sxm", seq=8192, batch=8)
    assert hf.engine == "hf" and hf.cards[0].engine_command is None and hf.overhead_bytes == FRAMEWORK_OVERHEAD_BYTES
    assert hf.kv_cache_bytes == 8 * 8192 * 128 * KIB
    t = P.plan("llama-3-8b", engine="train", card="h100-sxm")
    assert t.mode == "train" and t.weights_bytes == 16 * t.params and t.cards[0].kv_pool_bytes == 0
    with pytest.raises(BadInput, match="--engine must be one of"):
        P.plan("llama-3-8b", engine="sglang")


@pytest.mark.parametrize(
    "qc,dtype,per_param",
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", 1 + 4 / 16384),
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8", 1.0),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "int4", 0.5 + 2.5 / 128),
        ({"quant_method": "gptq", "bits": 4, "group_size": 32}, "int4", 0.5 + 2.5 / 32),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8", 1 + 3 / 128),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "int4", 0.5 + 4 / 64),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8", 1.0),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}},
                "ignore": ["lm_head"],
            },
            "fp8",
            1.0,
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "group_0": {
                        "weights": {
                            "num_bits": 4,
                            "type": "int",
                            "strategy": "group",
                            "group_size": 128,
                            "symmetric": True,
                        }
                    }
                },
                "ignore": ["lm_head"],
            },
            "int4",
            0.5 + 2 / 128,
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "group_0": {
                        "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}
                    }
                },
                "ignore": ["lm_head"],
            },
            "fp8",
            1 + 4 / 16384,
        ),
    ],
)
def test_quantization_config_methods(qc, dtype, per_param):
    q = quantization({"quantization_config": qc})
    assert q.dtype == dtype and q.bytes_per_param == pytest.approx(per_param, rel=1e-9) and q.known and not q.lm_head
    c = {**builtin_model("llama-3-8b").config, "quantization_config": qc}
    a = architecture(c)
    p = P.plan(ModelSource(name="q", config=c, source="t"), card="h100-sxm")
    assert p.weights_bytes == pytest.approx(a.linear_params * per_param + (a.params - a.linear_params) * 2, rel=1e-6)


def test_unknown_quantization_method_without_a_byte_count_is_unverified():
    c = {**builtin_model("llama-3-8b").config, "quantization_config": {"quant_method": "hqq"}}
    p = P.plan(ModelSource(name="q", config=c, source="t"), card="h100-sxm")
    assert p.unverified and any("hqq" in w for w in p.warnings)


def test_tensor_parallel_must_divide_the_attention_heads():
    # Seen: `plan --model llama-3-8b --card h100-sxm --gpu-count 3` said "fits: yes" and printed
    # `vllm serve ... --tensor-parallel-size 3`, which vLLM refuses at start-up ("Total number of
    # attention heads (32) must be divisible by tensor parallel size (3)", vllm/config/model.py
    # ModelConfig.verify_with_parallel_config, 0.11). hf and train split no heads: they plan it.
    with pytest.raises(BadInput) as e:
        P.plan("llama-3-8b", card="h100-sxm", gpu_count=3)
    assert (e.value.message, e.value.fix) == (
        "vLLM cannot split llama-3-8b's 32 attention heads over --gpu-count 3 (tensor parallelism needs a count that divides them)",
        "pass --gpu-count 2, 4, 8 or 16",
    )
    with pytest.raises(BadInput, match=r"28 attention heads over --gpu-count 8 .*pass --gpu-count 2, 4, 7 or 14\)$"):
        P.plan("qwen2.5-7b", card="h100-sxm", gpu_count=8)
    assert P.plan("llama-3-8b", card="h100-sxm", gpu_count=3, engine="hf").cards[0].fits
    assert P.plan("llama-3-8b", card="h100-sxm", gpu_count=4).cards[0].fits


def test_the_fix_for_a_model_that_does_not_fit_never_names_a_count_vllm_refuses():
    # Seen: Qwen2.5-32B (40 heads) in fp32 on a T4: "try --gpu-count 16 on t4", which vLLM refuses.
    with pytest.raises(BadInput) as e:
        P.size_for_up("qwen2.5-32b", card="t4", dtype="fp32")
    assert "--gpu-count 16" not in str(e.value) and "attention heads" not in str(e.value), str(e.value)
    assert str(e.value).endswith("short; try a smaller model on t4)")


def test_plan_all_leaves_out_the_models_a_gpu_count_does_not_split(gpuops_home, cli):
    out = cli("plan", "--model", "all", "--gpu-count", "8", "--format", "json")
    assert out.returncode == 0, out.stderr
    names = {d["model"] for d in json.loads(out.stdout)}
    assert (
        "llama-3-8b" in names and "qwen2.5-7b" not in names and "qwen2.5-32b" in names
    )  # 32 and 40 heads split by 8, 28 not
    assert out.stderr.startswith("warning: left out qwen2.5-7b, ") and "--gpu-count 8" in out.stderr, out.stderr
