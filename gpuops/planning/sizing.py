"""Size the box before renting: model config -> parameter count -> memory -> fit, speed and price per card.

Pure functions over plain data; the only I/O is reading a model's ``config.json`` and its
safetensors metadata (a built-in from ``catalog/models.toml``, a local file or directory, or a
Hugging Face repo through ``huggingface_hub``, imported lazily). Nothing here imports more than the
standard library and gpuops' own catalog, so the CLI stays fast.

Units: bytes are integers; "GB" = 10^9 bytes, "GiB" = 2^30 bytes; bandwidth in bytes/s; compute in
FLOP/s; prices in USD/hour; speeds in tokens/s; cost in USD per million generated tokens ($/Mtoken).

Engines (``engine=``; formulas also in docs/ARCHITECTURE.md "Numbers to know"):

- ``vllm`` (default) sizes memory the way vLLM 0.11 (V1 engine) does at start-up
  (vllm/v1/worker/gpu_worker.py ``determine_available_memory``, vllm/utils ``memory_profiling``,
  vllm/v1/core/kv_cache_utils.py, docs.vllm.ai "Conserving memory"): per GPU, the budget is
  ``gpu_memory_utilization`` (default 0.90) x the total the engine sees (torch.cuda.mem_get_info,
  catalog ``engine_visible_gib``); minus the weights (split by tensor parallelism), non-torch memory
  (0.25 GiB; 2.1 GiB with NCCL at TP >= 2), the activation peak of the profiling run
  (``max_num_batched_tokens`` tokens through the model + ``max_num_seqs`` fp32 logits and
  probabilities, defaults per card from vllm/engine/arg_utils.py), and CUDA-graph memory (0.8 GiB;
  counted inside the budget, as vLLM does with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the
  default of later releases; 0.10/0.11 captured graphs after sizing the pool, so their published
  pools are ~0.8 GiB larger than ours: conservative by 1-2%);
  what is left is the KV pool, cut in blocks of 16 tokens. Max concurrency at ``seq`` = pool blocks
  / blocks one request of ``seq`` tokens needs; a sliding-window layer needs
  ceil(min(window - 1 + max_num_batched_tokens, seq) / 16) + 1 blocks
  (``SlidingWindowSpec.max_memory_usage_bytes``).
- ``hf``: plain transformers ``generate``: weights + a contiguous KV cache of batch x seq (a windowed
  layer holds min(seq, window)) + the activations of a whole-batch prefill + 1.5 GB of framework
  overhead (seed 001), against the headroom fraction of the engine-visible total.
- ``train``: mixed-precision Adam, 16 B/param + activations kept for backward (seed 003).

Weights: parameters are counted from matrix shapes (a matrix mapping a length-a vector to a
length-b vector has a x b parameters, + b with a bias). A checkpoint's own byte count (safetensors
headers, or the index's ``total_size``) wins when it is stored in the dtype that will be served; it
is never rescaled by ``--dtype``. Quantization (``quantization_config``, or ``--dtype fp8/int8/int4``
on a 16-bit checkpoint) shrinks only the linear layers of attention, MLP and experts; embeddings,
lm_head, norms, routers and vision towers keep 16 bits; scales and zero points are added per group.

Speed: decode ceiling at batch 1 = bandwidth / weight bytes one step reads (the embedding table is
not read, only the rows of the step's tokens; MoE: the experts the batch routes to); ridge point =
dense FLOP/s / bandwidth; $/Mtoken = USD/hour / (tokens/s x 3600) x 1e6.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import struct
import sys
from dataclasses import dataclass, field, replace
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

# int4 weights (AWQ, the common 4-bit checkpoint format): 4 bits per weight plus, per group of 128
# input weights, one fp16 scale and one packed 4-bit zero point: 0.5 + (2 + 0.5)/128 = 0.51953 B.
INT4_GROUP_SIZE = 128
INT4_BYTES_PER_PARAM = 0.5 + (2 + 0.5) / INT4_GROUP_SIZE
# Bytes per parameter of a whole dtype. Quantized dtypes (fp8, int8, int4) apply to linear layers
# only (see ``weight_bytes``); int8: one scale per output channel, < 0.1%, ignored.
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": INT4_BYTES_PER_PARAM}
KV_DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}
QUANTIZED_DTYPES = ("fp8", "int8", "int4")
_DTYPE_ALIASES = {
    "float32": "fp32", "f32": "fp32", "float": "fp32",
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8-e4m3": "fp8", "e4m3": "fp8", "fp8_e5m2": "fp8",
    "i8": "int8", "i4": "int4", "w4a16": "int4", "awq": "int4", "gptq": "int4",
}
AUTO = ("", "auto", "same", "none")
ENGINES = ("vllm", "hf", "train")

# hf engine: CUDA context (~0.3-0.5 GB), the caching allocator's slack, cuBLAS workspaces. Seed 001
# takes 1-2 GB and uses 1.5 GB; so do we.
FRAMEWORK_OVERHEAD_BYTES = int(1.5 * GB)
# vLLM CacheConfig.gpu_memory_utilization default (vllm/config/cache.py, 0.11); also our hf headroom.
DEFAULT_HEADROOM = 0.90
# Mixed-precision Adam: bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m 4 + v 4 (seed 003).
TRAIN_BYTES_PER_PARAM = 16
# Training activations kept for backward, bytes per layer per token per hidden unit: 34 (Korthikanti
# et al. 2022, "Reducing Activation Recomputation", arXiv 2205.05198: 34sbh with 16-bit activations,
# FlashAttention removing the 5as^2b term, no recomputation). Plus the fp32 logits (4 x vocab per token).
TRAIN_ACT_BYTES_PER_TOKEN_HIDDEN_LAYER = 34

# -- vLLM, the version whose defaults and start-up arithmetic we follow -------------------------------
VLLM_VERSION = "0.11"
# CacheConfig.block_size: 16 tokens on CUDA (vllm/config/cache.py).
VLLM_BLOCK_SIZE = 16
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
    """vLLM's ``(max_num_batched_tokens, max_num_seqs)`` defaults for ``vllm serve`` on ``card``
    (vllm/engine/arg_utils.py ``EngineArgs.get_batch_defaults``, UsageContext.OPENAI_API_SERVER, 0.11):
    8192 / 1024 on GPUs with >= 70 GiB that are not an A100 (vLLM PR #17885 keeps the A100 on the
    small defaults), else 2048 / 256."""
    if card.engine_visible_bytes >= 70 * GIB and card.family != "a100":
        return 8192, 1024
    return 2048, 256


_MODELS_FILE = Path(__file__).resolve().parents[1] / "catalog" / "models.toml"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# -- input normalisation --------------------------------------------------------------------------
def norm_dtype(name: str, *, kv: bool = False) -> str:
    """Canonical dtype name (fp32, bf16, fp16, fp8, int8, int4); BadInput naming the valid ones."""
    key = str(name).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    table = KV_DTYPE_BYTES if kv else DTYPE_BYTES
    if key not in table:
        flag = "--kv-dtype" if kv else "--dtype"
        raise BadInput(f"unknown {flag} {name!r}", f"use one of: auto, {', '.join(table)}")
    return key


def default_kv_dtype(dtype: str) -> str:
    """vLLM's ``--kv-cache-dtype auto``: the model's compute dtype (bf16/fp16; fp32 when the weights
    are fp32). Quantized weights (fp8, int8, int4) still compute, and cache, in 16 bits."""
    return dtype if dtype in ("fp32", "bf16", "fp16") else "bf16"


# -- quantization ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quant:
    """How quantized linear layers are stored. ``dtype``: the --dtype it amounts to (fp8, int8,
    int4). ``bytes_per_param``: bytes per linear weight, scales and zero points included.
    ``lm_head``: whether lm_head is quantized too. ``from_checkpoint``: read from quantization_config
    (False: quantized by the engine at load, e.g. vLLM ``--quantization fp8``). ``known``: False for a
    method gpuops does not model (its size cannot be confirmed from shapes)."""

    method: str
    dtype: str
    bytes_per_param: float
    label: str
    lm_head: bool = False
    from_checkpoint: bool = True
    known: bool = True


def _num(v: Any, default: float) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _group_bytes(bits: float, group: float, scale_bytes: float, zero: bool) -> float:
    """bits/8 per weight + (scale + packed zero point) per group of ``group`` weights."""
    return bits / 8 + (scale_bytes + (bits / 8 if zero else 0.0)) / group


def quantization(config: dict) -> Quant | None:
    """The checkpoint's quantization from ``quantization_config`` (or ``compression_config``), or None.

    fp8 (``quant_method: fp8``, block scales ``weight_block_size`` [128, 128] as fp32 per block),
    compressed-tensors (``config_groups.*.weights``: num_bits, type, strategy tensor/channel/group/block),
    AWQ and GPTQ (bits, group_size, fp16 scales, packed zero points), bitsandbytes (nf4: 0.5 B + an
    absmax per 64, double-quantized to 8 bits; int8: 1 B), modelopt (FP8, NVFP4: 0.5 B + an fp8
    scale per 16). Any other method is returned with ``known=False``. Sources: vLLM
    vllm/model_executor/layers/quantization/{fp8,awq,gptq,bitsandbytes,modelopt}.py and
    compressed_tensors/, 0.11.
    """
    qc = config.get("quantization_config") or config.get("compression_config")
    if not isinstance(qc, dict):
        tc = config.get("text_config")
        qc = tc.get("quantization_config") if isinstance(tc, dict) else None
    if not isinstance(qc, dict):
        return None
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "").lower()
    if method in ("fp8", "fbgemm_fp8"):
        block = qc.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(_num(b, 0) > 0 for b in block):
            return Quant("fp8", "fp8", 1 + 4 / (_num(block[0], 128) * _num(block[1], 128)),
                         f"fp8 (e4m3, fp32 scale per {int(block[0])}x{int(block[1])} block)")
        return Quant("fp8", "fp8", 1.0, "fp8 (e4m3, per-tensor/channel scales)")
    if method == "awq":
        bits = _num(qc.get("bits", qc.get("w_bit")), 4)
        group = _num(qc.get("group_size", qc.get("q_group_size")), 128)
        zero = bool(qc.get("zero_point", True))
        return Quant("awq", "int4" if bits <= 4 else "int8", _group_bytes(bits, group, 2, zero),
                     f"AWQ {int(bits)}-bit, group {int(group)}, fp16 scales" + (" + zero points" if zero else ""))
    if method == "gptq":
        bits = _num(qc.get("bits"), 4)
        group = _num(qc.get("group_size"), 128)
        group = group if group > 0 else 4096.0  # -1: one scale per output channel
        return Quant("gptq", "int4" if bits <= 4 else "int8", _group_bytes(bits, group, 2, True),
                     f"GPTQ {int(bits)}-bit, group {int(group)}, fp16 scales + zero points", lm_head=bool(qc.get("lm_head")))
    if method == "bitsandbytes":
        if qc.get("load_in_8bit"):
            return Quant("bitsandbytes", "int8", 1.0, "bitsandbytes int8 (LLM.int8)")
        double = bool(qc.get("bnb_4bit_use_double_quant"))
        per = 0.5 + (1 / 64 + 4 / (64 * 256) if double else 4 / 64)
        return Quant("bitsandbytes", "int4", per, "bitsandbytes 4-bit (" + str(qc.get("bnb_4bit_quant_type", "fp4"))
                     + (", double-quantized absmax)" if double else ", fp32 absmax per 64)"))
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        w = next((g.get("weights") for g in groups.values() if isinstance(g, dict) and isinstance(g.get("weights"), dict)), None)
        if not w:
            return Quant("compressed-tensors", "fp8", 2.0, "compressed-tensors (no weight scheme)", known=False)
        bits = _num(w.get("num_bits"), 8)
        strategy = str(w.get("strategy") or "tensor")
        zero = not bool(w.get("symmetric", True))
        if strategy == "group":
            per = _group_bytes(bits, _num(w.get("group_size"), 128), 2, zero)
        elif strategy == "block":
            bs = w.get("block_structure") or [128, 128]
            per = bits / 8 + 4 / (_num(bs[0], 128) * _num(bs[1], 128))
        else:  # tensor / channel: one scale per matrix or per output row, < 0.1%
            per = bits / 8
        kind = "fp8" if str(w.get("type")) == "float" and bits == 8 else ("int8" if bits == 8 else "int4")
        ignore = qc.get("ignore") or []
        return Quant("compressed-tensors", kind, per, f"compressed-tensors {w.get('type', 'int')}{int(bits)} ({strategy})",
                     lm_head=isinstance(ignore, list) and "lm_head" not in ignore and bool(ignore))
    if method == "modelopt":
        algo = str((qc.get("quantization") or {}).get("quant_algo") or qc.get("quant_algo") or "").upper()
        if "FP4" in algo:
            return Quant("modelopt", "int4", 0.5 + 1 / 16, "ModelOpt NVFP4 (fp8 scale per 16)")
        return Quant("modelopt", "fp8", 1.0, "ModelOpt FP8")
    return Quant(method or "unknown", "int4", 2.0, f"quantization {method or '(no quant_method)'} (not modelled)", known=False)


def online_quant(dtype: str) -> Quant | None:
    """``--dtype fp8/int8/int4`` on a 16-bit checkpoint: fp8 as vLLM ``--quantization fp8`` (dynamic,
    per-tensor scales), int8 one scale per channel, int4 as an AWQ checkpoint (group 128)."""
    if dtype == "fp8":
        return Quant("online-fp8", "fp8", 1.0, "fp8 (vLLM --quantization fp8, per-tensor scales)", from_checkpoint=False)
    if dtype == "int8":
        return Quant("int8", "int8", 1.0, "int8 weights (per-channel scales)", from_checkpoint=False)
    if dtype == "int4":
        return Quant("int4", "int4", INT4_BYTES_PER_PARAM, f"int4 (AWQ-style: 4 bit + fp16 scale and 4-bit zero per {INT4_GROUP_SIZE})",
                     from_checkpoint=False)
    return None


# -- model catalog and loading --------------------------------------------------------------------
SAFETENSORS_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I64": 8,
                           "I32": 4, "I16": 2, "I8": 1, "U8": 1, "U16": 2, "U32": 4, "BOOL": 1, "F4": 0.5, "F6_E2M3": 0.75}


@dataclass(frozen=True)
class ModelSource:
    """A model's config as read.

    ``weights_total_size``: the checkpoint's stored bytes, from safetensors headers (exact) or the
    index's ``metadata.total_size``; ``weights_size_source`` says which. ``params_by_dtype``:
    tensor elements per safetensors dtype (headers only). ``stored_dtype``: config ``torch_dtype``.
    """

    name: str
    config: dict
    source: str
    params_published: int | None = None
    weights_total_size: int | None = None
    stored_dtype: str | None = None
    weights_size_source: str = ""
    params_by_dtype: dict | None = None
    hf_id: str = ""


@lru_cache(maxsize=1)
def _models_data() -> dict:
    return tomllib.loads(_MODELS_FILE.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def model_catalog() -> tuple[ModelSource, ...]:
    """The built-in models of ``catalog/models.toml``, in file order."""
    out = []
    for m in _models_data()["models"]:
        hf = next((a for a in m.get("aliases", ()) if "/" in a), "")
        out.append(ModelSource(name=m["name"], config=dict(m["config"]), source=m["source"], params_published=m.get("params_published"),
                               stored_dtype=_stored_dtype(m["config"]), hf_id=hf))
    return tuple(out)


@lru_cache(maxsize=1)
def _model_names() -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _models_data()["models"]:
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
    """``metadata.total_size`` of a safetensors index (bytes), or None when it has none (then the
    shapes, or the shard headers, give the size)."""
    data = _read_json(index, "safetensors index")
    size = (data.get("metadata") or {}).get("total_size")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        return None
    return int(size)


def _stored_dtype(config: dict) -> str | None:
    raw = config.get("torch_dtype") or config.get("dtype")
    if not isinstance(raw, str) and isinstance(config.get("text_config"), dict):
        raw = config["text_config"].get("torch_dtype") or config["text_config"].get("dtype")
    if not isinstance(raw, str):
        return None
    try:
        return norm_dtype(raw)
    except BadInput:
        return None


def _header_counts(header: dict, counts: dict[str, int]) -> None:
    for name, t in header.items():
        if name == "__metadata__" or not isinstance(t, dict):
            continue
        n = 1
        for d in t.get("shape") or []:
            n *= int(d)
        counts[str(t.get("dtype"))] = counts.get(str(t.get("dtype")), 0) + n


def safetensors_bytes(params_by_dtype: dict[str, int]) -> int:
    """Stored bytes of tensors counted per safetensors dtype (``{"BF16": n, "F8_E4M3": m, ...}``)."""
    return int(sum(n * SAFETENSORS_DTYPE_BYTES.get(dt, 2) for dt, n in params_by_dtype.items()))


def _local_safetensors(directory: Path) -> dict[str, int] | None:
    """Elements per dtype read from the headers of ``*.safetensors`` in ``directory`` (the first 8
    bytes give the header length; no tensor data is read), or None when there are none or one is
    unreadable."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    counts: dict[str, int] = {}
    try:
        for f in files:
            with f.open("rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                if n > 100 * 2**20:
                    return None
                _header_counts(json.loads(fh.read(n)), counts)
    except (OSError, ValueError, struct.error):
        return None
    return counts


def _hub_reachable(endpoint: str) -> bool:
    """Whether the Hub's host name resolves. Without it huggingface_hub retries with back-off for
    ~25 s before failing; with it we go straight to the local cache."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    try:
        socket.getaddrinfo(parts.hostname or "", parts.port or 443)
    except (OSError, UnicodeError):
        return False
    return True


def _hf_endpoint() -> str:
    """The Hub URL: ``HF_ENDPOINT`` as set now (huggingface_hub reads it once, at import)."""
    import os

    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _hf_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or not _hub_reachable(_hf_endpoint())


def _hf_download(repo_id: str, filename: str) -> str:
    """Path of ``filename`` from the Hub (or its cache when offline); the one place that downloads.
    The hub's own retry warnings are silenced: the caller turns failures into one line."""
    import logging

    from huggingface_hub import hf_hub_download

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    return hf_hub_download(repo_id, filename, local_files_only=_hf_offline(), etag_timeout=10, endpoint=_hf_endpoint())


def _hf_safetensors_counts(repo_id: str) -> dict[str, int] | None:
    """Elements per dtype from the repo's safetensors headers (HTTP Range reads of the first 100 kB
    of each shard through ``huggingface_hub.get_safetensors_metadata``; no weights downloaded), or
    None offline or when the repo has no safetensors."""
    if _hf_offline():
        return None
    from huggingface_hub import HfApi
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # one line of output per problem, no bars on stderr
    try:
        meta = HfApi(endpoint=_hf_endpoint()).get_safetensors_metadata(repo_id)
    except Exception:  # noqa: BLE001 - any failure here only costs the exact count; the index or shapes remain
        return None
    counts: dict[str, int] = {}
    for fm in meta.files_metadata.values():
        for dt, n in (fm.parameter_count or {}).items():
            counts[dt] = counts.get(dt, 0) + int(n)
    return counts or None


def _load_hf(repo_id: str) -> ModelSource:
    local = "download its config.json and pass the path: gpuops plan --model ./config.json"
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
    counts = _hf_safetensors_counts(repo_id)
    total, how = None, ""
    if counts:
        total, how = safetensors_bytes(counts), "safetensors headers"
    else:
        try:
            total = _index_total_size(Path(_hf_download(repo_id, "model.safetensors.index.json")))
            how = "safetensors index total_size" if total else ""
        except (hf_errors.EntryNotFoundError, hf_errors.HfHubHTTPError, OSError, BadInput):
            total = None  # single-file checkpoints have no index: fall back to the shape count
    return ModelSource(name=repo_id, config=config, source=f"https://huggingface.co/{repo_id}", weights_total_size=total,
                       stored_dtype=_stored_dtype(config), weights_size_source=how, params_by_dtype=counts, hf_id=repo_id)


def load_model(model: str) -> ModelSource:
    """Resolve ``--model``: a built-in name, a path to config.json or to a directory holding one,
    or a Hugging Face repo id (config.json and safetensors headers; needs huggingface_hub and the
    network, or its cache for the config).

    The checkpoint's byte count comes from the safetensors headers beside the config (exact, per
    dtype) or from ``model.safetensors.index.json`` (``metadata.total_size``; an index without it
    falls back to the shapes). Raises BadInput with the fix for anything unreadable.
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
        counts = _local_safetensors(cfg.parent)
        total, how = None, ""
        if counts:
            total, how = safetensors_bytes(counts), "safetensors headers"
        else:
            index = cfg.parent / "model.safetensors.index.json"
            total = _index_total_size(index) if index.is_file() else None
            how = "safetensors index total_size" if total else ""
        return ModelSource(name=str(model), config=config, source=str(cfg), weights_total_size=total,
                           stored_dtype=_stored_dtype(config), weights_size_source=how, params_by_dtype=counts, hf_id=str(cfg.parent))
    if model.endswith(".json") or model.startswith((".", "/", "~")):
        raise BadInput(f"model config {model} not found", "check the path to config.json")
    if _REPO_ID.match(model):
        return _load_hf(model)
    import difflib

    close = difflib.get_close_matches(model.strip().lower(), list(_model_names()), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise BadInput(f"unknown model {model!r}", f"{hint}pass a built-in name (`gpuops plan --model list` shows them), a config.json path or a HF repo id (org/name)")


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


# -- memory ---------------------------------------------------------------------------------------
def kv_bytes_per_token(arch: Architecture, kv_dtype: str) -> int:
    """KV cache bytes one token adds with every layer holding it (no window): sum over layers of
    2 x kv_heads x head_dim x bytes (MLA: (kv_lora_rank + qk_rope_head_dim) x bytes)."""
    return int(sum(arch.layer_kv_elems) * KV_DTYPE_BYTES[kv_dtype])


def kv_cache_bytes(arch: Architecture, kv_dtype: str, batch: int, seq: int) -> int:
    """Contiguous KV cache bytes (engine hf) for ``batch`` sequences of ``seq`` tokens; a windowed
    layer holds min(seq, window)."""
    per_seq = sum(e * (seq if w is None else min(seq, w)) for e, w in zip(arch.layer_kv_elems, arch.layer_window))
    return int(per_seq * KV_DTYPE_BYTES[kv_dtype] * batch)


def request_kv_bytes(arch: Architecture, kv_dtype: str, seq: int, max_num_batched_tokens: int,
                     block_size: int = VLLM_BLOCK_SIZE) -> int:
    """KV bytes vLLM reserves for one request of ``seq`` tokens (whole model, before the TP split), in
    blocks of ``block_size`` tokens: a full-attention layer needs ceil(seq / 16) blocks; a sliding
    window layer ceil(min(window - 1 + max_num_batched_tokens, seq) / 16) + 1 blocks
    (vllm/v1/kv_cache_interface.py ``FullAttentionSpec`` / ``SlidingWindowSpec.max_memory_usage_bytes``)."""
    b = KV_DTYPE_BYTES[kv_dtype]
    total = 0.0
    for elems, w in zip(arch.layer_kv_elems, arch.layer_window):
        if w is None:
            blocks = -(-seq // block_size)
        else:
            blocks = -(-min(w - 1 + max_num_batched_tokens, seq) // block_size) + 1
        total += elems * b * block_size * blocks
    return int(total)


def activation_bytes(arch: Architecture, dtype: str, batch: int, seq: int, mode: str) -> int:
    """Activation bytes at the peak, engines hf and train (vLLM: ``vllm_activation_bytes``).

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


def vllm_activation_bytes(arch: Architecture, max_num_batched_tokens: int, max_num_seqs: int, tp: int, dtype: str = "bf16") -> int:
    """Per-GPU activation peak of vLLM's profiling run (``gpu_model_runner.profile_run``): a forward
    pass of ``max_num_batched_tokens`` tokens (per token: gate/up and the activated MLP width, split
    by tensor parallelism, + 4 hidden-sized vectors, in 16 bits) plus the sampler on
    ``max_num_seqs`` rows of logits (fp32 logits + probabilities, vocabulary gathered on every GPU).
    Calibrated on published logs: Llama-3.1-8B on H100 (8192 / 1024) -> 1.88 GiB."""
    width_bytes = 4 if dtype == "fp32" else 2
    forward = max_num_batched_tokens * (3 * arch.act_width / tp + 4 * arch.hidden) * width_bytes
    sampler = max_num_seqs * arch.vocab * VLLM_SAMPLER_BYTES_PER_LOGIT
    return int(forward + sampler)


def vllm_non_torch_bytes(gpu_count: int) -> int:
    """Non-torch memory per GPU: 0.25 GiB alone, 2.1 GiB with NCCL (TP >= 2)."""
    return VLLM_NON_TORCH_BYTES + (VLLM_NCCL_BYTES if gpu_count > 1 else 0)


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


@dataclass(frozen=True)
class Weights:
    """Weight bytes and how they were found. ``parts``: bytes per breakdown part (scaled to ``total``
    when the checkpoint's own count is used). ``verified``: a known family's shape count, or the
    checkpoint's own byte count. ``source``: one line saying which."""

    total: int
    parts: dict[str, int]
    source: str
    verified: bool
    quant: Quant | None
    notes: tuple[str, ...] = ()


def weight_bytes(arch: Architecture, dtype: str, quant: Quant | None) -> tuple[int, dict[str, int]]:
    """(bytes, bytes per part) from the shape count. Without ``quant`` every part is ``dtype``'s size.
    With it the linear layers (attention, MLP, experts; lm_head when the config says so) take
    ``quant.bytes_per_param`` and the rest (embeddings, lm_head, norms, routers, vision) 16 bits."""
    base = DTYPE_BYTES[dtype] if quant is None else 2.0
    parts: dict[str, int] = {}
    for k, n in arch.breakdown.items():
        q = quant is not None and (k in ("attention", "mlp", "experts") or (k == "lm_head" and quant.lm_head))
        parts[k] = int(math.ceil(n * (quant.bytes_per_param if q else base)))
    return sum(parts.values()), parts


def resolve_weights(src: ModelSource, arch: Architecture, dtype: str, quant: Quant | None, mode: str) -> Weights:
    """The weight bytes to plan with: the checkpoint's own count (safetensors headers or index
    total_size) when it is stored as it will be served, else the shape count; never the index
    total_size rescaled by a dtype. Unknown families without a checkpoint count are unverified."""
    if mode == "train":
        total = arch.params * TRAIN_BYTES_PER_PARAM
        return Weights(total, {k: v * TRAIN_BYTES_PER_PARAM for k, v in arch.breakdown.items()},
                       "16 B/param (bf16 weights + grads, fp32 master + Adam m, v)", arch.known, None)
    shape_total, parts = weight_bytes(arch, dtype, quant)
    notes: list[str] = []
    what = (f"shapes: {arch.params:,} params x {DTYPE_BYTES[dtype]:g} B" if quant is None else
            f"shapes: {arch.linear_params + (arch.breakdown['lm_head'] if quant.lm_head else 0):,} linear params x "
            f"{quant.bytes_per_param:.4g} B ({quant.label}) + {arch.params - arch.linear_params:,} others x 2 B")
    stored = src.weights_total_size
    checkpoint_quant = quant is not None and quant.from_checkpoint
    as_stored = checkpoint_quant or (quant is None and (src.stored_dtype in (None, dtype) or (
        src.stored_dtype in ("bf16", "fp16") and dtype in ("bf16", "fp16"))))
    if stored and as_stored:
        ratio = stored / shape_total if shape_total else 0
        if arch.known and abs(ratio - 1) > 0.05:
            notes.append(f"the checkpoint stores {stored / GB:,.2f} GB where the shapes count {shape_total / GB:,.2f} GB; "
                         f"planning with the checkpoint's {src.weights_size_source}")
        elif not arch.known:
            notes.append(f"weights from the checkpoint's {src.weights_size_source} ({stored / GB:,.2f} GB), not from the "
                         f"llama-style shape guess ({shape_total / GB:,.2f} GB)")
        scaled = {k: int(v * stored / shape_total) for k, v in parts.items()} if shape_total else parts
        return Weights(int(stored), scaled, f"checkpoint {src.weights_size_source}", True, quant, tuple(notes))
    if src.params_by_dtype and quant is None and not arch.known:
        # an unquantized checkpoint served in another 16/32-bit dtype: exact count x new size
        n = sum(src.params_by_dtype.values())
        return Weights(int(n * DTYPE_BYTES[dtype]), parts, f"safetensors headers: {n:,} params x {DTYPE_BYTES[dtype]:g} B", True, quant,
                       (f"weights from the checkpoint's parameter count ({n:,}), not from the llama-style shape guess",))
    if stored and not as_stored and arch.known:
        stored_params = stored / DTYPE_BYTES.get(src.stored_dtype or "bf16", 2.0)
        if abs(stored_params / arch.params - 1) > 0.05:
            notes.append(f"the checkpoint's total_size ({stored / GB:,.2f} GB as {src.stored_dtype}) does not match the shape count; "
                         "planning with the shapes")
    verified = arch.known and (quant is None or quant.known)
    if quant is not None and not quant.known:
        notes.append(f"{quant.label}: gpuops cannot size it from shapes; planned at 16 bits")
    return Weights(shape_total, parts, what, verified, quant, tuple(notes))


# -- the plan -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CardPlan:
    """One card at ``gpu_count`` GPUs.

    ``need_bytes_per_gpu``: what one GPU needs at the plan's batch (vllm: weights/N + non-torch +
    activation peak + CUDA graphs + batch x per-request KV/split; hf: weights/N + KV/split +
    activations/N + overhead). ``budget_bytes``: utilization x engine-visible total.
    ``kv_pool_bytes``: budget - everything but the KV cache (per GPU; vllm's "Available KV cache
    memory"). ``max_concurrency``: requests of ``seq`` tokens the pool holds (vllm: pool blocks /
    blocks per request). ``max_batch``: whole requests that fit (vllm: also <= max_num_seqs).
    ``decode_tok_s``: the batch-1 ceiling, N x bandwidth / weight bytes one step reads.
    ``batch1_tok_s``/``max_batch_tok_s``: roofline step time max(bytes read / bandwidth, FLOPs /
    FLOP/s) with the KV cache of a full ``seq`` context read every step. ``compute_bound_batch``:
    batch at which decode FLOPs time equals weight-read time. ``usd_per_mtoken``: at the ceiling,
    batch 1 and the largest batch (None where a speed is 0 or in train mode). ``engine_command``:
    the ``vllm serve`` line that makes the plan true (None for hf and train). ``context_fits``: the
    model's max_position_embeddings fits the pool (vLLM's default --max-model-len).
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
    engine: str = "hf"
    kv_pool_bytes: int = 0
    max_concurrency: float = 0.0
    unverified: bool = False
    engine_command: str | None = None
    fixed_bytes: int = 0
    per_request_bytes: int = 0
    activation_bytes: int = 0
    overhead_bytes: int = 0
    cuda_graph_bytes: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    context_fits: bool = True

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
            "engine": self.engine,
            "budget_bytes": int(self.budget_bytes),
            "kv_pool_bytes": int(self.kv_pool_bytes),
            "max_concurrency": round(self.max_concurrency, 3),
            "unverified": self.unverified,
            "engine_command": self.engine_command,
        }


@dataclass(frozen=True)
class Plan:
    """The memory breakdown of one model run and what each card makes of it.

    Bytes are for the whole run: ``weights_bytes`` (train: 16 B/param, weights + grads + Adam),
    ``kv_cache_bytes`` (batch x seq, vllm: with block rounding and window admission; 0 in train
    mode), ``activation_bytes`` (peak; vllm: per GPU, at the plan's reference defaults),
    ``overhead_bytes`` (per GPU, replicated; vllm: non-torch + NCCL), ``total_bytes`` = weights + KV
    + activations + overhead x gpu_count. ``weights_source``: shapes, or the checkpoint's count.
    ``unverified``: nothing confirms the weight count (unknown family, no checkpoint byte count).
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
    engine: str = "hf"
    unverified: bool = False
    weight_parts: dict = field(default_factory=dict)
    quant: Quant | None = None
    src: ModelSource | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    cuda_graph_bytes: int = 0

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
            "engine": self.engine,
            "unverified": self.unverified,
            "weights_source": self.weights_source,
            "quantization": None if self.quant is None else self.quant.label,
        }


def _split(arch: Architecture, gpu_count: int) -> tuple[int, int]:
    """(weight/activation split, KV split) over ``gpu_count`` GPUs with tensor parallelism: the KV
    cache splits by KV head, so past kv_heads GPUs it is replicated (MLA's latent: on every GPU)."""
    return gpu_count, max(1, min(gpu_count, arch.kv_split))


def _batch_settings(p: Plan, card: Card | None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM runs with on ``card``: the user's, else the card's
    defaults (``vllm_batch_defaults``; without a card the smaller ones), max_num_seqs >= the batch."""
    dt, ds = vllm_batch_defaults(card) if card is not None else (2048, 256)
    return p.max_num_batched_tokens or dt, max(p.max_num_seqs or ds, p.batch if p.max_num_seqs is None else 0)


def _vllm_fixed(p: Plan, card: Card | None) -> tuple[int, int, int, int]:
    """(fixed bytes per GPU, activation peak, non-torch, CUDA graphs) for vllm on ``card``."""
    n, _ = _split(p.arch, p.gpu_count)
    mnbt, mns = _batch_settings(p, card)
    act = vllm_activation_bytes(p.arch, mnbt, mns, n, p.dtype)
    over = vllm_non_torch_bytes(n)
    return int(math.ceil(p.weights_bytes / n)) + over + act + p.cuda_graph_bytes, act, over, p.cuda_graph_bytes


def _request_kv_per_gpu(p: Plan, seq: int, card: Card | None) -> int:
    _, kv_n = _split(p.arch, p.gpu_count)
    mnbt, _ = _batch_settings(p, card)
    return int(math.ceil(request_kv_bytes(p.arch, p.kv_dtype, seq, mnbt) / kv_n))


def per_gpu_bytes(p: Plan, batch: int, card: Card | None = None) -> int:
    """Bytes per GPU at ``batch`` sequences of ``p.seq``.

    vllm: weights/N + non-torch + activation peak + CUDA graphs + batch x per-request KV (blocks,
    window admission)/split, with ``card``'s batch defaults (None: the smaller defaults).
    hf/train: weights/N + KV/split + activations/N + overhead."""
    n, kv_n = _split(p.arch, p.gpu_count)
    if p.engine == "vllm":
        return _vllm_fixed(p, card)[0] + batch * _request_kv_per_gpu(p, p.seq, card)
    kv = 0 if p.mode == "train" else kv_cache_bytes(p.arch, p.kv_dtype, batch, p.seq)
    act = activation_bytes(p.arch, p.dtype, batch, p.seq, p.mode)
    return int(math.ceil(p.weights_bytes / n + kv / kv_n + act / n + p.overhead_bytes))


def _weights_read(p: Plan, batch: int) -> float:
    """Weight bytes one decode step reads at ``batch``: every part but the embedding table (only the
    batch's rows of it; a tied table is read whole as lm_head), the routed experts the batch
    touches, expected E x (1 - (1 - k/E)^B) of E per layer (uniform routing)."""
    parts = p.weight_parts or {"other": p.weights_bytes}
    a = p.arch
    read = float(sum(v for k, v in parts.items() if k not in ("embeddings", "experts")))
    emb = parts.get("embeddings", 0)
    read += emb if a.tied else min(emb, batch * a.hidden * (emb / max(1, a.vocab * a.hidden)))
    if a.experts and parts.get("experts"):
        touched = 1.0 - (1.0 - a.experts_per_tok / a.experts) ** batch
        read += parts["experts"] * touched
    return read


def _step_tok_s(p: Plan, card: Card, flops: float, batch: int) -> float:
    n, kv_n = _split(p.arch, p.gpu_count)
    bw = card.bandwidth_bytes_s * n
    kv_read = kv_cache_bytes(p.arch, p.kv_dtype, batch, p.seq) * (n / kv_n)  # replicated KV is read on every GPU
    mem_t = (_weights_read(p, batch) + kv_read) / bw
    cmp_t = 2.0 * p.active_params * batch / (flops * n)
    return batch / max(mem_t, cmp_t)


def _compute_bound_batch(p: Plan, card: Card, flops: float) -> float:
    """Batch where 2 x active params x B / FLOP/s = weight-read time / bandwidth (KV reads ignored).

    Dense: B = ridge x bytes read per active param / 2 (fp16 on A100: ~153, seed 001)."""
    bw = card.bandwidth_bytes_s

    def gap(b: float) -> float:
        return 2.0 * p.active_params * b / flops - _weights_read(p, max(1, int(b))) / bw
    if not p.arch.experts:
        return flops / bw * _weights_read(p, 1) / (2.0 * p.active_params)
    lo, hi = 0.0, 1.0
    while gap(hi) < 0 and hi < 1e9:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return hi


def _fmt_util(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") if x < 1 else "1.0"


def vllm_command(p: Plan, card: Card | None) -> str:
    """The ``vllm serve`` line that makes the plan true on ``card``: --max-model-len, --gpu-memory-
    utilization, --max-num-seqs, --kv-cache-dtype, --tensor-parallel-size (+ --quantization fp8 for
    an fp8 plan of a 16-bit checkpoint, --max-num-batched-tokens when set). Every value is quoted."""
    mnbt, mns = _batch_settings(p, card)
    src = p.src
    model = (src.hf_id if src is not None and src.hf_id else p.model)
    parts = ["vllm", "serve", shlex.quote(model), "--max-model-len", str(p.seq), "--gpu-memory-utilization", _fmt_util(p.headroom),
             "--max-num-seqs", str(mns), "--kv-cache-dtype", "fp8" if p.kv_dtype == "fp8" else "auto",
             "--tensor-parallel-size", str(p.gpu_count)]
    if p.max_num_batched_tokens:
        parts += ["--max-num-batched-tokens", str(mnbt)]
    if p.quant is not None and not p.quant.from_checkpoint:
        if p.quant.dtype == "fp8":
            parts += ["--quantization", "fp8"]
        else:
            parts += ["#", f"{p.quant.dtype}: serve an AWQ/GPTQ checkpoint of this model"]
    elif p.quant is None and p.dtype in ("fp16", "fp32") and (src is None or src.stored_dtype != p.dtype):
        parts += ["--dtype", {"fp16": "float16", "fp32": "float32"}[p.dtype]]
    return " ".join(parts)


def _card_plan(p: Plan, card: Card) -> CardPlan:
    n, kv_n = _split(p.arch, p.gpu_count)
    # fp8 weights run fp8 matmuls where the card has them; int8/int4 are weight-only (dequantized
    # to 16-bit), so their compute peak is the 16-bit one.
    flops = card.fp8_flops if (p.dtype == "fp8" and card.fp8_flops) else card.bf16_flops
    ridge = flops / card.bandwidth_bytes_s
    budget = int(p.headroom * card.engine_visible_bytes)
    price = card.reference_usd_per_hour * n
    extra: dict[str, Any] = {"engine": p.engine, "unverified": p.unverified}
    if p.engine == "vllm":
        mnbt, mns = _batch_settings(p, card)
        fixed, act, over, graphs = _vllm_fixed(p, card)
        per_req = _request_kv_per_gpu(p, p.seq, card)
        pool = budget - fixed
        block = sum(p.arch.layer_kv_elems) * KV_DTYPE_BYTES[p.kv_dtype] * VLLM_BLOCK_SIZE / kv_n  # one block, every layer, per GPU
        blocks = max(0, int(pool // block)) if pool > 0 else 0
        conc = blocks * block / per_req if per_req else 0.0
        mb = min(int(math.floor(conc + 1e-9)), mns)
        need = fixed + p.batch * per_req
        ctx_fits = True
        if p.arch.max_context and p.arch.max_context > p.seq:
            ctx_fits = pool >= _request_kv_per_gpu(p, p.arch.max_context, card)
        extra.update(kv_pool_bytes=max(0, pool), max_concurrency=conc, engine_command=vllm_command(p, card), fixed_bytes=fixed,
                     per_request_bytes=per_req, activation_bytes=act, overhead_bytes=over, cuda_graph_bytes=graphs,
                     max_num_seqs=mns, max_num_batched_tokens=mnbt, context_fits=ctx_fits)
        fits = need <= budget and pool > 0
    else:
        need = per_gpu_bytes(p, p.batch)
        fixed = per_gpu_bytes(p, 0)
        per_seq = per_gpu_bytes(p, 1) - fixed
        mb = max_batch_for(budget, fixed, per_seq)
        pool = budget - fixed
        extra.update(kv_pool_bytes=max(0, pool) if p.mode != "train" else 0,
                     max_concurrency=(max(0, pool) / per_seq if per_seq > 0 and p.mode != "train" else 0.0),
                     fixed_bytes=fixed, per_request_bytes=per_seq, overhead_bytes=p.overhead_bytes)
        fits = need <= budget
    if p.mode == "train":
        return CardPlan(card, n, need, budget, fits, mb, None, None, None, ridge, flops, None, price, None, **extra)
    ceiling = n * card.bandwidth_bytes_s / _weights_read(p, 1)
    b1 = _step_tok_s(p, card, flops, 1)
    bmax = _step_tok_s(p, card, flops, mb) if mb >= 1 else None
    cbb = _compute_bound_batch(p, card, flops)
    usd = {
        "ceiling": dollars_per_mtoken(price, ceiling),
        "batch_1": dollars_per_mtoken(price, b1),
        "max_batch": dollars_per_mtoken(price, bmax) if bmax else None,
    } if price > 0 else None
    return CardPlan(card, n, need, budget, fits, mb, ceiling, b1, bmax, ridge, flops, cbb, price, usd, **extra)


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


def _serving_dtype(src: ModelSource, dtype: str | None, engine: str) -> tuple[str, Quant | None]:
    """(weight dtype, quantization) to plan with. ``dtype`` None/"auto": the checkpoint's own
    (quantization_config, else torch_dtype; fp32 checkpoints are served in bf16 as vLLM's dtype
    "auto" does). An explicit --dtype that contradicts a quantized checkpoint is BadInput."""
    q = quantization(src.config)
    asked = None if dtype is None or str(dtype).strip().lower() in AUTO else norm_dtype(dtype)
    if q is not None:
        if asked is not None and asked != q.dtype:
            raise BadInput(f"--dtype {asked} contradicts the checkpoint: it is quantized ({q.label})",
                           f"drop --dtype (its quantization_config sets the weight size){', or pass --dtype ' + q.dtype if q.known else ''}")
        return q.dtype, q
    if asked is None:
        stored = src.stored_dtype or "bf16"
        return ("bf16" if stored == "fp32" and engine != "train" else stored), None
    return asked, online_quant(asked)


def plan(
    model: str | ModelSource,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    batch: int = 1,
    seq: int = 4096,
    mode: str = "infer",
    gpu_count: int = 1,
    headroom: float | None = None,
    card: str | None = None,
    engine: str | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> Plan:
    """Plan ``model`` (a --model string or a loaded ModelSource) for every catalog card, or the cards
    ``card`` names (one card or a family).

    ``engine``: vllm (default; train when ``mode`` is train), hf or train. ``dtype`` None/"auto": the
    checkpoint's (see ``_serving_dtype``). ``kv_dtype`` None/"auto"/"same": ``default_kv_dtype``.
    ``headroom``: vLLM's gpu_memory_utilization (default 0.90), fraction of the engine-visible total.
    ``max_num_seqs``/``max_num_batched_tokens``: vLLM settings (default: the card's). Raises
    BadInput for unknown dtypes, a --dtype contradicting a quantized checkpoint, non-positive sizes,
    a bad config or an unknown card; a ``seq`` beyond the model's context is a warning.
    """
    src = load_model(model) if isinstance(model, str) else model
    engine = (engine or ("train" if mode == "train" else "vllm")).strip().lower()
    if engine not in ENGINES:
        raise BadInput(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}", "e.g. --engine vllm")
    if mode not in ("infer", "train"):
        raise BadInput(f"--mode must be infer or train, got {mode!r}", "e.g. --mode train")
    if engine == "train":
        mode = "train"
    elif mode == "train":
        raise BadInput(f"--mode train with --engine {engine}", "use --engine train (or drop --mode)")
    batch = _positive_int(batch, "--batch", "32")
    seq = _positive_int(seq, "--seq", "4096")
    gpu_count = _positive_int(gpu_count, "--gpu-count", "2")
    mns = None if max_num_seqs is None else _positive_int(max_num_seqs, "--max-num-seqs", "256")
    mnbt = None if max_num_batched_tokens is None else _positive_int(max_num_batched_tokens, "--max-num-batched-tokens", "8192")
    if headroom is None:
        headroom = DEFAULT_HEADROOM
    try:
        headroom = float(headroom)
    except (TypeError, ValueError):
        raise BadInput(f"--gpu-memory-utilization must be a fraction, got {headroom!r}", "e.g. --gpu-memory-utilization 0.9") from None
    if not 0 < headroom <= 1:
        raise BadInput(f"--gpu-memory-utilization must be in (0, 1], got {headroom:g}", "e.g. --gpu-memory-utilization 0.9 (vLLM's default)")
    dtype_n, quant = _serving_dtype(src, dtype, engine)
    kv = default_kv_dtype(dtype_n) if kv_dtype is None or str(kv_dtype).strip().lower() in AUTO else norm_dtype(kv_dtype, kv=True)
    chosen = tuple(resolve_cards(card)) if card else cards()

    arch = architecture(src.config)
    w = resolve_weights(src, arch, dtype_n, quant, mode)
    warnings = list(arch.notes) + list(w.notes)
    unverified = not w.verified
    if unverified:
        warnings.append("unverified: nothing confirms the weight count (a family gpuops does not know and no checkpoint byte count); "
                        "`up --model` refuses to rent on it without --allow-unverified")
    if arch.max_context and seq > arch.max_context:
        warnings.append(f"--seq {seq} is beyond the model's context ({arch.max_context} tokens, max_position_embeddings)")
    if dtype_n == "bf16" and chosen and all(not c.bf16_native for c in chosen):
        names = ", ".join(c.name for c in chosen)
        warnings.append(f"{names} has no bf16: serving engines run it in fp16 (same bytes); pass --dtype fp16")
    n = gpu_count
    if engine == "vllm":
        # plan-level figures: the one card's defaults when one card is planned, else the smaller ones
        ref_mnbt, ref_mns = vllm_batch_defaults(chosen[0]) if len(chosen) == 1 else (2048, 256)
        overhead = vllm_non_torch_bytes(n)
        kv_cache = batch * request_kv_bytes(arch, kv, seq, mnbt or ref_mnbt)
        act = vllm_activation_bytes(arch, mnbt or ref_mnbt, max(mns or ref_mns, batch), n, dtype_n)
        total = w.total + kv_cache + (act + overhead + VLLM_CUDA_GRAPH_BYTES) * n
    else:
        overhead = FRAMEWORK_OVERHEAD_BYTES
        kv_cache = 0 if mode == "train" else kv_cache_bytes(arch, kv, batch, seq)
        act = activation_bytes(arch, dtype_n, batch, seq, mode)
        total = w.total + kv_cache + act + overhead * n
    p = Plan(
        model=src.name, source=src.source, arch=arch, params=arch.params, active_params=arch.active_params,
        dtype=dtype_n, kv_dtype=kv, batch=batch, seq=seq, mode=mode, gpu_count=gpu_count, headroom=headroom,
        weights_bytes=w.total, weights_source=w.source, kv_bytes_per_token=kv_bytes_per_token(arch, kv),
        kv_cache_bytes=kv_cache, activation_bytes=act, overhead_bytes=overhead,
        total_bytes=total, cards=(), warnings=tuple(warnings), engine=engine, unverified=unverified, weight_parts=w.parts,
        quant=quant, src=src, max_num_seqs=mns, max_num_batched_tokens=mnbt,
        cuda_graph_bytes=VLLM_CUDA_GRAPH_BYTES if engine == "vllm" else 0,
    )
    p = _with_cards(p, chosen)
    if engine == "vllm" and arch.max_context and arch.max_context > seq:
        short = [c.card.name for c in p.cards if c.fits and not c.context_fits]
        if short:
            need = request_kv_bytes(arch, kv, arch.max_context, mnbt or ref_mnbt) / _split(arch, n)[1]
            p = replace(p, warnings=p.warnings + (
                f"vLLM's default --max-model-len is max_position_embeddings ({arch.max_context:,} tokens, {need / GIB:,.2f} GiB of KV "
                f"per GPU): it does not fit the KV pool on {', '.join(short)} and vLLM would refuse to start; "
                f"keep --max-model-len {seq} from the engine command",))
    return p


def _with_cards(p: Plan, chosen: Iterable[Card]) -> Plan:
    return replace(p, cards=tuple(_card_plan(p, c) for c in chosen))


# -- `up --model`: the bytes a GPU needs, and what to do when nothing fits ------------------------
def need_bytes_per_gpu(p: Plan) -> int:
    """Engine-visible VRAM one GPU must have for this plan at its utilization: per-GPU need /
    headroom (vllm: the smallest over the cards that fit, since the activation peak depends on the
    card's defaults; none fits: with the smaller defaults).

    This is what ``offers.rank(need_bytes_per_gpu=...)`` compares with an offer's VRAM (with its 7%
    nominal-vs-reported tolerance)."""
    if p.engine == "vllm":
        fitting = [c.need_bytes_per_gpu for c in p.cards if c.fits]
        need = min(fitting) if fitting else per_gpu_bytes(p, p.batch)
        return int(math.ceil(need / p.headroom))
    return int(math.ceil(p.per_gpu_bytes() / p.headroom))


def fit_advice(p: Plan) -> str:
    """A one-line fix for a plan no card fits: what is missing on the largest card, and the first
    changes (smaller dtype, fp8 KV cache, more GPUs, smaller batch) that make it fit there."""
    if not p.cards:
        return "no card to compare with"
    big = max(p.cards, key=lambda c: c.budget_bytes)
    short = big.missing_bytes
    fixes: list[str] = []
    base = dict(dtype=p.dtype, kv_dtype=p.kv_dtype, gpu_count=p.gpu_count)

    def fits_with(**over: Any) -> bool:
        q = _replan(p, big.card, **{**base, **over})
        return bool(q.cards) and q.cards[0].fits

    quantized_ckpt = p.quant is not None and p.quant.from_checkpoint
    if p.mode == "infer":
        if not quantized_ckpt:
            # fp8 weights only where the card has fp8 tensor cores (catalog fp8_tflops > 0: Ada,
            # Hopper, Blackwell, MI300X); an A100 or older gets int8 instead.
            for d in ("fp8", "int4") if big.card.fp8_flops else ("int8", "int4"):
                if DTYPE_BYTES[d] < DTYPE_BYTES[p.dtype] and fits_with(dtype=d):
                    fixes.append(f"--dtype {d}")
                    break
        if KV_DTYPE_BYTES[p.kv_dtype] > 1 and fits_with(kv_dtype="fp8"):
            fixes.append("--kv-dtype fp8")
    for n in (2, 4, 8, 16):
        if n > p.gpu_count and fits_with(gpu_count=n):
            fixes.append(f"--gpu-count {n}")
            break
    if p.batch > 1 and big.max_batch >= 1:
        fixes.append(f"--batch {big.max_batch}")
    what = " or ".join(fixes) if fixes else "a smaller model"
    return (f"needs {fmt_bytes(big.need_bytes_per_gpu)} per GPU; {big.card.name} x{p.gpu_count} has "
            f"{fmt_bytes(big.budget_bytes)} at {p.headroom:.0%} of its {big.card.engine_visible_bytes / GIB:.2f} GiB, "
            f"{fmt_bytes(short)} short; try {what} on {big.card.name}")


def _replan(p: Plan, card: Card, **args: Any) -> Plan:
    """``p`` with another dtype / KV dtype / GPU count on ``card`` (same model, no reload)."""
    assert p.src is not None
    dtype = args["dtype"] if not (p.quant is not None and p.quant.from_checkpoint) else None
    q = plan(p.src, dtype=dtype, kv_dtype=args["kv_dtype"], batch=p.batch, seq=p.seq, mode=p.mode, gpu_count=args["gpu_count"],
             headroom=p.headroom, card=card.name, engine=p.engine, max_num_seqs=p.max_num_seqs,
             max_num_batched_tokens=p.max_num_batched_tokens)
    return q


def fmt_bytes(n: float) -> str:
    """``13.48 GB (12.55 GiB)``: both units, so nobody has to guess which one we mean."""
    return f"{n / GB:,.2f} GB ({n / GIB:,.2f} GiB)"


def parse_positive_int(value: Any, flag: str, example: str) -> int:
    """``value`` as a whole number >= 1 (text from the command line welcome); BadInput naming ``flag``."""
    return _positive_int(value, flag, example)


def size_for_up(
    model: str,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    seq: int = 4096,
    batch: int = 1,
    gpu_count: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    card: str | None = None,
    allow_unverified: bool = False,
    engine: str | None = None,
) -> tuple[int, tuple[str, ...], Plan]:
    """What `up --model` rents by: (need_bytes_per_gpu, names of the catalog cards that fit, plan).

    ``need_bytes_per_gpu`` = per-GPU need / headroom, the VRAM an offer must report (offers.rank
    allows its 7% nominal-vs-reported tolerance on top). Cards are all catalog cards or the
    ``card`` family. Raises BadInput, before anything is rented, when no card fits (how much is
    missing on the largest card and what would make it fit, ``fit_advice``), and when the plan is
    unverified unless ``allow_unverified`` (``--allow-unverified``).
    """
    p = plan(model, dtype=dtype, kv_dtype=kv_dtype, batch=batch, seq=seq, mode="infer", gpu_count=gpu_count,
             headroom=headroom, card=card, engine=engine)
    if p.unverified and not allow_unverified:
        raise BadInput(f"{p.model}: the plan is unverified (model_type {p.arch.family!r} is not a family gpuops counts, and no "
                       "checkpoint byte count confirms it)",
                       "pass the model directory with its *.safetensors or index, or add --allow-unverified to rent on the guess")
    fitting = tuple(c.card.name for c in p.cards if c.fits)
    if not fitting:
        where = f"--card {card}" if card else "catalog card"
        raise BadInput(f"{p.model} ({p.dtype}, KV {p.kv_dtype}, batch {p.batch} x seq {p.seq}, {p.gpu_count} GPU(s), {p.engine}) fits no {where}",
                       fit_advice(p))
    return need_bytes_per_gpu(p), fitting, p


def prefill_seconds(active_params: float, tokens: int, flops: float) -> float:
    """Lower bound of a prefill of ``tokens`` tokens: 2 x active params x tokens / FLOP/s (MFU 100%;
    seed 003 problem 6: 7B x 2048 tokens on an A100 -> 92 ms)."""
    return 2.0 * active_params * tokens / flops
