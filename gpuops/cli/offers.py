"""`gpuops offers` and `gpuops cards`: what can be rented, parsed and rendered."""

from __future__ import annotations

import sys

import typer

from gpuops.cli.options import (
    CARD_HELP,
    CONFIG_OPT,
    _card_count,
    _dtypes_not_blank,
    _not_blank,
    _parse_price,
    _settings,
    _without_spot,
    number,
    output_options,
)
from gpuops.errors import BadInput
from gpuops.providers import NAMES, SPOT, choices, titles


@output_options()
def offers(
    card: str | None = typer.Option(None, "--card", help=CARD_HELP),
    vram_gb: float | None = number(
        None, "--vram-gb", help="Memory needed per GPU, in GB (10^9 bytes).", example="24", unit="GB"
    ),
    model: str | None = typer.Option(None, "--model", help="Size from this model instead (as in `gpuops plan`)."),
    dtype: str = typer.Option(
        "auto",
        "--dtype",
        help="With --model: weight dtype (auto = the checkpoint's; fp32, bf16, fp16, fp8, int8, int4).",
    ),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="With --model: KV cache dtype (auto = the model's)."),
    seq: int = number(4096, "--seq", help="With --model: tokens per sequence.", example="4096", whole=True),
    batch: int = number(1, "--batch", help="With --model: concurrent sequences.", example="32", whole=True),
    gpu_count: int = number(1, "--gpu-count", help="GPUs in the box.", example="2", whole=True),
    provider: str | None = typer.Option(
        None, "--provider", help=f"{choices(NAMES)} (default: every provider with a key)."
    ),
    spot: bool | None = typer.Option(
        None,
        "--spot/--on-demand",
        help=(
            f"Interruptible offers only ({titles(SPOT, ', ')}; {_without_spot()} none), or on-demand only (default: both, each at the price it rents at)."
        ),
    ),
    max_price: float | None = number(
        None, "--max-price", help="Highest price in USD per hour for the whole box.", example="2.5", unit="USD per hour"
    ),
    limit: int = number(20, "--limit", help="Show at most this many offers.", example="20", whole=True),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Offers across providers: those that fit, cheapest first, reliability as the tie-break."""
    from gpuops.planning.sizing import parse_positive_int
    from gpuops.render import emit, offers as offers_view, progress, ui
    from gpuops.rental.offers import find_offers

    _not_blank("--model", model, "pass a model, e.g. --model llama-3-8b, or leave --model out")
    _dtypes_not_blank(dtype, kv_dtype)
    card, gpu_count = _card_count(card, gpu_count)
    if not model and (dtype, kv_dtype, seq, batch) != ("auto", "auto", 4096, 1):
        raise BadInput(
            "--dtype, --kv-dtype, --seq and --batch size the box from a model", "add --model, e.g. --model llama-3-8b"
        )
    res = find_offers(
        _settings(config),
        card=card,
        vram_gb=vram_gb,
        gpu_count=gpu_count,
        provider=provider,
        spot=spot,
        max_price=_parse_price(max_price),
        limit=limit,
        model=model,
        dtype=dtype,
        kv_dtype=kv_dtype,
        seq=parse_positive_int(seq, "--seq", "4096"),
        batch=parse_positive_int(batch, "--batch", "32"),
        waiting=progress.waiting,
    )
    for n in res.notes:
        sys.stderr.write(f"note: {ui.safe(n)}\n")
    emit.emit(res.offers, fmt, lambda: offers_view.render(res))


@output_options()
def cards(
    fmt: str = "table",
) -> None:
    """The cards gpuops knows: names and aliases for --card, memory, bandwidth, reference price."""
    from gpuops.render.cards import show_cards

    show_cards(fmt)
