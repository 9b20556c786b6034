"""The data files: every built-in model counts to its published size, every card is complete."""

from __future__ import annotations

import pytest

from gpuops.catalog import cards, resolve_cards
from gpuops.errors import BadInput
from gpuops.planning.architecture import architecture
from gpuops.planning.models import builtin_model

ISSUE_CARDS = [
    "T4",
    "L4",
    "A10G",
    "RTX 3090",
    "RTX 4090",
    "RTX 5090",
    "RTX A6000",
    "L40S",
    "A100 40GB",
    "A100 40GB PCIe",
    "A100 80GB PCIe",
    "A100 80GB SXM",
    "H100 PCIe",
    "H100 SXM",
    "H200",
    "B200",
    "MI300X",
]
ISSUE_MODELS = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen2.5-32b",
    "qwen2.5-72b",
    "gemma-2-9b",
    "gemma-2-27b",
    "phi-3-mini",
    "tinyllama-1.1b",
    "deepseek-v3",
    # the published counts of the newer kinds (MXFP4, hybrid KV groups, shared expert + vision towers)
    "gpt-oss-20b",
    "gemma-3-27b",
    "llama-4-scout",
    "qwen2.5-vl-7b",
]


def test_every_issue_card_is_in_the_catalog_with_sources():
    assert [c.display for c in cards()] == ISSUE_CARDS
    for c in cards():
        assert c.vram_bytes > 0 and c.bandwidth_bytes_s > 0 and c.bf16_flops > 0, c.name
        assert c.reported_vram_bytes <= c.vram_bytes * 1.01, c.name  # nvidia-smi shows a little less than nominal
        assert c.sources and c.form_factor, c.name
        assert c.runpod_id or c.vast_name or c.name == "a10g", c.name  # A10G is AWS-only
        # the engine sees less than nvidia-smi (torch.cuda.mem_get_info total), and says where from
        assert 0.9 * c.reported_vram_bytes < c.engine_visible_bytes <= c.reported_vram_bytes, c.name
        assert any("mem_get_info" in s for s in c.sources), c.name


def test_card_numbers_from_the_spec_sheets():
    by = {c.name: c for c in cards()}
    assert by["h100-sxm"].bf16_flops == 989e12 and by["h100-sxm"].fp8_flops == 1979e12  # dense, not sparsity
    assert by["h200"].vram_bytes == 141 * 2**30 and by["h200"].bandwidth_bytes_s == 4.8e12
    assert by["mi300x"].vram_bytes == 192 * 2**30 and by["mi300x"].bf16_flops == 1307.4e12
    assert by["t4"].bf16_native is False and by["t4"].bf16_flops == 65e12
    assert by["a100-80gb-sxm"].runpod_id == "NVIDIA A100-SXM4-80GB" and by["a100-80gb-sxm"].vast_name == "A100 SXM4"
    assert by["h100-sxm"].runpod_id == "NVIDIA H100 80GB HBM3" and by["h100-pcie"].vast_name == "H100 PCIE"
    assert by["mi300x"].runpod_id == "AMD Instinct MI300X OAM" and by["t4"].vast_name == "Tesla T4"


def test_catalog_corrections_of_issue_12():
    by = {c.name: c for c in cards()}
    assert by["b200"].bandwidth_bytes_s == 7.7e12  # DGX/HGX B200 spec: 7.7 TB/s per GPU, not 8.0
    pcie40 = by["a100-40gb-pcie"]  # Vast's "A100 PCIE" includes 40 GB boards
    assert pcie40.bandwidth_bytes_s == 1555e9 and pcie40.vram_bytes == 40 * 2**30 and pcie40.vast_name == "A100 PCIE"
    # engine-visible totals (torch.cuda.mem_get_info; gpuops/catalog/cards.toml cites each)
    assert round(by["h100-sxm"].engine_visible_bytes / 2**30, 2) == 79.19
    assert round(by["rtx-4090"].engine_visible_bytes / 2**30, 2) == 23.58
    assert round(by["mi300x"].engine_visible_bytes / 2**30, 2) == 191.45
    # the "141 GB" / "180 GB" labels are GiB: nvidia-smi reports 140.4 / 179.1 GiB
    assert by["h200"].reported_vram_bytes / 2**30 == pytest.approx(141, rel=0.01)
    assert by["b200"].reported_vram_bytes / 2**30 == pytest.approx(180, rel=0.01)


def test_family_and_card_aliases():
    assert [c.name for c in resolve_cards("a100")] == ["a100-40gb", "a100-40gb-pcie", "a100-80gb-pcie", "a100-80gb-sxm"]
    assert [c.name for c in resolve_cards("A100-80GB-SXM")] == ["a100-80gb-sxm"]
    assert [c.name for c in resolve_cards("h100")] == ["h100-pcie", "h100-sxm"]
    assert [c.name for c in resolve_cards("4090")] == ["rtx-4090"]
    with pytest.raises(BadInput, match="did you mean"):
        resolve_cards("a1000")


@pytest.mark.parametrize("name", ISSUE_MODELS)
def test_builtin_model_counts_to_its_published_size(name):
    m = builtin_model(name)
    assert m is not None and m.source.startswith("https://huggingface.co/")
    a = architecture(m.config)
    assert a.params == m.params_published


def test_moe_active_params():
    mix = architecture(builtin_model("mixtral-8x7b").config)
    assert mix.params == 46_702_792_704 and mix.active_params == 12_879_925_248  # "12.9B active"
    ds = architecture(builtin_model("deepseek-v3").config)
    assert ds.params == 671_026_419_200 and round(ds.active_params / 1e9) == 38  # DeepSeek: "37B activated"
    assert ds.mla and ds.layer_kv_elems[0] == 512 + 64


def test_model_aliases_resolve():
    assert builtin_model("meta-llama/Meta-Llama-3-8B").name == "llama-3-8b"
    assert builtin_model("Llama-2-7B").name == "llama-2-7b"
    assert builtin_model("no-such") is None


def test_vast_a100_pcie_offers_map_by_their_memory():
    from gpuops.providers.vast.compute import _card_for

    pool = list(cards())
    assert _card_for("A100 PCIE", 40 * 2**30, pool).name == "a100-40gb-pcie"
    assert _card_for("A100 PCIE", 80 * 2**30, pool).name == "a100-80gb-pcie"
