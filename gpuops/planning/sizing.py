"""Size the box before renting: model config -> parameter count -> memory -> fit, speed and price per card.

Pure functions over plain data; the only I/O is reading a model's ``config.json`` and its
safetensors metadata (a built-in from ``catalog/models.toml``, a local file or directory, or a
Hugging Face repo through ``huggingface_hub``, imported lazily). Nothing here imports more than the
standard library and gpuops' own catalog, so the CLI stays fast.

Units: bytes are integers; "GB" = 10^9 bytes, "GiB" = 2^30 bytes; bandwidth in bytes/s; compute in
FLOP/s; prices in USD/hour; speeds in tokens/s; cost in USD per million generated tokens ($/Mtoken).

Engines (``engine=``; formulas also in docs/ARCHITECTURE.md "Numbers to know"):

- ``vllm`` (default) sizes memory the way vLLM ``VLLM_RELEASE`` (0.33.0, V1 engine) does at start-up
  (vllm/v1/worker/gpu_worker.py ``determine_available_memory``, vllm/utils/mem_utils.py
  ``memory_profiling``): per GPU, the budget (``requested_memory``) is ``gpu_memory_utilization``
  (default 0.90) x the total the engine sees (torch.cuda.mem_get_info, catalog
  ``engine_visible_gib``); minus the weights (split by tensor parallelism), non-torch memory (0.25
  GiB; 2.1 GiB with NCCL at TP >= 2), the activation peak of the profiling run
  (``max_num_batched_tokens`` tokens through the model + ``max_num_seqs`` fp32 logits and
  probabilities, defaults per card from vllm/engine/arg_utils.py), and the CUDA-graph estimate (0.8
  GiB; subtracted before the pool since ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1);
  what is left is the KV pool. Its blocks, groups and max concurrency at ``seq`` follow vLLM's KV cache
  planning (``memory.vllm_kv_layout``; the rules and their sources in gpuops/planning/vllm_kv.py,
  proven against vLLM's own functions by tests/data/vllm_golden.json): a sliding-window layer
  needs ceil(min(window - 1 + 2 x max_num_batched_tokens, seq) / 16) + 1 blocks (two batches in
  flight), layers of two kinds are grouped by the smaller count (the larger when within 1.5x) and
  padded, a Mamba / Gated DeltaNet layer holds one state page per request.
- ``hf``: plain transformers ``generate``: weights + a contiguous KV cache of batch x seq (a windowed
  layer holds min(seq, window)) + the activations of a whole-batch prefill + 1.5 GB of framework
  overhead (docs/worked-numbers.md), against the headroom fraction of the engine-visible total.
- ``train``: mixed-precision Adam, 16 B/param + activations kept for backward (ZeRO's 16 B/param).

Weights: parameters are counted from matrix shapes (a matrix mapping a length-a vector to a
length-b vector has a x b parameters, + b with a bias). A checkpoint's own byte count (safetensors
headers, or the index's ``total_size``) wins when it is stored in the dtype that will be served; it
is never rescaled by ``--dtype``. Quantization (``quantization_config``, or ``--dtype fp8/int8/int4``
on a 16-bit checkpoint) shrinks only the linear layers of attention, Mamba mixers, MLP and experts
(MXFP4: the experts only); embeddings, lm_head, norms, routers and vision towers keep 16 bits; scales
and zero points are added per group.

Cards: NVIDIA's unless asked (``vendor``; ``gpuops.catalog.vendor_for``).

Speed: decode ceiling at batch 1 = bandwidth / weight bytes one step reads (the embedding table is
not read, only the rows of the step's tokens; MoE: the experts the batch routes to); ridge point =
dense FLOP/s / bandwidth; $/Mtoken = USD/hour / (tokens/s x 3600) x 1e6.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gpuops.catalog import Card, alias_note, cards_for, resolve_cards, vendor_for
from gpuops.errors import BadInput
from gpuops.planning.architecture import Architecture, _int_key, _text_config, architecture
from gpuops.planning.memory import (
    DEFAULT_HEADROOM,
    FRAMEWORK_OVERHEAD_BYTES,
    GB,
    GIB,
    VLLM_CUDA_GRAPH_BYTES,
    VLLM_VERSION,
    activation_bytes,
    dollars_per_mtoken,
    kv_bytes_per_token,
    kv_cache_bytes,
    max_batch_for,
    request_kv_bytes,
    resolve_weights,
    vllm_activation_bytes,
    vllm_batch_defaults,
    vllm_kv_layout,
    vllm_non_torch_bytes,
)
from gpuops.planning.models import ModelSource, load_model
from gpuops.planning.quant import (
    AUTO,
    DTYPE_BYTES,
    ENGINES,
    KV_DTYPE_BYTES,
    MXFP4_BYTES_PER_PARAM,
    Quant,
    default_kv_dtype,
    norm_dtype,
    online_quant,
    quantization,
)
from gpuops.planning.vllm_kv import CHUNKED, KVLayout


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
    note: str = ""

    @property
    def missing_bytes(self) -> int:
        return max(0, self.need_bytes_per_gpu - self.budget_bytes)

    @property
    def shown_speed(self) -> tuple[float | None, dict[str, float | None] | None]:
        """(decode ceiling tok/s, $/Mtoken) as `plan` shows them; (None, None) on a card that does not fit.

        Its figures are the physics of a box that cannot hold the model: the fields keep them (the
        roofline is still what the card's bandwidth gives), the table and the JSON show none."""
        return (self.decode_tok_s, self.usd_per_mtoken) if self.fits else (None, None)

    def as_json(self) -> dict:
        """The card's plan as JSON; a card that does not fit has no speed and no $/Mtoken (null, ``shown_speed``)."""
        speed, usd = self.shown_speed
        return {
            "card": self.card.name,
            "vram_bytes": int(self.card.vram_bytes),
            "fits": self.fits,
            "max_batch": int(self.max_batch),
            "decode_tok_s": None if speed is None else round(speed, 3),
            "ridge_flop_per_byte": round(self.ridge_flop_per_byte, 3),
            "usd_per_mtoken": None
            if usd is None
            else {k: (None if v is None else round(v, 6)) for k, v in usd.items()},
            "engine": self.engine,
            "budget_bytes": int(self.budget_bytes),
            "kv_pool_bytes": int(self.kv_pool_bytes),
            "max_concurrency": round(self.max_concurrency, 3),
            "unverified": self.unverified,
            "engine_command": self.engine_command,
            "vendor": self.card.vendor,
            "note": self.note,
        }


@dataclass(frozen=True)
class Plan:
    """The memory breakdown of one model run and what each card makes of it.

    Bytes are for the whole run: ``weights_bytes`` (train: 16 B/param, weights + grads + Adam),
    ``kv_cache_bytes`` (batch x seq, vllm: with block rounding and window admission; 0 in train
    mode), ``activation_bytes`` (peak; vllm: per GPU, at the plan's reference defaults),
    ``overhead_bytes`` (per GPU, replicated; vllm: non-torch + NCCL), ``total_bytes`` = weights + KV
    + activations + overhead x gpu_count. ``weights_source``: shapes, or the checkpoint's count.
    Verified speaks of two things, each its own flag: ``weights_verified`` (the weight bytes are
    confirmed: a family gpuops counts, or the checkpoint's own byte count; ``memory.Weights``) and
    ``arch.layout_verified`` (the KV layout is read, not assumed: a family gpuops knows, or a
    config stating its layers in keys gpuops reads; ``architecture.Architecture``). ``unverified``
    = either is not: `up --model` refuses such a plan without ``--allow-unverified``. JSON:
    ``weights_verified``, ``kv_layout_verified`` and ``unverified``, one story (``unverified`` is
    true exactly when one of the other two is false).
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
    kv_layout: KVLayout | None = None
    chunked_hybrid: bool = False
    weights_verified: bool = True

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
            "weights_verified": self.weights_verified,
            "kv_layout_verified": self.arch.layout_verified,
            "vllm_version": VLLM_VERSION,
            "weights_source": self.weights_source,
            "quantization": None if self.quant is None else self.quant.label,
        }


MAX_TP = 16  # the most GPUs `up` puts in one box (gpuops.rental.launcher.MAX_GPUS_PER_BOX)


class TensorParallelRefused(BadInput):
    """``--gpu-count`` is a tensor-parallel size vLLM refuses for the model (see ``tp_splits``)."""


def tp_splits(arch: Architecture, gpu_count: int) -> bool:
    """Whether vLLM takes ``--tensor-parallel-size gpu_count`` for this model.

    The attention heads must divide evenly (vLLM 0.11 ``vllm/config/model.py``,
    ``ModelConfig.verify_with_parallel_config``: "Total number of attention heads ... must be
    divisible by tensor parallel size")."""
    return gpu_count <= 1 or arch.heads % gpu_count == 0


def _split(arch: Architecture, gpu_count: int) -> tuple[int, int]:
    """(weight/activation split, KV split) over ``gpu_count`` GPUs with tensor parallelism.

    The KV cache splits by KV head, so past kv_heads GPUs it is replicated (MLA's latent: on every
    GPU)."""
    return gpu_count, max(1, min(gpu_count, arch.kv_split))


def _batch_settings(p: Plan, card: Card | None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM runs with on ``card``.

    The user's, else the card's defaults (``vllm_batch_defaults``; without a card the smaller ones),
    max_num_seqs >= the batch."""
    dt, ds = vllm_batch_defaults(card) if card is not None else (2048, 256)
    return p.max_num_batched_tokens or dt, max(p.max_num_seqs or ds, p.batch if p.max_num_seqs is None else 0)


def _vllm_fixed(p: Plan, card: Card | None) -> tuple[int, int, int, int]:
    """(fixed bytes per GPU, activation peak, non-torch, CUDA graphs) for vllm on ``card``."""
    n, _ = _split(p.arch, p.gpu_count)
    mnbt, mns = _batch_settings(p, card)
    act = vllm_activation_bytes(p.arch, mnbt, mns, n, p.dtype)
    over = vllm_non_torch_bytes(n)
    pad = mxfp4_padding_bytes(p, card)[0] if card is not None else 0
    return int(math.ceil(p.weights_bytes / n)) + pad + over + act + p.cuda_graph_bytes, act, over, p.cuda_graph_bytes


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def mxfp4_backend(card: Card) -> tuple[str, int, int] | None:
    """(backend, intermediate alignment, hidden alignment) vLLM 0.11 picks for MXFP4 experts on ``card``.

    None where it cannot run (compute capability < 8.0); from ``get_mxfp4_backend`` and
    ``Mxfp4MoEMethod.create_weights`` in vllm/model_executor/layers/quantization/mxfp4.py.
    ``pip install vllm==0.11.0`` brings neither FlashInfer (an extra) nor triton_kernels, so every
    NVIDIA card takes Marlin (intermediate to a multiple of 128, hidden of 256); ROCm takes the
    Triton kernels (both to 256). Later images with FlashInfer pad by 128 on Hopper, 256 on
    Blackwell."""
    if card.vendor == "amd":
        return "triton (ROCm)", 256, 256
    if card.compute_capability and card.compute_capability < 8.0:
        return None
    return "marlin", 128, 256


def mxfp4_padding_bytes(p: Plan, card: Card) -> tuple[int, str]:
    """(bytes per GPU, note) that vLLM's MXFP4 kernels add by padding each expert's matrices.

    On ``card`` at the plan's tensor parallelism: per expert 3 x I_pad x H_pad x 4.25 bits (+ bf16
    biases) where the checkpoint has 3 x I/TP x H; (0, "") for other plans."""
    a = p.arch
    if p.quant is None or p.quant.method != "mxfp4" or not a.experts:
        return 0, ""
    be = mxfp4_backend(card)
    if be is None:
        return 0, ""
    name, ia, ha = be
    cfg = _text_config(p.src.config)[0] if p.src is not None else {}
    width = (
        _int_key(cfg, "moe_intermediate_size")
        if cfg.get("moe_intermediate_size")
        else _int_key(cfg, "intermediate_size")
    )
    per = -(-width // p.gpu_count)
    ip, hp = _round_up(per, ia), _round_up(a.hidden, ha)
    ml = round(a.breakdown.get("experts", 0) / (a.experts * 3 * a.hidden * width)) if width else 0
    extra = (
        ml
        * a.experts
        * (3 * (ip * hp - per * a.hidden) * MXFP4_BYTES_PER_PARAM + 2 * (2 * (ip - per) + (hp - a.hidden)))
    )
    note = (
        f"MXFP4 on {name}: experts padded to {ip} x {hp} (checkpoint {per} x {a.hidden}), +{extra / GIB:.2f} GiB per GPU"
        if extra
        else ""
    )
    return int(extra), note


def _layout(p: Plan, card: Card | None = None) -> KVLayout:
    """The KV cache layout on ``card`` (its MLA block size; None: the plan's own)."""
    if card is None and p.kv_layout is not None:
        return p.kv_layout
    return vllm_kv_layout(p.arch, p.kv_dtype, p.dtype, p.gpu_count, p.chunked_hybrid, card)


def _request_kv_per_gpu(p: Plan, seq: int, card: Card | None) -> int:
    mnbt, _ = _batch_settings(p, card)
    return _layout(p, card).bytes_per_request(seq, mnbt)


def per_gpu_bytes(p: Plan, batch: int, card: Card | None = None) -> int:
    """Bytes per GPU at ``batch`` sequences of ``p.seq``.

    vllm: weights/N + non-torch + activation peak + CUDA graphs + batch x per-request KV (blocks,
    window admission)/split, with ``card``'s batch defaults (None: the smaller defaults).
    hf/train: weights/N + KV/split + activations/N + overhead."""
    n, kv_n = _split(p.arch, p.gpu_count)
    if p.engine == "vllm":
        return _vllm_fixed(p, card)[0] + batch * _request_kv_per_gpu(p, p.seq, card)
    kv = 0 if p.mode == "train" else kv_cache_bytes(p.arch, p.kv_dtype, batch, p.seq, p.dtype)
    act = activation_bytes(p.arch, p.dtype, batch, p.seq, p.mode)
    return int(math.ceil(p.weights_bytes / n + kv / kv_n + act / n + p.overhead_bytes))


def _weights_read(p: Plan, batch: int) -> float:
    """Weight bytes one decode step reads at ``batch``.

    Every part but the embedding table (only the batch's rows of it; a tied table is read whole as
    lm_head), the routed experts the batch touches, expected E x (1 - (1 - k/E)^B) of E per layer
    (uniform routing)."""
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
    kv_read = kv_cache_bytes(p.arch, p.kv_dtype, batch, p.seq, p.dtype) * (
        n / kv_n
    )  # replicated KV is read on every GPU
    mem_t = (_weights_read(p, batch) + kv_read) / bw
    cmp_t = 2.0 * p.active_params * batch / (flops * n)
    return batch / max(mem_t, cmp_t)


def _compute_bound_batch(p: Plan, card: Card, flops: float) -> float:
    """Batch where 2 x active params x B / FLOP/s = weight-read time / bandwidth (KV reads ignored).

    Dense: B = ridge x bytes read per active param / 2 (fp16 on A100: ~153, docs/worked-numbers.md)."""
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
    """The ``vllm serve`` line that makes the plan true on ``card``.

    --max-model-len, --gpu-memory- utilization, --max-num-seqs, --kv-cache-dtype,
    --tensor-parallel-size (+ --quantization fp8 for an fp8 plan of a 16-bit checkpoint,
    --max-num-batched-tokens when set). Every value is quoted."""
    mnbt, mns = _batch_settings(p, card)
    src = p.src
    model = src.hf_id if src is not None and src.hf_id else p.model
    env = (
        ["VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0"]
        if not p.chunked_hybrid and CHUNKED in p.arch.kinds
        else []
    )
    parts = [
        *env,
        "vllm",
        "serve",
        shlex.quote(model),
        "--max-model-len",
        str(p.seq),
        "--gpu-memory-utilization",
        _fmt_util(p.headroom),
        "--max-num-seqs",
        str(mns),
        "--kv-cache-dtype",
        "fp8" if p.kv_dtype == "fp8" else "auto",
        "--tensor-parallel-size",
        str(p.gpu_count),
    ]
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
        conc = _layout(p, card).max_concurrency(pool, p.seq, mnbt)  # pool blocks / blocks one request needs
        mb = min(int(math.floor(conc + 1e-9)), mns)
        need = fixed + p.batch * per_req
        ctx_fits = True
        if p.arch.max_context and p.arch.max_context > p.seq:
            ctx_fits = pool >= _layout(p, card).layer_bytes(p.arch.max_context, mnbt)  # check_enough_kv_cache_memory
        extra.update(
            kv_pool_bytes=max(0, pool),
            max_concurrency=conc,
            engine_command=vllm_command(p, card),
            fixed_bytes=fixed,
            per_request_bytes=per_req,
            activation_bytes=act,
            overhead_bytes=over,
            cuda_graph_bytes=graphs,
            max_num_seqs=mns,
            max_num_batched_tokens=mnbt,
            context_fits=ctx_fits,
        )
        fits = need <= budget and pool > 0
        extra["note"] = mxfp4_padding_bytes(p, card)[1]
        if p.quant is not None and p.quant.method == "mxfp4" and mxfp4_backend(card) is None:
            fits, mb = False, 0  # Mxfp4Config.get_min_capability: 80
            extra["note"] = (
                f"vLLM {VLLM_VERSION} runs MXFP4 on compute capability >= 8.0 only; {card.display} is {card.compute_capability:g}"
            )
    else:
        need = per_gpu_bytes(p, p.batch)
        fixed = per_gpu_bytes(p, 0)
        per_seq = per_gpu_bytes(p, 1) - fixed
        mb = max_batch_for(budget, fixed, per_seq)
        pool = budget - fixed
        extra.update(
            kv_pool_bytes=max(0, pool) if p.mode != "train" else 0,
            max_concurrency=(max(0, pool) / per_seq if per_seq > 0 and p.mode != "train" else 0.0),
            fixed_bytes=fixed,
            per_request_bytes=per_seq,
            overhead_bytes=p.overhead_bytes,
        )
        fits = need <= budget
    if p.mode == "train":
        return CardPlan(card, n, need, budget, fits, mb, None, None, None, ridge, flops, None, price, None, **extra)
    ceiling = n * card.bandwidth_bytes_s / _weights_read(p, 1)
    b1 = _step_tok_s(p, card, flops, 1)
    bmax = _step_tok_s(p, card, flops, mb) if mb >= 1 else None
    cbb = _compute_bound_batch(p, card, flops)
    usd = (
        {
            "ceiling": dollars_per_mtoken(price, ceiling),
            "batch_1": dollars_per_mtoken(price, b1),
            "max_batch": dollars_per_mtoken(price, bmax) if bmax else None,
        }
        if price > 0
        else None
    )
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
    """(weight dtype, quantization) to plan with.

    ``dtype`` None/"auto": the checkpoint's own (quantization_config, else torch_dtype; fp32
    checkpoints are served in bf16 as vLLM's dtype "auto" does). An explicit --dtype that
    contradicts a quantized checkpoint is BadInput."""
    q = quantization(src.config)
    asked = None if dtype is None or str(dtype).strip().lower() in AUTO else norm_dtype(dtype)
    if q is not None:
        if asked is not None and asked != q.dtype:
            raise BadInput(
                f"--dtype {asked} contradicts the checkpoint: it is quantized ({q.label})",
                f"drop --dtype (its quantization_config sets the weight size){', or pass --dtype ' + q.dtype if q.known else ''}",
            )
        return q.dtype, q
    if asked is None:
        stored = src.stored_dtype or "bf16"
        return ("bf16" if stored == "fp32" and engine != "train" else stored), None
    if asked == "mxfp4":  # vLLM 0.11 loads MXFP4 from a checkpoint only (Mxfp4MoEMethod has no online path)
        raise BadInput(
            "--dtype mxfp4 needs an MXFP4 checkpoint (quantization_config quant_method mxfp4, e.g. gpt-oss)",
            "drop --dtype, or use --dtype fp8 / int4 on this checkpoint",
        )
    return asked, online_quant(asked)


def _layout_notes(arch: Architecture, layout: KVLayout, kv: str, dtype: str, seq: int, mnbt: int) -> list[str]:
    """What the engine's KV cache layout does to this model, one line each (the plan's warnings)."""
    out: list[str] = []
    if arch.mamba_layers:
        assert arch.mamba is not None  # mamba_layers counts its layers
        out.append(
            f"{arch.mamba_layers} {arch.mamba.kind} layers ({arch.mamba.source}) hold a fixed state per request, no per-token KV; "
            f"vLLM raises the attention block to {layout.block_size} tokens so one page holds a state "
            f"(vllm/platforms/interface.py _align_hybrid_block_size, vLLM {VLLM_VERSION})"
        )
    if layout.padding_layers:
        full = layout.layer_bytes(seq, mnbt)
        out.append(
            f"vLLM's hybrid KV cache groups layers {layout.group_size} to a group and pads {layout.padding_layers} layers "
            f"(vllm/v1/core/kv_cache_planning.py _get_kv_cache_groups_uniform_page_size, {VLLM_VERSION}): a request of {seq:,} tokens "
            f"takes {layout.bytes_per_request(seq, mnbt) / full - 1:.1%} more KV than the layers hold"
        )
    if CHUNKED in arch.kinds and not layout.hybrid:
        on = vllm_kv_layout(arch, kv, dtype, 1, chunked_hybrid=True)
        off = vllm_kv_layout(arch, kv, dtype, 1, chunked_hybrid=False)
        save = 1 - on.bytes_per_request(seq, mnbt) / off.bytes_per_request(seq, mnbt)
        out.append(
            f"chunked local attention (attention_chunk_size {arch.attention_chunk}) on {arch.kinds.count(CHUNKED)} of "
            f"{len(arch.kinds)} layers cached as full attention (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0; "
            f"vLLM {VLLM_VERSION} defaults to 1, where a request of {seq:,} tokens needs {save:.0%} less KV)"
        )
    return out


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
    chunked_hybrid: bool = True,
    vendor: str | None = None,
) -> Plan:
    """Plan ``model`` for every catalog card, or for the cards ``card`` names.

    ``model``: a --model string or a loaded ModelSource; ``card``: one card or a family.

    ``engine``: vllm (default; train when ``mode`` is train), hf or train. ``dtype`` None/"auto": the
    checkpoint's (see ``_serving_dtype``). ``kv_dtype`` None/"auto"/"same": ``default_kv_dtype``.
    ``headroom``: vLLM's gpu_memory_utilization (default 0.90), fraction of the engine-visible total.
    ``max_num_seqs``/``max_num_batched_tokens``: vLLM settings (default: the card's).
    ``vendor``: nvidia (default), amd or any: whose cards to plan when ``card`` names none (AMD cards
    only when asked: a CUDA job does not run on them). ``chunked_hybrid``: ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``
    (1, vLLM's default: Llama-4's chunked layers cached as chunks; False: as full attention). Raises
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
    mnbt = (
        None
        if max_num_batched_tokens is None
        else _positive_int(max_num_batched_tokens, "--max-num-batched-tokens", "8192")
    )
    if headroom is None:
        headroom = DEFAULT_HEADROOM
    try:
        headroom = float(headroom)
    except (TypeError, ValueError):
        raise BadInput(
            f"--gpu-memory-utilization must be a fraction, got {headroom!r}", "e.g. --gpu-memory-utilization 0.9"
        ) from None
    if not 0 < headroom <= 1:
        raise BadInput(
            f"--gpu-memory-utilization must be in (0, 1], got {headroom:g}",
            "e.g. --gpu-memory-utilization 0.9 (vLLM's default)",
        )
    dtype_n, quant = _serving_dtype(src, dtype, engine)
    kv = (
        default_kv_dtype(dtype_n)
        if kv_dtype is None or str(kv_dtype).strip().lower() in AUTO
        else norm_dtype(kv_dtype, kv=True)
    )
    chosen = tuple(resolve_cards(card)) if card else cards_for(vendor_for(vendor))

    arch = architecture(src.config)
    if engine == "vllm" and not tp_splits(arch, gpu_count):
        takes = [str(n) for n in range(2, MAX_TP + 1) if tp_splits(arch, n)]
        raise TensorParallelRefused(
            f"vLLM cannot split {src.name}'s {arch.heads} attention heads over --gpu-count {gpu_count} "
            "(tensor parallelism needs a count that divides them)",
            f"pass --gpu-count {', '.join(takes[:-1]) + ' or ' + takes[-1] if len(takes) > 1 else '1'}",
        )
    w = resolve_weights(src, arch, dtype_n, quant, mode)
    warnings = list(arch.notes) + list(w.notes)
    if card and alias_note(card):
        warnings.append(alias_note(card))
    unverified = not w.verified or not arch.layout_verified
    if not w.verified:
        warnings.append(
            "unverified: nothing confirms the weight count (a family gpuops does not know and no checkpoint byte count); "
            "`up --model` refuses to rent on it without --allow-unverified"
        )
    if not arch.layout_verified:
        warnings.append(
            f"unverified KV plan: {arch.layout_note}; `up --model` refuses to rent on it without --allow-unverified"
        )
    beyond = context_limit(arch, seq)
    if beyond is not None:
        warnings.append(beyond[0])
    if dtype_n == "bf16" and chosen and all(not c.bf16_native for c in chosen):
        names = ", ".join(c.name for c in chosen)
        warnings.append(f"{names} has no bf16: serving engines run it in fp16 (same bytes); pass --dtype fp16")
    n = gpu_count
    # the plan-level layout: the one card's when one card is planned (MLA blocks depend on it), else Hopper's
    layout = (
        vllm_kv_layout(arch, kv, dtype_n, n, bool(chunked_hybrid), chosen[0] if len(chosen) == 1 else None)
        if engine == "vllm"
        else None
    )
    if layout is not None:
        warnings += _layout_notes(
            arch, layout, kv, dtype_n, seq, mnbt or (vllm_batch_defaults(chosen[0])[0] if len(chosen) == 1 else 2048)
        )
    if engine == "vllm":
        # plan-level figures: the one card's defaults when one card is planned, else the smaller ones
        ref_mnbt, ref_mns = vllm_batch_defaults(chosen[0]) if len(chosen) == 1 else (2048, 256)
        overhead = vllm_non_torch_bytes(n)
        kv_cache = batch * request_kv_bytes(arch, kv, seq, mnbt or ref_mnbt, dtype_n)
        act = vllm_activation_bytes(arch, mnbt or ref_mnbt, max(mns or ref_mns, batch), n, dtype_n)
        total = w.total + kv_cache + (act + overhead + VLLM_CUDA_GRAPH_BYTES) * n
    else:
        overhead = FRAMEWORK_OVERHEAD_BYTES
        kv_cache = 0 if mode == "train" else kv_cache_bytes(arch, kv, batch, seq, dtype_n)
        act = activation_bytes(arch, dtype_n, batch, seq, mode)
        total = w.total + kv_cache + act + overhead * n
    p = Plan(
        model=src.name,
        source=src.source,
        arch=arch,
        params=arch.params,
        active_params=arch.active_params,
        dtype=dtype_n,
        kv_dtype=kv,
        batch=batch,
        seq=seq,
        mode=mode,
        gpu_count=gpu_count,
        headroom=headroom,
        weights_bytes=w.total,
        weights_source=w.source,
        kv_bytes_per_token=kv_bytes_per_token(arch, kv),
        kv_cache_bytes=kv_cache,
        activation_bytes=act,
        overhead_bytes=overhead,
        total_bytes=total,
        cards=(),
        warnings=tuple(warnings),
        engine=engine,
        unverified=unverified,
        weight_parts=w.parts,
        quant=quant,
        src=src,
        max_num_seqs=mns,
        max_num_batched_tokens=mnbt,
        cuda_graph_bytes=VLLM_CUDA_GRAPH_BYTES if engine == "vllm" else 0,
        kv_layout=layout,
        chunked_hybrid=bool(chunked_hybrid),
        weights_verified=w.verified,
    )
    p = _with_cards(p, chosen)
    if engine == "vllm" and arch.max_context and arch.max_context > seq:
        short = [c.card.name for c in p.cards if c.fits and not c.context_fits]
        if short:
            assert p.kv_layout is not None  # a vLLM plan has its layout
            need = p.kv_layout.layer_bytes(arch.max_context, mnbt or ref_mnbt)
            p = replace(
                p,
                warnings=p.warnings
                + (
                    f"vLLM's default --max-model-len is max_position_embeddings ({arch.max_context:,} tokens, {need / GIB:,.2f} GiB of KV "
                    f"per GPU): it does not fit the KV pool on {', '.join(short)} and vLLM would refuse to start; "
                    f"keep --max-model-len {seq} from the engine command",
                ),
            )
    return p


def context_limit(arch: Architecture, seq: int) -> tuple[str, str | None] | None:
    """What a ``--seq`` of ``seq`` tokens beyond the model's context means: (warning, refusal) or None.

    None when ``seq`` is within ``max_position_embeddings`` (or the config has none). Beyond it, the
    warning line that `plan` and `up --model` both print; the refusal (a fix for `up`, which
    refuses before renting) only when the config's ``rope_scaling`` says the extended context
    (``Architecture.rope_context``, vLLM's own derivation) is shorter than ``seq``: vLLM would
    refuse ``--max-model-len seq`` at start-up. Without a ``rope_scaling`` the line is a warning
    only: a user may extend the context at serve time (``--hf-overrides`` with a rope_scaling,
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``)."""
    if not arch.max_context or seq <= arch.max_context:
        return None
    line = f"--seq {seq} is beyond the model's context ({arch.max_context} tokens, max_position_embeddings)"
    if arch.rope_context is None:
        return (
            line + "; its config has no rope_scaling: vLLM refuses --max-model-len beyond it unless told "
            "(VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, or a rope_scaling in --hf-overrides)",
            None,
        )
    if seq <= arch.rope_context:
        return line + f"; its rope_scaling extends it to {arch.rope_context} tokens, which vLLM takes", None
    return (
        line + f"; its rope_scaling extends it only to {arch.rope_context} tokens, and vLLM refuses more",
        f"pass --seq {arch.rope_context} or less",
    )


def _with_cards(p: Plan, chosen: Iterable[Card]) -> Plan:
    return replace(p, cards=tuple(_card_plan(p, c) for c in chosen))


# -- `up --model`: the bytes a GPU needs, and what to do when nothing fits ------------------------
def need_bytes_per_gpu(p: Plan) -> int:
    """Engine-visible VRAM one GPU must have for this plan at its utilization.

    per-GPU need / headroom (vllm: the smallest over the cards that fit, since the activation peak
    depends on the card's defaults; none fits: with the smaller defaults).

    This is what ``offers.rank(need_bytes_per_gpu=...)`` compares with an offer's VRAM (with its 7%
    nominal-vs-reported tolerance)."""
    if p.engine == "vllm":
        fitting = [c.need_bytes_per_gpu for c in p.cards if c.fits]
        need = min(fitting) if fitting else per_gpu_bytes(p, p.batch)
        return int(math.ceil(need / p.headroom))
    return int(math.ceil(p.per_gpu_bytes() / p.headroom))


def fit_advice(p: Plan) -> str:
    """A one-line fix for a plan no card fits.

    What is missing on the largest card, and the first changes (smaller dtype, fp8 KV cache, more
    GPUs, smaller batch) that make it fit there."""
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
        if n > p.gpu_count and (p.engine != "vllm" or tp_splits(p.arch, n)) and fits_with(gpu_count=n):
            fixes.append(f"--gpu-count {n}")
            break
    if p.batch > 1 and big.max_batch >= 1:
        fixes.append(f"--batch {big.max_batch}")
    what = " or ".join(fixes) if fixes else "a smaller model"
    return (
        f"needs {fmt_bytes(big.need_bytes_per_gpu)} per GPU; {big.card.name} x{p.gpu_count} has "
        f"{fmt_bytes(big.budget_bytes)} at {p.headroom:.0%} of its {big.card.engine_visible_bytes / GIB:.2f} GiB, "
        f"{fmt_bytes(short)} short; try {what} on {big.card.name}"
    )


def _replan(p: Plan, card: Card, **args: Any) -> Plan:
    """``p`` with another dtype / KV dtype / GPU count on ``card`` (same model, no reload)."""
    assert p.src is not None
    dtype = args["dtype"] if not (p.quant is not None and p.quant.from_checkpoint) else None
    q = plan(
        p.src,
        dtype=dtype,
        kv_dtype=args["kv_dtype"],
        batch=p.batch,
        seq=p.seq,
        mode=p.mode,
        gpu_count=args["gpu_count"],
        headroom=p.headroom,
        card=card.name,
        engine=p.engine,
        max_num_seqs=p.max_num_seqs,
        max_num_batched_tokens=p.max_num_batched_tokens,
    )
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
    vendor: str | None = None,
    image: str = "",
) -> tuple[int, tuple[str, ...], Plan]:
    """What `up --model` rents by: (need_bytes_per_gpu, names of the catalog cards that fit, plan).

    ``need_bytes_per_gpu`` = per-GPU need / headroom, the VRAM an offer must report (offers.rank
    allows its 7% nominal-vs-reported tolerance on top). Cards are all catalog cards or the
    ``card`` family, of the vendor ``vendor_for(vendor, image, card)`` says (NVIDIA unless asked: an
    AMD card named, ``vendor`` amd or any, or a ROCm ``image``). Raises BadInput, before anything is rented, when no card fits (how much is
    missing on the largest card and what would make it fit, ``fit_advice``), when the plan is
    unverified unless ``allow_unverified`` (``--allow-unverified``), and when ``seq`` is beyond the
    context the config's rope_scaling allows (``context_limit``; beyond ``max_position_embeddings``
    alone the plan's warning is the caller's to print: ``context_limit(plan.arch, plan.seq)``).
    """
    p = plan(
        model,
        dtype=dtype,
        kv_dtype=kv_dtype,
        batch=batch,
        seq=seq,
        mode="infer",
        gpu_count=gpu_count,
        headroom=headroom,
        card=card,
        engine=engine,
        vendor=vendor_for(vendor, image, card),
    )
    beyond = context_limit(p.arch, p.seq)
    if beyond is not None and beyond[1] is not None:
        raise BadInput(f"{p.model}: {beyond[0]}", beyond[1])
    if p.unverified and not allow_unverified:
        if not p.arch.layout_verified:
            weights = "" if p.weights_verified else " and nothing confirms the weight count"
            raise BadInput(
                f"{p.model}: the KV plan is unverified ({p.arch.layout_note}){weights}",
                "add --allow-unverified to rent on the guess (it covers the KV plan too)",
            )
        raise BadInput(
            f"{p.model}: the plan is unverified (model_type {p.arch.family!r} is not a family gpuops counts, and no "
            "checkpoint byte count confirms it)",
            "pass the model directory with its *.safetensors or index, or add --allow-unverified to rent on the guess",
        )
    fitting = tuple(c.card.name for c in p.cards if c.fits)
    if not fitting:
        where = f"--card {card}" if card else "catalog card"
        raise BadInput(
            f"{p.model} ({p.dtype}, KV {p.kv_dtype}, batch {p.batch} x seq {p.seq}, {p.gpu_count} GPU(s), {p.engine}) fits no {where}",
            fit_advice(p),
        )
    return need_bytes_per_gpu(p), fitting, p


def prefill_seconds(active_params: float, tokens: int, flops: float) -> float:
    """Lower bound of a prefill of ``tokens`` tokens.

    2 x active params x tokens / FLOP/s (MFU 100%; 7B x 2048 tokens on an A100 -> 92 ms,
    docs/worked-numbers.md)."""
    return 2.0 * active_params * tokens / flops
