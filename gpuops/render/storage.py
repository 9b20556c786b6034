"""`gpuops storage-plan`: the keep-or-refetch arithmetic (gpuops.planning.storage) as a table, JSON or CSV."""

from __future__ import annotations

from gpuops.planning.storage import StoragePlan


def render(sp: StoragePlan, fmt: str = "table") -> None:
    """Print the storage plan as ``fmt`` (table, json, csv: gpuops.render.emit's convention)."""
    if fmt != "table":
        from gpuops.render import emit

        emit.emit(sp.as_json(), fmt)
        return
    from gpuops.render import ui
    from gpuops.render.tables import ID, TEXT, Col, print_table

    c = ui.console()
    rows = [
        ("weights", f"{sp.weights_bytes / 1e9:.2f} GB ({sp.weights_bytes / 2**30:.2f} GiB), {sp.weights_source}"),
        (
            "volume",
            f"{sp.volume_gb} GB x {sp.usd_per_gb_month:.3f} USD/GB/month = {sp.volume_usd_per_month:.2f} USD/month ({sp.price_source})",
        ),
        ("download", f"{sp.download_seconds:.0f} s per run at {sp.download_gbps:g} Gbit/s = weights x 8 / rate"),
        (
            "refetch cost",
            f"{sp.refetch_usd_per_run:.4f} USD per run at {sp.box_usd_per_hour:.2f} USD/h ({sp.card}); "
            f"{sp.refetch_usd_per_month:.{2 if sp.refetch_usd_per_month >= 1 else 4}f} USD/month at {sp.runs_per_month} runs",
        ),
        (
            "break-even",
            f"{sp.break_even_runs:.1f} runs/month (volume USD/month / refetch USD per run)"
            if sp.break_even_runs
            else "-",
        ),
    ]
    print_table(
        c,
        f"storage plan for {sp.model} on {sp.provider}",
        [Col("item", ID, style="bold"), Col("value", TEXT)],
        [list(r) for r in rows],
        header=False,
    )
    c.print(f"recommendation: {sp.recommendation}", markup=False)
    for r in sp.reasons:
        c.print(f"  - {r}", markup=False, soft_wrap=True)
