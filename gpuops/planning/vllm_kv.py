"""vLLM's KV cache arithmetic, rule for rule, as the release ``VLLM_RELEASE`` has it.

Per-layer cache specs, the KV cache groups, the block count of a pool, the blocks one request needs,
and max concurrency. Pure functions over integers (bytes, tokens); standard library only. Checked
against vLLM's own functions by tests/plan/test_vllm_golden.py (tests/data/vllm_golden.json,
written by scripts/vllm_oracle.py with that release installed).

Sources (vLLM 0.33.0 wheel):

- vllm/v1/kv_cache_interface.py: ``FullAttentionSpec``, ``MLAAttentionSpec``, ``SlidingWindowSpec``,
  ``ChunkedLocalAttentionSpec``, ``MambaSpec`` (``page_size_bytes``, ``max_memory_usage_bytes``: a
  sliding or chunked layer keeps ``VllmConfig.max_in_flight_tokens`` = batches in flight x
  max_num_batched_tokens), ``UniformTypeKVCacheSpecs`` (layers of one type with different pages:
  one group whose page is their sum).
- vllm/v1/core/kv_cache_planning.py: ``get_kv_cache_groups`` (one spec: one group; one type: one
  group; else ``unify_kv_cache_spec_page_size`` then ``_get_kv_cache_groups_uniform_page_size``:
  group size = the smallest layer count of a spec, or the largest when it is under 1.5 x the
  smallest; each spec's layers split into ceil(count / size) groups, ``layers[i::k]``),
  ``_get_kv_cache_bytes_per_block`` (the largest group's bytes per block), ``get_kv_cache_configs``
  (blocks = available // bytes per block), ``_promote_local_kv_cache_specs`` (hybrid manager off).
- vllm/v1/core/kv_cache_utils.py ``get_max_concurrency_for_kv_cache_config``: blocks / the sum over
  groups of ceil(a request's bytes in the group / the group's page).
- vllm/platforms/interface.py ``_align_hybrid_block_size``: with Mamba layers the attention block is
  the smallest multiple of 16 (128 with MLA) whose page holds one state; the state page is padded to it.
- vllm/config/vllm.py ``max_concurrent_batches``: async scheduling, on by default for ``vllm serve``
  on CUDA, keeps 2 batches in flight; ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``
  defaults to 1 (vllm/envs.py), so chunked local attention keeps the hybrid manager on.
"""

from __future__ import annotations

from dataclasses import dataclass

# The vLLM release the planner follows, the one place it is named: scripts/vllm_oracle.py installs it
# to write tests/data/vllm_golden.json, and `plan` prints it ("follows vLLM ...").
VLLM_RELEASE = "0.33.0"
FULL, SLIDING, CHUNKED, MLA, MAMBA = "full", "sliding", "chunked", "mla", "mamba"
KINDS = (FULL, SLIDING, CHUNKED, MLA, MAMBA)
# CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py); FlashAttention/FlashInfer take MultipleOf(16).
DEFAULT_BLOCK_SIZE = 16
# VllmConfig.max_concurrent_batches with async scheduling (the `vllm serve` default on CUDA, no PP).
BATCHES_IN_FLIGHT = 2
# MambaSpec.max_memory_usage_bytes with mamba_cache_mode "align": 2 state pages per request (the state
# and its prefix-cache checkpoint). MambaModelConfig.verify_and_update_config (vllm/model_executor/models/
# config.py) sets "align" whenever prefix caching is on, the default.
MAMBA_PAGES_PER_REQUEST = 2
# _get_kv_cache_groups_uniform_page_size: the largest count is the group size below this ratio.
CLOSE_COUNTS_RATIO = 1.5


def cdiv(a: int, b: int) -> int:
    """Ceiling division of whole numbers (vllm.utils.math_utils.cdiv)."""
    return -(-a // b)


@dataclass(frozen=True)
class LayerSpec:
    """The KV cache spec of one layer on one GPU.

    ``kind``: full, sliding, chunked, mla (a full-attention latent) or mamba. ``page_bytes``: bytes
    of one block (``block_size`` tokens of this layer; a Mamba layer's page is its whole state,
    padded). ``window``: the sliding window or attention chunk, in tokens (0 otherwise).
    ``role``: what the layer's cache is beside its kind ("indexer": a sparse-MLA indexer cache).
    """

    kind: str
    page_bytes: int
    block_size: int = DEFAULT_BLOCK_SIZE
    window: int = 0
    role: str = ""

    @property
    def type_key(self) -> tuple:
        """What makes layers one type (``is_uniform_with_collection``): full and MLA are full attention."""
        if self.kind in (FULL, MLA):
            return (FULL, self.block_size)
        if self.kind == MAMBA:
            return (MAMBA, self.block_size, self.page_bytes)
        return (self.kind, self.block_size, self.window)

    def max_memory_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        """Bytes one request of ``max_model_len`` tokens can hold in this layer (``max_memory_usage_bytes``).

        Full / MLA: ceil(len / block) pages; sliding: ceil(min(window - 1 + in flight, len) / block)
        + 1; chunked: ceil(min(chunk + in flight, len) / block); mamba: ``MAMBA_PAGES_PER_REQUEST`` pages. ``in_flight_tokens``:
        ``max_in_flight_tokens`` (``BATCHES_IN_FLIGHT`` x max_num_batched_tokens)."""
        if self.kind == MAMBA:
            return MAMBA_PAGES_PER_REQUEST * self.page_bytes
        if self.kind == SLIDING:
            return (cdiv(min(self.window - 1 + in_flight_tokens, max_model_len), self.block_size) + 1) * self.page_bytes
        if self.kind == CHUNKED:
            return cdiv(min(self.window + in_flight_tokens, max_model_len), self.block_size) * self.page_bytes
        return cdiv(max_model_len, self.block_size) * self.page_bytes


@dataclass(frozen=True)
class KVGroup:
    """One KV cache group: layers sharing a block table (``KVCacheGroupSpec``).

    ``layers``: the specs of its layers (one type; their pages may differ, ``UniformTypeKVCacheSpecs``)."""

    layers: tuple[LayerSpec, ...]

    @property
    def kind(self) -> str:
        """The kinds of its layers, "+"-joined (e.g. "mla" or "full+mla")."""
        return "+".join(sorted({s.kind for s in self.layers}))

    @property
    def block_size(self) -> int:
        return self.layers[0].block_size

    @property
    def page_bytes(self) -> int:
        """Bytes of one block of the group: its layers' pages together."""
        return sum(s.page_bytes for s in self.layers)

    @property
    def spec_page_bytes(self) -> int:
        """The page of the group's spec as vLLM reports it (bytes).

        One layer's when its layers share one spec, else (``UniformTypeKVCacheSpecs``) their pages together."""
        return self.layers[0].page_bytes if len(set(self.layers)) == 1 else self.page_bytes

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        """Block ids one request takes in this group: the most pages any of its layers needs."""
        return max(cdiv(s.max_memory_bytes(max_model_len, in_flight_tokens), s.page_bytes) for s in self.layers)


def in_flight(max_num_batched_tokens: int) -> int:
    """``VllmConfig.max_in_flight_tokens`` with vLLM's serving defaults: 2 batches x max_num_batched_tokens."""
    return BATCHES_IN_FLIGHT * max_num_batched_tokens


@dataclass(frozen=True)
class KVLayout:
    """How vLLM lays a model's KV cache out on one GPU.

    ``groups``: the KV cache groups. ``padding_layers``: layer slots vLLM pads in to make groups of
    one size (a block of every group costs the widest group's bytes). ``hybrid``: the hybrid
    manager is on (else sliding and chunked layers are cached as full attention, ``unified``).
    """

    groups: tuple[KVGroup, ...]
    hybrid: bool = True
    padding_layers: int = 0
    unified: tuple[str, ...] = ()

    @property
    def block_size(self) -> int:
        """Tokens per attention block (the smallest block size of the attention groups)."""
        att = [g.block_size for g in self.groups if g.kind != MAMBA]
        return min(att) if att else (self.groups[0].block_size if self.groups else DEFAULT_BLOCK_SIZE)

    @property
    def group_size(self) -> int:
        """Layers in the widest group."""
        return max((len(g.layers) for g in self.groups), default=0)

    @property
    def block_bytes(self) -> int:
        """Bytes one block id costs in the pool (``_get_kv_cache_bytes_per_block``): the widest group's page."""
        return max((g.page_bytes for g in self.groups), default=0)

    def num_blocks(self, available_bytes: int) -> int:
        """Blocks the pool holds: available // bytes per block, >= 0."""
        if available_bytes <= 0 or not self.groups:
            return 0
        return int(available_bytes // self.block_bytes)

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Block ids one request of ``max_model_len`` tokens can need: the sum over groups."""
        t = in_flight(max_num_batched_tokens)
        return sum(g.blocks_per_request(max_model_len, t) for g in self.groups)

    def layer_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Bytes the layers themselves hold for one request, padding left out."""
        t = in_flight(max_num_batched_tokens)
        return sum(s.max_memory_bytes(max_model_len, t) for g in self.groups for s in g.layers)

    def bytes_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Pool bytes one request of ``max_model_len`` tokens can take, padding included."""
        return self.blocks_per_request(max_model_len, max_num_batched_tokens) * self.block_bytes

    def max_concurrency(self, available_bytes: int, max_model_len: int, max_num_batched_tokens: int) -> float:
        """vLLM's "Maximum concurrency for N tokens per request": pool blocks / blocks per request."""
        need = self.blocks_per_request(max_model_len, max_num_batched_tokens)
        return self.num_blocks(available_bytes) / need if need else 0.0

    def tokens(self, available_bytes: int) -> int:
        """vLLM's "GPU KV cache size: N tokens": blocks // groups x block size."""
        return self.num_blocks(available_bytes) // max(1, len(self.groups)) * self.block_size


def promote_local(specs: list[LayerSpec]) -> tuple[list[LayerSpec], tuple[str, ...]]:
    """``_promote_local_kv_cache_specs`` (hybrid manager off).

    With full attention present, sliding-window and chunked layers are cached as full attention
    (blocks for every token, the full layers' block size). Returns (specs, kinds turned into full)."""
    kinds = {s.kind for s in specs}
    if not kinds & {FULL, MLA} or not kinds & {SLIDING, CHUNKED}:
        return list(specs), ()
    blocks = {s.block_size for s in specs if s.kind == FULL}
    out = [
        LayerSpec(
            FULL,
            s.page_bytes * (next(iter(blocks)) if len(blocks) == 1 else s.block_size) // s.block_size,
            next(iter(blocks)) if len(blocks) == 1 else s.block_size,
        )
        if s.kind in (SLIDING, CHUNKED)
        else s
        for s in specs
    ]
    return out, tuple(sorted(kinds & {SLIDING, CHUNKED}))


def unify_page_sizes(specs: list[LayerSpec]) -> list[LayerSpec]:
    """``unify_kv_cache_spec_page_size``: every page made the largest.

    An attention layer whose page divides the largest gets a block that many times larger; a Mamba
    page, or a non-MLA attention page that does not divide it, is padded. Raises ValueError where
    vLLM raises NotImplementedError (an MLA page that does not divide the largest)."""
    top = max(s.page_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_bytes == top:
            out.append(s)
        elif s.kind != MAMBA and top % s.page_bytes == 0:
            out.append(LayerSpec(s.kind, top, s.block_size * (top // s.page_bytes), s.window, s.role))
        elif s.kind != MLA:
            out.append(LayerSpec(s.kind, top, s.block_size, s.window, s.role))
        else:
            raise ValueError(f"an MLA page of {s.page_bytes} B does not divide {top} B: vLLM cannot lay this cache out")
    return out


def kv_layout(specs: list[LayerSpec], *, hybrid_allocator: bool = True) -> KVLayout:
    """Group ``specs`` (one per cache layer, in model order) the way ``get_kv_cache_groups`` does.

    All layers of one spec, or of one type (``type_key``): one group of every layer. Else the pages
    are unified, the layers bucketed by spec, the group size is the smallest bucket (the largest
    when it is under 1.5 x the smallest, e.g. 13 full + 12 sliding -> 13) and each bucket splits into
    ceil(count / size) groups, ``layers[i::k]``."""
    if not specs:
        return KVLayout((), hybrid_allocator)
    unified: tuple[str, ...] = ()
    if not hybrid_allocator:
        specs, unified = promote_local(specs)
    if len(set(specs)) == 1 or len({s.type_key for s in specs}) == 1:
        return KVLayout((KVGroup(tuple(specs)),), hybrid_allocator, 0, unified)
    specs = unify_page_sizes(specs)
    buckets: dict[LayerSpec, list[LayerSpec]] = {}
    for s in specs:
        buckets.setdefault(s, []).append(s)
    counts = [len(b) for b in buckets.values()]
    size = min(counts)
    if max(counts) < size * CLOSE_COUNTS_RATIO:
        size = max(counts)
    groups: list[KVGroup] = []
    padding = 0
    for layers in buckets.values():
        k = cdiv(len(layers), size)
        padding += k * size - len(layers)
        groups += [KVGroup(tuple(layers[i::k])) for i in range(k)]
    return KVLayout(tuple(groups), hybrid_allocator, padding, unified)


def attention_block_size(
    attn_page_bytes_per_token: int, mamba_page_bytes: int, block_size: int = DEFAULT_BLOCK_SIZE, mla: bool = False
) -> int:
    """Tokens per attention block in a model with Mamba / linear-attention layers.

    ``_align_hybrid_block_size``: the smallest multiple of the kernel alignment (16; 128 with MLA)
    whose page holds one Mamba state, or ``block_size`` when that is larger."""
    align = max(128 if mla else DEFAULT_BLOCK_SIZE, block_size)
    need = align * cdiv(mamba_page_bytes, align * attn_page_bytes_per_token)
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
