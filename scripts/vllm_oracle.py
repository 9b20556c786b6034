"""vLLM itself as the oracle for `gpuops plan`: writes tests/data/vllm_golden.json.

Run by hand when vLLM changes, never in CI (docs/ARCHITECTURE.md, "Re-running the vLLM oracle"):

    scripts/vllm_oracle.sh            # installs the release, then writes the golden file

Two steps, each a subcommand of this file:

- ``install [VENV]``: a scratch venv OUTSIDE the repository (default /tmp/vllm-oracle-<release>) with
  ``vllm==<release>``, the release being ``VLLM_RELEASE`` in gpuops/planning/vllm_kv.py (the one place
  the planner reads it from too). About 9 GB with torch; 12 GB free disk.
- ``golden`` (run with that venv's python, ``VLLM_TARGET_DEVICE=cpu``): for each case, vLLM reads the
  config (``ModelConfig(model=<dir with config.json>, skip_tokenizer_init=True)``, local files only)
  and its own helpers give the per-layer KV specs (``get_num_kv_heads``, ``get_head_size``,
  ``use_mla``, ``hf_text_config.layer_types`` / ``sliding_window`` / ``attention_chunk_size``,
  ``num_kv_shared_layers``, the model class's ``get_mamba_state_shape_from_config``); where a piece
  cannot be read that way the case says so in ``reading`` and the layout was written by hand from the
  vLLM model file it names. vLLM's own planning functions then give the groups, blocks and
  concurrency (``get_global_kv_cache_groups``, ``get_kv_cache_configs``,
  ``get_max_concurrency_for_kv_cache_config``).

Inputs shared with the tests: the catalog (gpuops/catalog/models.toml) and the synthetic configs in
tests/data/vllm_oracle/*.json. Nothing here imports gpuops: the oracle never sees the planner.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
CONSTANT_FILE = ROOT / "gpuops" / "planning" / "vllm_kv.py"
CATALOG = ROOT / "gpuops" / "catalog" / "models.toml"
SYNTHETIC = ROOT / "tests" / "data" / "vllm_oracle"
GOLDEN = ROOT / "tests" / "data" / "vllm_golden.json"
GIB = 2**30

# The pool every case is planned against, and the engine settings of a `vllm serve` on one H100
# (max_num_batched_tokens 8192; async scheduling on, so two batches in flight). The pool is an
# input: what the planner's memory profile leaves is checked elsewhere; here the arithmetic after it.
POOL_BYTES = 40 * GIB
MAX_NUM_BATCHED_TOKENS = 8192
# HF architectures for configs that do not name one (the catalog keeps only the keys gpuops reads).
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "deepseek_v32": "DeepseekV32ForCausalLM",
    "kimi_k2": "DeepseekV3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "jamba": "JambaForCausalLM",
    "nemotron_h": "NemotronHForCausalLM",
    "llama4": "Llama4ForConditionalGeneration",
    "llava": "LlavaForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "gemma3n": "Gemma3nForConditionalGeneration",
}


def release() -> str:
    """``VLLM_RELEASE`` as written in gpuops/planning/vllm_kv.py (read with ast, not imported)."""
    tree = ast.parse(CONSTANT_FILE.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "VLLM_RELEASE" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise SystemExit(f"no VLLM_RELEASE constant in {CONSTANT_FILE}")


def install(venv: Path) -> None:
    """Create ``venv`` (outside the repository) and install ``vllm==VLLM_RELEASE`` into it."""
    if ROOT in venv.resolve().parents or venv.resolve() == ROOT:
        raise SystemExit(f"{venv} is inside the repository; pick a scratch directory outside it")
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "uv"], check=True)
    uv = str(venv / "bin" / "uv")
    subprocess.run([uv, "pip", "install", "--python", str(py), f"vllm=={release()}"], check=True)
    # cuda-python 12.x (flashinfer's dependency) writes an older cuda/bindings over cuda-bindings 13's;
    # vLLM's model inspection on CPU then fails importing the CUTLASS DSL (no cudaLibrary_t). Putting
    # cuda-bindings' own files back fixes it (seen with 0.33.0: cuda-bindings 13.5.0).
    show = subprocess.run([uv, "pip", "show", "--python", str(py), "cuda-bindings"], capture_output=True, text=True)
    version = next((ln.split()[1] for ln in show.stdout.splitlines() if ln.startswith("Version:")), None)
    if version:
        subprocess.run(
            [
                uv,
                "pip",
                "install",
                "--python",
                str(py),
                "--reinstall-package",
                "cuda-bindings",
                f"cuda-bindings=={version}",
            ],
            check=True,
        )


# -- cases -----------------------------------------------------------------------------------------
def cases() -> list[dict]:
    """Every case: the catalog at 4K (or its context, when shorter) on an H100, then the synthetic configs (their own settings)."""
    out = []
    for m in tomllib.loads(CATALOG.read_text(encoding="utf-8"))["models"]:
        cfg = dict(m["config"])
        ctx = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get("max_position_embeddings")
        seq = min(4096, int(ctx)) if ctx else 4096
        out.append({"name": m["name"], "config_ref": f"catalog:{m['name']}", "config": cfg, "max_model_len": seq})
    for f in sorted(SYNTHETIC.glob("*.json")):
        data = json.loads(f.read_text(encoding="utf-8"))
        out.append(
            {
                "name": f.stem,
                "config_ref": str(f.relative_to(ROOT)),
                "config": data.get("config"),
                **{k: v for k, v in data.items() if k not in ("config",)},
            }
        )
    return out


HAND_MODEL = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def _materialize(config: dict | None, where: Path) -> Path:
    cfg = dict(config or HAND_MODEL)
    # The weights' quantization does not change the KV cache (its dtype is the model's with
    # --kv-cache-dtype auto), and vLLM's check of it imports CUDA kernels that do not load on CPU.
    cfg.pop("quantization_config", None)
    # Llama-4's published attn_temperature_tuning is 4 where transformers' strict config wants a bool
    # (it scales attention logits; no bearing on the cache).
    for c in (cfg, cfg.get("text_config")):
        if isinstance(c, dict) and isinstance(c.get("attn_temperature_tuning"), int):
            c["attn_temperature_tuning"] = bool(c["attn_temperature_tuning"])
    if isinstance(cfg.get("text_config"), dict):
        cfg["text_config"] = {k: v for k, v in cfg["text_config"].items() if k != "quantization_config"}
    mt = cfg.get("model_type", "")
    cfg.setdefault("architectures", [ARCHITECTURES.get(mt, "LlamaForCausalLM")])
    where.mkdir(parents=True, exist_ok=True)
    (where / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return where


# -- vLLM's reading ----------------------------------------------------------------------------------
def attention_block_size(card: str, use_mla: bool, sparse: bool, kv_cache_dtype: str) -> tuple[int, str]:
    """Tokens per block vLLM's CUDA backend picks (written by hand: no GPU here to select a backend).

    vllm/platforms/cuda.py ``_get_backend_priorities`` + each backend's
    ``get_supported_kernel_block_sizes`` and ``AttentionBackend.get_preferred_block_size`` (the
    default 16 when the backend takes it, else its smallest size)."""
    cc = {"h100": 9, "a100": 8, "b200": 10}[card]
    if not use_mla:
        return 16, "FLASH_ATTN / FLASHINFER: MultipleOf(16) -> CacheConfig default 16"
    if sparse:
        return 64, "FLASHMLA_SPARSE: [64] (sparse MLA, every card that runs it)"
    if cc == 9:
        if kv_cache_dtype == "auto":
            return 16, "FLASH_ATTN_MLA (sm90, FA3): MultipleOf(16) -> 16"
        return 64, "FLASHMLA (fp8 cache; FLASH_ATTN_MLA takes auto/bf16/fp16 only): [64]"
    if cc == 10:
        return 32, "FLASHINFER_MLA (sm100, first in priority): [32, 64] -> smallest, 32"
    return 16, "TRITON_MLA (sm80): MultipleOf(16) -> 16"


def layer_specs(case: dict, model_dir: Path) -> tuple[dict, dict, str]:
    """(vllm_config, {layer name: KVCacheSpec}, how the layout was read) for one case."""
    import torch
    from vllm.config import ModelConfig, VllmConfig
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )

    if case.get("layers"):
        return hand_specs(case, model_dir)
    seq = int(case.get("max_model_len", 4096))
    kv_dtype = case.get("kv_cache_dtype", "auto")
    card = case.get("card", "h100")
    mc = ModelConfig(model=str(model_dir), max_model_len=seq, skip_tokenizer_init=True)
    from vllm.config import CacheConfig

    vc = VllmConfig(model_config=mc, cache_config=CacheConfig(cache_dtype=kv_dtype))
    vc.scheduler_config.max_num_batched_tokens = int(case.get("max_num_batched_tokens", MAX_NUM_BATCHED_TOKENS))
    vc.scheduler_config.async_scheduling = True  # what `vllm serve` resolves on CUDA (VllmConfig.__post_init__)
    # CpuPlatform.check_and_update_config stores the SSM state in float32 for its GDN kernels; CUDA keeps
    # "auto" (the model's dtype), which is what a served box holds.
    vc.cache_config.mamba_ssm_cache_dtype = "auto"
    object.__setattr__(vc.cache_config, "kv_cache_layout", "LBHNC")
    if case.get("disable_hybrid_kv_cache_manager"):
        vc.scheduler_config.disable_hybrid_kv_cache_manager = True
    pc = vc.parallel_config
    text = mc.hf_text_config
    n = mc.get_total_num_hidden_layers()
    dtype = mc.dtype if kv_dtype == "auto" else torch.float8_e4m3fn
    reading = ["vllm ModelConfig: get_total_num_hidden_layers, get_num_kv_heads, get_head_size, use_mla"]
    sparse = bool(getattr(text, "index_topk", None)) and mc.use_mla
    block, why = attention_block_size(card, mc.use_mla, sparse, kv_dtype)
    reading.append(f"block size {block} by hand: {why}")

    # which layers hold attention (hybrids), from vLLM's own helpers
    roles = ["attention"] * n
    # a layer is attention, a state (mamba / linear attention) or neither (an MLP or MoE block), from the
    # layout key vLLM's get_num_layers_by_block_type reads (layers_block_type, else layer_types)
    state_names, attn_names = ("mamba", "linear_attention"), ("attention", "full_attention", "hybrid")
    for key in ("layers_block_type", "layer_types"):
        types = getattr(text, key, None)
        if isinstance(types, (list, tuple)) and any(str(t) in state_names for t in types):
            roles = [
                "mamba" if str(t) in state_names else ("attention" if str(t) in attn_names else "none") for t in types
            ]
            reading.append(f"hybrid layout: hf_text_config.{key}")
            break
    if mc.is_hybrid and mc.get_num_layers_by_block_type(pc, "attention") != roles.count("attention"):
        reading.append(
            f"vLLM's get_num_layers_by_block_type counts {mc.get_num_layers_by_block_type(pc, 'attention')} attention "
            f"layers (it looks for 'attention', the config says 'full_attention'); the model file builds "
            f"{roles.count('attention')}, from the same key"
        )
    elif "mamba" in roles and not mc.is_hybrid:
        reading.append("vLLM's model inspection on CPU did not mark it hybrid; the layout key above decides")
    # sliding / chunked per layer (vllm model files: gemma2/gemma3/mistral/llama read layer_types and
    # sliding_window; llama4.py: chunked on the RoPE layers, no_rope_layers[i] == 1)
    window = getattr(text, "sliding_window", None)
    layer_types = getattr(text, "layer_types", None)
    chunk = getattr(text, "attention_chunk_size", None)
    nrl = getattr(text, "no_rope_layers", None)
    shared = int(getattr(text, "num_kv_shared_layers", 0) or 0)
    if shared:
        reading.append(
            f"num_kv_shared_layers {shared}: the last {shared} layers read an earlier layer's cache "
            "(by hand from vllm/model_executor/models/gemma3n.py, kv_sharing_target_layer_name: no spec of their own)"
        )
    specs: dict = {}
    heads = mc.get_num_kv_heads(pc)
    head = mc.get_head_size()
    mamba_spec = None
    if "mamba" in roles:
        from vllm.model_executor.models import ModelRegistry

        cls, _ = ModelRegistry.resolve_model_cls(mc.architectures, model_config=mc)
        if hasattr(cls, "get_mamba_state_shape_from_config"):
            shapes = cls.get_mamba_state_shape_from_config(vc)
            dtypes = cls.get_mamba_state_dtype_from_config(vc)
        else:  # resolved to the Transformers backend: vLLM's own Mamba-2 calculator on the config's fields
            from vllm.model_executor.layers.mamba.mamba_utils import (
                MambaStateDtypeCalculator,
                MambaStateShapeCalculator,
            )

            shapes = MambaStateShapeCalculator.mamba2_state_shape(
                tp_world_size=1,
                intermediate_size=int(getattr(text, "mamba_d_ssm", None) or text.mamba_expand * text.hidden_size),
                n_groups=text.mamba_n_groups,
                num_heads=text.mamba_n_heads,
                head_dim=text.mamba_d_head,
                state_size=text.mamba_d_state,
                conv_kernel=text.mamba_d_conv,
            )
            dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(
                mc.dtype, vc.cache_config.mamba_cache_dtype, vc.cache_config.mamba_ssm_cache_dtype
            )
            reading.append(
                f"vLLM resolved {cls.__name__} (no native class read on CPU): the state from "
                "MambaStateShapeCalculator.mamba2_state_shape on the config's mamba_* fields"
            )
        mamba_page = MambaSpec(shapes=tuple(shapes), dtypes=tuple(dtypes), block_size=-1).page_size_bytes
        attn_1 = FullAttentionSpec(block_size=1, num_kv_heads=heads, head_size=head, dtype=dtype).page_size_bytes
        align = 128 if mc.use_mla else 16
        block = max(block, align * -(-mamba_page // (align * attn_1)))
        reading.append(
            f"mamba state: {cls.__name__}.get_mamba_state_shape_from_config; attention block raised to {block} "
            "(by hand from vllm/platforms/interface.py _align_hybrid_block_size, FlashAttention MultipleOf(16))"
        )
        pad = block * attn_1
        mamba_spec = MambaSpec(
            shapes=tuple(shapes),
            dtypes=tuple(dtypes),
            block_size=block,
            page_size_padded=pad if pad != mamba_page else None,
        )
    for i in range(n - shared):
        name = f"model.layers.{i}"
        if roles[i] == "mamba":
            specs[name] = mamba_spec
            continue
        if roles[i] == "none":
            continue
        if mc.use_mla:
            if sparse:
                fmt = "fp8_ds_mla" if kv_dtype.startswith("fp8") else "auto"
                # flashmla_sparse.py: fp8_ds_mla is 656 B per token (512 fp8 + 16 scale + 128 rope bf16)
                if fmt == "fp8_ds_mla":
                    specs[name] = MLAAttentionSpec(
                        block_size=block, num_kv_heads=1, head_size=656, dtype=torch.uint8, cache_dtype_str=fmt
                    )
                else:
                    specs[name] = MLAAttentionSpec(
                        block_size=block, num_kv_heads=1, head_size=head, dtype=mc.dtype, cache_dtype_str="auto"
                    )
                ihd = int(text.index_head_dim)
                specs[name + ".indexer.k_cache"] = MLAAttentionSpec(
                    block_size=block, num_kv_heads=1, head_size=ihd + ihd // 128 * 4, dtype=torch.uint8
                )
            else:
                specs[name] = MLAAttentionSpec(
                    block_size=block, num_kv_heads=heads, head_size=head, dtype=dtype, cache_dtype_str=kv_dtype
                )
            continue
        kind = "full"
        if chunk and isinstance(nrl, list) and nrl[i]:
            kind = "chunked"
        elif window and isinstance(layer_types, list) and len(layer_types) == n:
            kind = "sliding" if str(layer_types[i]).startswith("sliding") else "full"
        elif window and not isinstance(layer_types, list):
            kind = "sliding"
        if kind == "sliding":
            specs[name] = SlidingWindowSpec(
                block_size=block, num_kv_heads=heads, head_size=head, dtype=dtype, sliding_window=int(window)
            )
        elif kind == "chunked":
            specs[name] = ChunkedLocalAttentionSpec(
                block_size=block, num_kv_heads=heads, head_size=head, dtype=dtype, attention_chunk_size=int(chunk)
            )
        else:
            specs[name] = FullAttentionSpec(block_size=block, num_kv_heads=heads, head_size=head, dtype=dtype)
    if sparse:
        reading.append(
            "sparse MLA: an indexer cache per layer (by hand from vllm/model_executor/models/deepseek_v2.py "
            "DeepseekV32IndexerCache: index_head_dim + index_head_dim // 128 x 4 bytes, uint8); the latent in "
            "fp8_ds_mla (656 B/token, vllm/v1/attention/backends/mla/flashmla_sparse.py) with an fp8 cache"
        )
    return vc, specs, "; ".join(reading)


def _vllm_config(case: dict, model_dir: Path):
    from vllm.config import CacheConfig, ModelConfig, VllmConfig

    mc = ModelConfig(model=str(model_dir), max_model_len=int(case["max_model_len"]), skip_tokenizer_init=True)
    vc = VllmConfig(model_config=mc, cache_config=CacheConfig(cache_dtype=case.get("kv_cache_dtype", "auto")))
    vc.scheduler_config.max_num_batched_tokens = int(case.get("max_num_batched_tokens", MAX_NUM_BATCHED_TOKENS))
    vc.scheduler_config.async_scheduling = True
    vc.cache_config.mamba_ssm_cache_dtype = "auto"
    object.__setattr__(vc.cache_config, "kv_cache_layout", "LBHNC")
    return vc


def hand_specs(case: dict, model_dir: Path) -> tuple:
    """A layer layout given in the case itself (no model config): vLLM's planning functions only.

    ``layers``: [{"kind": full|sliding, "count", "num_kv_heads", "head_size", "window"}], bf16,
    block 16; the model directory holds a one-layer llama config, read only for ModelConfig."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    vc = _vllm_config(case, model_dir)
    specs: dict = {}
    i = 0
    for part in case["layers"]:
        for _ in range(int(part["count"])):
            kw = dict(
                block_size=16, num_kv_heads=part["num_kv_heads"], head_size=part["head_size"], dtype=torch.bfloat16
            )
            if part["kind"] == "sliding":
                specs[f"layer.{i}"] = SlidingWindowSpec(sliding_window=int(part["window"]), **kw)
            else:
                specs[f"layer.{i}"] = FullAttentionSpec(**kw)
            i += 1
    return vc, specs, "layout written in the case (no model): only vLLM's planning functions ran"


def _kind(spec) -> str:
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
        UniformTypeKVCacheSpecs,
    )

    if isinstance(spec, UniformTypeKVCacheSpecs):
        return "+".join(sorted({_kind(s) for s in spec.kv_cache_specs.values()}))
    for cls, name in (
        (MLAAttentionSpec, "mla"),
        (SlidingWindowSpec, "sliding"),
        (ChunkedLocalAttentionSpec, "chunked"),
        (MambaSpec, "mamba"),
    ):
        if isinstance(spec, cls):
            return name
    return "full"


def run_case(case: dict, scratch: Path) -> dict:
    """vLLM's plan of one case: the layers as read, the groups, blocks and concurrency."""
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core import kv_cache_planning as kp, kv_cache_utils as ku

    vc, specs, reading = layer_specs(case, _materialize(case["config"], scratch / case["name"]))
    pool = int(case.get("available_bytes", POOL_BYTES))
    layers: dict[tuple, int] = {}
    for s in specs.values():
        key = (_kind(s), s.block_size, s.page_size_bytes)
        layers[key] = layers.get(key, 0) + 1
    groups = kp.get_global_kv_cache_groups(vc, [dict(specs)])
    cfg = kp.get_kv_cache_configs(vc, [dict(specs)], [pool], groups)[0]
    conc = ku.get_max_concurrency_for_kv_cache_config(vc, cfg)
    per_group = [
        cdiv(g.kv_cache_spec.max_memory_usage_bytes(vc), g.kv_cache_spec.page_size_bytes) for g in cfg.kv_cache_groups
    ]
    bytes_per_block = pool // cfg.num_blocks if cfg.num_blocks else 0
    bpb = kp._get_kv_cache_bytes_per_block(cfg.kv_cache_groups, vc.cache_config.get_resolved_kv_cache_layout())
    attn_per_token = sum(s.page_size_bytes // s.block_size for s in specs.values() if _kind(s) != "mamba")
    return {
        "name": case["name"],
        "config": case["config_ref"],
        "note": case.get("note", ""),
        "reading": reading,
        "card": case.get("card", "h100"),
        "kv_cache_dtype": case.get("kv_cache_dtype", "auto"),
        "max_model_len": vc.model_config.max_model_len,
        "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
        "max_in_flight_tokens": vc.max_in_flight_tokens,
        "hybrid_kv_cache_manager": not vc.scheduler_config.disable_hybrid_kv_cache_manager,
        "available_bytes": pool,
        "layers": [{"kind": k, "block_size": b, "page_bytes": p, "count": c} for (k, b, p), c in layers.items()],
        "kv_bytes_per_token": attn_per_token,
        "groups": [
            {
                "kind": _kind(g.kv_cache_spec),
                "layers": len(g.layer_names),
                "block_size": g.kv_cache_spec.block_size,
                "page_bytes": g.kv_cache_spec.page_size_bytes,
                "blocks_per_request": n,
            }
            for g, n in zip(cfg.kv_cache_groups, per_group)
        ],
        "bytes_per_block": bpb,
        "num_blocks": cfg.num_blocks,
        "blocks_per_request": sum(per_group),
        "bytes_per_request": sum(per_group) * bpb,
        "max_concurrency": conc,
        "_check_bytes_per_block_floor": bytes_per_block,
    }


def golden(out: Path) -> None:
    """Write the golden file: every case through vLLM, with the version that computed it."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only: no hub, no retries
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import vllm

    if vllm.__version__ != release():
        raise SystemExit(f"this venv has vLLM {vllm.__version__}, VLLM_RELEASE is {release()}: run `install` first")
    results = []
    not_run = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases():
            try:
                r = run_case(case, Path(tmp))
            except Exception as e:  # noqa: BLE001 - a case vLLM cannot read on CPU is listed, not hidden
                print(f"FAILED {case['name']}: {type(e).__name__}: {e}", file=sys.stderr)
                not_run.append(
                    {"name": case["name"], "config": case["config_ref"], "error": f"{type(e).__name__}: {e}"[:400]}
                )
                continue
            r.pop("_check_bytes_per_block_floor")
            results.append(r)
            print(
                f"{r['name']:32s} groups {[g['layers'] for g in r['groups']]} blocks {r['num_blocks']} "
                f"per-request {r['blocks_per_request']} conc {r['max_concurrency']:.3f}",
                file=sys.stderr,
            )
    doc = {
        "vllm_version": vllm.__version__,
        "generated_by": "scripts/vllm_oracle.py golden (VLLM_TARGET_DEVICE=cpu); rerun: scripts/vllm_oracle.sh",
        "kv_cache_layout": "LBHNC",
        "cases": results,
        "not_run": not_run,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(results)} cases, vLLM {vllm.__version__})", file=sys.stderr)


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("install", "golden", "release"):
        raise SystemExit("usage: vllm_oracle.py install [VENV] | golden [OUT] | release")
    if argv[0] == "release":
        print(release())
    elif argv[0] == "install":
        install(Path(argv[1]) if len(argv) > 1 else Path(f"/tmp/vllm-oracle-{release()}"))
    else:
        golden(Path(argv[1]) if len(argv) > 1 else GOLDEN)


if __name__ == "__main__":
    main(sys.argv[1:])
