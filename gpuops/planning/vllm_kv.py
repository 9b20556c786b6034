"""vLLM's KV cache arithmetic, rule for rule.

per-layer cache specs, the hybrid allocator's groups, the block count of a pool, the blocks one
request needs, and max concurrency.

Pure functions over integers (bytes, tokens); standard library only. Each rule names the vLLM file
and function it follows. The version followed is vLLM 0.11 (``VLLM_VERSION`` in the planner);
where 0.12 changed a rule, ``version="0.12"`` gives the newer one and the docstring says what moved.

Sources (vLLM 0.11.0 wheel, and 0.12.0 where named):

- vllm/v1/kv_cache_interface.py: ``FullAttentionSpec``, ``SlidingWindowSpec``,
  ``ChunkedLocalAttentionSpec``, ``MambaSpec`` (``page_size_bytes``, ``max_memory_usage_bytes``).
- vllm/v1/core/kv_cache_utils.py: ``get_kv_cache_groups``, ``unify_hybrid_kv_cache_specs``,
  ``_get_kv_cache_groups_uniform_page_size`` (group size = the smallest layer count of a type, the
  other types padded to whole groups), ``get_kv_cache_config_from_groups`` / ``get_num_blocks``
  (blocks = available // page // group size), ``get_max_concurrency_for_kv_cache_config``.
- vllm/model_executor/models/config.py: ``HybridAttentionMambaModelConfig.verify_and_update_config``
  (the attention block size is raised to a multiple of 16 tokens whose page holds one Mamba state;
  the Mamba page is padded to it).
- vllm/model_executor/layers/mamba/mamba_utils.py: ``MambaStateShapeCalculator`` (conv and temporal
  state shapes of Mamba-1, Mamba-2 and Gated DeltaNet layers, split by tensor parallelism).
- vllm/config/__init__.py ``VllmConfig.__post_init__``: chunked local attention (Llama-4
  ``attention_chunk_size``) turns the hybrid allocator off unless
  ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1`` (still the default in 0.12); then
  ``unify_hybrid_kv_cache_specs`` treats sliding and chunked layers as full attention.
"""

from __future__ import annotations

from dataclasses import dataclass

FULL, SLIDING, CHUNKED, MAMBA = "full", "sliding", "chunked", "mamba"
KINDS = (FULL, SLIDING, CHUNKED, MAMBA)
# CacheConfig.block_size on CUDA (vllm/config/cache.py); attention backends want multiples of 16.
DEFAULT_BLOCK_SIZE = 16
VERSIONS = ("0.11", "0.12")


def cdiv(a: int, b: int) -> int:
    """Ceiling division of whole numbers (vllm.utils.cdiv)."""
    return -(-a // b)


@dataclass(frozen=True)
class LayerSpec:
    """The KV cache spec of one layer on one GPU.

    ``kind``: full, sliding, chunked or mamba. ``page_bytes``: bytes of one block (``block_size``
    tokens of this layer; a Mamba layer's page is its whole state, padded). ``window``: the sliding
    window or attention chunk, in tokens (0 otherwise).
    """

    kind: str
    page_bytes: int
    block_size: int = DEFAULT_BLOCK_SIZE
    window: int = 0

    def max_memory_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Bytes one request of ``max_model_len`` tokens can hold in this layer (``max_memory_usage_bytes``).

        Full: ceil(len / block) pages; sliding: ceil(min(window - 1 + batched, len) / block) + 1;
        chunked: ceil(min(chunk + batched, len) / block); mamba: one page."""
        if self.kind == MAMBA:
            return self.page_bytes
        if self.kind == SLIDING:
            return (
                cdiv(min(self.window - 1 + max_num_batched_tokens, max_model_len), self.block_size) + 1
            ) * self.page_bytes
        if self.kind == CHUNKED:
            return cdiv(min(self.window + max_num_batched_tokens, max_model_len), self.block_size) * self.page_bytes
        return cdiv(max_model_len, self.block_size) * self.page_bytes


@dataclass(frozen=True)
class KVGroup:
    """One KV cache group: layers of one spec sharing a block table.

    ``layers``: real layers in it (a padded group has fewer than the layout's ``group_size``)."""

    spec: LayerSpec
    layers: int


@dataclass(frozen=True)
class KVLayout:
    """How vLLM lays a model's KV cache out on one GPU.

    ``group_size``: layers per group, padding included: the pool is cut into this many tensors and
    each block of a tensor is one page of one layer of every group. ``padding_layers``: layers vLLM
    pads in to make whole groups (memory that holds nothing). ``hybrid``: the hybrid allocator is on
    (else every attention layer is full attention, as ``unify_hybrid_kv_cache_specs`` makes it).
    ``unified``: kinds that were turned into full attention because the allocator is off.
    """

    groups: tuple[KVGroup, ...]
    group_size: int
    page_bytes: int
    hybrid: bool
    padding_layers: int = 0
    unified: tuple[str, ...] = ()

    @property
    def block_size(self) -> int:
        """Tokens per attention block (the smallest block size of the groups)."""
        att = [g.spec.block_size for g in self.groups if g.spec.kind != MAMBA]
        return min(att) if att else self.groups[0].spec.block_size

    @property
    def block_bytes(self) -> int:
        """Bytes one block id costs: one page in each of the ``group_size`` tensors."""
        return self.page_bytes * self.group_size

    def num_blocks(self, available_bytes: int) -> int:
        """Blocks the pool holds (``get_num_blocks``): available // page // group size, >= 0."""
        if available_bytes <= 0 or not self.groups:
            return 0
        return int(available_bytes // self.page_bytes // self.group_size)

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Block ids one request of ``max_model_len`` tokens can need.

        The sum over groups of its pages (``get_max_concurrency_for_kv_cache_config``'s
        num_block_per_request)."""
        per = sum(g.spec.max_memory_bytes(max_model_len, max_num_batched_tokens) for g in self.groups)
        return cdiv(per * self.group_size, self.block_bytes)

    def layer_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Bytes the layers themselves hold for one request, padding left out.

        What ``check_enough_kv_cache_memory`` compares with the pool before vLLM starts."""
        return sum(g.spec.max_memory_bytes(max_model_len, max_num_batched_tokens) * g.layers for g in self.groups)

    def bytes_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Pool bytes one request of ``max_model_len`` tokens can take, padding layers included."""
        return self.blocks_per_request(max_model_len, max_num_batched_tokens) * self.block_bytes

    def max_concurrency(self, available_bytes: int, max_model_len: int, max_num_batched_tokens: int) -> float:
        """vLLM's "Maximum concurrency for N tokens per request": pool blocks / blocks per request."""
        need = self.blocks_per_request(max_model_len, max_num_batched_tokens)
        return self.num_blocks(available_bytes) / need if need else 0.0

    def tokens(self, available_bytes: int) -> int:
        """vLLM's "GPU KV cache size: N tokens": blocks // groups x block size."""
        return self.num_blocks(available_bytes) // max(1, len(self.groups)) * self.block_size


def unify_hybrid(specs: list[LayerSpec]) -> tuple[list[LayerSpec], tuple[str, ...]]:
    """``unify_hybrid_kv_cache_specs``.

    With the hybrid allocator off and full attention present, sliding-window and chunked layers are
    cached as full attention (blocks for every token). Returns (specs, kinds turned into full)."""
    kinds = {s.kind for s in specs}
    if FULL not in kinds or not kinds & {SLIDING, CHUNKED}:
        return list(specs), ()
    out = [LayerSpec(FULL, s.page_bytes, s.block_size) if s.kind in (SLIDING, CHUNKED) else s for s in specs]
    return out, tuple(sorted(kinds & {SLIDING, CHUNKED}))


def kv_layout(specs: list[LayerSpec], *, hybrid_allocator: bool = True, version: str = "0.11") -> KVLayout:
    """Group ``specs`` (one per cache layer, in model order) the way ``get_kv_cache_groups`` does.

    All layers of one spec: one group of every layer. Several specs with one page size: group size
    = the smallest layer count of a spec (0.12: the largest when it is under 1.25 x the smallest, e.g.
    12 sliding + 13 full -> 13), each spec's layers split into ceil(count / group size) groups, the
    last one padded. With ``hybrid_allocator`` False, sliding and chunked layers become full first.
    Raises ValueError for page sizes that differ (vLLM raises NotImplementedError) or an unknown
    ``version``.
    """
    if version not in VERSIONS:
        raise ValueError(f"vLLM version {version!r}: known rules are {', '.join(VERSIONS)}")
    if not specs:
        return KVLayout((), 1, 1, hybrid_allocator)
    unified: tuple[str, ...] = ()
    if not hybrid_allocator:
        specs, unified = unify_hybrid(specs)
    pages = {s.page_bytes for s in specs}
    if len(pages) != 1:
        raise ValueError(f"layers with different page sizes ({sorted(pages)} B): vLLM cannot lay this cache out")
    page = pages.pop()
    by_spec: dict[LayerSpec, int] = {}
    for s in specs:
        by_spec[s] = by_spec.get(s, 0) + 1
    if len(by_spec) == 1:
        ((spec, n),) = by_spec.items()
        return KVLayout((KVGroup(spec, n),), n, page, hybrid_allocator, 0, unified)
    counts = list(by_spec.values())
    size = min(counts)
    if version != "0.11" and max(counts) < size * 1.25:
        size = max(counts)
    groups: list[KVGroup] = []
    padding = 0
    for spec, n in by_spec.items():
        k = cdiv(n, size)
        padding += k * size - n
        for i in range(k):  # layers[i::k]: group i gets every k-th layer
            groups.append(KVGroup(spec, len(range(i, n, k))))
    return KVLayout(tuple(groups), size, page, hybrid_allocator, padding, unified)


def attention_block_size(
    attn_page_bytes_per_token: int, mamba_page_bytes: int, block_size: int = DEFAULT_BLOCK_SIZE
) -> int:
    """Tokens per attention block in a model with Mamba / linear-attention layers.

    ``HybridAttentionMambaModelConfig.verify_and_update_config``: the smallest multiple of 16
    whose page holds one Mamba state, 16 x ceil(mamba page / (16 x attention bytes per token)), or
    ``block_size`` when that is larger. 0.12 keeps the rule without prefix caching (Blackwell with
    head size 256 aligns to 32)."""
    need = DEFAULT_BLOCK_SIZE * cdiv(mamba_page_bytes, DEFAULT_BLOCK_SIZE * attn_page_bytes_per_token)
    return max(block_size, need)


@dataclass(frozen=True)
class MambaShape:
    """What sizes one Mamba / linear-attention layer's state (``MambaStateShapeCalculator``).

    ``kind``: mamba1 (Jamba: ``inner`` = mamba_expand x hidden, ``d_state``, ``conv_kernel``),
    mamba2 (Nemotron-H, Falcon-H1: ``inner``, ``n_groups``, ``heads``, ``head_dim``, ``d_state``,
    ``conv_kernel``) or gdn (Qwen3-Next Gated DeltaNet: ``k_heads``, ``v_heads``, ``k_dim``,
    ``v_dim``, ``conv_kernel``). ``source``: the config keys, for the plan's text.
    """

    kind: str
    conv_kernel: int
    inner: int = 0
    d_state: int = 0
    n_groups: int = 0
    heads: int = 0
    head_dim: int = 0
    k_heads: int = 0
    v_heads: int = 0
    k_dim: int = 0
    v_dim: int = 0
    source: str = ""

    def state_elems(self, tp: int = 1) -> tuple[int, int]:
        """(conv state, temporal state) elements per layer per request on one of ``tp`` GPUs.

        mamba1: (K - 1) x inner/tp and inner/tp x d_state. mamba2: (K - 1) x (inner + 2 x groups x
        d_state)/tp (groups padded to a multiple of tp) and heads/tp x head_dim x d_state.
        gdn: (K - 1) x (2 x k_heads x k_dim + v_heads x v_dim)/tp and v_heads/tp x k_dim x v_dim."""
        k1 = self.conv_kernel - 1
        if self.kind == "mamba1":
            return k1 * (self.inner // tp), (self.inner // tp) * self.d_state
        if self.kind == "mamba2":
            groups = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)
            conv_dim = self.inner + 2 * groups * self.d_state
            return k1 * (conv_dim // tp), (self.heads // tp) * self.head_dim * self.d_state
        if self.kind == "gdn":
            conv_dim = 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
            return k1 * (conv_dim // tp), (self.v_heads // tp) * self.k_dim * self.v_dim
        raise ValueError(f"unknown Mamba layer kind {self.kind!r}")

    def state_bytes(self, dtype_bytes: float, tp: int = 1) -> int:
        """Bytes of one layer's state per request.

        Conv and temporal state in the model's dtype: vLLM's ``mamba_cache_dtype`` /
        ``mamba_ssm_cache_dtype`` default "auto"."""
        conv, temporal = self.state_elems(tp)
        return int((conv + temporal) * dtype_bytes)
