"""`plan` for MXFP4 (gpt-oss), hybrid linear attention (Gated DeltaNet, Mamba), vLLM's
hybrid KV cache groups, chunked local attention, shared experts without ``n_shared_experts``, vision
towers other than SigLIP, the vendor rule, alias variants and the unverified cell.

Every expected figure is derived here by hand from the published config (tests/plan/data, sources
in SOURCES.md) and vLLM 0.11's rules (the file and function named beside each), never copied from
gpuops' output. vLLM's own unit-test numbers for the grouping are in test_vllm_kv.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuops.errors import BadInput
from gpuops.planning import models, sizing as P
from gpuops.planning.architecture import architecture
from gpuops.planning.memory import kv_bytes_per_token, mamba_state_bytes, vllm_activation_bytes
from gpuops.planning.models import ModelSource, builtin_model

GB, GIB, KIB, MIB = 10**9, 2**30, 2**10, 2**20
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


# -- MXFP4 -----------------------------------------------------------------------------------------
def test_gpt_oss_20b_counts_to_its_published_params_and_its_index_bytes():
    a = architecture(cfg("gpt-oss-20b"))
    assert a.params == 20_914_757_184 and a.experts == 32 and a.experts_per_tok == 4
    experts = 24 * 32 * 3 * 2880 * 2880  # gate_up (2 x 2880) and down, 2880 wide, 24 layers
    assert a.breakdown["experts"] == experts
    p = P.plan(src("gpt-oss-20b"), card="h100-sxm")
    # mxfp4.py: uint8 blocks of two e2m1 weights + one uint8 E8M0 scale per 32 on the experts; biases,
    # attention (with sinks), router, embeddings and lm_head in bf16: the index's total_size exactly
    assert p.weights_bytes == experts * (0.5 + 1 / 32) + (a.params - experts) * 2 == 13_761_264_768
    assert p.dtype == "mxfp4" and p.quant.parts == ("experts",) and not p.unverified and "mxfp4" not in str(p.warnings)
    assert p.weights_bytes / (2 * a.params) == pytest.approx(1 / 3.04, rel=0.01)  # 3.0x lighter than the bf16 sizing


def test_gpt_oss_120b_fits_one_80gb_card():
    p, c = one(
        src("gpt-oss-120b", weights_total_size=65_248_815_744, weights_size_source="safetensors index total_size"),
        "h100-sxm",
    )
    assert p.params == 116_829_156_672 and p.weights_bytes == 65_248_815_744  # 3.6x under 233.7 GB of bf16
    assert c.fits and c.max_concurrency >= 1


def test_builtin_gpt_oss_uses_the_index_total_size():
    p = P.plan("openai/gpt-oss-120b", card="h200")
    assert p.weights_bytes == 65_248_815_744 and "total_size" in p.weights_source


def test_mxfp4_marlin_padding_and_the_capability_floor():
    p = P.plan(src("gpt-oss-20b"), card="t4")
    assert not p.cards[0].fits and "compute capability >= 8.0" in p.cards[0].note
    _, h = one(src("gpt-oss-20b"), "h100-sxm")
    _, plain = one(src("gpt-oss-20b"), "h100-sxm", gpu_count=1, dtype=None)
    # pip's vLLM 0.11 has neither FlashInfer nor triton_kernels: Marlin pads 2880 -> 2944 (128) x 3072 (256)
    pad = 24 * 32 * (3 * (2944 * 3072 - 2880 * 2880) * (0.5 + 1 / 32) + 2 * (2 * 64 + 192))
    assert h.fixed_bytes == plain.fixed_bytes and "2944 x 3072" in h.note
    assert h.fixed_bytes - h.overhead_bytes - h.activation_bytes - h.cuda_graph_bytes == 13_761_264_768 + int(pad)
    with pytest.raises(BadInput, match="contradicts the checkpoint"):
        P.plan(src("gpt-oss-20b"), dtype="bf16")
    with pytest.raises(BadInput, match="needs an MXFP4 checkpoint"):
        P.plan("llama-3-8b", dtype="mxfp4")


# -- hybrid linear attention -----------------------------------------------------------------------
def test_qwen3_next_caches_only_its_attention_layers():
    a = architecture(cfg("qwen3-next-80b-a3b"))
    assert a.params == 79_674_391_296 and a.active_params == 3_874_929_408  # 10 routed + 1 shared expert
    assert len(a.layer_kv_elems) == 12 and a.mamba_layers == 36 and a.mamba.kind == "gdn"
    assert kv_bytes_per_token(a, "bf16") == 12 * 2 * 2 * 256 * 2  # 24 KiB, not 48 layers' 96 KiB
    # state: conv 3 x (2 x 16 x 128 + 32 x 128) + temporal 32 x 128 x 128, bf16
    assert mamba_state_bytes(a, "bf16") == 36 * (3 * 8192 + 32 * 128 * 128) * 2
    p, c = one(src("qwen3-next-80b-a3b"), "h200", gpu_count=2, seq=32768)
    # TP 2: 1 KV head per GPU (1,024 B/token), state 548,864 B -> block 16 x ceil(548864 / 16384) = 544 tokens
    lay = p.kv_layout
    assert lay.block_size == 544 and lay.group_size == 12 and len(lay.groups) == 4
    page = 544 * 1024
    # 61 attention blocks + 2 pages in each of 3 state groups (mamba_cache_mode "align", vLLM 0.33)
    assert c.per_request_bytes == (-(-32768 // 544) + 3 * 2) * page * 12
    old = 48 * 2 * 1 * 256 * 2 * 32768  # every layer counted as attention (gpuops at 86593ec)
    assert old / c.per_request_bytes == pytest.approx(3.60, abs=0.01)  # "KV 4x too big"
    assert any("raises the attention block to 544 tokens" in w for w in p.warnings)


def test_jamba_mamba1_state_and_block():
    a = architecture(cfg("jamba-v0.1"))
    assert len(a.layer_kv_elems) == 4 and a.mamba_layers == 28 and a.experts == 16
    assert a.breakdown["experts"] == 16 * 16 * 3 * 4096 * 14336  # MoE in every 2nd layer (expert_layer_period 2)
    p, c = one(src("jamba-v0.1"), "h200", gpu_count=2, seq=32768)
    # TP 2: attention 2 x 4 x 128 x 2 = 2,048 B/token; state (3 x 4096 + 4096 x 16) x 2 = 155,648 B -> 80 tokens
    assert p.kv_layout.block_size == 80 and p.kv_layout.group_size == 4 and len(p.kv_layout.groups) == 8
    assert c.per_request_bytes == (-(-32768 // 80) + 7 * 2) * 80 * 2048 * 4  # 2 pages per state group (align)


def test_nemotron_h_pattern_and_mamba2_state():
    a = architecture(cfg("nemotron-h-8b"))
    assert (len(a.layer_kv_elems), a.mamba_layers) == (4, 24)
    assert a.breakdown["mlp"] == 24 * 2 * 4096 * 21504  # relu2: up and down, no gate
    p, c = one(src("nemotron-h-8b"), "h100-sxm", seq=8192)
    # state (3 x (8192 + 2 x 8 x 128) + 128 x 64 x 128) x 2 = 2,158,592 B; 4,096 B/token -> 528 tokens
    assert p.kv_layout.block_size == 528
    assert c.per_request_bytes == (-(-8192 // 528) + 6 * 2) * 528 * 4096 * 4  # 2 pages per state group (align)


def test_falcon_h1_is_counted_but_unchecked():
    c = {
        "model_type": "falcon_h1",
        "hidden_size": 3072,
        "num_hidden_layers": 44,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "intermediate_size": 12288,
        "vocab_size": 130049,
        "mamba_d_ssm": 3072,
        "mamba_d_state": 256,
        "mamba_d_head": 128,
        "mamba_n_heads": 24,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
    }
    a = architecture(c)
    assert (len(a.layer_kv_elems), a.mamba_layers) == (44, 44) and not a.known  # attention and Mamba-2 in every layer
    p = P.plan(ModelSource(name="f", config=c, source="t"), card="h100-sxm")
    assert p.unverified and p.kv_layout.block_size == 1568 and len(p.kv_layout.groups) == 2


def test_hf_engine_adds_the_state_not_per_token_kv():
    p = P.plan(src("nemotron-h-8b"), engine="hf", card="h100-sxm", seq=4096, batch=2)
    assert p.kv_cache_bytes == 2 * (4 * 2 * 8 * 128 * 2 * 4096 + 24 * (3 * 10240 + 128 * 64 * 128) * 2)


# -- vLLM's hybrid KV cache groups ---------------------------------------------------------------
@pytest.mark.parametrize("seq,more", [(4096, 0.129), (32768, 0.113)])
def test_gemma3_27b_groups_of_ten_pad_the_sliding_layers(seq, more):
    p, c = one("gemma-3-27b", "h100-sxm", seq=seq)
    assert p.kv_layout.group_size == 10 and len(p.kv_layout.groups) == 7 and p.kv_layout.padding_layers == 8
    page = 16 * 2 * 16 * 128 * 2
    full = -(-seq // 16)
    local = -(-min(1023 + 2 * 8192, seq) // 16) + 1  # two batches of 8192 in flight (vLLM 0.33)
    assert c.per_request_bytes == 10 * (full + 6 * local) * page
    per_layer = (10 * full + 52 * local) * page  # what the layers hold (gpuops at 86593ec)
    assert c.per_request_bytes / per_layer - 1 == pytest.approx(more, abs=0.001)
    assert any(f"{more:.1%}" in w for w in p.warnings)


# -- chunked local attention, shared expert ------------------------------------------------------
def test_llama4_scout_shared_expert_vision_and_chunked_layers():
    a = architecture(cfg("llama-4-scout-17b-16e"))
    assert a.params == 108_641_793_536  # the repository's safetensors count
    assert a.breakdown["mlp"] == 48 * 3 * 5120 * 8192  # the shared expert: 6.04B that n_shared_experts never named
    assert a.active_params == a.params - 48 * 15 * 3 * 5120 * 8192  # one routed expert of 16
    assert a.kinds.count("chunked") == 36 and a.attention_chunk == 8192
    p, c = one(src("llama-4-scout-17b-16e"), "h200", gpu_count=2, seq=32768)
    page = 16 * 2 * 4 * 128 * 2  # TP 2: 4 KV heads per GPU
    # vLLM 0.33: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1, the chunked layers keep chunks
    chunk = -(-min(8192 + 2 * 8192, 32768) // 16)  # ChunkedLocalAttentionSpec: chunk + in-flight tokens, no +1
    assert p.kv_layout.unified == () and c.per_request_bytes == 12 * (2048 + 3 * chunk) * page
    off = P.plan(src("llama-4-scout-17b-16e"), card="h200", gpu_count=2, seq=32768, chunked_hybrid=False)
    assert off.kv_layout.unified == ("chunked",) and off.cards[0].per_request_bytes == 48 * 2048 * page
    assert any("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0" in w and "19% less" in w for w in off.warnings)
    assert off.cards[0].engine_command.startswith("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 vllm serve ")
    assert c.engine_command.startswith("vllm serve ")


# -- vision towers --------------------------------------------------------------------------------
def test_pixtral_and_qwen25_vl_towers_are_counted():
    px = architecture(cfg("pixtral-12b"))
    tower = 3 * 16 * 16 * 1024 + 1024 + 24 * (4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024)
    assert px.breakdown["vision"] == tower + (1024 * 5120 + 5120) + (5120 * 5120 + 5120) and px.known
    assert px.heads == 32 and not px.tied  # MistralConfig's defaults for what text_config leaves out
    q = architecture(cfg("qwen2.5-vl-7b"))
    block = (1280 * 3840 + 3840) + (1280 * 1280 + 1280) + 2 * (1280 * 3420 + 3420) + (3420 * 1280 + 1280) + 2 * 1280
    merger = 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584)
    assert q.breakdown["vision"] == 3 * 2 * 14 * 14 * 1280 + 32 * block + merger
    assert q.params == 8_292_166_656 and q.known  # the text model's q/k/v biases (qwen2) included
    assert not P.plan(src("qwen2.5-vl-7b"), card="h100-sxm").unverified


def test_the_profile_run_keeps_an_encoder_cache():
    # profile_run fills the encoder cache (budget max(max_num_batched_tokens, largest image)) before the text pass
    _, g = one("gemma-3-27b", "h100-sxm")
    text_only = vllm_activation_bytes(architecture({**cfg("gemma-3-27b-it"), "vision_config": None}), 8192, 1024, 1)
    assert g.activation_bytes - text_only == 8192 * 5376 * 2  # 256 tokens an image < 8192
    _, q = one(src("qwen2.5-vl-7b"), "h100-sxm")
    assert architecture(cfg("qwen2.5-vl-7b")).vision_tokens == 16384  # max_pixels 12,845,056 / 28^2 > 8192
    assert q.activation_bytes == vllm_activation_bytes(architecture(cfg("qwen2.5-vl-7b")), 8192, 1024, 1)
    assert (
        q.activation_bytes
        - vllm_activation_bytes(architecture({**cfg("qwen2.5-vl-7b"), "vision_config": None}), 8192, 1024, 1)
        == 16384 * 3584 * 2
    )


def test_an_unknown_tower_is_named_and_unverified():
    c = {**cfg("qwen2.5-vl-7b"), "model_type": "qwen2_vl_new"}
    a = architecture(c)
    assert not a.known and "vision" not in a.breakdown and any("not counted" in n for n in a.notes)


# -- alias variants, the unverified cell ----------------------------------------------------------
def test_an_alias_spanning_variants_plans_each_and_says_which():
    p = P.plan("llama-3-8b", card="h100")
    assert [c.card.name for c in p.cards] == ["h100-pcie", "h100-sxm"]
    assert any("h100 means 2 cards: h100-pcie, h100-sxm" in w for w in p.warnings)
    assert not any("means" in w for w in P.plan("llama-3-8b", card="h100-sxm").warnings)


def test_an_unverified_row_says_so_in_its_cells():
    from rich.console import Console

    from gpuops.render.sizing import render

    odd = {**builtin_model("llama-3-8b").config, "model_type": "brandnew"}
    p = P.plan(ModelSource(name="x", config=odd, source="t"), card="h100-sxm")
    con = Console(width=250, record=True)
    render(p, console=con)
    row = next(line for line in con.export_text().splitlines() if line.startswith("│ H100 SXM"))
    assert "guess: yes (unverified)" in row and "~" in row and " yes " not in row.replace("guess: yes", "")
    d = p.as_json()
    assert d["unverified"] and all(c["unverified"] for c in d["cards"])


def test_vendor_for_follows_what_was_asked():
    from gpuops.catalog import cards_for, vendor_for

    assert vendor_for() == "nvidia" and vendor_for(image="runpod/pytorch:2.4.0-py3.11-cuda12.4.1") == "nvidia"
    assert (
        vendor_for(image="rocm/vllm:rocm6.4") == "amd"
        and vendor_for(card="mi300x") == "amd"
        and vendor_for(card="h100") == "nvidia"
    )
    assert vendor_for("AMD", image="") == "amd" and vendor_for("any") == "any"
    assert [c.name for c in cards_for("amd")] == ["mi300x"] and "mi300x" not in {c.name for c in cards_for("nvidia")}
    with pytest.raises(BadInput, match="use nvidia, amd or any"):
        vendor_for("intel")
