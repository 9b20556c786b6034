"""`gpuops cards` (and `gpuops plan --card list`): the catalog's cards, the names --card takes."""

from __future__ import annotations

GIB = 2**30
COLUMNS = ("name", "family", "aliases", "vram_gib", "bandwidth_gb_s", "bf16_tflops", "reference_usd_per_hour")
# Left out first when the terminal is too narrow (the name, its family and its memory stay).
# Left out first to last; the card, its aliases (what --card takes) and its price stay.
DROP_ORDER = ("bf16 TFLOP/s", "bandwidth GB/s", "family")


def card_rows() -> list[dict]:
    """Every catalog card (``gpuops/catalog/cards.toml``, file order) as ``COLUMNS``.

    VRAM in GiB (2^30 bytes), bandwidth in GB/s (10^9 bytes), dense bf16 peak in TFLOP/s, the
    reference on-demand price in USD/h (the local provider's simulated price)."""
    from gpuops.catalog import cards

    return [
        {
            "name": c.name,
            "family": c.family,
            "aliases": " ".join(c.aliases),
            "vram_gib": round(c.vram_bytes / GIB, 1),
            "bandwidth_gb_s": round(c.bandwidth_bytes_s / 1e9),
            "bf16_tflops": round(c.bf16_flops / 1e12, 1),
            "reference_usd_per_hour": c.reference_usd_per_hour,
        }
        for c in cards()
    ]


def show_cards(fmt: str = "table") -> None:
    """Print the cards as ``fmt`` (table, json, csv); the table through ``gpuops.render.tables``."""
    from gpuops.render import emit

    rows = card_rows()

    def table() -> None:
        from gpuops.render.tables import ID, NAME, NUM, Col, console, print_table, ranked

        cols = [
            Col("card", ID),
            Col("family", ID),
            Col("VRAM GiB", NUM),
            Col("bandwidth GB/s", NUM),
            Col("bf16 TFLOP/s", NUM),
            Col("ref USD/h", NUM),
            Col("aliases", NAME),
        ]
        c = console()
        print_table(
            c,
            "cards (--card takes a name, an alias or a family; NAME:COUNT for several GPUs)",
            ranked(cols, DROP_ORDER),
            [
                [
                    r["name"],
                    r["family"],
                    f"{r['vram_gib']:g}",
                    f"{r['bandwidth_gb_s']:,}",
                    f"{r['bf16_tflops']:g}",
                    f"{r['reference_usd_per_hour']:.2f}",
                    r["aliases"],
                ]
                for r in rows
            ],
        )

    emit.emit(rows, fmt, table, csv_columns=COLUMNS)
