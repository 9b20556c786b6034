"""The one table rule (gpuops/render/tables.py): at 80, 100 and 120 columns no number or id is cut,
names wrap, headers never break inside a word, and what is left out is named."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from gpuops.render.tables import ID, NAME, NUM, TEXT, Col, layout, print_table

WIDTHS = (80, 100, 120)


def _console(width: int) -> Console:
    return Console(
        width=width, record=True, highlight=False, markup=False, soft_wrap=False, file=open("/dev/null", "w")
    )


def _group(
    name: str, cost: float, sim: float, hours: float, sessions: int, tokens: int, per: float | None, job: float | None
) -> dict:
    return {
        "name": name,
        "cost_usd": cost,
        "simulated_usd": sim,
        "gpu_hours": hours,
        "sessions": sessions,
        "open_sessions": 0,
        "tokens": tokens,
        "usd_per_mtoken": per,
        "usd_per_mtoken_job": job,
        "simulated_usd_per_mtoken": None,
        "simulated_usd_per_mtoken_job": None,
        "latest_conclusion": "the 8-bit run matched bf16 within noise, keep it",
    }


def _month() -> dict:
    exps = [
        _group(f"experiment-{i:02d}", 7880.1234 - i, 0.0, 1234.567, 3, 12_000_000 + i, 0.6567, 0.5012)
        for i in range(200)
    ]
    return {
        "month": "2026-11",
        "tz": "UTC",
        "total_usd": 1_576_024.68,
        "simulated_usd": 0.0,
        "gpu_hours": 246_913.4,
        "sessions": 600,
        "open_sessions": 0,
        "tokens": 1_157_000_000_000,
        "usd_per_mtoken": 1.3622,
        "usd_per_mtoken_job": 1.0,
        "by_experiment": exps,
        "by_card": [_group("a100-80gb-sxm x8", 7880.1234, 12.5, 1234.567, 185, 1_157_000_000, 6.8107, 5.9)],
        "by_provider": [_group("runpod", 7880.1234, 0.0, 1234.567, 185, 1_157_000_000, None, None)],
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_ledger_month_keeps_every_digit(width, monkeypatch):
    from gpuops.render import ledger as ledger_view

    c = _console(width)
    monkeypatch.setattr(ledger_view, "_console", lambda: c)
    ledger_view.render_month(_month())
    text = c.export_text()
    assert "…" not in text and max(len(x) for x in text.splitlines()) <= width
    left = re.findall(r"left out for width: (.*?) \(", text.replace("\n", " "))
    # totals in cents (a month's, an experiment's, a card's, a provider's), every digit before them
    for number in ("7,880.12", "7,866.12", "1,234.567", "(185 more)", "1,576,024.68", "1,157,000,000,000"):
        assert number in text, number
    assert "7,880.1234" not in text
    # the 185 folded rows' sums, whole
    assert f"{sum(7880.1234 - i for i in range(15, 200)):,.2f}" in text
    if (
        not left or "tokens" not in left[0]
    ):  # the by-experiment table's tokens: shown whole, or the column is named as left out
        assert f"{sum(12_000_000 + i for i in range(15, 200)):,}" in text and "12,000,014" in text
    if not any("tokens" in x for x in left[1:]):
        assert "1,157,000,000 " in text
    if width == 120:
        assert left == []  # everything fits at 120
    for dropped in left:  # what is left out is named, in the stated order
        names = dropped.split(", ")
        from gpuops.render.ledger import GROUP_DROP_ORDER

        assert names == [h for h in GROUP_DROP_ORDER if h in names]
    for header_word in ("experiment", "provider", "sessions"):
        assert re.search(rf"\b{header_word}\b", text), header_word  # never "experim/ent"


@pytest.mark.parametrize("width", WIDTHS)
def test_experiments_conclusion_wraps_and_numbers_stay(width, monkeypatch):
    from gpuops.render import ledger as ledger_view

    c = _console(width)
    monkeypatch.setattr(ledger_view, "_console", lambda: c)
    rows = [
        _group(
            "a-very-long-experiment-name-that-wraps-in-its-cell",
            7880.1234,
            0.0,
            1234.567,
            3,
            1_157_000_000,
            6.8107,
            5.9,
        )
    ]
    ledger_view.render_experiments({"since": None, "until": None, "experiments": rows})
    text = c.export_text()
    assert "…" not in text
    assert "7,880.12" in text and "1,234.567" in text
    # the name is all there, wrapped (fold keeps every character)
    body = "".join(re.sub(r"[│┃]", "", line).split()[0] for line in text.splitlines() if line.startswith("│"))
    assert "a-very-long-experiment-name-that-wraps-in-its-cell" in body


@pytest.mark.parametrize("width", WIDTHS)
def test_offers_show_pcie_and_sxm_and_whole_ids(width):
    from gpuops.planning.offers import OffersResult
    from gpuops.providers.base import Offer
    from gpuops.render.offers import render

    offers = [
        Offer(
            provider="vast",
            offer_id="vast-offer-28417731-long",
            card=card,
            gpu_count=1,
            vram_bytes=80 * 2**30,
            usd_per_hour=price,
            spot=False,
            reliability=0.9987,
            region="Europe, Norway (NO)",
        )
        for card, price in (("a100-80gb-pcie", 1.187), ("a100-80gb-sxm", 1.493))
    ]
    c = _console(width)
    render(OffersResult(offers=offers, providers=["vast"]), c)
    text = c.export_text()
    assert "…" not in text
    assert "a100-80gb-pcie" in text and "a100-80gb-sxm" in text
    # the offer id keys every table (the first, and each continuation at a narrow width); rates to 4 places
    tables = text.count("┏")
    assert text.count("vast-offer-28417731-long") == 2 * tables and "1.1870" in text and "1.4930" in text
    for header in ("GPUs", "VRAM/GPU", "region", "reliability"):  # moved to a continuation, never left out
        assert header in text, header


def test_layout_leaves_out_by_stated_order_and_keeps_drop_zero():
    cols = [Col("id", ID), Col("a"), Col("b", drop=1), Col("c", drop=3), Col("d", drop=2), Col("note", TEXT, drop=4)]
    rows = [["session-0123456789", "1,234,567.8901", "22.5", "333", "4,444", "a long note " * 5]]
    shown, widths, left = layout(cols, rows, 46)  # 18 + 14 + 4 cells, 10 of rules and padding
    # note (drop 4) first, then c (3), then d (2): b and the drop-0 columns stay
    assert [cols[i].header for i in left] == ["note", "c", "d"]
    assert [cols[i].header for i in shown] == ["id", "a", "b"]
    assert widths[:2] == [18, 14]  # an id and a number are exactly as wide as their longest cell


def test_print_table_names_what_was_left_out():
    c = _console(34)  # name 4 + cost 10 + rules 7 fit; tokens (13 more) does not
    left = print_table(
        c,
        "t",
        [Col("name", NAME), Col("cost USD", NUM), Col("tokens", NUM, drop=1)],
        [["x", "7,880.1234", "1,157,000,000"]],
    )
    text = c.export_text()
    assert left == ["tokens"] and "left out for width: tokens" in text and "7,880.1234" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_model_all_every_max_batch_shown(width, cli):
    doc = json.loads(cli("plan", "--model", "all", "--format", "json").stdout)
    out = cli("plan", "--model", "all", env={"COLUMNS": str(width)})
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout and max(len(x) for x in out.stdout.splitlines()) <= width
    for p in doc:
        cells: list[str] = []
        for line in out.stdout.splitlines():
            parts = [x.strip() for x in line.split("│")]
            if len(parts) > 2 and parts[1] == p["model"]:
                cells += parts[2:-1]
        expected = [str(c["max_batch"]) if c["max_batch"] else "-" for c in p["cards"]]
        assert cells[2:] == expected, p["model"]  # after params and weights GB, every card in order


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_one_model_every_figure_shown(width, cli):
    args = ("plan", "--model", "llama-3-8b")
    doc = json.loads(cli(*args, "--json").stdout)
    out = cli(*args, env={"COLUMNS": str(width)})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "…" not in text
    for c in doc["cards"]:
        assert f"{c['max_concurrency']:,.2f}" in text and f"{c['kv_pool_bytes'] / 2**30:.2f}" in text
        # a card that does not fit has no speed (null in the JSON, "-" in the table)
        assert (c["decode_tok_s"] is None) == (not c["fits"])
        assert c["decode_tok_s"] is None or f"{c['decode_tok_s']:,.1f}" in text
