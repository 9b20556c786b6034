"""The attention layout read from the config's fields, whatever the model_type; what cannot be read is unverified.

Configs: tests/data/vllm_oracle/*.json (the synthetic configs vLLM read for the golden file) and
small ones written here. Expected values are arithmetic on the config written in the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuops.errors import BadInput
from gpuops.planning.architecture import architecture
from gpuops.planning.models import ModelSource
from gpuops.planning.sizing import plan, size_for_up

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_oracle"


def cfg(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))["config"]


def src(config: dict, name: str = "m") -> ModelSource:
    return ModelSource(name=name, config=config, source="test")


def test_mla_under_another_model_type_is_read_by_its_fields():
    a = architecture(cfg("mla_glm4_moe_lite"))
    assert a.family == "glm4_moe_lite" and a.mla and not a.known and a.layout_verified
    p = plan(src(cfg("mla_glm4_moe_lite")), card="h100-sxm")
    assert p.kv_bytes_per_token == 6 * (512 + 64) * 2  # the latent, not 2 x 16 heads x 64 per layer


def test_sparse_mla_adds_an_indexer_and_fp8_ds_mla():
    c = cfg("sparse_mla_deepseek_v32")
    a = architecture(c)
    assert a.mla and a.sparse_mla and a.index_head_dim == 128
    assert plan(src(c), card="h100-sxm").kv_bytes_per_token == 4 * ((512 + 64) * 2 + 128 + 4)
    assert plan(src(c), card="h100-sxm", kv_dtype="fp8").kv_bytes_per_token == 4 * (656 + 128 + 4)


def test_kv_shared_layers_hold_no_cache():
    a = architecture(cfg("shared_kv_gemma3n"))
    # 10 layers, the last 4 read an earlier layer's cache: 6 hold one (4 sliding, 1 full, 1 sliding)
    assert a.kv_shared_layers == 4 and len(a.layer_kv_elems) == 6
    assert a.kinds == ("sliding", "sliding", "sliding", "sliding", "full", "sliding")


def test_a_mamba2_hybrid_of_an_unknown_type_is_read_from_its_layout_keys():
    a = architecture(cfg("mamba2_granitemoehybrid"))
    assert (len(a.layer_kv_elems), a.mamba_layers) == (2, 6) and a.mamba is not None and a.mamba.kind == "mamba2"
    assert a.layout_verified


def test_sliding_layer_types_of_an_unknown_type():
    a = architecture(cfg("sliding_cohere2"))
    assert a.kinds.count("sliding") == 6 and a.kinds.count("full") == 2 and a.layout_verified


UNREADABLE = {
    "model_type": "minimax_like",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "attn_type_list": [0, 0, 0, 1],  # lightning (linear) attention on 3 of 4 layers: no reader for it
}


def test_a_layout_gpuops_cannot_read_is_unverified_whatever_the_weights_say():
    a = architecture(UNREADABLE)
    assert not a.layout_verified and "attn_type_list" in a.layout_note
    # the checkpoint's byte count confirms the weights, not the KV plan
    s = ModelSource(name="mm", config=UNREADABLE, source="t", weights_total_size=2 * 10**9, weights_size_source="x")
    p = plan(s, card="h100-sxm")
    assert p.unverified and p.as_json()["unverified"] and p.as_json()["kv_layout_verified"] is False
    assert all(c.unverified for c in p.cards)
    with pytest.raises(BadInput, match="KV plan is unverified") as e:
        size_for_up(s, card="h100-sxm")  # type: ignore[arg-type]
    assert "--allow-unverified" in e.value.fix
    need, fitting, _ = size_for_up(s, card="h100-sxm", allow_unverified=True)  # type: ignore[arg-type]
    assert need > 0 and fitting == ("h100-sxm",)


def test_the_engine_command_serves_the_repository_asked_for():
    c = plan("meta-llama/Llama-3.1-8B-Instruct", card="h100-sxm").cards[0]
    assert c.engine_command is not None and c.engine_command.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct ")
    base = plan("llama-3.1-8b", card="h100-sxm").cards[0]
    assert base.engine_command is not None and base.engine_command.startswith("vllm serve meta-llama/Llama-3.1-8B ")


PLAIN_FOO = {  # a family gpuops does not know, with nothing but the base keys: its layers are not stated
    "model_type": "foo",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
}


def _flags(s: ModelSource) -> tuple[bool, bool, bool]:
    d = plan(s, card="h100-sxm").as_json()
    return d["unverified"], d["weights_verified"], d["kv_layout_verified"]


def test_an_unknown_family_whose_config_states_no_layers_is_never_kv_verified():
    # no checkpoint count: neither the weights nor the layout is confirmed
    assert _flags(src(PLAIN_FOO)) == (True, False, False)
    # the checkpoint's byte count confirms the weights, never the layout it says nothing about
    counted = ModelSource(name="f", config=PLAIN_FOO, source="t", weights_total_size=2 * 10**9, weights_size_source="x")
    assert _flags(counted) == (True, True, False)
    a = architecture(PLAIN_FOO)
    assert "states no layer layout" in a.layout_note and "llama attention on every layer" in a.layout_note
    with pytest.raises(BadInput, match="KV plan is unverified") as e:
        size_for_up(counted, card="h100-sxm")  # type: ignore[arg-type]
    assert "weight count" not in e.value.message and "--allow-unverified" in (e.value.fix or "")
    with pytest.raises(BadInput, match="KV plan is unverified .* and nothing confirms the weight count"):
        size_for_up(src(PLAIN_FOO), card="h100-sxm")  # type: ignore[arg-type]


def test_an_unknown_family_is_kv_verified_when_its_config_states_its_layers():
    full = {**PLAIN_FOO, "layer_types": ["full_attention"] * 4}
    counted = ModelSource(name="f", config=full, source="t", weights_total_size=2 * 10**9, weights_size_source="x")
    assert _flags(counted) == (False, True, True)
    # 4 full-attention layers x 2 (K and V) x 4 kv heads x 64 head_dim x 2 B (bf16)
    assert plan(counted, card="h100-sxm").kv_bytes_per_token == 4 * 2 * 4 * 64 * 2
    # a layer kind gpuops does not size, or a sliding layer with no window, states nothing it can size
    odd = {**PLAIN_FOO, "layer_types": ["full_attention", "lightning_attention"] * 2}
    assert not architecture(odd).layout_verified
    no_window = {**PLAIN_FOO, "layer_types": ["sliding_attention", "full_attention"] * 2}
    assert not architecture(no_window).layout_verified
    # MLA's fields state the latent on every layer
    assert architecture(cfg("mla_glm4_moe_lite")).layout_verified


def test_a_known_family_is_kv_verified_and_olmo2_is_not():
    assert architecture({**PLAIN_FOO, "model_type": "llama"}).layout_verified
    # olmo2 is not a family gpuops counts, and its config lists no layer_types: sized as llama, unverified
    assert not architecture(cfg("full_olmo2")).layout_verified
