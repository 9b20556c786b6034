"""The card catalog: GPU specs, aliases and provider ids, read from ``cards.toml`` beside this file.

Data lives in the TOML file with a source for every number; this module only parses and looks up.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from gpuops.errors import BadInput

GIB = 1024**3


@dataclass(frozen=True)
class Card:
    """One GPU model.

    ``vram_bytes``: nominal memory in bytes (GiB x 2^30). ``bandwidth_bytes_s``: peak memory
    bandwidth in bytes/s. ``bf16_flops``/``fp8_flops``: dense peak FLOP/s (0 when unsupported).
    ``reference_usd_per_hour``: a typical on-demand price, used only for simulated costs.
    ``reported_vram_bytes``: what nvidia-smi reports (MiB x 2^20), or ``vram_bytes`` when the
    catalog has no reported figure; serving engines take their headroom fraction of this.
    ``bf16_native``: False for cards whose 16-bit tensor peak is fp16 only (T4).
    ``engine_visible_bytes``: the total a serving engine sees, ``torch.cuda.mem_get_info()[1]``
    (``engine_visible_gib`` x 2^30; source in ``sources``), below nvidia-smi's figure; vLLM's
    ``gpu_memory_utilization`` is a fraction of it. Falls back to ``reported_vram_bytes``.
    ``vendor``: nvidia or amd. ``compute_capability``: CUDA compute capability (0 for AMD).
    """

    name: str
    display: str
    family: str
    aliases: tuple[str, ...]
    vram_bytes: int
    bandwidth_bytes_s: float
    bf16_flops: float
    fp8_flops: float
    form_factor: str
    runpod_id: str
    vast_name: str
    reference_usd_per_hour: float
    sources: tuple[str, ...]
    reported_vram_bytes: int = 0
    bf16_native: bool = True
    engine_visible_bytes: int = 0
    vendor: str = "nvidia"
    compute_capability: float = 0.0


@lru_cache(maxsize=1)
def cards() -> tuple[Card, ...]:
    """Every card in the catalog, in file order."""
    data = tomllib.loads((Path(__file__).with_name("cards.toml")).read_text(encoding="utf-8"))
    out = []
    for c in data["cards"]:
        out.append(
            Card(
                name=c["name"],
                display=c["display"],
                family=c["family"],
                aliases=tuple(c.get("aliases", ())),
                vram_bytes=int(c["vram_gib"] * GIB),
                bandwidth_bytes_s=float(c["bandwidth_gb_s"]) * 1e9,
                bf16_flops=float(c["bf16_tflops"]) * 1e12,
                fp8_flops=float(c.get("fp8_tflops", 0)) * 1e12,
                form_factor=c.get("form_factor", ""),
                runpod_id=c.get("runpod_id", ""),
                vast_name=c.get("vast_name", ""),
                reference_usd_per_hour=float(c.get("reference_usd_per_hour", 0.0)),
                sources=tuple(c.get("sources", ())),
                reported_vram_bytes=int(c["vram_reported_mib"] * 2**20)
                if c.get("vram_reported_mib")
                else int(c["vram_gib"] * GIB),
                bf16_native=bool(c.get("bf16_native", True)),
                engine_visible_bytes=int(c["engine_visible_gib"] * GIB)
                if c.get("engine_visible_gib")
                else (int(c["vram_reported_mib"] * 2**20) if c.get("vram_reported_mib") else int(c["vram_gib"] * GIB)),
                vendor=str(c.get("vendor", "nvidia")),
                compute_capability=float(c.get("compute_capability", 0.0)),
            )
        )
    return tuple(out)


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def resolve_cards(query: str) -> list[Card]:
    """Cards that ``query`` names: a card name or alias gives one card, a family name all of it.

    Raises BadInput naming the closest known names when nothing matches.
    """
    q = _norm(query)
    exact = [c for c in cards() if q == c.name or q in c.aliases]
    if exact:
        return exact
    family = [c for c in cards() if q == c.family]
    if family:
        return family
    known = sorted({c.name for c in cards()} | {c.family for c in cards()} | {a for c in cards() for a in c.aliases})
    close = difflib.get_close_matches(q, known, n=3, cutoff=0.5)
    hint = (
        f"did you mean {', '.join(close)}? (`gpuops cards` lists them)" if close else "`gpuops cards` lists the cards"
    )
    raise BadInput(f"unknown card {query!r}", f"{hint}")


VENDORS = ("nvidia", "amd")


def vendor_for(vendor: str | None = None, image: str = "", card: str | None = None) -> str:
    """Whose cards a job may run on.

    ``vendor`` when given (nvidia, amd or any); else the vendor of the card named (an AMD card named
    is asked for); else amd for a ROCm image (``rocm`` in the image name, e.g. rocm/vllm); else
    nvidia: a CUDA job never lands on an AMD card by default. Raises BadInput for another vendor
    name."""
    if vendor is not None and str(vendor).strip():
        v = str(vendor).strip().lower()
        if v not in VENDORS + ("any",):
            raise BadInput(f"unknown --vendor {vendor!r}", "use nvidia, amd or any")
        return v
    if card:
        named = {c.vendor for c in resolve_cards(card)}
        return named.pop() if len(named) == 1 else "any"
    if "rocm" in (image or "").lower():
        return "amd"
    return "nvidia"


def cards_for(vendor: str = "nvidia") -> tuple[Card, ...]:
    """Catalog cards of ``vendor`` (nvidia, amd; any: every card), in file order."""
    return tuple(c for c in cards() if vendor == "any" or c.vendor == vendor)


def alias_note(query: str) -> str:
    """One line saying what ``query`` means when it names more than one card, else "".

    Such a query is a family or an alias spanning variants, e.g. h100 = h100-pcie and h100-sxm."""
    try:
        found = resolve_cards(query)
    except BadInput:
        return ""
    if len(found) < 2:
        return ""
    return f"--card {query} means {len(found)} cards: {', '.join(c.name for c in found)}; each is planned (name one to plan one)"


def card_by_name(name: str) -> Card:
    """The card with catalog name ``name``; KeyError when absent."""
    for c in cards():
        if c.name == name:
            return c
    raise KeyError(name)
