"""The engines' memory rules.

vLLM's start-up arithmetic and defaults (the release ``VLLM_RELEASE``), the hf and train engines' constants, and the bytes of
weights, KV cache and activations (units: bytes, GB = 10^9, GiB = 2^30)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuops.catalog import Card
from gpuops.planning.architecture import Architecture
from gpuops.planning.models import ModelSource
from gpuops.planning.quant import DTYPE_BYTES, KV_DTYPE_BYTES, Quant, default_kv_dtype
from gpuops.planning.vllm_kv import (
    CHUNKED,
    DEFAULT_BLOCK_SIZE,
    FULL,
    MAMBA,
    MLA,
    SLIDING,
    VLLM_RELEASE,
    KVLayout,
    LayerSpec,
    attention_block_size,
    kv_layout,
)

GB = 10**9
GIB = 2**30


# hf engine: CUDA context (~0.3-0.5 GB), the caching allocator's slack, cuBLAS workspaces: 1-2 GB
# together; 1.5 GB, as in docs/worked-numbers.md.
FRAMEWORK_OVERHEAD_BYTES = int(1.5 * GB)
# vLLM CacheConfig.gpu_memory_utilization default (vllm/config/cache.py, 0.11); also our hf headroom.
DEFAULT_HEADROOM = 0.90
# Mixed-precision Adam: bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m 4 + v 4 (ZeRO,
# Rajbhandari et al. 2020, section 3.1, https://arxiv.org/abs/1910.02054).
TRAIN_BYTES_PER_PARAM = 16
# Training activations kept for backward, bytes per layer per token per hidden unit: 34 (Korthikanti
# et al. 2022, "Reducing Activation Recomputation", arXiv 2205.05198: 34sbh with 16-bit activations,
# FlashAttention removing the 5as^2b term, no recomputation). Plus the fp32 logits (4 x vocab per token).
TRAIN_ACT_BYTES_PER_TOKEN_HIDDEN_LAYER = 34

# -- vLLM, the version whose defaults and start-up arithmetic we follow -------------------------------
VLLM_VERSION = VLLM_RELEASE
# CacheConfig.DEFAULT_BLOCK_SIZE: 16 tokens (vllm/config/cache.py); FlashAttention / FlashInfer keep it.
VLLM_BLOCK_SIZE = DEFAULT_BLOCK_SIZE
# fp8_ds_mla: a sparse-MLA latent with an fp8 cache, 656 B per token (512 fp8 NoPE + 4 fp32 scales +
# 64 bf16 RoPE; vllm/v1/attention/backends/mla/flashmla_sparse.py).
FP8_DS_MLA_BYTES_PER_TOKEN = 656
# DeepseekV32IndexerCache: index_head_dim fp8 values + one fp32 scale per 128 (vllm/model_executor/models/deepseek_v2.py).
INDEXER_QUANT_BLOCK = 128
# memory_profiling's non_torch_increase on one GPU (cuBLAS workspace, allocator fragments): 0.25 GiB in
# published "Memory profiling takes ..." logs of 8B models on one H100. With TP >= 2, NCCL buffers and
# the custom all-reduce add ~1.85 GiB per GPU (published TP=2/4 logs: non_torch_memory ~2.1 GiB).
VLLM_NON_TORCH_BYTES = int(0.25 * GIB)
VLLM_NCCL_BYTES = int(1.85 * GIB)
# "Graph capturing finished in N secs, took 0.5-0.9 GiB" for 7-70B models with the default capture sizes.
VLLM_CUDA_GRAPH_BYTES = int(0.8 * GIB)
# Sampler in the profiling run (vllm/v1/sample/sampler.py): fp32 logits + fp32 probabilities for
# max_num_seqs rows of the vocabulary.
VLLM_SAMPLER_BYTES_PER_LOGIT = 8


def vllm_batch_defaults(card: Card) -> tuple[int, int]:
    """vLLM's ``(max_num_batched_tokens, max_num_seqs)`` defaults for ``vllm serve`` on ``card``.

    16384 / 1024 on GPUs with >= 160 GiB (B200), 8192 / 1024 on GPUs with >= 70 GiB that are not an
    A100, else 2048 / 256 (vLLM 0.33 vllm/engine/arg_utils.py ``EngineArgs.get_batch_defaults``,
    UsageContext.OPENAI_API_SERVER; the A100 stays on the small defaults since
    https://github.com/vllm-project/vllm/pull/17885)."""
    if card.engine_visible_bytes >= 160 * GIB:
        return 16384, 1024
    if card.engine_visible_bytes >= 70 * GIB and card.family != "a100":
        return 8192, 1024
    return 2048, 256


# -- memory ---------------------------------------------------------------------------------------
def kv_bytes_per_token(arch: Architecture, kv_dtype: str) -> int:
    """KV cache bytes one token adds with every layer holding it (no window).

    Sum over the layers that hold a cache of 2 x kv_heads x head_dim x bytes (MLA: (kv_lora_rank +
    qk_rope_head_dim) x bytes, fp8_ds_mla 656 B, + the sparse-MLA indexer's bytes)."""
    if arch.mla:
        index = arch.index_head_dim + arch.index_head_dim // INDEXER_QUANT_BLOCK * 4 if arch.sparse_mla else 0
        return (mla_bytes_per_token(arch, kv_dtype) + index) * len(arch.layer_kv_elems)
    return int(sum(arch.layer_kv_elems) * KV_DTYPE_BYTES[kv_dtype])


def mamba_state_bytes(arch: Architecture, dtype: str, gpu_count: int = 1) -> int:
    """Bytes of the Mamba / linear-attention layers' state for one request on one GPU; 0 without such layers.

    Conv + temporal state in the compute dtype (vLLM's ``mamba_cache_dtype`` "auto"), on one of
    ``gpu_count`` GPUs. It does not grow with the sequence."""
    if not arch.mamba or not arch.mamba_layers:
        return 0
    return arch.mamba_layers * arch.mamba.state_bytes(DTYPE_BYTES[default_kv_dtype(dtype)], gpu_count)


def kv_cache_bytes(arch: Architecture, kv_dtype: str, batch: int, seq: int, dtype: str = "bf16") -> int:
    """Contiguous KV cache bytes (engine hf) for ``batch`` sequences of ``seq`` tokens.

    A windowed layer holds min(seq, window); Mamba / linear-attention layers hold their fixed state."""
    per_seq = sum(e * (seq if w is None else min(seq, w)) for e, w in zip(arch.layer_kv_elems, arch.layer_window))
    return int((per_seq * KV_DTYPE_BYTES[kv_dtype] + mamba_state_bytes(arch, dtype)) * batch)


def mla_block_size(kv_dtype: str, card: Card | None, sparse: bool = False) -> tuple[int, str]:
    """(tokens per MLA block, the backend that sets it) vLLM picks on ``card``.

    The first backend of ``_get_backend_priorities`` (vllm/platforms/cuda.py) that takes the case,
    its ``get_supported_kernel_block_sizes`` and ``get_preferred_block_size`` (16 when it takes 16,
    else its smallest): sparse MLA FLASHMLA_SPARSE [64]; Hopper FLASH_ATTN_MLA MultipleOf(16) -> 16
    with a 16-bit cache, FLASHMLA [64] with fp8 (FLASH_ATTN_MLA takes auto/fp16/bf16 only);
    Blackwell FLASHINFER_MLA [32, 64] -> 32; others TRITON_MLA MultipleOf(16) -> 16. No card: Hopper."""
    if sparse:
        return 64, "FLASHMLA_SPARSE"
    cc = int(card.compute_capability) if card is not None and card.compute_capability else 9
    if cc == 9:
        return (16, "FLASH_ATTN_MLA") if kv_dtype not in ("fp8", "fp8_e4m3", "fp8_e5m2") else (64, "FLASHMLA")
    if cc == 10:
        return 32, "FLASHINFER_MLA"
    return 16, "TRITON_MLA"


def mla_bytes_per_token(arch: Architecture, kv_dtype: str) -> int:
    """Cache bytes per token of one MLA layer: (kv_lora_rank + qk_rope_head_dim) x bytes, or fp8_ds_mla's 656 B.

    The sparse-MLA latent with an fp8 cache is stored in fp8_ds_mla; a dense MLA latent in the KV dtype."""
    if arch.sparse_mla and KV_DTYPE_BYTES[kv_dtype] == 1:
        return FP8_DS_MLA_BYTES_PER_TOKEN
    return int(arch.layer_kv_elems[0] * KV_DTYPE_BYTES[kv_dtype]) if arch.layer_kv_elems else 0


def vllm_kv_layout(
    arch: Architecture,
    kv_dtype: str,
    dtype: str = "bf16",
    gpu_count: int = 1,
    chunked_hybrid: bool = True,
    card: Card | None = None,
) -> KVLayout:
    """vLLM's KV cache layout on one of ``gpu_count`` tensor-parallel GPUs of ``card``.

    One spec per attention layer that holds a cache (full, sliding window, chunked, MLA; layers that
    read another layer's cache, ``num_kv_shared_layers``, hold none), a sparse-MLA indexer cache
    beside each MLA layer, and one per Mamba / Gated DeltaNet layer; blocks of 16 tokens (MLA: the
    backend's, ``mla_block_size``), raised with Mamba layers until one page holds a state (the state
    page is padded to it); grouped by ``kv_layout``. KV heads split by TP down to one per GPU (MLA's
    latent is on every GPU). ``chunked_hybrid``: ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``
    (1 by default): off, chunked layers are cached as full attention."""
    kvb = KV_DTYPE_BYTES[kv_dtype]
    block = VLLM_BLOCK_SIZE
    if arch.mla:
        per_tok = mla_bytes_per_token(arch, kv_dtype)
        block = mla_block_size(kv_dtype, card, arch.sparse_mla)[0]
    else:
        per_tok = int(2 * max(1, arch.kv_heads // gpu_count) * arch.head_dim * kvb)
    state = (
        arch.mamba.state_bytes(DTYPE_BYTES[default_kv_dtype(dtype)], gpu_count)
        if arch.mamba and arch.mamba_layers
        else 0
    )
    if state and per_tok:
        block = attention_block_size(per_tok, state, block, arch.mla)
    page = per_tok * block
    index_page = 0
    if arch.sparse_mla:
        index_page = (arch.index_head_dim + arch.index_head_dim // INDEXER_QUANT_BLOCK * 4) * block
    specs: list[LayerSpec] = []
    for kind, w in zip(arch.kinds, arch.layer_window):
        if arch.mla:
            specs.append(LayerSpec(MLA, page, block))
            if index_page:
                specs.append(LayerSpec(MLA, index_page, block, role="indexer"))
        elif kind == SLIDING:
            specs.append(LayerSpec(SLIDING, page, block, int(w or 0)))
        elif kind == CHUNKED:
            specs.append(LayerSpec(CHUNKED, page, block, int(arch.attention_chunk or 0)))
        else:
            specs.append(LayerSpec(FULL, page, block))
    specs += [LayerSpec(MAMBA, page or state, block)] * (arch.mamba_layers if state else 0)
    hybrid = not (CHUNKED in arch.kinds and not chunked_hybrid)
    return kv_layout(specs, hybrid_allocator=hybrid)


def request_kv_bytes(
    arch: Architecture, kv_dtype: str, seq: int, max_num_batched_tokens: int, dtype: str = "bf16", gpu_count: int = 1
) -> int:
    """KV bytes vLLM reserves for one request of ``seq`` tokens on one of ``gpu_count`` GPUs (1: the whole model).

    The blocks of every KV cache group, padding layers included (``vllm_kv_layout``; a
    full-attention layer ceil(seq / block), a sliding-window layer ceil(min(window - 1 + 2 x
    max_num_batched_tokens, seq) / block) + 1, a chunked one ceil(min(chunk + 2 x
    max_num_batched_tokens, seq) / block), a Mamba layer 2 pages; vllm/v1/kv_cache_interface.py
    ``max_memory_usage_bytes``)."""
    return vllm_kv_layout(arch, kv_dtype, dtype, gpu_count).bytes_per_request(seq, max_num_batched_tokens)


def activation_bytes(arch: Architecture, dtype: str, batch: int, seq: int, mode: str) -> int:
    """Activation bytes at the peak, engines hf and train (vLLM: ``vllm_activation_bytes``).

    infer: the widest intermediate vector (FFN width, or experts-per-token x expert width for MoE)
    for every token of the batch in one pass (a whole-batch prefill, no chunking: an upper bound;
    ~1.4 GB for Llama-2-7B at 32 x 2048, docs/worked-numbers.md), in the compute dtype (fp32 when the weights
    are fp32, else 16-bit), one layer at a time since a layer's temporaries are freed after it.
    train: 34 x hidden x layers bytes per token kept for backward plus fp32 logits (4 x vocab bytes
    per token) (Korthikanti et al. 2022, FlashAttention, no recomputation).
    """
    tokens = batch * seq
    if mode == "train":
        return int(tokens * (TRAIN_ACT_BYTES_PER_TOKEN_HIDDEN_LAYER * arch.hidden * arch.layers + 4 * arch.vocab))
    width_bytes = 4 if dtype == "fp32" else 2
    return int(tokens * arch.act_width * width_bytes)


def vllm_activation_bytes(
    arch: Architecture, max_num_batched_tokens: int, max_num_seqs: int, tp: int, dtype: str = "bf16"
) -> int:
    """Per-GPU activation peak of vLLM's profiling run (``gpu_model_runner.profile_run``).

    A forward pass of ``max_num_batched_tokens`` tokens (per token: gate/up and the activated MLP
    width, split by tensor parallelism, + 4 hidden-sized vectors, in 16 bits) plus the sampler on
    ``max_num_seqs`` rows of logits (fp32 logits + probabilities, vocabulary gathered on every GPU).
    Calibrated on published logs: Llama-3.1-8B on H100 (8192 / 1024) -> 1.88 GiB. A model with a
    vision tower first fills the encoder cache the profile run keeps through that pass: its budget,
    max(max_num_batched_tokens, tokens of the largest image), of text-width embeddings in 16 bits
    (``profile_run``'s dummy encoder outputs, 0.11; the tower's own transient peak is not counted)."""
    width_bytes = 4 if dtype == "fp32" else 2
    forward = max_num_batched_tokens * (3 * arch.act_width / tp + 4 * arch.hidden) * width_bytes
    sampler = max_num_seqs * arch.vocab * VLLM_SAMPLER_BYTES_PER_LOGIT
    encoder = max(max_num_batched_tokens, arch.vision_tokens) * arch.hidden * width_bytes if arch.vision_tokens else 0
    return int(forward + sampler + encoder)


def vllm_non_torch_bytes(gpu_count: int) -> int:
    """Non-torch memory per GPU: 0.25 GiB alone, 2.1 GiB with NCCL (TP >= 2)."""
    return VLLM_NON_TORCH_BYTES + (VLLM_NCCL_BYTES if gpu_count > 1 else 0)


def max_batch_for(budget_bytes: float, fixed_bytes: float, per_seq_bytes: float) -> int:
    """Largest whole batch B with fixed + B x per_seq <= budget (0 when not even one fits).

    docs/worked-numbers.md, set 2 problem 4: (80 GB x 0.9 - 14 GB) / 0.537 GB -> 108.
    """
    if per_seq_bytes <= 0:
        return 0 if fixed_bytes > budget_bytes else 10**9
    spare = budget_bytes - fixed_bytes
    return max(0, int(math.floor(spare / per_seq_bytes + 1e-9)))


def dollars_per_mtoken(usd_per_hour: float, tokens_per_s: float) -> float | None:
    """USD per million tokens: usd_per_hour / (tokens_per_s x 3600) x 1e6 (None without a speed)."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return usd_per_hour / (tokens_per_s * 3600.0) * 1e6


@dataclass(frozen=True)
class Weights:
    """Weight bytes and how they were found.

    ``parts``: bytes per breakdown part (scaled to ``total`` when the checkpoint's own count is
    used). ``verified``: a known family's shape count, or the checkpoint's own byte count.
    ``source``: one line saying which."""

    total: int
    parts: dict[str, int]
    source: str
    verified: bool
    quant: Quant | None
    notes: tuple[str, ...] = ()


def weight_bytes(arch: Architecture, dtype: str, quant: Quant | None) -> tuple[int, dict[str, int]]:
    """(bytes, bytes per part) from the shape count.

    Without ``quant`` every part is ``dtype``'s size. With it the linear layers (attention, MLP,
    experts; lm_head when the config says so) take ``quant.bytes_per_param`` and the rest
    (embeddings, lm_head, norms, routers, vision) 16 bits."""
    base = DTYPE_BYTES[dtype] if quant is None else 2.0
    parts: dict[str, int] = {}
    for k, n in arch.breakdown.items():
        q = quant is not None and (k in quant.parts or (k == "lm_head" and quant.lm_head))
        parts[k] = int(math.ceil(n * (quant.bytes_per_param if q and quant is not None else base)))
    return sum(parts.values()), parts


def resolve_weights(src: ModelSource, arch: Architecture, dtype: str, quant: Quant | None, mode: str) -> Weights:
    """The weight bytes to plan with.

    The checkpoint's own count (safetensors headers or index total_size) when it is stored as it
    will be served, else the shape count; never the index total_size rescaled by a dtype. Unknown
    families without a checkpoint count are unverified."""
    if mode == "train":
        total = arch.params * TRAIN_BYTES_PER_PARAM
        return Weights(
            total,
            {k: v * TRAIN_BYTES_PER_PARAM for k, v in arch.breakdown.items()},
            "16 B/param (bf16 weights + grads, fp32 master + Adam m, v)",
            arch.known,
            None,
        )
    shape_total, parts = weight_bytes(arch, dtype, quant)
    notes: list[str] = []
    qn = (
        0
        if quant is None
        else sum(arch.breakdown.get(k, 0) for k in quant.parts) + (arch.breakdown["lm_head"] if quant.lm_head else 0)
    )
    what = (
        f"shapes: {arch.params:,} params x {DTYPE_BYTES[dtype]:g} B"
        if quant is None
        else f"shapes: {qn:,} {'expert' if quant.parts == ('experts',) else 'linear'} params x "
        f"{quant.bytes_per_param:.4g} B ({quant.label}) + {arch.params - qn:,} others x 2 B"
    )
    stored = src.weights_total_size
    checkpoint_quant = quant is not None and quant.from_checkpoint
    as_stored = checkpoint_quant or (
        quant is None
        and (src.stored_dtype in (None, dtype) or (src.stored_dtype in ("bf16", "fp16") and dtype in ("bf16", "fp16")))
    )
    if stored and as_stored:
        ratio = stored / shape_total if shape_total else 0
        if arch.known and abs(ratio - 1) > 0.05:
            notes.append(
                f"the checkpoint stores {stored / GB:,.2f} GB where the shapes count {shape_total / GB:,.2f} GB; "
                f"planning with the checkpoint's {src.weights_size_source}"
            )
        elif not arch.known:
            notes.append(
                f"weights from the checkpoint's {src.weights_size_source} ({stored / GB:,.2f} GB), not from the "
                f"llama-style shape guess ({shape_total / GB:,.2f} GB)"
            )
        scaled = {k: int(v * stored / shape_total) for k, v in parts.items()} if shape_total else parts
        return Weights(int(stored), scaled, f"checkpoint {src.weights_size_source}", True, quant, tuple(notes))
    if src.params_by_dtype and quant is None and not arch.known:
        # an unquantized checkpoint served in another 16/32-bit dtype: exact count x new size
        n = sum(src.params_by_dtype.values())
        return Weights(
            int(n * DTYPE_BYTES[dtype]),
            parts,
            f"safetensors headers: {n:,} params x {DTYPE_BYTES[dtype]:g} B",
            True,
            quant,
            (f"weights from the checkpoint's parameter count ({n:,}), not from the llama-style shape guess",),
        )
    if stored and not as_stored and arch.known:
        stored_params = stored / DTYPE_BYTES.get(src.stored_dtype or "bf16", 2.0)
        if abs(stored_params / arch.params - 1) > 0.05:
            notes.append(
                f"the checkpoint's total_size ({stored / GB:,.2f} GB as {src.stored_dtype}) does not match the shape count; "
                "planning with the shapes"
            )
    verified = arch.known and (quant is None or quant.known)
    if quant is not None and not quant.known:
        notes.append(f"{quant.label}: gpuops cannot size it from shapes; planned at 16 bits")
    return Weights(shape_total, parts, what, verified, quant, tuple(notes))
