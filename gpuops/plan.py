"""Size the box before renting: model config -> parameter count -> memory -> fit, speed and price per card.

Pure functions over plain data; the only I/O is reading a model's ``config.json`` (a built-in from
``catalog/models.toml``, a local file or directory, or a Hugging Face repo through
``huggingface_hub``, imported lazily). Nothing here imports more than the standard library and
gpuops' own catalog, so the CLI stays fast.

Units: bytes are integers; "GB" = 10^9 bytes, "GiB" = 2^30 bytes; bandwidth in bytes/s; compute in
FLOP/s; prices in USD/hour; speeds in tokens/s; cost in USD per million generated tokens ($/Mtoken).

Formulas (docs/ARCHITECTURE.md "Numbers to know"):

- parameters are counted from matrix shapes: a matrix mapping a length-a vector to a length-b
  vector has a x b parameters (+ b with a bias);
- weights = params x bytes(dtype);
- KV cache per token = sum over layers of 2 x kv_heads x head_dim x bytes(kv dtype) (MLA: one
  latent of kv_lora_rank + qk_rope_head_dim per layer); a sliding-window layer holds at most
  ``window`` tokens of a sequence;
- decode ceiling at batch 1 = bandwidth / weight bytes read per token;
- ridge point = dense FLOP/s / bandwidth; decode turns compute-bound at the batch where
  2 x active params x batch / FLOP/s equals the weight-read time;
- $/Mtoken = USD/hour / (tokens/s x 3600) x 1e6.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from gpuops.catalog import Card, cards, resolve_cards
from gpuops.errors import BadInput

GB = 10**9
GIB = 2**30

# int4 weights (GPTQ/AWQ style): 4 bits per weight plus one fp16 scale per group of 128 weights,
# i.e. 0.5 + 2/128 = 0.515625 bytes/param (+3.1%). Zero points (packed 4-bit, +0.4%) are ignored, and
# the embedding and lm_head are assumed quantized too (real checkpoints often keep them 16-bit).
INT4_GROUP_SIZE = 128
INT4_BYTES_PER_PARAM = 0.5 + 2 / INT4_GROUP_SIZE
# int8: one scale per output channel, < 0.1%, ignored.
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": INT4_BYTES_PER_PARAM}
KV_DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}
_DTYPE_ALIASES = {
    "float32": "fp32", "f32": "fp32", "float": "fp32",
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8-e4m3": "fp8", "e4m3": "fp8", "fp8_e5m2": "fp8",
    "i8": "int8", "i4": "int4", "w4a16": "int4", "awq": "int4", "gptq": "int4",
}

# Framework overhead per GPU: CUDA context (~0.3-0.5 GB), the caching allocator's slack, cuBLAS /
# NCCL workspaces and the engine's CUDA graphs. Seed 001 takes 1-2 GB and uses 1.5 GB; so do we.
FRAMEWORK_OVERHEAD_BYTES = int(1.5 * GB)
# Serving engines reserve this fraction of the card (vLLM gpu_memory_utilization default 0.90).
DEFAULT_HEADROOM = 0.90
# Mixed-precision Adam: bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m 4 + v 4 (seed 003).
TRAIN_BYTES_PER_PARAM = 16
# Training activations kept for backward, bytes per layer per token per hidden unit: 34 (Korthikanti
# et al. 2022, "Reducing Activation Recomputation", arXiv 2205.05198: 34sbh with 16-bit activations,
# FlashAttention removing the 5as^2b term, no recomputation). Plus the fp32 logits (4 x vocab per token).
TRAIN_ACT_BYTES_PER_TOKEN_HIDDEN_LAYER = 34

_MODELS_FILE = Path(__file__).resolve().parent / "catalog" / "models.toml"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# -- input normalisation --------------------------------------------------------------------------
def norm_dtype(name: str, *, kv: bool = False) -> str:
    """Canonical dtype name (fp32, bf16, fp16, fp8, int8, int4); BadInput naming the valid ones."""
    key = str(name).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    table = KV_DTYPE_BYTES if kv else DTYPE_BYTES
    if key not in table:
        flag = "--kv-dtype" if kv else "--dtype"
        raise BadInput(f"unknown {flag} {name!r}", f"use one of: {', '.join(table)}" + (" or same" if kv else ""))
    return key


def default_kv_dtype(dtype: str) -> str:
    """``--kv-dtype same``: the weight dtype, except that weight-only int8/int4 keep a bf16 cache."""
    return dtype if dtype in KV_DTYPE_BYTES and dtype != "int8" else "bf16"


# -- model catalog and loading --------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSource:
    """A model's config as read. ``weights_total_size``: bytes from model.safetensors.index.json
    (``metadata.total_size``) when one was found, stored in ``stored_dtype``."""

    name: str
    config: dict
    source: str
    params_published: int | None = None
    weights_total_size: int | None = None
    stored_dtype: str | None = None


@lru_cache(maxsize=1)
def model_catalog() -> tuple[ModelSource, ...]:
    """The built-in models of ``catalog/models.toml``, in file order."""
    data = tomllib.loads(_MODELS_FILE.read_text(encoding="utf-8"))
    return tuple(
        ModelSource(name=m["name"], config=dict(m["config"]), source=m["source"], params_published=m.get("params_published"))
        for m in data["models"]
    )


@lru_cache(maxsize=1)
def _model_names() -> dict[str, str]:
    data = tomllib.loads(_MODELS_FILE.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for m in data["models"]:
        for n in (m["name"], m.get("display", ""), *m.get("aliases", ())):
            if n:
                out[n.strip().lower()] = m["name"]
    return out


def builtin_model(name: str) -> ModelSource | None:
    """The built-in model called ``name`` (catalog name, display name or alias, any case), or None."""
    key = _model_names().get(name.strip().lower())
    if key is None:
        return None
    return next(m for m in model_catalog() if m.name == key)


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror or e}", "pass a readable config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{what} {path} is not valid JSON ({e})", "pass the model's config.json as published") from None
    if not isinstance(data, dict):
        raise BadInput(f"{what} {path} is not a JSON object", "pass the model's config.json as published")
    return data


def _index_total_size(index: Path) -> int | None:
    data = _read_json(index, "safetensors index")
    size = (data.get("metadata") or {}).get("total_size")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        raise BadInput(f"{index} has no positive metadata.total_size", "remove the index or pass config.json alone")
    return int(size)


def _stored_dtype(config: dict) -> str | None:
    raw = config.get("torch_dtype") or config.get("dtype")
    if not isinstance(raw, str):
        return None
    try:
        return norm_dtype(raw)
    except BadInput:
        return None


def _hub_reachable(endpoint: str) -> bool:
    """Whether the Hub's host name resolves. Without it huggingface_hub retries with back-off for
    ~25 s before failing; with it we go straight to the local cache."""
    import socket
    from urllib.parse import urlsplit

    host = urlsplit(endpoint).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except (OSError, UnicodeError):
        return False
    return True


def _hf_download(repo_id: str, filename: str) -> str:
    """Path of ``filename`` from the Hub (or its cache when offline); the one place that touches the
    network. The hub's own retry warnings are silenced: the caller turns failures into one line."""
    import logging

    from huggingface_hub import constants, hf_hub_download

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    offline = bool(constants.HF_HUB_OFFLINE) or not _hub_reachable(constants.ENDPOINT)
    return hf_hub_download(repo_id, filename, local_files_only=offline, etag_timeout=10)


def _load_hf(repo_id: str) -> ModelSource:
    local = f"download its config.json and pass the path: gpuops plan --model ./config.json"
    try:
        import huggingface_hub.errors as hf_errors
    except ImportError:
        raise BadInput(f"{repo_id!r} looks like a Hugging Face repo id, but huggingface_hub is not installed",
                       f"pip install 'gpuops[hf]', or {local}") from None
    try:
        cfg_path = _hf_download(repo_id, "config.json")
    except hf_errors.GatedRepoError:
        raise BadInput(f"Hugging Face repo {repo_id} is gated", f"accept its licence and set HF_TOKEN, or {local}") from None
    except hf_errors.RepositoryNotFoundError:
        raise BadInput(f"Hugging Face repo {repo_id} not found (or private)", f"check the name, set HF_TOKEN, or {local}") from None
    except hf_errors.LocalEntryNotFoundError:
        raise BadInput(f"cannot reach the Hugging Face Hub for {repo_id} (offline, and config.json not cached)", local) from None
    except hf_errors.EntryNotFoundError:
        raise BadInput(f"Hugging Face repo {repo_id} has no config.json", local) from None
    except (hf_errors.HfHubHTTPError, OSError) as e:
        raise BadInput(f"cannot fetch config.json of {repo_id}: {str(e).splitlines()[0] if str(e) else type(e).__name__}", local) from None
    config = _read_json(Path(cfg_path), "config")
    total = None
    try:
        total = _index_total_size(Path(_hf_download(repo_id, "model.safetensors.index.json")))
    except (hf_errors.EntryNotFoundError, hf_errors.HfHubHTTPError, OSError, BadInput):
        total = None  # single-file checkpoints have no index: fall back to the shape count
    return ModelSource(name=repo_id, config=config, source=f"https://huggingface.co/{repo_id}", weights_total_size=total,
                       stored_dtype=_stored_dtype(config))


def load_model(model: str) -> ModelSource:
    """Resolve ``--model``: a built-in name, a path to config.json or to a directory holding one,
    or a Hugging Face repo id (config.json only; needs huggingface_hub and the network or its cache).

    A ``model.safetensors.index.json`` beside the config supplies ``weights_total_size`` (bytes),
    which wins over the shape estimate. Raises BadInput with the fix for anything unreadable.
    """
    if not model or not model.strip():
        raise BadInput("--model is empty", "pass a built-in name (e.g. llama-3-8b), a config.json path or a HF repo id")
    builtin = builtin_model(model)
    if builtin is not None:
        return builtin
    path = Path(model).expanduser()
    if path.exists():
        if path.is_dir():
            cfg = path / "config.json"
            if not cfg.is_file():
                raise BadInput(f"{path} has no config.json", "pass the model directory that holds config.json, or the file itself")
        else:
            cfg = path
        config = _read_json(cfg, "config")
        index = cfg.parent / "model.safetensors.index.json"
        total = _index_total_size(index) if index.is_file() else None
        return ModelSource(name=str(model), config=config, source=str(cfg), weights_total_size=total,
                           stored_dtype=_stored_dtype(config))
    if model.endswith(".json") or model.startswith((".", "/", "~")):
        raise BadInput(f"model config {model} not found", "check the path to config.json")
    if _REPO_ID.match(model):
        return _load_hf(model)
    import difflib

    close = difflib.get_close_matches(model.strip().lower(), list(_model_names()), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise BadInput(f"unknown model {model!r}", f"{hint}pass a built-in name (`gpuops plan --model list` shows them), a config.json path or a HF repo id (org/name)")


# -- parameter count from shapes ------------------------------------------------------------------
# Per family: biases on q/k/v and o, norms per layer, default for tied embeddings, MLP kind.
# Every family here uses RMSNorm (a weight vector of length hidden, no bias).
_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {"qkv_bias": False, "o_bias": False, "norms": 2, "tied": False},
    "mistral": {"qkv_bias": False, "o_bias": False, "norms": 2, "tied": False},
    "mixtral": {"qkv_bias": False, "o_bias": False, "norms": 2, "tied": False, "moe": "mixtral"},
    "qwen2": {"qkv_bias": True, "o_bias": False, "norms": 2, "tied": False},
    "gemma": {"qkv_bias": False, "o_bias": False, "norms": 2, "tied": True},
    "gemma2": {"qkv_bias": False, "o_bias": False, "norms": 4, "tied": True, "swa": "alternate"},
    "phi3": {"qkv_bias": False, "o_bias": False, "norms": 2, "tied": False},
    "deepseek_v2": {"qkv_bias": False, "o_bias": False, "norms": 2, "tied": False, "moe": "deepseek", "mla": True},
    "deepseek_v3": {"qkv_bias": False, "o_bias": False, "norms": 2, "tied": False, "moe": "deepseek", "mla": True},
}
_BASE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
_MIXTRAL_KEYS = ("num_local_experts", "num_experts_per_tok")
_DEEPSEEK_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts",
                  "num_experts_per_tok", "moe_intermediate_size")


@dataclass(frozen=True)
class Architecture:
    """What the planner needs from a config, all derived from matrix shapes.

    ``params``: every weight resident in memory. ``active_params``: weights one token goes through
    (non-routed experts excluded); FLOPs per generated token = 2 x active_params.
    ``expert_params``: routed-expert weights (0 for dense models). ``breakdown``: params per part.
    ``layer_kv_elems``: cache elements per token per layer. ``layer_window``: tokens a layer keeps
    (None = all). ``kv_heads``: how far tensor parallelism can split the cache (1 for MLA, whose
    latent is replicated on every GPU). ``act_width``: widest per-token intermediate (elements).
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


def _int_key(cfg: dict, key: str, default: Any = None, *, allow_zero: bool = False) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise BadInput(f"config key {key} must be a whole number, got {v!r}", "fix config.json (published configs have integers here)")
    v = int(v)
    if v < 0 or (v == 0 and not allow_zero):
        raise BadInput(f"config key {key} must be > 0, got {v}", "fix config.json (published configs have positive sizes here)")
    return v


def _text_config(cfg: dict) -> dict:
    """Multimodal configs (llava, gemma3, ...) keep the language model under ``text_config``."""
    if not all(k in cfg for k in _BASE_KEYS) and isinstance(cfg.get("text_config"), dict):
        return cfg["text_config"]
    return cfg


def _require(cfg: dict, keys: Iterable[str], family: str) -> None:
    missing = [k for k in keys if cfg.get(k) is None]
    if missing:
        raise BadInput(f"config ({family or 'no model_type'}) lacks {', '.join(missing)}",
                       "the planner needs these config.json keys for this family; pass the model's published config.json")


def architecture(config: dict) -> Architecture:
    """Count parameters and cache shapes from a config.json dict.

    Handles llama, mistral, mixtral, qwen2, gemma, gemma2, phi3, deepseek_v2/v3 (MLA + MoE). Any
    other ``model_type`` with the five base keys is counted as a llama-style decoder (gated MLP, no
    biases) and says so in ``notes``. Raises BadInput naming missing or non-numeric keys.
    """
    cfg = _text_config(config)
    family = str(cfg.get("model_type") or "")
    notes: list[str] = []
    fam = _FAMILIES.get(family)
    if fam is None:
        _require(cfg, _BASE_KEYS, family)
        fam = _FAMILIES["llama"]
        notes.append(f"model_type {family or '(none)'!r} is not a family gpuops knows; counted as a llama-style decoder (gated MLP, no biases)")
    else:
        _require(cfg, _BASE_KEYS, family)
    h = _int_key(cfg, "hidden_size")
    n_layers = _int_key(cfg, "num_hidden_layers")
    heads = _int_key(cfg, "num_attention_heads")
    vocab = _int_key(cfg, "vocab_size")
    inter = _int_key(cfg, "intermediate_size")
    kv_heads = _int_key(cfg, "num_key_value_heads", heads) if cfg.get("num_key_value_heads") is not None else heads
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
    tied = bool(fam["tied"] if tied is None else tied)
    # `attention_bias` (llama-style configs) puts a bias on q, k, v and o; qwen2 always has q/k/v
    # biases and never an o bias, whatever the key says.
    attn_bias = bool(cfg.get("attention_bias", False))
    qkv_bias = fam["qkv_bias"] or attn_bias
    o_bias = fam["o_bias"] or (attn_bias and family != "qwen2")
    mlp_bias = bool(cfg.get("mlp_bias", False))
    max_ctx = cfg.get("max_position_embeddings")
    max_ctx = int(max_ctx) if isinstance(max_ctx, (int, float)) and not isinstance(max_ctx, bool) and max_ctx > 0 else None

    bd: dict[str, int] = {}
    bd["embeddings"] = vocab * h
    bd["lm_head"] = 0 if tied else h * vocab
    norms_per_layer = fam["norms"] * h
    bd["norms"] = n_layers * norms_per_layer + h  # + final norm

    mla = bool(fam.get("mla"))
    if mla:
        _require(cfg, _DEEPSEEK_KEYS, family)
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
    moe = fam.get("moe")
    if moe == "mixtral":
        _require(cfg, _MIXTRAL_KEYS, family)
        experts = _int_key(cfg, "num_local_experts")
        per_tok = _int_key(cfg, "num_experts_per_tok")
        expert_params = n_layers * experts * mlp(inter)
        bd["experts"] = expert_params
        bd["router"] = n_layers * h * experts
        bd["mlp"] = 0
        act_width = per_tok * inter
    elif moe == "deepseek":
        experts = _int_key(cfg, "n_routed_experts")
        per_tok = _int_key(cfg, "num_experts_per_tok")
        moe_inter = _int_key(cfg, "moe_intermediate_size")
        shared = _int_key(cfg, "n_shared_experts", 0, allow_zero=True) if cfg.get("n_shared_experts") is not None else 0
        first_dense = _int_key(cfg, "first_k_dense_replace", 0, allow_zero=True) if cfg.get("first_k_dense_replace") is not None else 0
        freq = _int_key(cfg, "moe_layer_freq", 1) if cfg.get("moe_layer_freq") is not None else 1
        moe_layers = sum(1 for i in range(n_layers) if i >= first_dense and i % freq == 0)
        dense_layers = n_layers - moe_layers
        expert_params = moe_layers * experts * mlp(moe_inter)
        bd["experts"] = expert_params
        bd["mlp"] = dense_layers * mlp(inter) + moe_layers * shared * mlp(moe_inter)
        # router: a hidden x experts matrix, plus DeepSeek-V3's per-expert score-correction bias
        bd["router"] = moe_layers * (h * experts + (experts if family == "deepseek_v3" else 0))
        act_width = max(inter if dense_layers else 0, (per_tok + shared) * moe_inter)
        if cfg.get("num_nextn_predict_layers"):
            notes.append("multi-token-prediction layers (num_nextn_predict_layers) are not counted: serving loads them only for speculative decoding")
    else:
        bd["mlp"] = n_layers * mlp(inter)
        act_width = inter
    params = sum(bd.values())
    active = params - expert_params + (expert_params * per_tok // experts if experts else 0)

    # Sliding windows: which layers keep at most `window` tokens.
    window = cfg.get("sliding_window")
    windows: list[int | None] = [None] * n_layers
    layer_types = cfg.get("layer_types")
    if isinstance(window, (int, float)) and not isinstance(window, bool) and window > 0:
        window = int(window)
        if isinstance(layer_types, list) and len(layer_types) == n_layers:
            windows = [window if str(t).startswith("sliding") else None for t in layer_types]
        elif fam.get("swa") == "alternate":
            windows = [window if i % 2 == 0 else None for i in range(n_layers)]  # gemma2: even layers are local
        elif family == "qwen2" or "use_sliding_window" in cfg:
            if cfg.get("use_sliding_window"):
                first = int(cfg.get("max_window_layers") or 0)
                windows = [window if i >= first else None for i in range(n_layers)]
        else:
            windows = [window] * n_layers
    return Architecture(
        family=family or "unknown", hidden=h, layers=n_layers, heads=heads, kv_heads=kv_heads if not mla else heads,
        head_dim=head_dim, vocab=vocab, max_context=max_ctx, params=params, active_params=active,
        expert_params=expert_params, experts=experts, experts_per_tok=per_tok, breakdown=bd,
        layer_kv_elems=tuple([layer_kv] * n_layers), layer_window=tuple(windows), kv_split=kv_split,
        act_width=act_width, mla=mla, notes=tuple(notes),
    )


# -- memory ---------------------------------------------------------------------------------------
def kv_bytes_per_token(arch: Architecture, kv_dtype: str) -> int:
    """KV cache bytes one token adds with every layer holding it (no window): sum over layers of
    2 x kv_heads x head_dim x bytes (MLA: (kv_lora_rank + qk_rope_head_dim) x bytes)."""
    return int(sum(arch.layer_kv_elems) * KV_DTYPE_BYTES[kv_dtype])


def kv_cache_bytes(arch: Architecture, kv_dtype: str, batch: int, seq: int) -> int:
    """KV cache bytes for ``batch`` sequences of ``seq`` tokens; a windowed layer holds min(seq, window)."""
    per_seq = sum(e * (seq if w is None else min(seq, w)) for e, w in zip(arch.layer_kv_elems, arch.layer_window))
    return int(per_seq * KV_DTYPE_BYTES[kv_dtype] * batch)


def activation_bytes(arch: Architecture, dtype: str, batch: int, seq: int, mode: str) -> int:
    """Activation bytes at the peak.

    infer: the widest intermediate vector (FFN width, or experts-per-token x expert width for MoE)
    for every token of the batch in one pass (a whole-batch prefill, no chunking: an upper bound;
    seed 001 gets ~1.4 GB for Llama-2-7B at 32 x 2048), in the compute dtype (fp32 when the weights
    are fp32, else 16-bit), one layer at a time since a layer's temporaries are freed after it.
    train: 34 x hidden x layers bytes per token kept for backward plus fp32 logits (4 x vocab bytes
    per token) (Korthikanti et al. 2022, FlashAttention, no recomputation).
    """
    tokens = batch * seq
    if mode == "train":
        return int(tokens * (TRAIN_ACT_BYTES_PER_TOKEN_HIDDEN_LAYER * arch.hidden * arch.layers + 4 * arch.vocab))
    width_bytes = 4 if dtype == "fp32" else 2
    return int(tokens * arch.act_width * width_bytes)


def max_batch_for(budget_bytes: float, fixed_bytes: float, per_seq_bytes: float) -> int:
    """Largest whole batch B with fixed + B x per_seq <= budget (0 when not even one fits).

    Seed 003 problem 4 is this formula: (80 GB x 0.9 - 14 GB) / 0.537 GB -> 108.
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


# -- the plan -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CardPlan:
    """One card at ``gpu_count`` GPUs.

    ``need_bytes_per_gpu``: weights/N + KV/N (KV split at most kv_heads ways) + activations/N +
    overhead. ``budget_bytes``: headroom x reported VRAM. ``decode_tok_s``: the batch-1 ceiling,
    N x bandwidth / weight bytes read per token (MoE: routed experts only). ``batch1_tok_s`` and
    ``max_batch_tok_s``: roofline step time max(bytes read / bandwidth, FLOPs / FLOP/s) with the
    KV cache of a full ``seq`` context read every step. ``compute_bound_batch``: batch at which
    decode FLOPs time equals weight-read time. ``usd_per_mtoken``: at the ceiling, batch 1 and
    the largest batch that fits (None where a speed is 0 or in train mode).
    """

    card: Card
    gpu_count: int
    need_bytes_per_gpu: int
    budget_bytes: int
    fits: bool
    max_batch: int
    decode_tok_s: float | None
    batch1_tok_s: float | None
    max_batch_tok_s: float | None
    ridge_flop_per_byte: float
    compute_flops: float
    compute_bound_batch: float | None
    usd_per_hour: float
    usd_per_mtoken: dict[str, float | None] | None

    @property
    def missing_bytes(self) -> int:
        return max(0, self.need_bytes_per_gpu - self.budget_bytes)

    def as_json(self) -> dict:
        return {
            "card": self.card.name,
            "vram_bytes": int(self.card.vram_bytes),
            "fits": self.fits,
            "max_batch": int(self.max_batch),
            "decode_tok_s": None if self.decode_tok_s is None else round(self.decode_tok_s, 3),
            "ridge_flop_per_byte": round(self.ridge_flop_per_byte, 3),
            "usd_per_mtoken": None if self.usd_per_mtoken is None else {k: (None if v is None else round(v, 6)) for k, v in self.usd_per_mtoken.items()},
        }


@dataclass(frozen=True)
class Plan:
    """The memory breakdown of one model run and what each card makes of it.

    Bytes are for the whole run: ``weights_bytes`` (train: 16 B/param, weights + grads + Adam),
    ``kv_cache_bytes`` (batch x seq; 0 in train mode), ``activation_bytes`` (peak),
    ``overhead_bytes`` (per GPU, replicated), ``total_bytes`` = weights + KV + activations +
    overhead x gpu_count. ``weights_source``: "shapes" or "safetensors index".
    """

    model: str
    source: str
    arch: Architecture
    params: int
    active_params: int
    dtype: str
    kv_dtype: str
    batch: int
    seq: int
    mode: str
    gpu_count: int
    headroom: float
    weights_bytes: int
    weights_source: str
    kv_bytes_per_token: int
    kv_cache_bytes: int
    activation_bytes: int
    overhead_bytes: int
    total_bytes: int
    cards: tuple[CardPlan, ...]
    warnings: tuple[str, ...] = field(default=())

    def per_gpu_bytes(self, batch: int | None = None) -> int:
        """Bytes one GPU needs at ``batch`` (default: the plan's batch)."""
        return per_gpu_bytes(self, self.batch if batch is None else batch)

    def as_json(self) -> dict:
        return {
            "model": self.model,
            "params": int(self.params),
            "active_params": int(self.active_params),
            "dtype": self.dtype,
            "kv_dtype": self.kv_dtype,
            "batch": int(self.batch),
            "seq": int(self.seq),
            "weights_bytes": int(self.weights_bytes),
            "kv_bytes_per_token": int(self.kv_bytes_per_token),
            "kv_cache_bytes": int(self.kv_cache_bytes),
            "activation_bytes": int(self.activation_bytes),
            "overhead_bytes": int(self.overhead_bytes),
            "total_bytes": int(self.total_bytes),
            "cards": [c.as_json() for c in self.cards],
        }


def _split(arch: Architecture, gpu_count: int) -> tuple[int, int]:
    """(weight/activation split, KV split) over ``gpu_count`` GPUs with tensor parallelism: the KV
    cache splits by KV head, so past kv_heads GPUs it is replicated (MLA's latent: on every GPU)."""
    return gpu_count, max(1, min(gpu_count, arch.kv_split))


def per_gpu_bytes(p: Plan, batch: int) -> int:
    """Bytes per GPU at ``batch`` sequences of ``p.seq``: weights/N + KV/split + activations/N + overhead."""
    n, kv_n = _split(p.arch, p.gpu_count)
    kv = 0 if p.mode == "train" else kv_cache_bytes(p.arch, p.kv_dtype, batch, p.seq)
    act = activation_bytes(p.arch, p.dtype, batch, p.seq, p.mode)
    return int(math.ceil(p.weights_bytes / n + kv / kv_n + act / n + p.overhead_bytes))


def _weights_read(arch: Architecture, weights_bytes: int, batch: int) -> float:
    """Weight bytes one decode step reads at ``batch``: dense weights plus the routed experts the
    batch touches, expected E x (1 - (1 - k/E)^B) of E per layer (uniform routing)."""
    if not arch.experts or not arch.params:
        return float(weights_bytes)
    expert_frac = arch.expert_params / arch.params
    touched = 1.0 - (1.0 - arch.experts_per_tok / arch.experts) ** batch
    return weights_bytes * ((1.0 - expert_frac) + expert_frac * touched)


def _step_tok_s(p: Plan, card: Card, flops: float, batch: int) -> float:
    n, kv_n = _split(p.arch, p.gpu_count)
    bw = card.bandwidth_bytes_s * n
    kv_read = kv_cache_bytes(p.arch, p.kv_dtype, batch, p.seq) * (n / kv_n)  # replicated KV is read on every GPU
    mem_t = (_weights_read(p.arch, p.weights_bytes, batch) + kv_read) / bw
    cmp_t = 2.0 * p.active_params * batch / (flops * n)
    return batch / max(mem_t, cmp_t)


def _compute_bound_batch(p: Plan, card: Card, flops: float) -> float:
    """Batch where 2 x active params x B / FLOP/s = weight-read time / bandwidth (KV reads ignored).

    Dense: B = ridge x bytes per param / 2 (fp16 on A100: 153, seed 001)."""
    bw = card.bandwidth_bytes_s
    def gap(b: float) -> float:
        return 2.0 * p.active_params * b / flops - _weights_read(p.arch, p.weights_bytes, max(1, int(b))) / bw
    if not p.arch.experts:
        return flops / bw * p.weights_bytes / (2.0 * p.active_params)
    lo, hi = 0.0, 1.0
    while gap(hi) < 0 and hi < 1e9:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return hi


def _card_plan(p: Plan, card: Card) -> CardPlan:
    n = p.gpu_count
    # fp8 weights run fp8 matmuls where the card has them; int8/int4 are weight-only (dequantized
    # to 16-bit), so their compute peak is the 16-bit one.
    flops = card.fp8_flops if (p.dtype == "fp8" and card.fp8_flops) else card.bf16_flops
    ridge = flops / card.bandwidth_bytes_s
    budget = int(p.headroom * card.reported_vram_bytes)
    need = per_gpu_bytes(p, p.batch)
    # Linear in batch: fixed (weights, overhead) + batch x per-sequence (KV, activations).
    fixed = per_gpu_bytes(p, 0)
    per_seq = per_gpu_bytes(p, 1) - fixed
    mb = max_batch_for(budget, fixed, per_seq)
    price = card.reference_usd_per_hour * n
    if p.mode == "train":
        return CardPlan(card, n, need, budget, need <= budget, mb, None, None, None, ridge, flops, None, price, None)
    ceiling = n * card.bandwidth_bytes_s / _weights_read(p.arch, p.weights_bytes, 1)
    b1 = _step_tok_s(p, card, flops, 1)
    bmax = _step_tok_s(p, card, flops, mb) if mb >= 1 else None
    cbb = _compute_bound_batch(p, card, flops)
    usd = {
        "ceiling": dollars_per_mtoken(price, ceiling),
        "batch_1": dollars_per_mtoken(price, b1),
        "max_batch": dollars_per_mtoken(price, bmax) if bmax else None,
    } if price > 0 else None
    return CardPlan(card, n, need, budget, need <= budget, mb, ceiling, b1, bmax, ridge, flops, cbb, price, usd)


def _positive_int(value: Any, flag: str, example: str) -> int:
    if isinstance(value, bool):
        raise BadInput(f"{flag} must be a whole number, got {value!r}", f"e.g. {flag} {example}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{flag} must be a whole number, got {value!r}", f"e.g. {flag} {example}") from None
    if not f.is_integer():
        raise BadInput(f"{flag} must be a whole number, got {value!r}", f"e.g. {flag} {example}")
    if f < 1:
        raise BadInput(f"{flag} must be >= 1, got {int(f)}", f"e.g. {flag} {example}")
    return int(f)


def plan(
    model: str | ModelSource,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    batch: int = 1,
    seq: int = 4096,
    mode: str = "infer",
    gpu_count: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    card: str | None = None,
) -> Plan:
    """Plan ``model`` (a --model string or a loaded ModelSource) for every catalog card, or the cards
    ``card`` names (one card or a family).

    ``kv_dtype`` None or "same": see ``default_kv_dtype``. ``headroom``: fraction of reported VRAM
    usable (0 < h <= 1). Raises BadInput for unknown dtypes, non-positive sizes, a bad config or an
    unknown card; a ``seq`` beyond the model's context is a warning, not an error.
    """
    src = load_model(model) if isinstance(model, str) else model
    dtype = norm_dtype(dtype)
    kv = default_kv_dtype(dtype) if kv_dtype in (None, "", "same", "SAME") else norm_dtype(kv_dtype, kv=True)
    batch = _positive_int(batch, "--batch", "32")
    seq = _positive_int(seq, "--seq", "4096")
    gpu_count = _positive_int(gpu_count, "--gpu-count", "2")
    if mode not in ("infer", "train"):
        raise BadInput(f"--mode must be infer or train, got {mode!r}", "e.g. --mode train")
    try:
        headroom = float(headroom)
    except (TypeError, ValueError):
        raise BadInput(f"--headroom must be a fraction, got {headroom!r}", "e.g. --headroom 0.9") from None
    if not 0 < headroom <= 1:
        raise BadInput(f"--headroom must be in (0, 1], got {headroom:g}", "e.g. --headroom 0.9 (vLLM's default)")
    chosen = tuple(resolve_cards(card)) if card else cards()

    arch = architecture(src.config)
    warnings = list(arch.notes)
    if arch.max_context and seq > arch.max_context:
        warnings.append(f"--seq {seq} is beyond the model's context ({arch.max_context} tokens, max_position_embeddings)")
    if mode == "train":
        weights = arch.params * TRAIN_BYTES_PER_PARAM
        wsrc = "16 B/param (bf16 weights + grads, fp32 master + Adam m, v)"
    elif src.weights_total_size:
        stored = src.stored_dtype
        scale = DTYPE_BYTES[dtype] / DTYPE_BYTES[stored] if stored and stored != dtype else 1.0
        weights = int(src.weights_total_size * scale)
        wsrc = "safetensors index total_size" + (f" x {DTYPE_BYTES[dtype]:g}/{DTYPE_BYTES[stored]:g} B ({stored} -> {dtype})" if scale != 1.0 else "")
    else:
        weights = int(math.ceil(arch.params * DTYPE_BYTES[dtype]))
        wsrc = f"shapes: {arch.params:,} params x {DTYPE_BYTES[dtype]:g} B"
    if dtype == "bf16" and chosen and all(not c.bf16_native for c in chosen):
        names = ", ".join(c.name for c in chosen)
        warnings.append(f"{names} has no bf16: serving engines run it in fp16 (same bytes); pass --dtype fp16")
    kv_cache = 0 if mode == "train" else kv_cache_bytes(arch, kv, batch, seq)
    act = activation_bytes(arch, dtype, batch, seq, mode)
    total = weights + kv_cache + act + FRAMEWORK_OVERHEAD_BYTES * gpu_count
    p = Plan(
        model=src.name, source=src.source, arch=arch, params=arch.params, active_params=arch.active_params,
        dtype=dtype, kv_dtype=kv, batch=batch, seq=seq, mode=mode, gpu_count=gpu_count, headroom=headroom,
        weights_bytes=weights, weights_source=wsrc, kv_bytes_per_token=kv_bytes_per_token(arch, kv),
        kv_cache_bytes=kv_cache, activation_bytes=act, overhead_bytes=FRAMEWORK_OVERHEAD_BYTES,
        total_bytes=total, cards=(), warnings=tuple(warnings),
    )
    return _with_cards(p, chosen)


def _with_cards(p: Plan, chosen: Iterable[Card]) -> Plan:
    from dataclasses import replace

    return replace(p, cards=tuple(_card_plan(p, c) for c in chosen))


# -- `up --model`: the bytes a GPU needs, and what to do when nothing fits ------------------------
def need_bytes_per_gpu(p: Plan) -> int:
    """Reported VRAM one GPU must have for this plan at its headroom: per-GPU bytes / headroom.

    This is what ``offers.rank(need_bytes_per_gpu=...)`` compares with an offer's VRAM (with its 7%
    nominal-vs-reported tolerance)."""
    return int(math.ceil(p.per_gpu_bytes() / p.headroom))


def fit_advice(p: Plan) -> str:
    """A one-line fix for a plan no card fits: what is missing on the largest card, and the first
    changes (smaller dtype, fp8 KV cache, more GPUs, shorter --seq) that make it fit there."""
    if not p.cards:
        return "no card to compare with"
    big = max(p.cards, key=lambda c: c.budget_bytes)
    short = big.missing_bytes
    fixes: list[str] = []
    base = dict(dtype=p.dtype, kv_dtype=p.kv_dtype, batch=p.batch, seq=p.seq, mode=p.mode, gpu_count=p.gpu_count, headroom=p.headroom)

    def fits_with(**over: Any) -> bool:
        args = {**base, **over}
        q = _replan(p, **args)
        return per_gpu_bytes(q, q.batch) <= big.budget_bytes

    if p.mode == "infer":
        for d in ("fp8", "int4"):
            if DTYPE_BYTES[d] < DTYPE_BYTES[p.dtype] and fits_with(dtype=d, kv_dtype=p.kv_dtype):
                fixes.append(f"--dtype {d}")
                break
        if KV_DTYPE_BYTES[p.kv_dtype] > 1 and fits_with(kv_dtype="fp8"):
            fixes.append("--kv-dtype fp8")
    for n in (2, 4, 8, 16):
        if n > p.gpu_count and fits_with(gpu_count=n):
            fixes.append(f"--gpu-count {n}")
            break
    if p.batch > 1:
        mb = max_batch_for(big.budget_bytes, per_gpu_bytes(p, 0), per_gpu_bytes(p, 1) - per_gpu_bytes(p, 0))
        if mb >= 1:
            fixes.append(f"--batch {mb}")
    what = " or ".join(fixes) if fixes else "a smaller model"
    return (f"needs {fmt_bytes(p.per_gpu_bytes())} per GPU; {big.card.name} x{p.gpu_count} has "
            f"{fmt_bytes(big.budget_bytes)} at {p.headroom:.0%} headroom, {fmt_bytes(short)} short; "
            f"try {what} on {big.card.name}")


def _replan(p: Plan, **args: Any) -> Plan:
    """``p`` with other dtype/kv/gpu settings (same model and cards), without reloading the config."""
    from dataclasses import replace

    dtype = args["dtype"]
    kv = args["kv_dtype"]
    n = args["gpu_count"]
    weights = p.weights_bytes
    if dtype != p.dtype and p.mode == "infer":
        weights = int(p.weights_bytes * DTYPE_BYTES[dtype] / DTYPE_BYTES[p.dtype])
    return replace(p, dtype=dtype, kv_dtype=kv, gpu_count=n, weights_bytes=weights, cards=(),
                   kv_bytes_per_token=kv_bytes_per_token(p.arch, kv))


def fmt_bytes(n: float) -> str:
    """``13.48 GB (12.55 GiB)``: both units, so nobody has to guess which one we mean."""
    return f"{n / GB:,.2f} GB ({n / GIB:,.2f} GiB)"


def parse_positive_int(value: Any, flag: str, example: str) -> int:
    """``value`` as a whole number >= 1 (text from the command line welcome); BadInput naming ``flag``."""
    return _positive_int(value, flag, example)


def size_for_up(
    model: str,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    seq: int = 4096,
    batch: int = 1,
    gpu_count: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    card: str | None = None,
) -> tuple[int, tuple[str, ...], Plan]:
    """What `up --model` rents by: (need_bytes_per_gpu, names of the catalog cards that fit, plan).

    ``need_bytes_per_gpu`` = per-GPU bytes / headroom, the VRAM an offer must report (offers.rank
    allows its 7% nominal-vs-reported tolerance on top). Cards are all catalog cards or the
    ``card`` family. Raises BadInput, before anything is rented, when no card fits: how much is
    missing on the largest card and what would make it fit (``fit_advice``).
    """
    p = plan(model, dtype=dtype, kv_dtype=kv_dtype, batch=batch, seq=seq, mode="infer", gpu_count=gpu_count,
             headroom=headroom, card=card)
    fitting = tuple(c.card.name for c in p.cards if c.fits)
    if not fitting:
        where = f"--card {card}" if card else "catalog card"
        raise BadInput(f"{p.model} ({p.dtype}, KV {p.kv_dtype}, batch {p.batch} x seq {p.seq}, {p.gpu_count} GPU(s)) fits no {where}",
                       fit_advice(p))
    return need_bytes_per_gpu(p), fitting, p


def prefill_seconds(active_params: float, tokens: int, flops: float) -> float:
    """Lower bound of a prefill of ``tokens`` tokens: 2 x active params x tokens / FLOP/s (MFU 100%;
    seed 003 problem 6: 7B x 2048 tokens on an A100 -> 92 ms)."""
    return 2.0 * active_params * tokens / flops
