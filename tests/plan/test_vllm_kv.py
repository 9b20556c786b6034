"""vLLM's own KV cache unit tests, reproduced on gpuops' copy of the rules (gpuops/planning/vllm_kv.py).

The block counts and concurrencies below are the ones vLLM asserts in
tests/v1/core/test_kv_cache_utils.py (vllm-project/vllm, v0.11): ``test_get_kv_cache_config``
(page = 16 tokens x 2 KV heads x head 64 x fp32 x K and V = 16,384 B) and
``test_get_max_concurrency_for_kv_cache_config`` (page = 16 x 32 heads x 128 x fp16 x 2 =
262,144 B, max_model_len 16,384, max_num_batched_tokens 1,024, sliding window 1,024). The Mamba
block sizes are vLLM's ``HybridAttentionMambaModelConfig`` arithmetic on the published configs.
"""

from __future__ import annotations

import pytest

from gpuops.planning.vllm_kv import (
    CHUNKED,
    FULL,
    MAMBA,
    SLIDING,
    KVLayout,
    LayerSpec,
    MambaShape,
    attention_block_size,
    kv_layout,
)

pytestmark = pytest.mark.unit

PAGE = 16 * 2 * 64 * 4 * 2  # test_get_kv_cache_config's mem_per_block_per_layer


def full(page: int = PAGE) -> LayerSpec:
    return LayerSpec(FULL, page)


def sw(page: int = PAGE, window: int = 1) -> LayerSpec:
    return LayerSpec(SLIDING, page, window=window)


# -- test_get_kv_cache_config ---------------------------------------------------------------------
def test_all_full_one_group_32_blocks():
    lay = kv_layout([full(), full()])
    assert len(lay.groups) == 1 and lay.group_size == 2 and lay.num_blocks(PAGE * 2 * 32) == 32


def test_all_sliding_one_group_32_blocks():
    lay = kv_layout([sw(), sw()])
    assert len(lay.groups) == 1 and lay.num_blocks(PAGE * 2 * 32) == 32


def test_full_and_sliding_with_the_hybrid_manager_off_is_one_full_group():
    lay = kv_layout([full(), sw()], hybrid_allocator=False)
    assert (
        [g.spec.kind for g in lay.groups] == [FULL]
        and lay.num_blocks(PAGE * 2 * 32) == 32
        and lay.unified == (SLIDING,)
    )


def test_full_and_sliding_hybrid_64_blocks_two_groups_of_one():
    lay = kv_layout([full(), sw()])
    assert lay.group_size == 1 and [g.spec.kind for g in lay.groups] == [FULL, SLIDING]
    assert lay.num_blocks(PAGE * 2 * 32) == 64


def test_two_full_four_sliding_three_groups_of_two():
    lay = kv_layout([full(), full(), sw(), sw(), sw(), sw()])
    assert lay.group_size == 2 and [(g.spec.kind, g.layers) for g in lay.groups] == [
        (FULL, 2),
        (SLIDING, 2),
        (SLIDING, 2),
    ]
    assert lay.num_blocks(PAGE * 2 * 32) == 32 and lay.padding_layers == 0


def test_three_full_seven_sliding_padded_to_nine():
    lay = kv_layout([full()] * 3 + [sw()] * 7)
    assert lay.group_size == 3 and len(lay.groups) == 4 and lay.padding_layers == 2
    assert lay.num_blocks(PAGE * 3 * 32) == 32
    # the start-up check counts the 10 layers, the allocation the 12 slots
    assert (
        lay.layer_bytes(16, 16) == 3 * PAGE + 7 * 2 * PAGE and lay.bytes_per_request(16, 16) == 3 * PAGE + 9 * 2 * PAGE
    )


def test_different_page_sizes_are_refused():
    with pytest.raises(ValueError, match="different page sizes"):
        kv_layout([full(), full(PAGE * 2)])


# -- test_get_max_concurrency_for_kv_cache_config -------------------------------------------------
P2 = 16 * 32 * 128 * 2 * 2


def test_max_concurrency_full_1_5_sliding_3_hybrid_3():
    f, s = LayerSpec(FULL, P2), LayerSpec(SLIDING, P2, window=1024)
    only_full = kv_layout([f] * 32)
    assert only_full.max_concurrency(int(1024 * 1.5) * P2 * 32, 16384, 1024) == 1.5
    only_sw = kv_layout([s] * 32)
    assert only_sw.blocks_per_request(16384, 1024) == 129  # ceil(min(1023 + 1024, 16384) / 16) + 1
    assert only_sw.max_concurrency(129 * 3 * P2 * 32, 16384, 1024) == 3
    hybrid = kv_layout([f] * 32 + [s] * 32)
    assert hybrid.group_size == 32 and hybrid.max_concurrency((1024 + 129) * 3 * P2 * 32, 16384, 1024) == 3


def test_chunked_local_attention_pages_and_the_0_11_default():
    c = LayerSpec(CHUNKED, PAGE, window=8192)
    assert c.max_memory_bytes(32768, 8192) == (16384 // 16) * PAGE  # min(8192 + 8192, 32768) tokens, no +1
    on = kv_layout([c, c, c, full()])  # Llama-4: 3 chunked layers to 1 global
    assert on.group_size == 1 and len(on.groups) == 4 and on.blocks_per_request(32768, 8192) == 3 * 1024 + 2048
    off = kv_layout([c, c, c, full()], hybrid_allocator=False)  # 0.11's default for attention_chunk_size
    assert off.unified == (CHUNKED,) and off.blocks_per_request(32768, 8192) == 2048


def test_0_12_groups_by_the_largest_count_when_counts_are_close():
    specs = [sw()] * 12 + [full()] * 13  # gpt-oss-20b with an EAGLE head, the case in the 0.12 source
    assert kv_layout(specs).group_size == 12 and kv_layout(specs).padding_layers == 11
    assert kv_layout(specs, version="0.12").group_size == 13 and kv_layout(specs, version="0.12").padding_layers == 1
    with pytest.raises(ValueError, match="0.13"):
        kv_layout(specs, version="0.13")


# -- Mamba and linear attention -------------------------------------------------------------------
QWEN3_NEXT = MambaShape("gdn", conv_kernel=4, k_heads=16, v_heads=32, k_dim=128, v_dim=128)
NEMOTRON_H = MambaShape("mamba2", conv_kernel=4, inner=128 * 64, n_groups=8, heads=128, head_dim=64, d_state=128)
JAMBA = MambaShape("mamba1", conv_kernel=4, inner=2 * 4096, d_state=16)
FALCON_H1_7B = MambaShape("mamba2", conv_kernel=4, inner=3072, n_groups=1, heads=24, head_dim=128, d_state=256)


@pytest.mark.parametrize(
    "shape,tp,conv,temporal",
    [
        (QWEN3_NEXT, 1, 3 * 8192, 32 * 128 * 128),
        (QWEN3_NEXT, 4, 3 * 2048, 8 * 128 * 128),
        (NEMOTRON_H, 1, 3 * (8192 + 2 * 8 * 128), 128 * 64 * 128),
        (JAMBA, 1, 3 * 8192, 8192 * 16),
        (FALCON_H1_7B, 1, 3 * (3072 + 2 * 256), 24 * 128 * 256),
        (FALCON_H1_7B, 2, 3 * (3072 + 2 * 2 * 256) // 2, 12 * 128 * 256),  # one group replicated to 2 for TP 2
    ],
)
def test_mamba_state_shapes(shape, tp, conv, temporal):
    assert shape.state_elems(tp) == (conv, temporal)


@pytest.mark.parametrize(
    "shape,attn_bytes_per_token,block",
    [
        (QWEN3_NEXT, 2 * 2 * 256 * 2, 544),  # 1,097,728 B of state: "Setting attention block size to 544 tokens"
        (NEMOTRON_H, 2 * 8 * 128 * 2, 528),
        (JAMBA, 2 * 8 * 128 * 2, 80),
        (FALCON_H1_7B, 2 * 2 * 128 * 2, 1568),
    ],
)
def test_attention_block_size_holds_one_mamba_state(shape, attn_bytes_per_token, block):
    state = shape.state_bytes(2)
    assert attention_block_size(attn_bytes_per_token, state) == block
    assert (block - 16) * attn_bytes_per_token < state <= block * attn_bytes_per_token


def test_qwen3_next_layout_one_attention_group_three_state_groups():
    page = 544 * 2048
    specs = ([LayerSpec(MAMBA, page, 262144)] * 3 + [LayerSpec(FULL, page, 544)]) * 12
    lay = kv_layout(specs)
    assert lay.group_size == 12 and [g.spec.kind for g in lay.groups] == [MAMBA, MAMBA, MAMBA, FULL]
    assert lay.block_size == 544 and lay.blocks_per_request(4096, 8192) == 8 + 3
    assert lay.bytes_per_request(4096, 8192) == 11 * 12 * page


def test_layout_of_nothing_is_empty():
    lay = kv_layout([])
    assert isinstance(lay, KVLayout) and lay.num_blocks(10**9) == 0 and lay.max_concurrency(10**9, 10, 10) == 0.0
