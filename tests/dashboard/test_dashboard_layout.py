"""The dashboard as a new user reads it, in the real headless chromium: "where the month went"
names every bar (10 experiments, 10 labels), sits above the fold at 1280x900, the session table is
not cut on the right, and with no monthly cap the budget section says how to set one.
Screenshots at 1280 and 390 px under test-artifacts/dashboard/ (GPUOPS_TEST_ARTIFACTS)."""

from __future__ import annotations

import json

import pytest

from tests.books.conftest import _rented, utc
from tests.dashboard.conftest import artifacts_dir, run_cli

pytestmark = pytest.mark.slow

# Ten experiments in November 2026, each a one-hour rental at its own price, so the bars differ:
# names as people write them (long enough that Chart.js skips every other label when it may).
EXPERIMENTS = [
    (f"{name}-{i:02d}", price)
    for i, (name, price) in enumerate(
        [
            ("llama-3-70b-serve-sweep", 9.60),
            ("qwen2-72b-int4-eval", 8.10),
            ("mixtral-8x7b-finetune", 7.20),
            ("gemma-2-27b-longctx", 6.30),
            ("phi-3-medium-distill", 5.40),
            ("mistral-7b-dpo", 4.50),
            ("deepseek-v2-lite-bench", 3.60),
            ("llama-3-8b-lora", 2.70),
            ("embedding-reindex", 1.80),
            ("smoke-test", 0.90),
        ]
    )
]
CONCLUSION = "throughput at batch 32 held at 1,100 tok/s; the KV cache was the limit, not the weights"


@pytest.fixture
def ledger_url(tmp_path):
    """SQLite only: the layout does not depend on the books' database."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def dash_env(cli_env, ledger_url):
    """cli_env on a ledger with the ten experiments of ``EXPERIMENTS`` and no monthly cap."""
    from ledger import Ledger

    led = Ledger(ledger_url)
    try:
        for i, (experiment, price) in enumerate(EXPERIMENTS):
            sid = f"20261103-{10 + i:02d}0000-{i:04x}"
            t = utc(2026, 11, 3 + i, 10, 0)
            _rented(led, sid, t, price=price, experiment=experiment, card="h100-sxm", gpu_count=8)
            led.close(sid, t + 60.0 + 3600.0, "job_end", exit_code=0)
            led.note(sid, CONCLUSION)
    finally:
        led.engine.dispose()
    env = dict(cli_env)
    env["GPUOPS_LEDGER_URL"] = ledger_url
    env["TZ"] = "UTC"
    env.pop("GPUOPS_TEARDOWN_MONTHLY_CAP_USD", None)
    return env


THICKNESS_JS = (
    "JSON.stringify(Chart.getChart(document.getElementById('CANVAS')).getDatasetMeta(0).data.map(b => b.height))"
)
MIN_BAR_PX = 8


def _labels(page, canvas: str) -> list[str]:
    """The category labels Chart.js drew on ``canvas``'s bar axis (after its own auto-skip)."""
    return json.loads(
        page.eval(
            f"(c => JSON.stringify(c.scales[c.options.indexAxis === 'y' ? 'y' : 'x'].ticks.map(t => c.data.labels[t.value])))"
            f"(Chart.getChart(document.getElementById('{canvas}')))"
        )
    )


def _box(page, selector: str) -> dict:
    return json.loads(
        page.eval(
            f"(r => JSON.stringify({{top: r.top, bottom: r.bottom, left: r.left, right: r.right}}))"
            f"(document.querySelector({json.dumps(selector)}).getBoundingClientRect())"
        )
    )


@pytest.mark.timeout(600)
def test_where_the_money_went_reads_at_a_glance(dash_env, dashboard_url, browser):
    month = json.loads(run_cli(dash_env, "ledger", "month", "2026-11", "--tz", "UTC", "--json").stdout)
    assert len(month["by_experiment"]) == 10  # the books the test wrote, as the CLI reads them
    names = [g["name"] for g in month["by_experiment"]]
    for width, height in ((1280, 900), (390, 844)):
        page = browser.page(width, height)
        page.goto(dashboard_url)
        page.screenshot(artifacts_dir() / f"layout-{width}px.png")  # kept whatever the checks say
        assert page.errors() == []
        # every bar named: 10 experiments, 10 labels, in the report's order
        assert _labels(page, "experiment-chart") == names, width
        assert _labels(page, "card-chart") == [g["name"] for g in month["by_card"]], width
        for canvas in ("experiment-chart", "card-chart"):  # and every bar drawn, thick enough to see
            thick = json.loads(page.eval(THICKNESS_JS.replace("CANVAS", canvas)))
            assert thick and min(thick) >= MIN_BAR_PX, (canvas, width, thick)
        # no monthly cap: the budget section is there and says how to set one
        budget = page.eval("(e => e && e.innerText)(document.getElementById('budget'))")
        assert budget is not None, "no budget section without a monthly cap"
        assert "no monthly cap" in budget and "monthly_cap_usd" in budget, budget
        assert "GPUOPS_TEARDOWN_MONTHLY_CAP_USD" in budget, budget
        # the page never scrolls sideways
        assert page.eval("document.documentElement.scrollWidth") <= width
        if width >= 1280:
            # "where the month went" whole above the fold, on a desktop screen
            where = _box(page, "#where")
            assert where["bottom"] <= height, where
            # the session table is not cut on the right: nothing of it needs a sideways scroll
            assert page.eval("(e => e.scrollWidth <= e.clientWidth)(document.querySelector('#sessions .scroll'))")
            table, panel = _box(page, "#sessions table"), _box(page, "#sessions")
            assert table["right"] <= panel["right"], (table, panel)
