"""Memory, fit and speed rules beyond docs/worked-numbers.md: windows, MLA, tensor parallelism, dtypes, train mode."""

from __future__ import annotations

import dataclasses

import pytest

from gpuops.errors import BadInput
from gpuops.planning import sizing as P
from gpuops.planning.architecture import architecture
from gpuops.planning.memory import FRAMEWORK_OVERHEAD_BYTES, dollars_per_mtoken, request_kv_bytes
from gpuops.planning.models import ModelSource, builtin_model
from gpuops.planning.quant import norm_dtype

GB, GIB, KIB = 10**9, 2**30, 2**10
A100 = "a100-80gb-sxm"
LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def src(cfg, name="test"):
    return ModelSource(name=name, config=cfg, source="test")


def test_sliding_window_caps_every_mistral_layer():
    short = P.plan("mistral-7b", seq=4096, card=A100, engine="hf")
    long = P.plan("mistral-7b", seq=32768, card=A100, engine="hf")
    assert short.kv_cache_bytes == 128 * KIB * 4096 == long.kv_cache_bytes  # window 4096 on all 32 layers
    assert long.kv_bytes_per_token == 128 * KIB
    # vLLM 0.33 admits a windowed layer at ceil(min(window - 1 + 2 x max_num_batched_tokens, seq) / 16) + 1
    # blocks (two batches in flight): A100 defaults 2048 tokens -> 513 blocks of 16 = 8208 tokens, not 4096
    v = P.plan("mistral-7b", seq=32768, card=A100)
    assert v.cards[0].max_num_batched_tokens == 2048
    assert v.cards[0].per_request_bytes == 128 * KIB * 16 * 513 == v.kv_cache_bytes
    assert request_kv_bytes(v.arch, "bf16", 1000, 2048) == 128 * KIB * 16 * (
        63 + 1
    )  # short request: its own blocks + 1


def test_gemma2_alternates_local_and_global_layers():
    a = architecture(builtin_model("gemma-2-9b").config)
    assert a.head_dim == 256 and sum(1 for w in a.layer_window if w == 4096) == 21  # even layers are local
    per_layer = 2 * 8 * 256 * 2
    p = P.plan("gemma-2-9b", seq=8192, card=A100, engine="hf")
    assert p.kv_cache_bytes == per_layer * (21 * 4096 + 21 * 8192)


def test_qwen_sliding_window_off_unless_use_sliding_window():
    cfg = builtin_model("qwen2.5-7b").config
    assert all(w is None for w in architecture(cfg).layer_window)
    on = architecture({**cfg, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20})
    assert on.layer_window[:20] == (None,) * 20 and on.layer_window[20:] == (4096,) * 8


def test_layer_types_list_wins():
    cfg = {
        **LLAMA,
        "num_hidden_layers": 4,
        "sliding_window": 1024,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    }
    assert architecture(cfg).layer_window == (1024, None, 1024, None)


def test_mla_cache_is_the_compressed_latent():
    p = P.plan("deepseek-v3", card="h200", gpu_count=8, dtype="fp8", kv_dtype="bf16", seq=4096, engine="hf")
    assert p.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272  # vs 2 x 61 x 128 x 128 x 2 = 3.9 MB for MHA
    # the latent has no heads to split: every GPU holds the whole cache
    assert P.per_gpu_bytes(p, 1) - P.per_gpu_bytes(p, 0) == pytest.approx(
        p.kv_cache_bytes + p.activation_bytes / 8, abs=2
    )


def test_tensor_parallel_splits_weights_and_kv_by_head():
    one = P.plan("llama-3-70b", card=A100, seq=8192, engine="hf")
    two = P.plan("llama-3-70b", card=A100, seq=8192, gpu_count=2, engine="hf")
    assert two.per_gpu_bytes() == pytest.approx(
        (one.per_gpu_bytes() - FRAMEWORK_OVERHEAD_BYTES) / 2 + FRAMEWORK_OVERHEAD_BYTES, abs=2
    )
    assert two.total_bytes == one.total_bytes + FRAMEWORK_OVERHEAD_BYTES  # overhead is replicated
    # 16 GPUs but only 8 KV heads: the cache splits 8 ways and is replicated beyond
    sixteen = P.plan("llama-3-70b", card=A100, seq=8192, gpu_count=16, engine="hf")
    kv_per_gpu = P.per_gpu_bytes(sixteen, 1) - P.per_gpu_bytes(sixteen, 0) - sixteen.activation_bytes / 16
    assert kv_per_gpu == pytest.approx(sixteen.kv_cache_bytes / 8, abs=2)


def test_dtype_bytes_and_int4_overhead():
    p = P.plan("llama-2-7b", card=A100, dtype="fp16")
    n, bd = p.params, p.arch.breakdown
    for dt, b in (("fp32", 4), ("bf16", 2)):
        assert P.plan("llama-2-7b", card=A100, dtype=dt).weights_bytes == n * b
    # quantized dtypes shrink the linear layers only; embeddings, lm_head and norms stay 16-bit
    linear = bd["attention"] + bd["mlp"]
    rest = n - linear
    for dt, b in (("fp8", 1), ("int8", 1), ("int4", 0.5 + 2.5 / 128)):
        assert P.plan("llama-2-7b", card=A100, dtype=dt).weights_bytes == pytest.approx(linear * b + rest * 2, abs=4), (
            dt
        )
    assert norm_dtype("bfloat16") == "bf16" and norm_dtype("FP16") == "fp16"


def test_kv_dtype_auto_is_the_model_dtype_fp8_only_when_asked():
    # vLLM --kv-cache-dtype auto = the model's compute dtype: fp8 weights still cache in bf16
    for dt in ("fp8", "int4", "int8", "bf16"):
        assert P.plan("llama-3-8b", card=A100, dtype=dt).kv_dtype == "bf16"
        assert P.plan("llama-3-8b", card=A100, dtype=dt).kv_bytes_per_token == 131_072
    assert P.plan("llama-3-8b", card=A100, dtype="fp16").kv_dtype == "fp16"
    assert P.plan("llama-3-8b", card=A100, kv_dtype="auto").kv_dtype == "bf16"
    p = P.plan("llama-3-8b", card=A100, dtype="int4", kv_dtype="fp8", seq=8192, engine="hf")
    assert p.kv_cache_bytes == GIB // 2 and p.kv_bytes_per_token == 65_536


def test_train_mode_16_bytes_per_param_plus_activations_no_kv():
    p = P.plan("llama-2-7b", mode="train", card=A100, seq=2048)
    assert p.weights_bytes == 16 * p.params and p.kv_cache_bytes == 0
    assert p.activation_bytes == 2048 * (34 * 4096 * 32 + 4 * 32000)
    c = p.cards[0]
    assert not c.fits and c.decode_tok_s is None and c.usd_per_mtoken is None


def test_max_batch_is_the_largest_that_fits():
    for name in ("llama-3-8b", "mixtral-8x7b", "gemma-2-9b"):
        for c in P.plan(name, seq=4096, engine="hf").cards:
            p = P.plan(name, seq=4096, card=c.card.name, engine="hf")
            if c.max_batch:
                assert P.per_gpu_bytes(p, c.max_batch) <= c.budget_bytes < P.per_gpu_bytes(p, c.max_batch + 1)
            else:
                assert P.per_gpu_bytes(p, 1) > c.budget_bytes
        for c in P.plan(name, seq=4096).cards:  # vllm: whole requests the block pool holds, at most max_num_seqs
            p = P.plan(name, seq=4096, card=c.card.name)
            assert c.max_batch == min(c.max_num_seqs, int(c.max_concurrency))
            if c.max_batch:
                assert P.per_gpu_bytes(p, c.max_batch, c.card) <= c.budget_bytes


def test_fit_uses_reported_vram_at_headroom():
    # the budget is a fraction of what the engine sees (torch.cuda.mem_get_info: 44.52 GiB), not of nvidia-smi's 46068 MiB
    c = P.plan("llama-3-8b", card="l40s").cards[0]
    assert c.budget_bytes == int(0.9 * int(44.52 * 2**30))
    assert P.plan("llama-3-8b", card="l40s", headroom=0.5, engine="hf").cards[0].budget_bytes == int(
        0.5 * int(44.52 * 2**30)
    )


def test_moe_decode_reads_only_routed_experts_at_batch_1():
    p = P.plan("mixtral-8x7b", card="h200")
    c = p.cards[0]
    bd = p.arch.breakdown
    # every weight but the embedding table (one row read) and the 6 experts of 8 a token does not route to
    read = p.weights_bytes - 2 * bd["embeddings"] + 2 * 4096 - 2 * bd["experts"] * (1 - 2 / 8)
    assert c.decode_tok_s == pytest.approx(4.8e12 / read, rel=1e-9)
    assert c.max_batch_tok_s > c.batch1_tok_s


def test_usd_per_mtoken_formula_and_batching_lever():
    c = P.plan("llama-2-7b", dtype="fp16", card=A100, seq=2048).cards[0]
    assert c.usd_per_mtoken["ceiling"] == pytest.approx(1.49 / (c.decode_tok_s * 3600) * 1e6, abs=1e-9)
    assert c.usd_per_mtoken["batch_1"] >= c.usd_per_mtoken["ceiling"]  # batch 1 also reads its KV
    assert c.usd_per_mtoken["max_batch"] < c.usd_per_mtoken["batch_1"] / 10  # batching is the lever on the bill
    assert dollars_per_mtoken(3.6, 1000) == pytest.approx(1.0, abs=1e-9)


def test_safetensors_index_total_size_wins(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({**LLAMA, "torch_dtype": "bfloat16"}))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16_060_522_496}, "weight_map": {}})
    )
    p = P.plan(str(tmp_path), card=A100)
    assert p.weights_bytes == 16_060_522_496 and "index" in p.weights_source
    # never rescaled by --dtype: an fp8 plan of a bf16 checkpoint counts shapes (linear fp8, embeddings bf16)
    f = P.plan(str(tmp_path), card=A100, dtype="fp8")
    assert f.weights_bytes == 6_979_321_856 + 2 * (1_050_673_152 + 65 * 4096) and f.weights_source.startswith("shapes")


def test_text_config_of_multimodal_configs():
    a = architecture({"model_type": "llava", "text_config": LLAMA})
    assert a.params == 8_030_261_248


def test_unknown_family_with_base_keys_is_counted_and_says_so():
    p = P.plan(src({**LLAMA, "model_type": "newfangled"}), card=A100)
    assert p.params == 8_030_261_248
    assert any("newfangled" in w for w in p.warnings)


def test_explicit_head_dim_is_used():
    cfg = {**LLAMA, "head_dim": 256}
    a = architecture(cfg)
    assert a.head_dim == 256 and a.breakdown["attention"] == 32 * (2 * 4096 * 32 * 256 + 2 * 4096 * 8 * 256)


def test_kv_heads_default_to_attention_heads():
    cfg = {k: v for k, v in LLAMA.items() if k != "num_key_value_heads"}
    assert architecture(cfg).kv_heads == 32


def test_qwen_biases_counted():
    a = architecture(builtin_model("qwen2.5-7b").config)
    no_bias = architecture({**builtin_model("qwen2.5-7b").config, "model_type": "llama"})
    assert a.params - no_bias.params == 28 * (3584 + 2 * 512)


# -- bad input ------------------------------------------------------------------------------------
def test_missing_keys_are_named():
    with pytest.raises(BadInput, match="lacks intermediate_size, vocab_size"):
        architecture({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32})


def test_unknown_family_without_keys_names_them():
    with pytest.raises(
        BadInput, match=r"gpt2.*lacks hidden_size, num_hidden_layers, num_attention_heads, intermediate_size"
    ):
        architecture({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257})


def test_deepseek_without_mla_keys_names_them():
    cfg = {k: v for k, v in builtin_model("deepseek-v3").config.items() if k not in ("kv_lora_rank", "v_head_dim")}
    with pytest.raises(BadInput, match="lacks kv_lora_rank, v_head_dim"):
        architecture(cfg)


@pytest.mark.parametrize("bad", ["4096x", 0, -1, 40.5, True, None])
def test_non_numeric_or_zero_sizes(bad):
    cfg = {**LLAMA, "hidden_size": bad}
    with pytest.raises(BadInput, match="hidden_size"):
        architecture(cfg)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"dtype": "fp4"}, "unknown --dtype 'fp4'"),
        ({"kv_dtype": "int4"}, "unknown --kv-dtype"),
        ({"batch": -1}, "--batch must be >= 1"),
        ({"batch": 0}, "--batch must be >= 1"),
        ({"batch": "x"}, "--batch must be a whole number"),
        ({"seq": 0}, "--seq must be >= 1"),
        ({"gpu_count": 0}, "--gpu-count must be >= 1"),
        ({"headroom": 1.5}, "--gpu-memory-utilization must be in"),
        ({"mode": "serve"}, "--mode must be infer or train"),
        ({"card": "z100"}, "unknown card"),
    ],
)
def test_bad_flags(kw, match):
    with pytest.raises(BadInput, match=match):
        P.plan("llama-3-8b", **kw)


def test_seq_beyond_context_warns_not_refuses():
    p = P.plan("llama-2-7b", seq=8192, card=A100)
    assert p.seq == 8192 and p.arch.max_context == 4096  # llama-2-7b config.json: max_position_embeddings 4096
    assert [w for w in p.warnings if "beyond" in w] == [
        "--seq 8192 is beyond the model's context (4096 tokens, max_position_embeddings); its config has no "
        "rope_scaling: vLLM refuses --max-model-len beyond it unless told (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, "
        "or a rope_scaling in --hf-overrides)"
    ]
    # the plan is sized for the --seq asked, not clipped to the context: twice the KV of 4096 tokens
    at_context = P.plan("llama-2-7b", seq=4096, card=A100)
    assert not [w for w in at_context.warnings if "beyond" in w]  # exactly the context: no warning
    assert p.kv_cache_bytes == 2 * at_context.kv_cache_bytes


YARN = {  # a Qwen2.5-style config whose card says: add YaRN x4 over 32,768 tokens for long inputs
    "model_type": "qwen2",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}


def test_seq_within_the_rope_scaled_context_warns_and_up_sizes_it():
    from gpuops.planning.models import ModelSource

    s = ModelSource(name="q", config=YARN, source="t", weights_total_size=10**9, weights_size_source="x")
    p = P.plan(s, seq=65536, card="h100-sxm")
    # vLLM: yarn derives original_max_position_embeddings x factor = 32,768 x 4 = 131,072 tokens
    assert p.arch.rope_context == 131_072
    assert [w for w in p.warnings if "beyond" in w] == [
        "--seq 65536 is beyond the model's context (32768 tokens, max_position_embeddings); "
        "its rope_scaling extends it to 131072 tokens, which vLLM takes"
    ]
    need, fitting, _ = P.size_for_up(s, seq=65536, card="h100-sxm")  # type: ignore[arg-type]
    assert fitting == ("h100-sxm",) and need > 0


def test_seq_beyond_the_rope_scaled_context_is_refused_by_up_and_warned_by_plan():
    from gpuops.planning.models import ModelSource

    s = ModelSource(name="q", config=YARN, source="t", weights_total_size=10**9, weights_size_source="x")
    p = P.plan(s, seq=262_144, card="h100-sxm")  # plan warns, never refuses
    assert any("extends it only to 131072 tokens, and vLLM refuses more" in w for w in p.warnings)
    with pytest.raises(BadInput, match="extends it only to 131072 tokens") as e:
        P.size_for_up(s, seq=262_144, card="h100-sxm")  # type: ignore[arg-type]
    assert e.value.fix == "pass --seq 131072 or less"
    # llama3 RoPE: max_position_embeddings (131,072) is already the extended length (vLLM applies no factor)
    with pytest.raises(BadInput, match="extends it only to 131072 tokens"):
        P.size_for_up("llama-3.1-8b", seq=262_144, card="h100-sxm")


def test_heads_not_dividing():
    with pytest.raises(BadInput, match="not a multiple"):
        architecture({**LLAMA, "num_attention_heads": 30, "num_key_value_heads": 8, "head_dim": 128})


def test_fit_advice_says_how_much_and_what_fits():
    with pytest.raises(BadInput) as e:
        P.size_for_up("llama-3-70b", card="a100")
    msg = str(e.value)
    assert "fits no --card a100" in msg and "short" in msg and "GiB" in msg
    assert (
        "--dtype int8" in msg and "--dtype fp8" not in msg and "--gpu-count 2" in msg and "\n" not in msg
    )  # A100: no fp8 hardware
    with pytest.raises(BadInput, match="try --dtype fp8"):  # an L40S has fp8 tensor cores
        P.size_for_up("qwen2.5-32b", card="l40s")
    with pytest.raises(BadInput, match="--kv-dtype fp8"):
        P.size_for_up("llama-3-8b", card="rtx-4090", seq=24576, batch=2)
    need, fitting, p = P.size_for_up("llama-3-70b")
    assert fitting == ("b200",)  # NVIDIA only unless asked
    assert P.size_for_up("llama-3-70b", vendor="any")[1] == ("b200", "mi300x")
    assert P.size_for_up("llama-3-70b", image="rocm/vllm:latest")[1] == ("mi300x",)
    assert P.size_for_up("llama-3-70b", card="mi300x")[1] == ("mi300x",)
    assert need == pytest.approx(min(c.need_bytes_per_gpu for c in p.cards if c.fits) / 0.9, abs=1)
    assert dataclasses.is_dataclass(p)


def test_bf16_on_a_card_without_bf16_warns():
    # Llama-3 is published in bf16 (Llama-2 in fp16, which the T4 runs as it is)
    assert any("no bf16" in w for w in P.plan("llama-3-8b", card="t4").warnings)
    assert not any("no bf16" in w for w in P.plan("llama-3-8b").warnings)
    assert not any("no bf16" in w for w in P.plan("llama-3-8b", card="t4", dtype="fp16").warnings)
    assert not any("no bf16" in w for w in P.plan("llama-2-7b", card="t4").warnings)


def test_attention_bias_key_adds_q_k_v_o_biases():
    a = architecture(LLAMA)
    b = architecture({**LLAMA, "attention_bias": True})
    assert b.params - a.params == 32 * (4096 + 2 * 1024 + 4096)


def test_fp8_uses_fp8_flops_where_the_card_has_them():
    assert P.plan("llama-3-8b", dtype="fp8", card="h100-sxm").cards[0].ridge_flop_per_byte == pytest.approx(
        1979e12 / 3350e9, rel=1e-9
    )
    assert P.plan("llama-3-8b", dtype="fp8", card=A100).cards[0].ridge_flop_per_byte == pytest.approx(
        312e12 / 2039e9, rel=1e-9
    )
    assert P.plan("llama-3-8b", dtype="int4", card="h100-sxm").cards[0].ridge_flop_per_byte == pytest.approx(
        989e12 / 3350e9, rel=1e-9
    )
