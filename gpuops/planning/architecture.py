"""A model's ``config.json`` read into an ``Architecture``: layers, heads, KV heads (GQA), MLA, MoE
layout, sliding windows, vision tower, and the parameter count from matrix shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from gpuops.errors import BadInput


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
}
_BASE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
_MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
# Keys that make a config a mixture of experts, any family (issue 12): the expert count under any of
# its names, and the layout keys.
MOE_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
MOE_LAYOUT_KEYS = ("moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace",
                   "decoder_sparse_step", "moe_layer_freq", "mlp_only_layers", "num_experts_per_tok")
# transformers' Gemma3TextConfig defaults (transformers/models/gemma3/configuration_gemma3.py, 4.50+):
# Gemma-3 4B/12B/27B publish a multimodal config whose text_config leaves these out.
GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
    "sliding_window": 4096, "sliding_window_pattern": 6, "tie_word_embeddings": True, "query_pre_attn_scalar": 256,
}
# transformers' SiglipVisionConfig defaults (Gemma-3 configs state every size they use).
SIGLIP_DEFAULTS: dict[str, Any] = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                                   "num_channels": 3, "image_size": 224, "patch_size": 16}
_TEXT_DEFAULTS = {"gemma3_text": GEMMA3_TEXT_DEFAULTS}


@dataclass(frozen=True)
class Architecture:
    """What the planner needs from a config, all derived from matrix shapes.

    ``params``: every weight resident in memory. ``active_params``: weights one token goes through
    (non-routed experts excluded); FLOPs per generated token = 2 x active_params.
    ``expert_params``: routed-expert weights (0 for dense models). ``breakdown``: params per part
    (embeddings, lm_head, norms, attention, mlp, experts, router, vision); attention, mlp and
    experts are the linear layers quantization shrinks. ``layer_kv_elems``: cache elements per token
    per layer. ``layer_window``: tokens a layer keeps (None = all). ``kv_split``: how far tensor
    parallelism can split the cache (kv heads; 1 for MLA, whose latent is replicated on every GPU).
    ``act_width``: widest per-token intermediate (elements). ``known``: the family is one gpuops
    counts (else the count is a llama-style guess). ``tied``: lm_head shares the embedding matrix.
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

    @property
    def linear_params(self) -> int:
        """Parameters in the linear layers of attention, MLP and experts (what quantization shrinks)."""
        return sum(self.breakdown.get(k, 0) for k in ("attention", "mlp", "experts"))


def _int_key(cfg: dict, key: str, default: Any = None, *, allow_zero: bool = False) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise BadInput(f"config key {key} must be a whole number, got {v!r}", "fix config.json (published configs have integers here)")
    v = int(v)
    if v < 0 or (v == 0 and not allow_zero):
        raise BadInput(f"config key {key} must be > 0, got {v}", "fix config.json (published configs have positive sizes here)")
    return v


def _opt_int(cfg: dict, key: str, default: int = 0) -> int:
    return _int_key(cfg, key, allow_zero=True) if cfg.get(key) is not None else default


def _text_config(cfg: dict) -> tuple[dict, dict | None]:
    """(language-model config, vision config or None). Multimodal configs (llava, gemma3, ...) keep
    the language model under ``text_config``; its missing keys take the library's defaults for its
    ``model_type`` (Gemma-3: ``GEMMA3_TEXT_DEFAULTS``)."""
    text = cfg.get("text_config")
    if isinstance(text, dict) and not all(k in cfg for k in _BASE_KEYS):
        mtype = str(text.get("model_type") or ("gemma3_text" if cfg.get("model_type") == "gemma3" else ""))
        merged = {**_TEXT_DEFAULTS.get(mtype, {}), **{k: v for k, v in text.items() if v is not None}, "model_type": mtype or text.get("model_type")}
        vision = cfg.get("vision_config") if isinstance(cfg.get("vision_config"), dict) else None
        return merged, vision
    mtype = str(cfg.get("model_type") or "")
    if mtype in _TEXT_DEFAULTS:
        return {**_TEXT_DEFAULTS[mtype], **{k: v for k, v in cfg.items() if v is not None}}, None
    return cfg, None


def _require(cfg: dict, keys: Iterable[str], family: str) -> None:
    missing = [k for k in keys if cfg.get(k) is None]
    if missing:
        raise BadInput(f"config ({family or 'no model_type'}) lacks {', '.join(missing)}",
                       "the planner needs these config.json keys for this family; pass the model's published config.json")


def _vision_params(vision: dict, text_hidden: int, top_type: str) -> tuple[int, str]:
    """(parameters, note) of a SigLIP-style vision tower and its projector (Gemma-3: SigLIP-400M with
    ``mm_input_projection_weight`` vision_hidden x text_hidden and ``mm_soft_emb_norm``)."""
    v = {**SIGLIP_DEFAULTS, **{k: x for k, x in vision.items() if x is not None}}
    hv, iv, lv = _int_key(v, "hidden_size"), _int_key(v, "intermediate_size"), _int_key(v, "num_hidden_layers")
    p, img, ch = _int_key(v, "patch_size"), _int_key(v, "image_size"), _int_key(v, "num_channels")
    patches = (img // p) ** 2
    layer = 4 * (hv * hv + hv) + (hv * iv + iv) + (iv * hv + hv) + 2 * 2 * hv  # q,k,v,o + fc1, fc2 (biases) + 2 LayerNorms
    tower = ch * p * p * hv + hv + patches * hv + lv * layer + 2 * hv  # patch conv, position embedding, layers, post-LN
    projector = hv * text_hidden + hv
    return tower + projector, f"vision tower counted: {v.get('model_type', 'siglip')} {lv} layers x {hv} wide + projector ({top_type})"


def _moe_layout(cfg: dict, n_layers: int, inter: int, family: str) -> dict | None:
    """The MoE layout of any family, or None for a dense model: experts E, experts per token k, expert
    width, shared-expert width, and which layers are MoE (``first_k_dense_replace``,
    ``moe_layer_freq``, ``decoder_sparse_step``, ``mlp_only_layers``)."""
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
    first_dense = _opt_int(cfg, "first_k_dense_replace")
    freq = _opt_int(cfg, "moe_layer_freq", 1) or 1
    step = _opt_int(cfg, "decoder_sparse_step", 1) or 1
    only = cfg.get("mlp_only_layers") or []
    only = {int(i) for i in only} if isinstance(only, list) else set()
    moe_layers = [i for i in range(n_layers)
                  if i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in only]
    return {"experts": experts, "per_tok": per_tok, "width": width, "shared": shared, "shared_gate": shared_gate,
            "moe_layers": len(moe_layers), "score_bias": family == "deepseek_v3" or cfg.get("topk_method") == "noaux_tc"}


def _windows(cfg: dict, fam: dict, family: str, n_layers: int) -> list[int | None]:
    """Tokens each layer keeps: ``layer_types`` when given; Gemma-3 ``sliding_window_pattern`` (every
    Nth layer global); Gemma-2 alternating; Qwen ``use_sliding_window`` from ``max_window_layers``;
    else every layer keeps ``sliding_window`` when the config has one."""
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


def architecture(config: dict) -> Architecture:
    """Count parameters and cache shapes from a config.json dict.

    Families: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, gemma3
    (text and multimodal: ``text_config`` with transformers' defaults, SigLIP vision tower counted),
    phi3, deepseek_v2/v3 (MLA). MoE from the keys of any family. Another ``model_type`` with the five
    base keys is counted as a llama-style decoder, marked ``known=False`` and says so in ``notes``.
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
        notes.append(f"model_type {family or '(none)'!r} is not a family gpuops knows; counted as a llama-style decoder (gated MLP, no biases)")
    h = _int_key(cfg, "hidden_size")
    n_layers = _int_key(cfg, "num_hidden_layers")
    heads = _int_key(cfg, "num_attention_heads")
    vocab = _int_key(cfg, "vocab_size")
    inter = _int_key(cfg, "intermediate_size") if cfg.get("intermediate_size") is not None else _int_key(cfg, "moe_intermediate_size")
    kv_heads = _int_key(cfg, "num_key_value_heads") if cfg.get("num_key_value_heads") is not None else heads
    if cfg.get("head_dim") is not None:
        head_dim = _int_key(cfg, "head_dim")
    else:
        if h % heads:
            raise BadInput(f"hidden_size {h} is not a multiple of num_attention_heads {heads} and the config has no head_dim",
                           "add head_dim to config.json")
        head_dim = h // heads
    if heads % kv_heads:
        raise BadInput(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}", "fix config.json")
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
    max_ctx = int(max_ctx) if isinstance(max_ctx, (int, float)) and not isinstance(max_ctx, bool) and max_ctx > 0 else None

    bd: dict[str, int] = {}
    bd["embeddings"] = vocab * h
    bd["lm_head"] = 0 if tied else h * vocab
    norms_per_layer = fam["norms"] * h + (2 * head_dim if fam.get("qk_norm") else 0)
    bd["norms"] = n_layers * norms_per_layer + h  # + final norm

    mla = bool(fam.get("mla"))
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
        q = h * heads * head_dim + (heads * head_dim if qkv_bias else 0)
        kv = 2 * (h * kv_heads * head_dim + (kv_heads * head_dim if qkv_bias else 0))
        o = heads * head_dim * h + (h if o_bias else 0)
        attn = q + kv + o
        layer_kv = 2 * kv_heads * head_dim
        kv_split = kv_heads
    bd["attention"] = n_layers * attn

    def mlp(width: int) -> int:  # gated: gate, up (h x width) and down (width x h)
        return 3 * h * width + ((2 * width + h) if mlp_bias else 0)

    experts = per_tok = 0
    expert_params = 0
    moe = _moe_layout(cfg, n_layers, inter, family)
    if moe:
        if known and not (family.startswith("deepseek") or family.endswith("moe") or family == "mixtral"):
            notes.append(f"{family}: mixture of experts detected from its config keys")
        experts, per_tok, width, ml = moe["experts"], moe["per_tok"], moe["width"], moe["moe_layers"]
        expert_params = ml * experts * mlp(width)
        bd["experts"] = expert_params
        bd["mlp"] = (n_layers - ml) * mlp(inter) + ml * (mlp(moe["shared"]) if moe["shared"] else 0)
        bd["router"] = ml * (h * experts + (experts if moe["score_bias"] else 0) + (h if moe["shared_gate"] else 0))
        act_width = max(inter if ml < n_layers else 0, per_tok * width + moe["shared"])
        if cfg.get("num_nextn_predict_layers"):
            notes.append("multi-token-prediction layers (num_nextn_predict_layers) are not counted: serving loads them only for speculative decoding")
    else:
        bd["mlp"] = n_layers * mlp(inter)
        act_width = inter
    if vision is not None:
        top = str(config.get("model_type") or "")
        if top == "gemma3" or str(vision.get("model_type", "")).startswith("siglip"):
            bd["vision"], vnote = _vision_params(vision, h, top)
            notes.append(vnote)
        else:
            notes.append(f"vision tower of {top or 'this model'} not counted (only SigLIP towers are); the checkpoint's byte count, when read, includes it")
            known = False
    params = sum(bd.values())
    active = params - expert_params + (expert_params * per_tok // experts if experts else 0)
    windows = _windows(cfg, fam, family, n_layers)
    return Architecture(
        family=family or "unknown", hidden=h, layers=n_layers, heads=heads, kv_heads=kv_heads if not mla else heads,
        head_dim=head_dim, vocab=vocab, max_context=max_ctx, params=params, active_params=active,
        expert_params=expert_params, experts=experts, experts_per_tok=per_tok, breakdown=bd,
        layer_kv_elems=tuple([layer_kv] * n_layers), layer_window=tuple(windows), kv_split=kv_split,
        act_width=act_width, mla=mla, notes=tuple(notes), known=known, tied=tied,
    )


def _moe_keys_only(cfg: dict) -> bool:
    """An MoE config may leave out the dense ``intermediate_size`` when it has ``moe_intermediate_size``."""
    return cfg.get("intermediate_size") is None and cfg.get("moe_intermediate_size") is not None and any(
        cfg.get(k) for k in MOE_EXPERT_KEYS)
