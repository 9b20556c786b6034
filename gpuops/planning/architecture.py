"""A model's ``config.json`` read into an ``Architecture``.

Layers, heads, KV heads (GQA), MLA, MoE layout, sliding windows, vision tower, and the parameter
count from matrix shapes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuops.errors import BadInput
from gpuops.planning.quant import _num
from gpuops.planning.vllm_kv import CHUNKED, FULL, SLIDING, MambaShape

# -- parameter count from shapes ------------------------------------------------------------------
# Per family: biases on q/k/v and o, norms per layer (vectors of length hidden), per-head q/k norms,
# default for tied embeddings, sliding-window layout. Every family here uses RMSNorm (a weight
# vector, no bias). MoE is detected from the config keys, whatever the family (``_moe_layout``).
_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {"qkv_bias": False, "norms": 2, "tied": False},
    "mistral": {"qkv_bias": False, "norms": 2, "tied": False},
    "mixtral": {"qkv_bias": False, "norms": 2, "tied": False},
    "qwen2": {"qkv_bias": True, "norms": 2, "tied": False},
    "qwen2_moe": {"qkv_bias": True, "norms": 2, "tied": False},
    "qwen3": {"qkv_bias": False, "norms": 2, "tied": False, "qk_norm": True},
    "qwen3_moe": {"qkv_bias": False, "norms": 2, "tied": False, "qk_norm": True},
    "gemma": {"qkv_bias": False, "norms": 2, "tied": True},
    "gemma2": {"qkv_bias": False, "norms": 4, "tied": True, "swa": "alternate"},
    "gemma3_text": {"qkv_bias": False, "norms": 4, "tied": True, "qk_norm": True, "swa": "pattern"},
    "phi3": {"qkv_bias": False, "norms": 2, "tied": False},
    "deepseek_v2": {"qkv_bias": False, "norms": 2, "tied": False, "mla": True},
    "deepseek_v3": {"qkv_bias": False, "norms": 2, "tied": False, "mla": True},
    # gpt-oss: q/k/v/o biases (attention_bias), one attention sink per head, biases on every expert
    # (gate_up 2 x width, down hidden) and on the router (transformers GptOss*, vllm gpt_oss.py).
    "gpt_oss": {"qkv_bias": False, "norms": 2, "tied": False, "sinks": True, "expert_bias": True, "router_bias": True},
    # Hybrids: attention layers among Gated DeltaNet / Mamba layers (``_hybrid_roles``).
    "qwen3_next": {
        "qkv_bias": False,
        "norms": 2,
        "tied": False,
        "qk_norm": True,
        "gated_q": True,
        "hybrid": "qwen3_next",
    },
    "jamba": {"qkv_bias": False, "norms": 2, "tied": False, "hybrid": "jamba"},
    "nemotron_h": {"qkv_bias": False, "norms": 1, "tied": False, "hybrid": "nemotron_h"},
    "falcon_h1": {"qkv_bias": False, "norms": 2, "tied": False, "hybrid": "falcon_h1", "unchecked": True},
    # Llama-4: a shared expert of intermediate_size beside the routed ones in every MoE layer, dense
    # layers of intermediate_size_mlp, chunked local attention on the RoPE layers; q/k L2-normed (no weights).
    "llama4_text": {"qkv_bias": False, "norms": 2, "tied": False},
    "qwen2_5_vl": {"qkv_bias": True, "norms": 2, "tied": False},
}
_BASE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
_MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
# Keys that make a config a mixture of experts, any family: the expert count under any of
# its names, and the layout keys.
MOE_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
MOE_LAYOUT_KEYS = (
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "moe_layer_freq",
    "mlp_only_layers",
    "num_experts_per_tok",
)
# transformers' Gemma3TextConfig defaults (transformers/models/gemma3/configuration_gemma3.py, 4.50+):
# Gemma-3 4B/12B/27B publish a multimodal config whose text_config leaves these out.
GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
    "query_pre_attn_scalar": 256,
}
# transformers' SiglipVisionConfig defaults (Gemma-3 configs state every size they use).
SIGLIP_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_channels": 3,
    "image_size": 224,
    "patch_size": 16,
}
# transformers' MistralConfig defaults that llava-style configs (Pixtral-12B) leave out of text_config;
# sliding_window 4096 too, which vLLM then applies to every layer (no layer_types: CacheConfig.sliding_window).
MISTRAL_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000,
    "num_attention_heads": 32,
    "tie_word_embeddings": False,
    "sliding_window": 4096,
}
# transformers' PixtralVisionConfig defaults (transformers/models/pixtral/configuration_pixtral.py).
PIXTRAL_DEFAULTS: dict[str, Any] = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_channels": 3,
    "image_size": 1024,
    "patch_size": 16,
}
_TEXT_DEFAULTS = {"gemma3_text": GEMMA3_TEXT_DEFAULTS, "mistral": MISTRAL_TEXT_DEFAULTS}


@dataclass(frozen=True)
class Architecture:
    """What the planner needs from a config, all derived from matrix shapes.

    ``params``: every weight resident in memory. ``active_params``: weights one token goes through
    (non-routed experts excluded); FLOPs per generated token = 2 x active_params.
    ``expert_params``: routed-expert weights (0 for dense models). ``breakdown``: params per part
    (embeddings, lm_head, norms, attention, mamba, mlp, experts, expert_bias, router, vision);
    attention, mamba, mlp and experts are the linear layers quantization shrinks. ``layer_kv_elems``: cache elements per token
    per attention layer (Mamba / linear-attention layers hold no per-token cache and are not in it).
    ``layer_window``: tokens an attention layer keeps (None = all). ``layer_kind``: full, sliding or
    chunked per attention layer (empty: from the windows). ``mamba``/``mamba_layers``: the state
    shape and count of Mamba / Gated DeltaNet layers (a fixed state per request, vLLM ``MambaSpec``).
    ``attention_chunk``: Llama-4 ``attention_chunk_size``. ``vision_tokens``: text tokens the largest
    image gives (0 without a vision tower). ``kv_split``: how far tensor
    parallelism can split the cache (kv heads; 1 for MLA, whose latent is replicated on every GPU).
    ``act_width``: widest per-token intermediate (elements). ``known``: the family is one gpuops
    counts (else the count is a llama-style guess). ``tied``: lm_head shares the embedding matrix.
    ``sparse_mla``/``index_head_dim``: a sparse-MLA model (``index_topk``) keeps an indexer cache of
    ``index_head_dim`` beside each latent. ``kv_shared_layers``: the last layers that read an
    earlier layer's cache (``num_kv_shared_layers``; not in ``layer_kv_elems``).
    ``layout_verified``: the KV layout is what vLLM will build, as far as gpuops can know it from
    the config: a family gpuops knows (its reader), or, for any other ``model_type``, a config
    that states its layers in keys gpuops reads (``layer_types`` of known kinds, a hybrid layout,
    MLA's fields; ``_layout_stated``) with no attention-layout key left unread. Else ``layout_note``
    says why (the keys it could not read, or that nothing states the layers) and the KV plan is a
    guess. It speaks of the KV cache only; the weights are ``memory.Weights.verified``.
    ``rope_context``: the longest ``--max-model-len`` vLLM takes under the config's
    ``rope_scaling`` (``_rope_context``; None without one, then ``max_context`` is the limit).
    """

    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_context: int | None
    params: int
    active_params: int
    expert_params: int
    experts: int
    experts_per_tok: int
    breakdown: dict[str, int]
    layer_kv_elems: tuple[int, ...]
    layer_window: tuple[int | None, ...]
    kv_split: int
    act_width: int
    mla: bool
    notes: tuple[str, ...] = ()
    known: bool = True
    tied: bool = False
    layer_kind: tuple[str, ...] = ()
    mamba: MambaShape | None = None
    mamba_layers: int = 0
    attention_chunk: int | None = None
    vision_tokens: int = 0
    sparse_mla: bool = False
    index_head_dim: int = 0
    kv_shared_layers: int = 0
    layout_verified: bool = True
    layout_note: str = ""
    rope_context: int | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """Cache kind of each attention layer (full, sliding, chunked), aligned with ``layer_kv_elems``."""
        if self.layer_kind:
            return self.layer_kind
        return tuple(FULL if w is None else SLIDING for w in self.layer_window)

    @property
    def linear_params(self) -> int:
        """Parameters in the linear layers of attention, MLP and experts (what quantization shrinks)."""
        return sum(self.breakdown.get(k, 0) for k in ("attention", "mamba", "mlp", "experts"))


def _int_key(cfg: dict, key: str, default: Any = None, *, allow_zero: bool = False) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise BadInput(
            f"config key {key} must be a whole number, got {v!r}",
            "fix config.json (published configs have integers here)",
        )
    v = int(v)
    if v < 0 or (v == 0 and not allow_zero):
        raise BadInput(
            f"config key {key} must be > 0, got {v}", "fix config.json (published configs have positive sizes here)"
        )
    return v


def _opt_int(cfg: dict, key: str, default: int = 0) -> int:
    return _int_key(cfg, key, allow_zero=True) if cfg.get(key) is not None else default


def _text_config(cfg: dict) -> tuple[dict, dict | None]:
    """(language-model config, vision config or None).

    Multimodal configs (llava, gemma3, ...) keep the language model under ``text_config``; its
    missing keys take the library's defaults for its ``model_type`` (Gemma-3:
    ``GEMMA3_TEXT_DEFAULTS``)."""
    text = cfg.get("text_config")
    vision = cfg.get("vision_config") if isinstance(cfg.get("vision_config"), dict) else None
    if isinstance(text, dict) and not all(k in cfg for k in _BASE_KEYS):
        mtype = str(text.get("model_type") or ("gemma3_text" if cfg.get("model_type") == "gemma3" else ""))
        merged = {
            **_TEXT_DEFAULTS.get(mtype, {}),
            **{k: v for k, v in text.items() if v is not None},
            "model_type": mtype or text.get("model_type"),
        }
        return merged, vision
    mtype = str(cfg.get("model_type") or "")
    if mtype in _TEXT_DEFAULTS:
        return {**_TEXT_DEFAULTS[mtype], **{k: v for k, v in cfg.items() if v is not None}}, vision
    return cfg, vision  # Qwen2.5-VL: the text keys at the top level, the tower in vision_config


def _require(cfg: dict, keys: Iterable[str], family: str) -> None:
    missing = [k for k in keys if cfg.get(k) is None]
    if missing:
        raise BadInput(
            f"config ({family or 'no model_type'}) lacks {', '.join(missing)}",
            "the planner needs these config.json keys for this family; pass the model's published config.json",
        )


def _vision_params(vision: dict, text_hidden: int, top_type: str) -> tuple[int, str] | None:
    """(parameters, note) of the vision tower and its projector, or None for an unknown tower.

    (parameters, note) of the vision tower and its projector, counted from ``vision_config`` with
    the library's defaults for the keys it leaves out; None for a tower gpuops does not know.

    SigLIP (Gemma-3), Pixtral (llava), Llama-4 and Qwen2.5-VL; module shapes as in transformers'
    modeling files of each (and vLLM's vllm/model_executor/models/{siglip,pixtral,mllama4,qwen2_5_vl}.py).
    """
    vtype = str(vision.get("model_type") or "")
    if top_type == "gemma3" or vtype.startswith("siglip"):
        return _siglip_params(vision, text_hidden, top_type)
    if vtype == "pixtral":
        return _pixtral_params(vision, text_hidden, top_type)
    if vtype == "llama4_vision_model":
        return _llama4_vision_params(vision, text_hidden)
    if top_type == "qwen2_5_vl":
        return _qwen25_vl_vision_params(vision)
    return None


def _pixtral_params(vision: dict, text_hidden: int, top_type: str) -> tuple[int, str]:
    """Parameters of a Pixtral-ViT tower and its llava projector.

    Pixtral-ViT (no biases, RMSNorms, gated SiLU MLP, 2-D RoPE: no position table) + the llava
    projector linear_1 (vision -> text) and linear_2 (text -> text), both with biases."""
    v = {**PIXTRAL_DEFAULTS, **{k: x for k, x in vision.items() if x is not None}}
    hv, iv, lv = _int_key(v, "hidden_size"), _int_key(v, "intermediate_size"), _int_key(v, "num_hidden_layers")
    p, ch = _int_key(v, "patch_size"), _int_key(v, "num_channels")
    layer = 4 * hv * hv + 3 * hv * iv + 2 * hv
    tower = ch * p * p * hv + hv + lv * layer  # patch conv (no bias), ln_pre, layers
    projector = (hv * text_hidden + text_hidden) + (text_hidden * text_hidden + text_hidden)
    return tower + projector, f"vision tower counted: pixtral {lv} layers x {hv} wide + llava projector ({top_type})"


def _llama4_vision_params(vision: dict, text_hidden: int) -> tuple[int, str]:
    """Parameters of the Llama-4 vision tower, its pixel-shuffle MLP and projector.

    Llama-4 vision: patch unfold (no bias), class token, position table (patches + 1), pre/post
    LayerNorms, layers with biased q/k/v/o and GELU fc1/fc2, the pixel-shuffle MLP (hidden x 4 ->
    projector_input_dim -> projector_output_dim, no biases) and the projector to the text width."""
    hv, iv, lv = (
        _int_key(vision, "hidden_size"),
        _int_key(vision, "intermediate_size"),
        _int_key(vision, "num_hidden_layers"),
    )
    p, img, ch = _int_key(vision, "patch_size"), _int_key(vision, "image_size"), _int_key(vision, "num_channels", 3)
    pin, pout = _int_key(vision, "projector_input_dim"), _int_key(vision, "projector_output_dim")
    out = _int_key(vision, "vision_output_dim", pout)
    ratio = float(vision.get("pixel_shuffle_ratio") or 0.5)
    patches = (img // p) ** 2
    layer = 4 * (hv * hv + hv) + (hv * iv + iv) + (iv * hv + hv) + 2 * 2 * hv
    tower = ch * p * p * hv + hv + (patches + 1) * hv + 2 * 2 * hv + lv * layer
    shuffle = int(hv / (ratio * ratio)) * pin + pout * pout
    projector = out * text_hidden + (text_hidden if vision.get("multi_modal_projector_bias") else 0)
    return (
        tower + shuffle + projector,
        f"vision tower counted: llama4 {lv} layers x {hv} wide + pixel-shuffle MLP + projector",
    )


def _qwen25_vl_vision_params(vision: dict) -> tuple[int, str]:
    """Parameters of the Qwen2.5-VL vision tower and its patch merger.

    Qwen2.5-VL vision: a 3-D patch conv (no bias), blocks with a biased fused qkv and proj,
    RMSNorms, a gated SiLU MLP with biases, and the patch merger (RMSNorm, spatial_merge^2 x hidden
    -> same, GELU, -> out_hidden_size, biases)."""
    hv, iv, depth = _int_key(vision, "hidden_size"), _int_key(vision, "intermediate_size"), _int_key(vision, "depth")
    p, tp, ch = (
        _int_key(vision, "patch_size"),
        _int_key(vision, "temporal_patch_size", 2),
        _int_key(vision, "in_chans", 3),
    )
    out, merge = _int_key(vision, "out_hidden_size"), _int_key(vision, "spatial_merge_size", 2)
    block = (hv * 3 * hv + 3 * hv) + (hv * hv + hv) + 2 * (hv * iv + iv) + (iv * hv + hv) + 2 * hv
    m = hv * merge * merge
    merger = hv + (m * m + m) + (m * out + out)
    return (
        ch * tp * p * p * hv + depth * block + merger,
        f"vision tower counted: qwen2.5-vl {depth} blocks x {hv} wide (q/k/v biases) + merger",
    )


def _siglip_params(vision: dict, text_hidden: int, top_type: str) -> tuple[int, str]:
    """(parameters, note) of a SigLIP-style vision tower and its projector.

    (parameters, note) of a SigLIP-style vision tower and its projector (Gemma-3: SigLIP-400M with
    ``mm_input_projection_weight`` vision_hidden x text_hidden and ``mm_soft_emb_norm``)."""
    v = {**SIGLIP_DEFAULTS, **{k: x for k, x in vision.items() if x is not None}}
    hv, iv, lv = _int_key(v, "hidden_size"), _int_key(v, "intermediate_size"), _int_key(v, "num_hidden_layers")
    p, img, ch = _int_key(v, "patch_size"), _int_key(v, "image_size"), _int_key(v, "num_channels")
    patches = (img // p) ** 2
    layer = (
        4 * (hv * hv + hv) + (hv * iv + iv) + (iv * hv + hv) + 2 * 2 * hv
    )  # q,k,v,o + fc1, fc2 (biases) + 2 LayerNorms
    tower = ch * p * p * hv + hv + patches * hv + lv * layer + 2 * hv  # patch conv, position embedding, layers, post-LN
    projector = hv * text_hidden + hv
    return (
        tower + projector,
        f"vision tower counted: {v.get('model_type', 'siglip')} {lv} layers x {hv} wide + projector ({top_type})",
    )


def _moe_layout(cfg: dict, n_layers: int, inter: int, family: str) -> dict | None:
    """The MoE layout of any family, or None for a dense model.

    Experts E, experts per token k, expert width, shared-expert width, and which layers are MoE
    (``first_k_dense_replace``, ``moe_layer_freq``, ``decoder_sparse_step``, ``mlp_only_layers``)."""
    experts = 0
    for k in MOE_EXPERT_KEYS:
        if cfg.get(k) is not None:
            experts = _int_key(cfg, k, allow_zero=True)
            break
    if experts <= 1:
        return None
    _require(cfg, ("num_experts_per_tok",), family)
    per_tok = _int_key(cfg, "num_experts_per_tok")
    width = _int_key(cfg, "moe_intermediate_size") if cfg.get("moe_intermediate_size") is not None else inter
    shared = _opt_int(cfg, "n_shared_experts") * width
    shared_gate = False
    if cfg.get("shared_expert_intermediate_size"):
        shared += _int_key(cfg, "shared_expert_intermediate_size")
        shared_gate = True  # Qwen2-MoE: a sigmoid gate hidden x 1 on the shared expert
    if family == "llama4_text":  # Llama4MoE: a shared expert as wide as the routed ones
        shared += width
    first_dense = _opt_int(cfg, "first_k_dense_replace")
    freq = _opt_int(cfg, "moe_layer_freq", 1) or 1
    step = _opt_int(cfg, "decoder_sparse_step", 1) or 1
    step = _opt_int(cfg, "interleave_moe_layer_step", step) or 1  # Llama-4: every step-th layer
    period = _opt_int(cfg, "expert_layer_period", 1) or 1  # Jamba: layers offset, offset + period, ...
    offset = _opt_int(cfg, "expert_layer_offset", 0) if "expert_layer_period" in cfg else 0
    only = cfg.get("mlp_only_layers") or []
    only = {int(i) for i in only} if isinstance(only, list) else set()
    moe_layers = [
        i
        for i in range(n_layers)
        if i >= first_dense
        and i % freq == 0
        and (i + 1) % step == 0
        and i not in only
        and i % period == offset % period
    ]
    return {
        "experts": experts,
        "per_tok": per_tok,
        "width": width,
        "shared": shared,
        "shared_gate": shared_gate,
        "moe_layers": len(moe_layers),
        "score_bias": family == "deepseek_v3" or cfg.get("topk_method") == "noaux_tc",
    }


def _windows(cfg: dict, fam: dict, family: str, n_layers: int) -> list[int | None]:
    """Tokens each layer keeps.

    ``layer_types`` when given; Gemma-3 ``sliding_window_pattern`` (every Nth layer global); Gemma-2
    alternating; Qwen ``use_sliding_window`` from ``max_window_layers``; else every layer keeps
    ``sliding_window`` when the config has one."""
    window = cfg.get("sliding_window")
    if not (isinstance(window, (int, float)) and not isinstance(window, bool) and window > 0):
        return [None] * n_layers
    window = int(window)
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == n_layers:
        return [window if str(t).startswith("sliding") else None for t in layer_types]
    pattern = cfg.get("sliding_window_pattern")
    if fam.get("swa") == "pattern" or (isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 1):
        n = int(pattern or 6)
        return [None if (i + 1) % n == 0 else window for i in range(n_layers)]
    if fam.get("swa") == "alternate":
        return [window if i % 2 == 0 else None for i in range(n_layers)]  # gemma2: even layers are local
    if family.startswith("qwen") or "use_sliding_window" in cfg:
        if cfg.get("use_sliding_window"):
            first = int(cfg.get("max_window_layers") or 0)
            return [window if i >= first else None for i in range(n_layers)]
        return [None] * n_layers
    return [window] * n_layers


def _hybrid_roles(cfg: dict, kind: str, n_layers: int) -> list[str]:
    """Each layer's kind: "attn", "mamba", "mlp" or "both".

    Per layer: "attn", "mamba" or "mlp" (Nemotron-H blocks), or "both" (Falcon-H1: attention and
    Mamba-2 side by side). Qwen3-Next: ``layer_types`` or every ``full_attention_interval``-th layer
    full; Jamba: attention at ``attn_layer_offset`` every ``attn_layer_period``; Nemotron-H:
    ``hybrid_override_pattern`` (M Mamba-2, * attention, - MLP, E MoE)."""
    if kind == "qwen3_next":
        types = cfg.get("layer_types")
        if isinstance(types, list) and len(types) == n_layers:
            return ["attn" if str(t) == "full_attention" else "mamba" for t in types]
        interval = _opt_int(cfg, "full_attention_interval", 4) or 4
        return ["attn" if (i + 1) % interval == 0 else "mamba" for i in range(n_layers)]
    if kind == "jamba":
        period = _opt_int(cfg, "attn_layer_period", 8) or 8
        offset = _opt_int(cfg, "attn_layer_offset", 4)
        return ["attn" if i % period == offset else "mamba" for i in range(n_layers)]
    if kind == "nemotron_h":
        pattern = cfg.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or len(pattern) != n_layers or set(pattern) - set("M*-E"):
            raise BadInput(
                f"nemotron_h: hybrid_override_pattern must be {n_layers} characters of M, *, - and E, got {pattern!r}",
                "pass the model's published config.json",
            )
        return [{"M": "mamba", "*": "attn", "-": "mlp", "E": "moe"}[c] for c in pattern]
    return ["both"] * n_layers  # falcon_h1


def _mamba_layer(cfg: dict, kind: str, h: int) -> tuple[MambaShape, int]:
    """(state shape, parameters) of one Mamba / Gated DeltaNet mixer.

    (state shape, parameters) of one Mamba / Gated DeltaNet mixer (vLLM's
    get_mamba_state_shape_from_config of jamba.py, nemotron_h.py, falcon_h1.py, qwen3_next.py, 0.11;
    parameters as in transformers' modules)."""
    if kind == "qwen3_next":
        kh, vh = _int_key(cfg, "linear_num_key_heads"), _int_key(cfg, "linear_num_value_heads")
        kd, vd, k = (
            _int_key(cfg, "linear_key_head_dim"),
            _int_key(cfg, "linear_value_head_dim"),
            _int_key(cfg, "linear_conv_kernel_dim", 4),
        )
        key, val = kh * kd, vh * vd
        # in_proj_qkvz, in_proj_ba, depthwise conv1d (no bias), dt_bias + A_log, gated RMSNorm, out_proj
        params = h * (2 * key + 2 * val) + h * 2 * vh + (2 * key + val) * k + 2 * vh + vd + val * h
        return MambaShape(
            "gdn", k, k_heads=kh, v_heads=vh, k_dim=kd, v_dim=vd, source="Gated DeltaNet (linear_* keys)"
        ), params
    if kind == "jamba":
        inner = _int_key(cfg, "mamba_expand", 2) * h
        ds, k = _int_key(cfg, "mamba_d_state", 16), _int_key(cfg, "mamba_d_conv", 4)
        dt = _int_key(cfg, "mamba_dt_rank") if cfg.get("mamba_dt_rank") not in (None, "auto") else -(-h // 16)
        pb = bool(cfg.get("mamba_proj_bias", False))
        params = (
            h * 2 * inner
            + (2 * inner if pb else 0)
            + inner * k
            + (inner if cfg.get("mamba_conv_bias", True) else 0)
            + inner * (dt + 2 * ds)
            + (dt * inner + inner)
            + inner * ds
            + inner
            + inner * h
            + (h if pb else 0)
            + dt
            + 2 * ds
        )  # in_proj, conv1d, x_proj, dt_proj, A_log, D, out_proj, dt/B/C layernorms
        return MambaShape(
            "mamba1", k, inner=inner, d_state=ds, source="Mamba-1 (mamba_expand x hidden, mamba_d_state)"
        ), params
    if kind == "nemotron_h":
        heads, hd = _int_key(cfg, "mamba_num_heads"), _int_key(cfg, "mamba_head_dim")
        inner, ng = heads * hd, _int_key(cfg, "n_groups", 1)
        ds, k = _int_key(cfg, "ssm_state_size"), _int_key(cfg, "conv_kernel", 4)
        bias, conv_bias = bool(cfg.get("use_bias", False)), bool(cfg.get("use_conv_bias", True))
    else:  # falcon_h1
        heads, hd = _int_key(cfg, "mamba_n_heads"), _int_key(cfg, "mamba_d_head")
        inner = (
            _int_key(cfg, "mamba_d_ssm")
            if cfg.get("mamba_d_ssm") is not None
            else int(_num(cfg.get("mamba_expand"), 2) * h)
        )
        ng, ds, k = _int_key(cfg, "mamba_n_groups", 1), _int_key(cfg, "mamba_d_state"), _int_key(cfg, "mamba_d_conv", 4)
        bias, conv_bias = bool(cfg.get("mamba_proj_bias", False)), bool(cfg.get("mamba_conv_bias", True))
    conv_dim = inner + 2 * ng * ds
    proj = 2 * inner + 2 * ng * ds + heads
    params = (
        h * proj
        + (proj if bias else 0)
        + conv_dim * k
        + (conv_dim if conv_bias else 0)
        + 3 * heads
        + inner
        + inner * h
        + (h if bias else 0)
    )  # in_proj, conv1d, dt_bias/A_log/D, gated norm, out_proj
    return MambaShape(
        "mamba2",
        k,
        inner=inner,
        n_groups=ng,
        heads=heads,
        head_dim=hd,
        d_state=ds,
        source="Mamba-2 (heads x head_dim, n_groups, state size)",
    ), params


# Substrings of config keys that change the KV cache layout (per-layer attention kind, a state in
# place of a cache, a latent, shared caches). A family gpuops does not know must have none of them
# left unread, else its KV plan is unverified.
LAYOUT_KEY_HINTS = (
    "mamba",
    "ssm",
    "linear_",
    "conv_kernel",
    "attn_layer",
    "block_type",
    "hybrid",
    "lora_rank",
    "index_",
    "kv_shared",
    "sliding",
    "window",
    "chunk",
    "layer_types",
    "attention_interval",
    "attn_type",
    "block_configs",
    "no_rope",
    "global_attn",
    "local_attn",
    "compress",
    "rwkv",
    "retention",
)
# Keys that carry such a hint but do not change the cache, or that the readers below consume.
_LAYOUT_KEYS_READ = {
    "sliding_window",
    "layer_types",
    "sliding_window_pattern",
    "use_sliding_window",
    "max_window_layers",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "index_topk",
    "index_head_dim",
    "index_n_heads",
    "num_kv_shared_layers",
    "attn_layer_indices",
    "layers_block_type",
    "hybrid_override_pattern",
    "full_attention_interval",
}
_MAMBA_KEYS_READ = {
    "qwen3_next": {
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
    },
    "nemotron_h": {
        "mamba_num_heads",
        "mamba_head_dim",
        "n_groups",
        "ssm_state_size",
        "conv_kernel",
        "mamba_hidden_act",
        "mamba_proj_bias",
        "use_mamba_kernels",
        "chunk_size",
        "mamba_d_state",
    },
    "falcon_h1": {
        "mamba_n_heads",
        "mamba_d_head",
        "mamba_d_ssm",
        "mamba_expand",
        "mamba_n_groups",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_proj_bias",
        "mamba_conv_bias",
        "mamba_chunk_size",
        "use_mamba_kernels",
        "mamba_dt_rank",
        "mamba_rms_norm",
        "mamba_norm_before_gate",
        "mamba_use_mlp",
    },
}


def _generic_state_kind(cfg: dict) -> str | None:
    """Which state reader fits a config gpuops has no family for: its Mamba / linear-attention keys."""
    if cfg.get("linear_num_value_heads") is not None and cfg.get("linear_key_head_dim") is not None:
        return "qwen3_next"
    if cfg.get("mamba_num_heads") is not None and cfg.get("mamba_head_dim") is not None:
        return "nemotron_h"
    if cfg.get("mamba_n_heads") is not None and cfg.get("mamba_d_head") is not None:
        return "falcon_h1"
    return None


def _generic_roles(cfg: dict, n_layers: int) -> list[str] | None:
    """Attention / state role of each layer from a hybrid layout key of any family, or None without one.

    ``attn_layer_indices`` (Bamba), ``layers_block_type`` (Jamba-style), ``layer_types`` naming
    linear_attention / mamba layers (Qwen3-Next, Granite-4), ``hybrid_override_pattern`` (Nemotron-H)."""
    idx = cfg.get("attn_layer_indices")
    if isinstance(idx, list) and all(isinstance(i, int) for i in idx):
        return ["attn" if i in set(idx) else "mamba" for i in range(n_layers)]
    for key in ("layers_block_type", "layer_types"):
        types = cfg.get(key)
        if (
            isinstance(types, list)
            and len(types) == n_layers
            and any(str(t) in ("mamba", "linear_attention") for t in types)
        ):
            return ["mamba" if str(t) in ("mamba", "linear_attention") else "attn" for t in types]
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) == n_layers:
        return [{"M": "mamba", "*": "attn"}.get(c, "mlp") for c in pattern]
    return None


# The keys that state each layer's kind in a config, whatever its model_type (what an unknown
# family's layout is verified by; MLA is stated by kv_lora_rank with qk_rope_head_dim).
_LAYOUT_STATING_KEYS = (
    "layer_types",
    "layers_block_type",
    "hybrid_override_pattern",
    "attn_layer_indices",
    "sliding_window_pattern",
)
# The layer kinds a ``layer_types`` list may name for gpuops to size it (transformers' names:
# configuration_utils.ALLOWED_LAYER_TYPES for attention, the hybrids' "mamba" / "linear_attention").
_KNOWN_LAYER_TYPES = ("full_attention", "attention", "sliding_attention", "mamba", "linear_attention")


def _layout_stated(cfg: dict, n_layers: int, mla: bool, hybrid_read: bool) -> bool:
    """Whether the config of a family gpuops does not know states its layer layout in keys gpuops reads.

    True for MLA (``kv_lora_rank`` and ``qk_rope_head_dim``: every layer holds the latent), for a
    hybrid layout read from ``attn_layer_indices`` / ``layers_block_type`` / ``layer_types`` /
    ``hybrid_override_pattern`` with a state gpuops sizes (``hybrid_read``), for a
    ``sliding_window`` with a ``sliding_window_pattern`` (every Nth layer global), and for a ``layer_types``
    list of ``n_layers`` entries that are all kinds gpuops sizes (``_KNOWN_LAYER_TYPES``; a sliding
    layer needs ``sliding_window``). A config with none of these states nothing: its plan is llama
    attention on every layer, a guess."""
    if mla or hybrid_read:
        return True
    window = cfg.get("sliding_window")
    has_window = isinstance(window, (int, float)) and not isinstance(window, bool) and window > 0
    pattern = cfg.get("sliding_window_pattern")
    if has_window and isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 1:
        return True  # every pattern-th layer global, the others sliding (``_windows``)
    types = cfg.get("layer_types")
    if not (isinstance(types, list) and len(types) == n_layers and types):
        return False
    if any(str(t) not in _KNOWN_LAYER_TYPES for t in types):
        return False
    return has_window or not any(str(t).startswith("sliding") for t in types)


def _unread_layout_keys(cfg: dict, read: set[str]) -> list[str]:
    """Keys of ``cfg`` that look like attention-layout keys (``LAYOUT_KEY_HINTS``) and were not read."""
    return sorted(
        k
        for k in cfg
        if any(h in k for h in LAYOUT_KEY_HINTS) and k not in read and cfg.get(k) not in (None, False, [], 0)
    )


def architecture(config: dict) -> Architecture:
    """Count parameters and cache shapes from a config.json dict.

    Families: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, gemma3
    (text and multimodal: ``text_config`` with transformers' defaults), phi3, deepseek_v2/v3 (MLA),
    gpt_oss, llama4 (shared expert, chunked local attention), the hybrids qwen3_next (Gated DeltaNet),
    jamba (Mamba-1), nemotron_h (Mamba-2) and falcon_h1 (Mamba-2 beside attention, counted but not
    checked against a published count), and vision towers from ``vision_config`` (SigLIP, Pixtral,
    Llama-4, Qwen2.5-VL). MoE from the keys of any family. Another ``model_type`` with the five base
    keys is counted as a llama-style decoder, marked ``known=False`` and says so in ``notes``.
    Raises BadInput naming missing or non-numeric keys.
    """
    cfg, vision = _text_config(config)
    family = str(cfg.get("model_type") or "")
    notes: list[str] = []
    fam = _FAMILIES.get(family)
    known = fam is not None
    _require(cfg, _BASE_KEYS if not _moe_keys_only(cfg) else _BASE_KEYS[:3] + ("vocab_size",), family)
    if fam is None:
        fam = _FAMILIES["llama"]
        notes.append(
            f"model_type {family or '(none)'!r} is not a family gpuops knows; counted as a llama-style decoder (gated MLP, no biases)"
        )
    elif fam.get("unchecked"):
        known = False
        notes.append(f"{family}: counted from its module shapes, not yet checked against a published parameter count")
    h = _int_key(cfg, "hidden_size")
    n_layers = _int_key(cfg, "num_hidden_layers")
    heads = _int_key(cfg, "num_attention_heads")
    vocab = _int_key(cfg, "vocab_size")
    inter = (
        _int_key(cfg, "intermediate_size")
        if cfg.get("intermediate_size") is not None
        else _int_key(cfg, "moe_intermediate_size")
    )
    kv_heads = _int_key(cfg, "num_key_value_heads") if cfg.get("num_key_value_heads") is not None else heads
    hd_key = (
        "head_dim"
        if cfg.get("head_dim") is not None
        else ("attention_head_dim" if cfg.get("attention_head_dim") is not None else None)
    )
    if hd_key:
        head_dim = _int_key(cfg, hd_key)
    else:
        if h % heads:
            raise BadInput(
                f"hidden_size {h} is not a multiple of num_attention_heads {heads} and the config has no head_dim",
                "add head_dim to config.json",
            )
        head_dim = h // heads
    if heads % kv_heads:
        raise BadInput(
            f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}", "fix config.json"
        )
    tied = cfg.get("tie_word_embeddings", fam["tied"])
    if tied is None and config is not cfg:
        tied = config.get("tie_word_embeddings")
    tied = bool(fam["tied"] if tied is None else tied)
    # `attention_bias` (llama-style configs) puts a bias on q, k, v and o; qwen2 always has q/k/v
    # biases and never an o bias, whatever the key says.
    attn_bias = bool(cfg.get("attention_bias", False))
    qkv_bias = fam["qkv_bias"] or attn_bias
    o_bias = attn_bias and not family.startswith("qwen2")
    mlp_bias = bool(cfg.get("mlp_bias", False))
    max_ctx = cfg.get("max_position_embeddings")
    max_ctx = (
        int(max_ctx) if isinstance(max_ctx, (int, float)) and not isinstance(max_ctx, bool) and max_ctx > 0 else None
    )

    hybrid = fam.get("hybrid")
    read_keys = set(_LAYOUT_KEYS_READ)
    generic_roles = None if known or fam.get("unchecked") else _generic_roles(cfg, n_layers)
    if generic_roles is not None and "mamba" in generic_roles:
        hybrid = _generic_state_kind(cfg)
        if hybrid is None:  # a hybrid layout whose state gpuops cannot size
            generic_roles = None
    if hybrid:
        read_keys |= _MAMBA_KEYS_READ.get(hybrid, set()) | {"attn_layer_offset", "attn_layer_period"}
    roles = (
        generic_roles
        if generic_roles is not None and hybrid
        else (_hybrid_roles(cfg, hybrid, n_layers) if hybrid else ["attn"] * n_layers)
    )
    attn_idx = [i for i, r in enumerate(roles) if r in ("attn", "both")]
    mamba_n = sum(1 for r in roles if r in ("mamba", "both"))
    mlp_n = sum(1 for r in roles if r not in ("attn", "mamba")) if hybrid == "nemotron_h" else n_layers
    if "moe" in roles:
        known = False
        notes.append("nemotron_h: MoE blocks (E) are not counted yet")

    bd: dict[str, int] = {}
    bd["embeddings"] = vocab * h
    bd["lm_head"] = 0 if tied else h * vocab
    qk_norm = 2 * head_dim if fam.get("qk_norm") else 0
    bd["norms"] = n_layers * fam["norms"] * h + len(attn_idx) * qk_norm + h  # + final norm

    mla = bool(fam.get("mla")) or (cfg.get("kv_lora_rank") is not None and cfg.get("qk_rope_head_dim") is not None)
    sparse = mla and cfg.get("index_topk") is not None
    index_head_dim = _int_key(cfg, "index_head_dim", 128) if sparse else 0
    if mla:
        _require(cfg, _MLA_KEYS, family)
        kv_rank = _int_key(cfg, "kv_lora_rank")
        rope = _int_key(cfg, "qk_rope_head_dim")
        nope = _int_key(cfg, "qk_nope_head_dim")
        v_dim = _int_key(cfg, "v_head_dim")
        q_rank = cfg.get("q_lora_rank")
        qk = nope + rope
        if q_rank:
            q_rank = _int_key(cfg, "q_lora_rank")
            attn = h * q_rank + q_rank + q_rank * heads * qk  # q_a_proj, q_a_layernorm, q_b_proj
        else:
            attn = h * heads * qk  # q_proj
        attn += h * (kv_rank + rope) + kv_rank  # kv_a_proj_with_mqa, kv_a_layernorm
        attn += kv_rank * heads * (nope + v_dim)  # kv_b_proj (k_nope and v for every head)
        attn += heads * v_dim * h  # o_proj
        layer_kv = kv_rank + rope  # the compressed latent + the decoupled rope key, per token per layer
        kv_split = 1
    else:
        q_out = heads * head_dim * (2 if fam.get("gated_q") else 1)  # Qwen3-Next: q and its output gate
        q = h * q_out + (q_out if qkv_bias else 0)
        kv = 2 * (h * kv_heads * head_dim + (kv_heads * head_dim if qkv_bias else 0))
        o = heads * head_dim * h + (h if o_bias else 0)
        attn = q + kv + o + (heads if fam.get("sinks") else 0)
        layer_kv = 2 * kv_heads * head_dim
        kv_split = kv_heads
    bd["attention"] = len(attn_idx) * attn
    mamba = None
    if hybrid:
        mamba, per_mamba = _mamba_layer(cfg, hybrid, h)
        bd["mamba"] = mamba_n * per_mamba

    gated = hybrid != "nemotron_h"  # Nemotron-H: relu2 up/down, no gate

    def mlp(width: int) -> int:  # gated: gate, up (h x width) and down (width x h)
        return (3 if gated else 2) * h * width + (((2 if gated else 1) * width + h) if mlp_bias else 0)

    experts = per_tok = 0
    expert_params = 0
    moe = _moe_layout(cfg, n_layers, inter, family)
    if moe:
        if known and not (
            family.startswith("deepseek")
            or family.endswith("moe")
            or family in ("mixtral", "gpt_oss", "llama4_text", "qwen3_next", "jamba")
        ):
            notes.append(f"{family}: mixture of experts detected from its config keys")
        experts, per_tok, width, ml = moe["experts"], moe["per_tok"], moe["width"], moe["moe_layers"]
        dense_width = (
            _int_key(cfg, "intermediate_size_mlp")
            if family == "llama4_text" and cfg.get("intermediate_size_mlp")
            else inter
        )
        expert_params = ml * experts * mlp(width)
        bd["experts"] = expert_params
        if fam.get("expert_bias"):
            bd["expert_bias"] = ml * experts * (2 * width + h)
            expert_params += bd["expert_bias"]
        bd["mlp"] = (n_layers - ml) * mlp(dense_width) + ml * (mlp(moe["shared"]) if moe["shared"] else 0)
        bd["router"] = ml * (
            h * experts
            + (experts if moe["score_bias"] or fam.get("router_bias") else 0)
            + (h if moe["shared_gate"] else 0)
        )
        act_width = max(dense_width if ml < n_layers else 0, per_tok * width + moe["shared"])
        if cfg.get("num_nextn_predict_layers"):
            notes.append(
                "multi-token-prediction layers (num_nextn_predict_layers) are not counted: serving loads them only for speculative decoding"
            )
    else:
        bd["mlp"] = mlp_n * mlp(inter)
        act_width = inter
    if vision is not None:
        top = str(config.get("model_type") or "")
        counted = _vision_params(vision, h, top)
        if counted is not None:
            bd["vision"], vnote = counted
            notes.append(vnote)
        else:
            notes.append(
                f"vision tower of {top or 'this model'} ({vision.get('model_type') or 'no model_type'}) not counted; "
                "the checkpoint's byte count, when read, includes it"
            )
            known = False
    params = sum(bd.values())
    active = params - expert_params + (expert_params * per_tok // experts if experts else 0)
    shared = _opt_int(cfg, "num_kv_shared_layers")
    if shared >= n_layers:
        raise BadInput(
            f"num_kv_shared_layers {shared} leaves no layer of the {n_layers} holding a cache", "fix config.json"
        )
    cache_idx = [i for i in attn_idx if i < n_layers - shared]  # the last `shared` layers read an earlier cache
    windows = _windows(cfg, fam, family, n_layers)
    windows = [windows[i] for i in cache_idx]
    kinds = [FULL if w is None else SLIDING for w in windows]
    chunk = cfg.get("attention_chunk_size") if family == "llama4_text" else None
    chunk = int(chunk) if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0 else None
    if chunk:
        # vllm llama4.py: the RoPE layers (no_rope_layers[i] == 1) attend in chunks; the others are global.
        # transformers' default when the config leaves the list empty: every 4th layer global.
        nrl = cfg.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(n_layers)]
        if not isinstance(nrl, list) or len(nrl) != n_layers:
            raise BadInput(
                f"llama4: no_rope_layers must list {n_layers} layers", "pass the model's published config.json"
            )
        kinds = [CHUNKED if nrl[i] else FULL for i in cache_idx]
        read_keys |= {"attention_chunk_size", "no_rope_layers"}
    unread = [] if known else _unread_layout_keys(cfg, read_keys)
    # a family with its own reader states its layout by its model_type (falcon_h1, whose weights are
    # unchecked, and a model whose vision tower is not counted, included)
    stated = family in _FAMILIES or _layout_stated(cfg, n_layers, mla, bool(generic_roles is not None and hybrid))
    if unread:
        layout_note = (
            f"model_type {family or '(none)'!r}: gpuops cannot read its attention layout from {', '.join(unread)}; "
            "the KV plan assumes the layers it could read"
        )
    elif not stated:
        layout_note = (
            f"model_type {family or '(none)'!r} is not a family gpuops knows and its config states no layer layout "
            f"gpuops reads ({', '.join(_LAYOUT_STATING_KEYS)}, or MLA's kv_lora_rank and qk_rope_head_dim); "
            "the KV plan assumes llama attention on every layer"
        )
    else:
        layout_note = ""
    return Architecture(
        family=family or "unknown",
        hidden=h,
        layers=n_layers,
        heads=heads,
        kv_heads=kv_heads if not mla else heads,
        head_dim=head_dim,
        vocab=vocab,
        max_context=max_ctx,
        params=params,
        active_params=active,
        expert_params=expert_params,
        experts=experts,
        experts_per_tok=per_tok,
        breakdown=bd,
        layer_kv_elems=tuple([layer_kv] * len(cache_idx)),
        layer_window=tuple(windows),
        kv_split=kv_split,
        act_width=act_width,
        mla=mla,
        notes=tuple(notes),
        known=known,
        tied=tied,
        layer_kind=tuple(kinds),
        mamba=mamba,
        mamba_layers=mamba_n,
        attention_chunk=chunk,
        vision_tokens=_vision_tokens(config, vision) if vision is not None and "vision" in bd else 0,
        sparse_mla=sparse,
        index_head_dim=index_head_dim,
        kv_shared_layers=shared,
        layout_verified=not unread and stated,
        layout_note=layout_note,
        rope_context=_rope_context(cfg, f"{config.get('model_type') or ''} {family}", max_ctx),
    )


def _rope_context(cfg: dict, model_type: str, max_ctx: int | None) -> int | None:
    """The context vLLM derives from ``max_position_embeddings`` and the config's RoPE scaling, tokens.

    None without a ``rope_scaling`` (or transformers v5 ``rope_parameters``, one per layer type).
    vLLM 0.33 ``vllm/config/model.py _get_and_verify_max_len``: Gemma-3's ``max_position_embeddings``
    is already scaled (no factor); a ``rope_type`` of su, longrope or llama3 keeps it as it is (it is
    the extended length); any other multiplies it by ``factor`` (1 when absent), yarn starting from
    ``original_max_position_embeddings``. A ``--max-model-len`` beyond it is refused at start-up."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not isinstance(rs, dict) or not rs or max_ctx is None:
        return None
    if "gemma3" in model_type:
        return max_ctx
    parts = list(rs.values()) if all(isinstance(v, dict) for v in rs.values()) else [rs]
    derived: float = max_ctx
    factor = 1.0
    for rp in parts:
        kind = str(rp.get("rope_type") or rp.get("type") or "default")
        if kind in ("su", "longrope", "llama3"):
            continue
        f = rp.get("factor", factor)
        factor = float(f) if isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 else factor
        orig = rp.get("original_max_position_embeddings")
        if kind == "yarn" and isinstance(orig, (int, float)) and not isinstance(orig, bool) and orig > 0:
            derived = orig
    return int(derived * factor)


def _vision_tokens(config: dict, vision: dict) -> int:
    """Text tokens the largest image gives, from each processor's defaults.

    Gemma-3 ``mm_tokens_per_image`` (256); Pixtral one per 16-px patch + a break per row (1024 px:
    4,160); Llama-4 (patches x pixel_shuffle_ratio^2) per tile x (16 tiles + 1 global); Qwen2.5-VL
    max_pixels 12,845,056 / 28^2 = 16,384."""
    top, vtype = str(config.get("model_type") or ""), str(vision.get("model_type") or "")
    if top == "gemma3":
        return int(_num(config.get("mm_tokens_per_image"), 256))
    if vtype == "pixtral":
        n = int(_num(vision.get("image_size"), 1024) // _num(vision.get("patch_size"), 16))
        return n * n + n
    if vtype == "llama4_vision_model":
        per_tile = (_num(vision.get("image_size"), 336) // _num(vision.get("patch_size"), 14)) ** 2 * _num(
            vision.get("pixel_shuffle_ratio"), 0.5
        ) ** 2
        return int(per_tile * 17)
    if top == "qwen2_5_vl":
        return 12_845_056 // (28 * 28)
    return int(_num(vision.get("image_size"), 224) // _num(vision.get("patch_size"), 16)) ** 2


def _moe_keys_only(cfg: dict) -> bool:
    """An MoE config may leave out the dense ``intermediate_size`` when it has ``moe_intermediate_size``."""
    return (
        cfg.get("intermediate_size") is None
        and cfg.get("moe_intermediate_size") is not None
        and any(cfg.get(k) for k in MOE_EXPERT_KEYS)
    )
