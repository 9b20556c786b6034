"""`gpuops plan`, `plan spot` and `plan storage`: sizing and the arithmetic before renting, parsed and rendered."""

from __future__ import annotations

import typer

from gpuops.cli.options import (
    CONFIG_OPT,
    _settings,
    number,
    output_options,
)
from gpuops.errors import BadInput
from gpuops.planning.vllm_kv import VLLM_RELEASE
from gpuops.providers import WITH_VOLUMES, choices


@output_options()
def plan(
    model: str | None = typer.Option(
        None,
        "--model",
        help="Built-in name (e.g. llama-3-8b; 'list' shows them, 'all' plans every one), a config.json or its directory, or a HF repo id.",
    ),
    dtype: str = typer.Option(
        "auto",
        "--dtype",
        help="Weight dtype: auto (the checkpoint's, quantization_config included), fp32, bf16, fp16, fp8, int8, int4.",
    ),
    kv_dtype: str = typer.Option(
        "auto", "--kv-dtype", help="KV cache dtype: auto (the model's, as vLLM), fp32, bf16, fp16, fp8, int8."
    ),
    batch: int = number(1, "--batch", help="Concurrent sequences.", example="32", whole=True),
    seq: int = number(
        4096, "--seq", help="Tokens per sequence (prompt + output); vLLM --max-model-len.", example="4096", whole=True
    ),
    engine: str | None = typer.Option(
        None,
        "--engine",
        help=f"vllm (default: sizes as vLLM {VLLM_RELEASE} does) | hf (transformers generate) | train.",
    ),
    mode: str = typer.Option(
        "infer",
        "--mode",
        help="infer | train (same as --engine train: mixed-precision Adam, 16 B/param + activations).",
    ),
    gpu_count: int = number(
        1, "--gpu-count", help="GPUs per box; weights and KV split by tensor parallelism.", example="2", whole=True
    ),
    headroom: float | None = number(
        None,
        "--gpu-memory-utilization",
        "--headroom",
        example="0.9",
        help="Fraction of the engine-visible VRAM the engine takes (vLLM default 0.90).",
    ),
    max_num_seqs: int | None = number(
        None,
        "--max-num-seqs",
        help="vLLM --max-num-seqs (default: the card's, 256 or 1024).",
        example="256",
        whole=True,
    ),
    max_num_batched_tokens: int | None = number(
        None,
        "--max-num-batched-tokens",
        example="8192",
        whole=True,
        help="vLLM --max-num-batched-tokens (default: the card's, 2048 or 8192).",
    ),
    card: str | None = typer.Option(
        None,
        "--card",
        help="One card or a family, e.g. a100, h100-sxm, rtx-4090, or NAME:COUNT (default: all; 'list' shows them).",
    ),
    vendor: str | None = typer.Option(
        None, "--vendor", help="nvidia (default) | amd | any: whose cards to plan when --card names none."
    ),
    fmt: str = "table",
) -> None:
    """Size the box before renting: memory as the engine sizes it, fit, KV pool, max concurrency, decode ceiling, $/Mtoken per card, and the `vllm serve` command.

    Two other questions have their own commands: `gpuops plan storage --model M` (keep the weights on
    a volume or refetch them every run) and `gpuops plan spot --card C` (what a run on spot costs
    against one on-demand box: the break-even preemption rate)."""
    from gpuops.render.sizing import plan_command

    if card == "list":  # the catalog's cards, as `gpuops cards`
        from gpuops.render.cards import show_cards

        show_cards(fmt)
        return
    if not model:
        raise BadInput(
            "--model is required",
            "e.g. gpuops plan --model llama-3-8b (--model list shows the models, --card list the cards)",
        )
    from gpuops.rental.request import plan_args

    args = plan_args(
        card=card,
        gpu_count=gpu_count,
        dtype=dtype,
        kv_dtype=kv_dtype,
        batch=batch,
        seq=seq,
        mode=mode,
        engine=engine,
        headroom=headroom,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        vendor=vendor,
    )
    plan_command(model, args, fmt)


@output_options()
def plan_spot(
    card: str | None = typer.Option(None, "--card", help="Card or family whose live offers give the two prices."),
    provider: str | None = typer.Option(None, "--provider", help="Whose offers (default: every provider with a key)."),
    gpu_count: int = number(1, "--gpu-count", help="GPUs in the box.", example="2", whole=True),
    lost_minutes: float = number(
        10,
        "--lost-minutes",
        example="10",
        unit="minutes",
        help="Minutes one preemption costs: re-rent, bootstrap, work since the last checkpoint.",
    ),
    spot_usd_per_hour: float | None = number(
        None,
        "--spot-usd-per-hour",
        help="The spot price instead of the cheapest offer's.",
        example="0.2",
        unit="USD per hour",
    ),
    on_demand_usd_per_hour: float | None = number(
        None,
        "--on-demand-usd-per-hour",
        example="0.5",
        unit="USD per hour",
        help="The on-demand price instead of the cheapest offer's.",
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """What a spot run (up --spot --recover N) costs against one on-demand box: the break-even preemption rate from the two prices."""
    from gpuops.render import emit, progress, spot as spot_view
    from gpuops.rental.spot import spot_plan

    need_offers = spot_usd_per_hour is None or on_demand_usd_per_hour is None
    rep = spot_plan(
        _settings(config) if need_offers else None,
        card=card,
        provider=provider,
        gpu_count=gpu_count,
        lost_minutes=lost_minutes,
        spot_usd_per_hour=spot_usd_per_hour,
        on_demand_usd_per_hour=on_demand_usd_per_hour,
        waiting=progress.waiting,
    )
    emit.emit(rep, fmt, lambda: spot_view.render(rep))


@output_options()
def plan_storage(
    model: str = typer.Option(..., "--model", help="Model, as in `gpuops plan --model`."),
    runs_per_month: int = number(
        20, "--runs-per-month", help="Boxes per month that need the weights.", example="20", whole=True
    ),
    download_gbps: float = number(
        1, "--download-gbps", help="Download rate from the box to the hub, Gbit/s.", example="1"
    ),
    provider: str = typer.Option(
        WITH_VOLUMES[0], "--provider", help=f"{choices(WITH_VOLUMES)}: whose volume price applies."
    ),
    dtype: str = typer.Option("bf16", "--dtype", help="Weight dtype when the checkpoint size is unknown."),
    card: str | None = typer.Option(
        None, "--card", help="The box whose hourly price a download burns (default: cheapest that fits)."
    ),
    usd_per_hour: float | None = number(
        None,
        "--usd-per-hour",
        help="Box price instead of the card's reference price.",
        example="2",
        unit="USD per hour",
    ),
    usd_per_gb_month: float | None = number(
        None,
        "--usd-per-gb-month",
        help="Volume price instead of the provider's.",
        example="0.07",
        unit="USD per GB-month",
    ),
    fmt: str = "table",
) -> None:
    """Keep the weights on a volume or refetch them every run: sizes, prices, break-even, recommendation."""
    from gpuops.planning.storage import storage_plan
    from gpuops.render.storage import render

    render(
        storage_plan(
            model,
            runs_per_month=runs_per_month,
            download_gbps=download_gbps,
            provider=provider,
            dtype=dtype,
            card=card,
            usd_per_hour=usd_per_hour,
            usd_per_gb_month=usd_per_gb_month,
        ),
        fmt,
    )
