"""The Mamba state shapes and block sizes of gpuops/planning/vllm_kv.py, on published configs.

The grouping, block and concurrency rules are checked against vLLM's own functions in
tests/plan/test_vllm_golden.py (tests/data/vllm_golden.json); here what the oracle reads through
the model classes: ``MambaStateShapeCalculator``'s conv and temporal state per layer, and the
attention block vLLM raises so one page holds a state (``_align_hybrid_block_size``).
"""

from __future__ import annotations

import pytest

from gpuops.planning.vllm_kv import KVLayout, MambaShape, attention_block_size, kv_layout

pytestmark = pytest.mark.unit

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


def test_layout_of_nothing_is_empty():
    lay = kv_layout([])
    assert isinstance(lay, KVLayout) and lay.num_blocks(10**9) == 0 and lay.max_concurrency(10**9, 10, 10) == 0.0
