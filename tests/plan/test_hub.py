"""`--model org/name` through the real huggingface_hub client against the stand-in hub on 127.0.0.1
(tests/support/hfhub.py): config.json, the index, and parameter counts per dtype read from the
safetensors headers with HTTP Range requests, no weights downloaded."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpuops.errors import BadInput
from gpuops.planning import sizing as P
from gpuops.planning.models import load_model
from tests.conftest import gpuops_cmd
from tests.support.hfhub import HubServer, safetensors_file

DATA = Path(__file__).parent / "data"
AWQ = json.loads((DATA / "llama-3-8b-awq.config.json").read_text())


def awq_shards() -> dict[str, bytes]:
    """An AWQ GEMM Llama-3-8B laid out as its real shards: I32 qweight/qzeros, F16 scales, F16 embeddings."""
    h, inter, v, L, kv = 4096, 14336, 128256, 32, 1024
    t1, t2 = (
        {"model.embed_tokens.weight": ("F16", [v, h])},
        {"lm_head.weight": ("F16", [v, h]), "model.norm.weight": ("F16", [h])},
    )
    for i in range(L):
        shard = t1 if i < 16 else t2
        for name, (i_dim, o_dim) in {
            "self_attn.q_proj": (h, h),
            "self_attn.k_proj": (h, kv),
            "self_attn.v_proj": (h, kv),
            "self_attn.o_proj": (h, h),
            "mlp.gate_proj": (h, inter),
            "mlp.up_proj": (h, inter),
            "mlp.down_proj": (inter, h),
        }.items():
            p = f"model.layers.{i}.{name}"
            shard[f"{p}.qweight"] = ("I32", [i_dim, o_dim // 8])
            shard[f"{p}.qzeros"] = ("I32", [i_dim // 128, o_dim // 8])
            shard[f"{p}.scales"] = ("F16", [i_dim // 128, o_dim])
        shard[f"model.layers.{i}.input_layernorm.weight"] = ("F16", [h])
        shard[f"model.layers.{i}.post_attention_layernorm.weight"] = ("F16", [h])
    files = {
        "model-00001-of-00002.safetensors": safetensors_file(t1, padding=4096),
        "model-00002-of-00002.safetensors": safetensors_file(t2, padding=4096),
    }
    index = {
        "metadata": {"total_size": 5_727_854_592},
        "weight_map": {
            **{k: "model-00001-of-00002.safetensors" for k in t1},
            **{k: "model-00002-of-00002.safetensors" for k in t2},
        },
    }
    return {
        "config.json": json.dumps(AWQ).encode(),
        "model.safetensors.index.json": json.dumps(index).encode(),
        **files,
    }


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    with HubServer() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
        yield h


def test_safetensors_headers_give_the_stored_bytes_without_downloading_weights(hub):
    hub.add_repo("someorg/llama-3-8b-awq", awq_shards())
    m = load_model("someorg/llama-3-8b-awq")
    assert m.weights_size_source == "safetensors headers" and m.params_by_dtype["I32"] > 0
    assert m.weights_total_size == 5_727_854_592  # the headers add up to what the index says
    p = P.plan(m, card="rtx-4090")
    assert p.weights_bytes == 5_727_854_592 and p.dtype == "int4" and not p.unverified
    assert "vllm serve someorg/llama-3-8b-awq " in p.cards[0].engine_command
    shard_gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith(".safetensors")]
    assert shard_gets and all(r[2] and r[2].startswith("bytes=") for r in shard_gets)  # Range reads only


def test_single_file_repo_and_unknown_family_weights_are_verified_by_the_headers(hub):
    cfg = {
        "model_type": "brandnew",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    }
    hub.add_repo(
        "someorg/brandnew",
        {
            "config.json": json.dumps(cfg),
            "model.safetensors": safetensors_file(
                {"embed.weight": ("BF16", [1000, 64]), "layers.0.w": ("BF16", [64, 4096]), "extra.w": ("F32", [1000])}
            ),
        },
    )
    p = P.plan("someorg/brandnew", card="t4")
    assert p.weights_bytes == 2 * (64000 + 64 * 4096) + 4 * 1000 and p.weights_verified
    assert any("checkpoint" in w for w in p.warnings)
    # the headers confirm the weights, not the layers: nothing in the config states them (llama assumed)
    assert p.unverified and not p.arch.layout_verified


def test_missing_repo_is_bad_input(hub):
    with pytest.raises(BadInput, match="not found"):
        load_model("someorg/nothing-here")


def test_cli_plan_against_the_stand_in_hub(hub, cli_env, tmp_path):
    hub.add_repo("someorg/llama-3-8b-awq", awq_shards())
    env = {**cli_env, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf-home")}
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run(
        gpuops_cmd("plan", "--model", "someorg/llama-3-8b-awq", "--card", "rtx-4090", "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["weights_bytes"] == 5_727_854_592 and d["weights_source"] == "checkpoint safetensors headers"
    assert d["cards"][0]["fits"] and d["cards"][0]["engine_command"].startswith("vllm serve someorg/llama-3-8b-awq")
    bad = subprocess.run(
        gpuops_cmd("plan", "--model", "someorg/llama-3-8b-awq", "--dtype", "bf16"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "contradicts the checkpoint" in bad.stderr and bad.stderr.count("\n") == 1


def test_stand_in_hub_serves_snapshot_download(tmp_path):
    """The stand-in is reusable for whole-repo downloads (another helper's bootstrap tests)."""
    from huggingface_hub import snapshot_download

    with HubServer() as h:
        h.add_repo("someorg/files", {"config.json": {"a": 1}, "sub/notes.txt": "hello"})
        path = Path(snapshot_download("someorg/files", endpoint=h.endpoint, cache_dir=str(tmp_path / "cache")))
        assert (
            json.loads((path / "config.json").read_text()) == {"a": 1}
            and (path / "sub" / "notes.txt").read_text() == "hello"
        )
