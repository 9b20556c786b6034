"""`plan` against vLLM's own planning functions: tests/data/vllm_golden.json, exactly.

The golden file is written by scripts/vllm_oracle.py with the release ``VLLM_RELEASE`` installed
(vLLM read each config and ran ``get_kv_cache_configs`` / ``get_max_concurrency_for_kv_cache_config``
on CPU); nothing in it comes from gpuops. Each case: a catalog model, a synthetic config of one
layer kind (tests/data/vllm_oracle/*.json, the same file the oracle read) or a layout written in the
case. The planner reads the same config with its own reader and must give the same groups, blocks,
bytes and concurrency.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuops.catalog import resolve_cards
from gpuops.planning.models import ModelSource, builtin_model
from gpuops.planning.sizing import plan
from gpuops.planning.vllm_kv import FULL, SLIDING, VLLM_RELEASE, KVLayout, LayerSpec, kv_layout

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "data" / "vllm_golden.json").read_text(encoding="utf-8"))
CASES = {c["name"]: c for c in GOLDEN["cases"]}


def _case_file(case: dict) -> dict:
    return json.loads((ROOT / case["config"]).read_text(encoding="utf-8"))


def _source(case: dict) -> ModelSource:
    if case["config"].startswith("catalog:"):
        src = builtin_model(case["config"].split(":", 1)[1])
        assert src is not None
        return src
    cfg = _case_file(case)["config"]
    return ModelSource(name=case["name"], config=cfg, source=case["config"])


def _layout(case: dict) -> tuple[KVLayout, int | None]:
    """(the planner's layout for the case, its KV bytes per token; None for a hand-written layout)."""
    data = None if case["config"].startswith("catalog:") else _case_file(case)
    if data is not None and data.get("layers"):
        specs = []
        for part in data["layers"]:
            page = 16 * 2 * part["num_kv_heads"] * part["head_size"] * 2  # bf16, block 16, K and V
            kind = SLIDING if part["kind"] == "sliding" else FULL
            specs += [LayerSpec(kind, page, 16, int(part.get("window", 0)))] * part["count"]
        return kv_layout(specs), None
    kv = {"auto": None, "fp8": "fp8"}[case["kv_cache_dtype"]]
    p = plan(
        _source(case),
        kv_dtype=kv,
        seq=case["max_model_len"],
        card=resolve_cards(case["card"])[0].name,
        max_num_batched_tokens=case["max_num_batched_tokens"],
    )
    assert p.kv_layout is not None
    return p.kv_layout, p.kv_bytes_per_token


def test_the_golden_file_is_the_release_the_planner_follows():
    assert GOLDEN["vllm_version"] == VLLM_RELEASE


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_matches_vllm(name: str):
    case = CASES[name]
    lay, per_token = _layout(case)
    mnbt, seq, pool = case["max_num_batched_tokens"], case["max_model_len"], case["available_bytes"]
    assert case["max_in_flight_tokens"] == 2 * mnbt  # async scheduling: two batches in flight
    got_groups = [
        {
            "kind": g.kind,
            "layers": len(g.layers),
            "block_size": g.block_size,
            "page_bytes": g.spec_page_bytes,
            "blocks_per_request": g.blocks_per_request(seq, 2 * mnbt),
        }
        for g in lay.groups
    ]
    # vLLM lists groups by their first layer; the order changes no number, so compare them as a set
    key = lambda g: sorted(g.items())  # noqa: E731
    assert sorted(got_groups, key=key) == sorted(case["groups"], key=key)
    assert lay.block_bytes == case["bytes_per_block"]
    assert lay.num_blocks(pool) == case["num_blocks"]
    assert lay.blocks_per_request(seq, mnbt) == case["blocks_per_request"]
    assert lay.bytes_per_request(seq, mnbt) == case["bytes_per_request"]
    assert lay.max_concurrency(pool, seq, mnbt) == case["max_concurrency"]
    if per_token is not None:
        assert per_token == case["kv_bytes_per_token"]


def test_every_layer_kind_is_covered():
    kinds = {g["kind"] for c in GOLDEN["cases"] for g in c["groups"]}
    assert {"full", "sliding", "chunked", "mla", "mamba"} <= kinds
    names = set(CASES)
    for needed in (
        "sparse_mla_deepseek_v32_fp8",
        "shared_kv_gemma3n",
        "mixed_pages_full8_sliding4",
        "mamba2_granitemoehybrid",
    ):
        assert needed in names
