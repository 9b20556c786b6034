"""Dtypes and quantization.

Bytes per parameter of a dtype, the names users write for them, and a checkpoint's
``quantization_config`` read into bits, group size and scales (``Quant``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuops.errors import BadInput

# int4 weights (AWQ, the common 4-bit checkpoint format): 4 bits per weight plus, per group of 128
# input weights, one fp16 scale and one packed 4-bit zero point: 0.5 + (2 + 0.5)/128 = 0.51953 B.
INT4_GROUP_SIZE = 128
INT4_BYTES_PER_PARAM = 0.5 + (2 + 0.5) / INT4_GROUP_SIZE
# MXFP4 (OCP Microscaling): 4-bit e2m1 weights + one 8-bit E8M0 scale per block of 32: 0.5 + 1/32 B.
MXFP4_BYTES_PER_PARAM = 0.5 + 1 / 32
# Bytes per parameter of a whole dtype. Quantized dtypes (fp8, int8, int4) apply to linear layers
# only (see ``weight_bytes``); int8: one scale per output channel, < 0.1%, ignored.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": INT4_BYTES_PER_PARAM,
    "mxfp4": MXFP4_BYTES_PER_PARAM,
}
KV_DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}
QUANTIZED_DTYPES = ("fp8", "int8", "int4", "mxfp4")
_DTYPE_ALIASES = {
    "float32": "fp32",
    "f32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8-e4m3": "fp8",
    "e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "i8": "int8",
    "i4": "int4",
    "w4a16": "int4",
    "awq": "int4",
    "gptq": "int4",
}
AUTO = ("", "auto", "same", "none")
ENGINES = ("vllm", "hf", "train")


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
    """vLLM's ``--kv-cache-dtype auto``: the model's compute dtype (bf16/fp16; fp32 when the weights are fp32).

    Quantized weights (fp8, int8, int4) still compute, and cache, in 16 bits."""
    return dtype if dtype in ("fp32", "bf16", "fp16") else "bf16"


# -- quantization ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quant:
    """How quantized linear layers are stored.

    ``dtype``: the --dtype it amounts to (fp8, int8, int4). ``bytes_per_param``: bytes per linear
    weight, scales and zero points included. ``lm_head``: whether lm_head is quantized too.
    ``from_checkpoint``: read from quantization_config (False: quantized by the engine at load, e.g.
    vLLM ``--quantization fp8``). ``known``: False for a method gpuops does not model (its size
    cannot be confirmed from shapes). ``parts``: the parts of ``Architecture.breakdown`` stored this
    way (MXFP4: the routed experts only)."""

    method: str
    dtype: str
    bytes_per_param: float
    label: str
    lm_head: bool = False
    from_checkpoint: bool = True
    known: bool = True
    parts: tuple[str, ...] = ("attention", "mamba", "mlp", "experts")


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
            return Quant(
                "fp8",
                "fp8",
                1 + 4 / (_num(block[0], 128) * _num(block[1], 128)),
                f"fp8 (e4m3, fp32 scale per {int(block[0])}x{int(block[1])} block)",
            )
        return Quant("fp8", "fp8", 1.0, "fp8 (e4m3, per-tensor/channel scales)")
    if method == "mxfp4":
        # vllm/model_executor/layers/quantization/mxfp4.py (0.11): Mxfp4Config quantizes FusedMoE
        # layers only (Mxfp4MoEMethod: uint8 blocks of 2 e2m1 weights + one uint8 E8M0 scale per 32,
        # bf16 biases); attention, router, embeddings and lm_head (modules_to_not_convert) stay 16-bit.
        return Quant(
            "mxfp4",
            "mxfp4",
            MXFP4_BYTES_PER_PARAM,
            "MXFP4 experts (e2m1 + E8M0 scale per 32; the rest 16-bit)",
            parts=("experts",),
        )
    if method == "awq":
        bits = _num(qc.get("bits", qc.get("w_bit")), 4)
        group = _num(qc.get("group_size", qc.get("q_group_size")), 128)
        zero = bool(qc.get("zero_point", True))
        return Quant(
            "awq",
            "int4" if bits <= 4 else "int8",
            _group_bytes(bits, group, 2, zero),
            f"AWQ {int(bits)}-bit, group {int(group)}, fp16 scales" + (" + zero points" if zero else ""),
        )
    if method == "gptq":
        bits = _num(qc.get("bits"), 4)
        group = _num(qc.get("group_size"), 128)
        group = group if group > 0 else 4096.0  # -1: one scale per output channel
        return Quant(
            "gptq",
            "int4" if bits <= 4 else "int8",
            _group_bytes(bits, group, 2, True),
            f"GPTQ {int(bits)}-bit, group {int(group)}, fp16 scales + zero points",
            lm_head=bool(qc.get("lm_head")),
        )
    if method == "bitsandbytes":
        if qc.get("load_in_8bit"):
            return Quant("bitsandbytes", "int8", 1.0, "bitsandbytes int8 (LLM.int8)")
        double = bool(qc.get("bnb_4bit_use_double_quant"))
        per = 0.5 + (1 / 64 + 4 / (64 * 256) if double else 4 / 64)
        return Quant(
            "bitsandbytes",
            "int4",
            per,
            "bitsandbytes 4-bit ("
            + str(qc.get("bnb_4bit_quant_type", "fp4"))
            + (", double-quantized absmax)" if double else ", fp32 absmax per 64)"),
        )
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        w = next(
            (g.get("weights") for g in groups.values() if isinstance(g, dict) and isinstance(g.get("weights"), dict)),
            None,
        )
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
        return Quant(
            "compressed-tensors",
            kind,
            per,
            f"compressed-tensors {w.get('type', 'int')}{int(bits)} ({strategy})",
            lm_head=isinstance(ignore, list) and "lm_head" not in ignore and bool(ignore),
        )
    if method == "modelopt":
        algo = str((qc.get("quantization") or {}).get("quant_algo") or qc.get("quant_algo") or "").upper()
        if "FP4" in algo:
            return Quant("modelopt", "int4", 0.5 + 1 / 16, "ModelOpt NVFP4 (fp8 scale per 16)")
        return Quant("modelopt", "fp8", 1.0, "ModelOpt FP8")
    return Quant(
        method or "unknown", "int4", 2.0, f"quantization {method or '(no quant_method)'} (not modelled)", known=False
    )


def online_quant(dtype: str) -> Quant | None:
    """``--dtype fp8/int8/int4`` on a 16-bit checkpoint.

    fp8 as vLLM ``--quantization fp8`` (dynamic, per-tensor scales), int8 one scale per channel,
    int4 as an AWQ checkpoint (group 128)."""
    if dtype == "fp8":
        return Quant(
            "online-fp8", "fp8", 1.0, "fp8 (vLLM --quantization fp8, per-tensor scales)", from_checkpoint=False
        )
    if dtype == "int8":
        return Quant("int8", "int8", 1.0, "int8 weights (per-channel scales)", from_checkpoint=False)
    if dtype == "int4":
        return Quant(
            "int4",
            "int4",
            INT4_BYTES_PER_PARAM,
            f"int4 (AWQ-style: 4 bit + fp16 scale and 4-bit zero per {INT4_GROUP_SIZE})",
            from_checkpoint=False,
        )
    return None
