"""The hand-worked numbers gpuops' planner was first checked against (docs/worked-numbers.md),
each as a test: ``test_s001_*`` are its set 1, ``test_s003_*`` its set 2; "seed" in a comment
below is the hand figure.

Units: the hand figures write "KB"/"GB" for both 10^3/10^9 and 2^10/2^30; each test says which
one was meant and asserts exact bytes. Where a hand figure rounds (70B for 70.55B, int4 without
scales, nominal "80 GB" cards that are 80 GiB), the note says so and the tolerance is the rounding.

Corrections the hand figures do not make: a decode step reads only its tokens' rows of an untied
embedding table, not the table (Llama-2-7B: 2% of the weights, so the hand ceilings are ~2% low);
int4 checkpoints keep embeddings and lm_head in 16 bits and store a zero point per group beside
the scale (AWQ), so "70B x 0.5 = 35 GB" is 39.8 GB for Llama-3-70B. The hand figures size a plain
transformers run (engine hf); the vLLM engine's numbers are in test_vllm.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from gpuops.catalog import card_by_name
from gpuops.planning import sizing as P
from gpuops.planning.architecture import architecture
from gpuops.planning.memory import TRAIN_BYTES_PER_PARAM, kv_bytes_per_token, max_batch_for
from gpuops.planning.models import builtin_model
from gpuops.planning.quant import DTYPE_BYTES

GB, GIB, KIB = 10**9, 2**30, 2**10
A100 = "a100-80gb-sxm"


def one(model, card=A100, **kw):
    kw.setdefault(
        "engine", "hf"
    )  # the hand figures size a plain transformers run: 1.5 GB overhead, whole-batch activations
    p = P.plan(model, card=card, **kw)
    assert len(p.cards) == 1
    return p, p.cards[0]


# -- set 1: Llama-2-7B, fp16, A100 80GB SXM ---------------------------------------------------------
def test_s001_llama2_7b_params_6_74b():
    p, _ = one("llama-2-7b", dtype="fp16")
    # seed: N = 2VD + L(4d^2 + 3 d d_ff) = 6,738,149,376 (no norms); with the 32 x 2 + 1 RMSNorm
    # weight vectors of length 4096 it is the published 6,738,415,616. Both are "6.74B".
    assert p.params == 6_738_415_616
    assert p.params - p.arch.breakdown["norms"] == 2 * 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008)
    assert round(p.params / 1e9, 2) == 6.74


def test_s001_llama2_7b_param_breakdown_table():
    a = architecture(builtin_model("llama-2-7b").config)
    assert a.breakdown["embeddings"] == a.breakdown["lm_head"] == 131_072_000  # 131.1M each
    assert a.breakdown["attention"] // 32 == 67_108_864  # 4 x 4096 x 4096 = 67.1M per layer
    assert a.breakdown["mlp"] // 32 == 135_266_304  # 3 x 4096 x 11008 = 135.3M per layer


def test_s001_llama2_7b_weights_13_5_gb():
    p, _ = one("llama-2-7b", dtype="fp16")
    assert p.weights_bytes == 2 * 6_738_415_616  # 13.48e9 B: the seed's 13.5 GB is decimal
    assert round(p.weights_bytes / GB, 1) == 13.5


def test_s001_llama2_7b_kv_512_kb_per_token():
    p, _ = one("llama-2-7b", dtype="fp16")
    assert p.kv_bytes_per_token == 2 * 32 * 4096 * 2 == 512 * KIB  # the seed's KB is KiB


def test_s001_llama2_7b_kv_32_gb_at_batch_32_x_2048():
    p, _ = one("llama-2-7b", dtype="fp16", batch=32, seq=2048)
    assert p.kv_cache_bytes == 65536 * 512 * KIB == 32 * GIB  # the seed's "32 GB" is 32 GiB = 34.36e9 B
    assert p.kv_cache_bytes / p.weights_bytes == pytest.approx(2.5, abs=0.06)  # seed: 32 / 13.5 ~ 2.4 (mixed units)


def test_s001_llama2_7b_activations_1_4_gb_and_overhead_1_5_gb():
    p, _ = one("llama-2-7b", dtype="fp16", batch=32, seq=2048)
    assert p.activation_bytes == 65536 * 11008 * 2  # widest FFN vector x tokens x 2 B
    assert round(p.activation_bytes / GB, 1) == 1.4
    assert p.overhead_bytes == 1.5 * GB
    # seed: total 48.4 "GB" = 13.5 GB + 32 GiB + 1.4 GB + 1.5 GB, units mixed; in bytes it is 50.78e9 (47.29 GiB)
    assert p.total_bytes == p.weights_bytes + p.kv_cache_bytes + p.activation_bytes + p.overhead_bytes
    assert round(p.total_bytes / GIB, 1) == 47.3


def test_s001_llama2_7b_decode_ceiling_150_tok_s_on_a100_sxm():
    _, c = one("llama-2-7b", dtype="fp16")
    # a step reads every weight but the embedding table, of which only its token's row (4096 x 2 B)
    read = 13_476_831_232 - 2 * 131_072_000 + 2 * 4096
    assert c.decode_tok_s == pytest.approx(2039e9 / read, rel=1e-9)
    assert round(c.decode_tok_s) == 154  # seed: 2039 GB/s / 13.5 GB ~ 150 (whole table read, weights rounded up)
    assert c.decode_tok_s == pytest.approx(150, rel=0.03)


def test_s001_a100_ridge_153_and_compute_bound_batch_153():
    _, c = one("llama-2-7b", dtype="fp16")
    assert c.ridge_flop_per_byte == pytest.approx(312e12 / 2039e9, rel=1e-9)
    assert round(c.ridge_flop_per_byte) == 153
    # intensity at batch B = 2N x B FLOP / 2N bytes = B, so decode turns compute-bound at B = ridge
    # (x 0.98: the embedding table, 2% of the weights, is not read)
    assert c.compute_bound_batch == pytest.approx(153, rel=0.025)


def test_s001_13b_worked_solution():
    p, c = one("llama-2-13b", dtype="fp16", batch=32, seq=2048)
    assert p.params == 13_015_864_320 and round(p.params / 1e9, 2) == 13.02
    assert round(p.weights_bytes / GB, 2) == 26.03  # seed: 26.04 GB from 13.02B x 2 (rounded params)
    assert p.kv_bytes_per_token == 2 * 40 * 5120 * 2 == 819_200 == 800 * KIB
    assert p.kv_cache_bytes == 50 * GIB  # seed "50 GB" = 65536 x 800 KiB
    assert c.decode_tok_s == pytest.approx(78, rel=0.03)  # seed 2039 / 26.04 = 78; 79.6 without the embedding table


def test_s001_llama3_8b_gqa_worked_solution():
    p, _ = one("llama-3-8b", dtype="fp16", batch=32, seq=2048)
    a = p.arch
    assert a.breakdown["embeddings"] + a.breakdown["lm_head"] == 1_050_673_152  # 1.05B, untied
    assert a.breakdown["attention"] // 32 == 41_943_040  # 2 x 4096^2 + 2 x 4096 x 1024 = 41.9M
    assert a.breakdown["mlp"] // 32 == 176_160_768
    assert p.params == 8_030_261_248 and round(p.params / 1e9, 2) == 8.03
    assert round(p.weights_bytes / GB, 2) == 16.06
    assert p.kv_bytes_per_token == 128 * KIB
    assert p.kv_cache_bytes == 8 * GIB
    ceilings = {c.card.name: c.decode_tok_s for c in P.plan("llama-3-8b", engine="hf", dtype="fp16").cards}
    # seed: 2039 / 16.06 = 127 and 3350 / 16.06 = 209; a step skips the 1.05 GB embedding table: 135.8 and 223.1
    assert round(ceilings[A100]) == 136 and round(ceilings["h100-sxm"]) == 223
    assert ceilings[A100] == pytest.approx(2039e9 / (p.weights_bytes - 2 * 525_336_576 + 2 * 4096), rel=1e-9)


def test_s001_h100_ridge_295_and_7b_at_248_tok_s():
    _, c = one("llama-2-7b", card="h100-sxm", dtype="fp16")
    assert round(c.ridge_flop_per_byte) == 295
    assert c.decode_tok_s == pytest.approx(248, rel=0.03)  # seed: 3350 / 13.5 = 248; 253.5 without the embedding table
    assert c.decode_tok_s / one("llama-2-7b", dtype="fp16")[1].decode_tok_s == pytest.approx(
        3350 / 2039, rel=1e-9
    )  # 1.64x


def test_s001_self_test_1_gqa_vs_mha_kv():
    cfg = {
        "model_type": "llama",
        "hidden_size": 6144,
        "num_hidden_layers": 48,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "intermediate_size": 16384,
        "vocab_size": 32000,
    }
    gqa = kv_bytes_per_token(architecture(cfg), "fp16")
    mha = kv_bytes_per_token(architecture({**cfg, "num_key_value_heads": 48}), "fp16")
    assert gqa == 192 * KIB and mha == 1152 * KIB and mha // gqa == 6


def test_s001_t4_tinyllama_145_tok_s_ridge_203():
    p, c = one("tinyllama-1.1b", card="t4", dtype="fp16")
    assert round(p.weights_bytes / GB, 1) == 2.2
    # 320 GB/s / 2.2 GB = 145; the 65.5M-row embedding table (6% of TinyLlama) is not read: 154.7
    assert c.decode_tok_s == pytest.approx(320e9 / (p.weights_bytes - 2 * 32000 * 2048 + 2 * 2048), rel=1e-9)
    assert c.decode_tok_s == pytest.approx(145, rel=0.07)
    assert round(c.ridge_flop_per_byte) == 203  # 65 TFLOP/s / 320 GB/s


# -- set 2: the ten problems --------------------------------------------------------------------
def test_s003_q1_70b_training_1120_gb_does_not_fit_8_a100():
    p = P.plan("llama-3-70b", mode="train", gpu_count=8, card=A100, seq=4096)
    assert p.weights_bytes == 16 * p.params
    # seed: 16 x 70 = 1120 GB (70B rounded; Llama-3-70B has 70.55B -> 1128.9 GB), "short by 480 GB" of 640 GB
    assert p.weights_bytes / GB == pytest.approx(1120, rel=0.01)
    assert (p.weights_bytes - 640 * GB) / GB == pytest.approx(480, rel=0.02)
    assert not p.cards[0].fits and p.cards[0].max_batch == 0


def test_s003_q2_70b_inference_bf16_and_int4():
    (a,) = P.plan("llama-3-70b", engine="hf", card=A100, dtype="bf16").cards
    assert not a.fits  # (a) one A100 80GB: weights alone are 141 GB (seed: 140 GB, 60 GB short)
    assert (
        round(a.missing_bytes / GB) == 68
    )  # 144.2 GB needed vs 76.5 GB usable (90% of the 79.15 GiB the engine sees; seed: 140 - 80 = 60)
    p2 = P.plan("llama-3-70b", engine="hf", card=A100, dtype="bf16", gpu_count=2, seq=1024)
    assert p2.cards[0].fits  # (b) two cards hold the weights ...
    kv_room_gb = 2 * (p2.cards[0].budget_bytes - P.per_gpu_bytes(p2, 0)) / GB
    assert (
        kv_room_gb < 12
    )  # ... with single-digit-ish GB left for KV (seed: 160 x 0.9 - 140 = 4 GB; 80 GiB cards give 10.4)
    p4 = P.plan("llama-3-70b", engine="hf", card=A100, dtype="int4")
    # (c) int4: seed 70 x 0.5 = 35 GB. An int4 (AWQ) checkpoint quantizes the linear layers only, with an
    # fp16 scale and a 4-bit zero per 128 weights (0.5195 B), and keeps embeddings + lm_head (2.1B) in bf16: 39.8 GB
    bd = p4.arch.breakdown
    linear = bd["attention"] + bd["mlp"]
    assert p4.weights_bytes == pytest.approx(linear * (0.5 + 2.5 / 128) + (p4.params - linear) * 2, abs=8)
    assert p4.weights_bytes / GB == pytest.approx(39.77, abs=0.01)
    assert p4.cards[0].fits
    assert (p4.cards[0].budget_bytes - p4.weights_bytes) / GB == pytest.approx(37, rel=0.12)  # seed: 72 - 35 = 37


def test_s003_q3_70b_kv_cache_gqa_vs_mha():
    p = P.plan("llama-3-70b", engine="hf", card=A100, batch=16, seq=8192)
    assert p.kv_bytes_per_token == 320 * KIB  # seed: 320 KB / token
    assert p.kv_bytes_per_token * 8192 == int(2.5 * GIB)  # seed "2.62 GB" = 2,621,440 KiB read as GB
    assert p.kv_cache_bytes == 40 * GIB  # seed "42 GB" (2.62 x 16); exactly 42.9e9 B = 40 GiB
    mha = dataclasses.replace(
        builtin_model("llama-3-70b"), config={**builtin_model("llama-3-70b").config, "num_key_value_heads": 64}
    )
    pm = P.plan(mha, engine="hf", card=A100, batch=16, seq=8192)
    assert pm.kv_cache_bytes == 8 * p.kv_cache_bytes == 320 * GIB  # seed "336 GB"


def test_s003_q4_max_batch_int4_weights_fp8_kv():
    per_tok = 2 * 32 * 8 * 128  # elements: 32 layers, GQA-8, head_dim 128
    a = max_batch_for(80 * GB * 0.9, 14 * GB, per_tok * 2 * 4096)
    b = max_batch_for(80 * GB * 0.9, 3.5 * GB, per_tok * 1 * 4096)
    assert (a, b) == (108, 255)  # seed: 108 and 255, 2.4x
    assert max_batch_for(80 * GB * 0.9, 3.5 * GB, per_tok * 2 * 4096) == 127  # seed "~128" (rounds 127.6 up)
    assert max_batch_for(80 * GB * 0.9, 14 * GB, per_tok * 1 * 4096) == 216
    # the same lever in the planner (Llama-3-8B has this attention shape): int4 + fp8 KV buys >2x the batch
    base = P.plan("llama-3-8b", engine="hf", card=A100, dtype="bf16", seq=4096).cards[0].max_batch
    quant = P.plan("llama-3-8b", engine="hf", card=A100, dtype="int4", kv_dtype="fp8", seq=4096).cards[0].max_batch
    # seed: 2.4x with 14 GB -> 3.5 GB of weights; a real int4 checkpoint of Llama-3-8B is 5.7 GB (bf16
    # embeddings and lm_head, scales + zeros), so the lever is 1.99x here
    assert quant / base > 1.9


def test_s003_q5_decode_intensity_and_compute_bound_batch():
    # set 2 says intensity 2 and B >= 78; its own numbers give 1.4e10 FLOP / 1.4e10 B = 1, and set 1
    # says 1 FLOP/byte with B ~ ridge. We follow the arithmetic: with the seed's A100 (312 TFLOP/s,
    # 2.0 TB/s, ridge 156) decode turns compute-bound at B = 156 for fp16 weights.
    seed_a100 = dataclasses.replace(card_by_name(A100), bandwidth_bytes_s=2.0e12)
    p = P.plan("llama-2-7b", engine="hf", dtype="fp16", card=A100)
    c = P._card_plan(p, seed_a100)
    assert c.ridge_flop_per_byte == pytest.approx(156, rel=1e-9)
    # bytes read per step / 2N: 1 for the seed; 0.98 since the embedding table (2%) is not read
    read = p.weights_bytes - 2 * 131_072_000 + 2 * 4096
    assert c.compute_bound_batch == pytest.approx(156 * read / p.weights_bytes, rel=1e-9)
    assert c.compute_bound_batch == pytest.approx(156, rel=0.025)
    # int4 weights move ~4x fewer bytes per FLOP: compute-bound ~3.7x earlier (lm_head stays 16-bit, + scales)
    p4 = P.plan("llama-2-7b", engine="hf", dtype="int4", card=A100)
    c4 = P._card_plan(p4, seed_a100)
    read4 = p4.weights_bytes - 2 * 131_072_000 + 2 * 4096
    assert c4.compute_bound_batch == pytest.approx(156 * read4 / (2 * p4.params), rel=1e-9)
    assert 156 / c4.compute_bound_batch == pytest.approx(3.7, abs=0.1)


def test_s003_q8_decode_ceilings_70b():
    h = P.plan("llama-3-70b", engine="hf", card="h100-sxm", dtype="bf16").cards[0].decode_tok_s
    h4 = P.plan("llama-3-70b", engine="hf", card="h100-sxm", dtype="int4").cards[0].decode_tok_s
    a = P.plan("llama-3-70b", engine="hf", card=A100, dtype="bf16").cards[0].decode_tok_s
    assert round(h) == 24  # seed (a) 3350 / 140 = 24
    # seed (b) 96 with 35 GB; an int4 checkpoint is 39.8 GB (bf16 embeddings and lm_head, scales + zeros),
    # of which a step reads all but the 1.05 GB embedding table: 3350 / 37.67 = 88.9
    assert h4 == pytest.approx(96, rel=0.08) and round(h4) == 89
    assert a == pytest.approx(
        14, rel=0.05
    )  # seed (c) 2000 / 140 = 14 (2039 / (141.1 - 1.05 GB embedding table) = 14.7)
    assert h / a == pytest.approx(3350 / 2039, rel=1e-9)  # only bandwidth matters at batch 1


def test_s003_q10_14b_quantized_memory():
    cfg = {
        "model_type": "llama",
        "hidden_size": 5120,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "intermediate_size": 17920,
        "vocab_size": 100352,
    }
    a = architecture(cfg)
    assert kv_bytes_per_token(a, "fp16") == 160 * KIB  # seed: 2 x 40 x 8 x 128 x 2 = 160 KB
    # seed: (80 x 0.9 - 7) / 0.655 = 99 concurrent; 160 KiB x 4096 is 0.671e9 B (the seed reads
    # 655,360 KiB as 0.655 GB), so in bytes the same budget holds 96.
    assert max_batch_for(72 * GB, 7 * GB, 0.655 * GB) == 99
    assert max_batch_for(72 * GB, 7 * GB, 160 * KIB * 4096) == 96
    assert max_batch_for(72 * GB, 7 * GB, 80 * KIB * 4096) == 193  # fp8 KV: seed "~198" (2 x 99)
    # (a)-(c): fp16 28 GB, training 16 x 14 = 224 GB, int8 14 GB, int4 7 GB (+ scales: 7.2 GB) for 14e9 params
    n = 14e9
    assert n * DTYPE_BYTES["fp16"] == 28 * GB and n * TRAIN_BYTES_PER_PARAM == 224 * GB
    assert n * DTYPE_BYTES["int8"] == 14 * GB and n * DTYPE_BYTES["int4"] == pytest.approx(7 * GB, rel=0.04)


def test_s003_q6_prefill_vs_decode_step():
    # 7e9 params (seed's round figure), fp16, A100 at 312 TFLOP/s and 2.0 TB/s
    t_prefill = P.prefill_seconds(7e9, 2048, 312e12)
    t_decode = 14e9 / 2.0e12
    assert t_prefill == pytest.approx(0.092, abs=0.001)  # seed: 92 ms at MFU 100%
    assert t_decode == pytest.approx(0.007, abs=1e-9)  # seed: 7 ms per decode step
    assert round(t_prefill / t_decode) == 13  # one 2048-token prefill ~ 13 decode steps


# -- KV sizes a reader can check by hand -------------------------------------------------------
def test_field_notes_llama3_8b_8k_is_1_gib_kv():
    p = P.plan("llama-3-8b", engine="hf", seq=8192, card=A100)
    assert p.kv_bytes_per_token == 128 * KIB and p.kv_cache_bytes == 1 * GIB


def test_field_notes_llama31_70b_32k_is_10_gib_kv_80_if_mha():
    p = P.plan("llama-3.1-70b", engine="hf", seq=32768, card=A100)
    assert p.kv_bytes_per_token == 320 * KIB and p.kv_cache_bytes == 10 * GIB
    src = builtin_model("llama-3.1-70b")
    mha = P.plan(
        dataclasses.replace(src, config={**src.config, "num_key_value_heads": 64}), engine="hf", seq=32768, card=A100
    )
    assert mha.kv_cache_bytes == 80 * GIB
