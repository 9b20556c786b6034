"""`gpuops dashboard` in a real headless chromium, on SQLite and PostgreSQL ledgers: the page
loads with no console error, every figure on it equals `gpuops ledger month --json` (and the
session rows `gpuops ledger sessions --json`) for the same month and zone, the chart holds the
same daily figures, user text stays text, and it renders at 1280 and 390 px wide (screenshots
under test-artifacts/dashboard/)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.dashboard.conftest import HOSTILE_NOTE, artifacts_dir, run_cli

pytestmark = pytest.mark.slow

FIGURES_JS = (
    "JSON.stringify([...document.querySelectorAll('[data-key]')]"
    ".map(e => [e.dataset.key, JSON.parse(e.dataset.value), e.textContent.trim()]))"
)
CHART_JS = (
    "JSON.stringify(Chart.getChart(document.getElementById('daily-chart')).data.datasets.map(d => [d.label, d.data]))"
)
WIDTHS = ((1280, 900), (390, 844))


def _resolve(doc, path: str):
    for part in path.split("."):
        doc = doc[int(part)] if part.isdigit() else doc[part]
    return doc


def _cli_truth(env) -> tuple[dict, dict]:
    month = run_cli(env, "ledger", "month", "2026-11", "--tz", "UTC", "--by", "day", "--json")
    assert month.returncode == 0, month.stderr
    sessions = run_cli(env, "ledger", "sessions", "--since", "2026-11-01", "--tz", "UTC", "--limit", "1000", "--json")
    assert sessions.returncode == 0, sessions.stderr
    return json.loads(month.stdout), json.loads(sessions.stdout)


def _shown_number(text: str) -> float:
    return float(text.replace(",", "").replace("$", ""))


def check_figures(page, month: dict, sessions: dict) -> int:
    """Every [data-key] figure equals the CLI's value, and its text shows that value rounded to
    the decimals it shows. Returns how many figures were checked."""
    figures = json.loads(page.eval(FIGURES_JS))
    truth = {"report": month, "sessions": sessions["sessions"]}
    seen = set()
    for key, value, text in figures:
        root = key.split(".")[0]
        if root not in truth:
            continue  # open_boxes: live state, checked in test_dashboard_data.py
        expected = _resolve(truth, key)
        assert value == expected, f"{key}: page {value!r}, CLI {expected!r}"
        seen.add(key)
        if isinstance(expected, str):
            assert text == expected, key
        elif expected is None:
            assert text == "-", key
        else:
            decimals = len(text.split(".")[1]) if "." in text else 0
            assert _shown_number(text) == pytest.approx(expected, abs=0.5 * 10**-decimals + 1e-12), f"{key}: {text}"
    # every figure of the month report is on the page
    need = {
        f"report.{k}"
        for k in (
            "total_usd",
            "simulated_usd",
            "gpu_hours",
            "sessions",
            "tokens",
            "usd_per_mtoken",
            "usd_per_mtoken_job",
        )
    }
    for group in ("by_experiment", "by_card", "by_provider"):
        for i, _ in enumerate(month[group]):
            need |= {
                f"report.{group}.{i}.{k}"
                for k in ("name", "cost_usd", "simulated_usd", "gpu_hours", "sessions", "tokens")
            }
    for i, _ in enumerate(month["days"]):
        need |= {
            f"report.days.{i}.{k}" for k in ("date", "cost_usd", "simulated_usd", "gpu_hours", "sessions", "tokens")
        }
    for i, _ in enumerate(sessions["sessions"]):
        need |= {f"sessions.{i}.tokens", f"sessions.{i}.usd_per_mtoken"}
    assert need <= seen, f"missing on the page: {sorted(need - seen)[:10]}"
    assert month["total_usd"] > 0 and month["simulated_usd"] > 0  # the books have both kinds of money
    return len(seen)


def check_page(page, month: dict, sessions: dict, width: int) -> None:
    assert page.errors() == []
    assert check_figures(page, month, sessions) > 100
    chart = dict(json.loads(page.eval(CHART_JS)))
    assert chart["real USD"] == [d["cost_usd"] for d in month["days"]]
    assert chart["simulated USD (not charged)"] == [d["simulated_usd"] for d in month["days"]]
    # user text is text: the note is shown literally and nothing in it ran
    assert HOSTILE_NOTE in page.eval("document.getElementById('sessions').innerText")
    assert page.eval("typeof window.pwned") == "undefined"
    assert page.eval("document.querySelectorAll('main script, main img').length") == 0
    # the page itself never scrolls sideways: wide tables scroll inside their own box, and at
    # desktop width the session table needs no scrolling at all
    assert page.eval("document.documentElement.scrollWidth") <= width
    if width >= 1280:
        assert page.eval("(e => e.scrollWidth <= e.clientWidth)(document.querySelector('#sessions .scroll'))")
    # the simulated money is marked
    assert page.eval("document.querySelectorAll('#totals .sim').length") >= 1
    assert page.eval("document.querySelectorAll('#sessions .badge').length") >= 1
    # the sweep conftest.add_sweep wrote: 1 of 4 done, 1 running, 1 queued, 1 failed; s1 + s5 =
    # 2.40 + 6.40 = 8.80 USD spent of its max_usd 20.00 (0.44 of the bar), on screen at both widths
    figures = {k: v for k, v, _ in json.loads(page.eval(FIGURES_JS)) if k.startswith("sweeps.0.")}
    counts = {f"sweeps.0.{k}": n for k, n in (("done", 1), ("jobs", 4), ("running", 1), ("queued", 1), ("failed", 1))}
    assert figures == {**counts, "sweeps.0.cost_usd": pytest.approx(8.80, abs=1e-9), "sweeps.0.max_usd": 20.0}
    assert page.eval("document.querySelector('#sweeps progress').value") == pytest.approx(0.44, abs=1e-9)
    sweeps = page.eval("document.getElementById('sweeps').innerText")
    assert "sweep-lr" in sweeps and "$8.80" in sweeps and "open" in sweeps, sweeps
    assert page.eval("(e => e.getBoundingClientRect().right)(document.getElementById('sweeps'))") <= width


@pytest.mark.timeout(600)
def test_served_page_matches_the_cli(dash_env, dashboard_url, browser, ledger_url):
    month, sessions = _cli_truth(dash_env)
    backend = "postgres" if ledger_url.startswith("postgres") else "sqlite"
    for width, height in WIDTHS:
        page = browser.page(width, height)
        page.goto(dashboard_url)
        check_page(page, month, sessions, width)
        # no request left this machine's server
        urls = page.eval("JSON.stringify(performance.getEntriesByType('resource').map(r => r.name))")
        assert all(u.startswith(dashboard_url) for u in json.loads(urls)), urls
        shot = page.screenshot(artifacts_dir() / f"served-{backend}-{width}px.png")
        assert shot.stat().st_size > 10_000
    # another zone through the form's query: the same function answers, so the same figures
    page = browser.page(1280, 900)
    page.goto(dashboard_url + "?month=2026-11&tz=Asia%2FTokyo")
    tokyo = json.loads(
        run_cli(dash_env, "ledger", "month", "2026-11", "--tz", "Asia/Tokyo", "--by", "day", "--json").stdout
    )
    figures = dict((k, v) for k, v, _ in json.loads(page.eval(FIGURES_JS)))
    assert figures["report.total_usd"] == tokyo["total_usd"] != month["total_usd"]  # s7 is November in Tokyo
    assert page.eval("document.querySelector('input[name=tz]').value") == "Asia/Tokyo"


def test_html_file_opens_offline(dash_env, browser, ledger_url, tmp_path):
    month, sessions = _cli_truth(dash_env)
    out = tmp_path / "costs.html"
    r = run_cli(dash_env, "dashboard", "--month", "2026-11", "--tz", "UTC", "--html", str(out))
    assert r.returncode == 0, r.stderr
    assert "opens offline" in r.stdout
    text = out.read_text()
    assert "src=" not in text.split("<main>")[0] and "http://" not in text.replace("http://www.w3.org", "")
    backend = "postgres" if ledger_url.startswith("postgres") else "sqlite"
    for width, height in WIDTHS:
        page = browser.page(width, height)
        page.goto(out.as_uri())
        check_page(page, month, sessions, width)
        assert json.loads(page.eval("JSON.stringify(performance.getEntriesByType('resource').map(r => r.name))")) == []
        page.screenshot(artifacts_dir() / f"file-{backend}-{width}px.png")


def test_bad_query_is_a_400_with_the_error(dashboard_url):
    for query, words in (("?month=2026-13", "month must look like 2026-11"), ("?tz=Mars/Olympus", "unknown time zone")):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(dashboard_url + query, timeout=30)
        assert e.value.code == 400
        assert words in e.value.read().decode()
    with urllib.request.urlopen(dashboard_url + "api/dashboard.json?month=2026-11&tz=UTC", timeout=60) as resp:
        doc = json.loads(resp.read())
        assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert doc["report"]["month"] == "2026-11" and doc["tz"] == "UTC"
    req = urllib.request.Request(dashboard_url, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 405  # read-only


def test_only_loopback_host_headers_are_served(dashboard_url):
    """DNS rebinding: a page on evil.example re-points its name at 127.0.0.1 and reads the books
    through the victim's browser; the request then carries ``Host: evil.example``."""
    import http.client
    from urllib.parse import urlsplit

    port = urlsplit(dashboard_url).port

    def get(path: str, host: str) -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            c.putrequest("GET", path, skip_host=True)
            c.putheader("Host", host)
            c.endheaders()
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example"):
        for path in ("/", "/api/dashboard.json?month=2026-11&tz=UTC", "/static/dashboard.js"):
            status, body = get(path, host)
            assert status == 400 and b"2026-11" not in body and b"usd" not in body.lower(), (host, path, status)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        status, body = get("/api/dashboard.json?month=2026-11&tz=UTC", host)
        assert status == 200 and json.loads(body)["report"]["month"] == "2026-11", host


OPEN_JS = (
    "JSON.stringify([...document.querySelectorAll('#open_boxes [data-live]')].map(e => "
    "[e.closest('tr').dataset.session, e.dataset.live, e.dataset.value && JSON.parse(e.dataset.value), e.textContent.trim(), "
    "e.getBoundingClientRect().right]))"
)


@pytest.mark.timeout(600)
def test_open_boxes_first_live_and_readable_at_390px(dash_env, dashboard_url, browser):
    # Seen: "1 open, no cost yet" beside a box accruing money; burn and TTL frozen at load; at
    # 390 px the open-box table scrolled sideways with burn, accrued and TTL off screen.
    import time

    month, _ = _cli_truth(dash_env)
    page = browser.page(390, 844)
    page.goto(dashboard_url)
    assert page.errors() == []
    assert page.eval("document.querySelector('main > section').id") == "open_boxes"  # what bills now, first
    assert page.eval("(e => e.scrollWidth <= e.clientWidth)(document.querySelector('#open_boxes'))")
    assert page.eval("document.documentElement.scrollWidth") <= 390
    first = json.loads(page.eval(OPEN_JS))
    assert {k for _, k, _, _, _ in first} == {"usd_per_hour", "accrued_usd", "ttl_left_seconds"}
    assert all(right <= 390 for *_, right in first), first  # burn, accrued and TTL on screen
    # the same figures as `gpuops ps` (the ledger's live figures), read a moment apart
    t0 = time.time()
    ps = {r["session"]: r for r in json.loads(run_cli(dash_env, "ps", "--all", "--json").stdout)}
    took = time.time() - t0 + 1.0
    for sid, key, value, text, _ in first:
        if key == "accrued_usd":
            assert value == pytest.approx(ps[sid]["accrued_usd"], abs=ps[sid]["usd_per_hour"] * (took + 60) / 3600), (
                sid,
                value,
            )
            assert text.startswith("$")
        if key == "usd_per_hour":
            assert value == ps[sid]["usd_per_hour"] and text == f"${value:,.4f}"
    # live: the accrual moves between two reads without a reload
    before = {(s, k): v for s, k, v, _, _ in first if k == "accrued_usd"}
    deadline = time.monotonic() + 60
    now = before
    while now == before and time.monotonic() < deadline:
        time.sleep(0.5)
        now = {(s, k): v for s, k, v, _, _ in json.loads(page.eval(OPEN_JS)) if k == "accrued_usd"}
    assert all(now[k] > before[k] for k in before), (before, now)
    # the refreshed figures read as the page first wrote them: money with its $, the TTL in words
    for sid, key, value, text, _ in json.loads(page.eval(OPEN_JS)):
        if key == "usd_per_hour":
            assert text == f"${value:,.4f}", (sid, text)  # a rate: 4 places
        elif key == "accrued_usd":  # one rental: 4 places under $1, cents from $1
            assert text == (f"${value:,.4f}" if value < 1 else f"${value:,.2f}"), (sid, value, text)
        else:
            assert text == "-" if value is None else text.endswith(("min", " s")), (sid, key, value, text)
    assert "refreshed every" in page.eval("document.getElementById('live-at').textContent")
    # money carries its $, and "no cost yet" is gone
    assert page.eval("document.querySelector('[data-key=\"report.total_usd\"]').textContent").startswith("$")
    assert "no cost yet" not in page.eval("document.body.innerText")
    # where the month went: by experiment and by card as charts, the report's figures
    for canvas, group in (("experiment-chart", "by_experiment"), ("card-chart", "by_card")):
        got = dict(
            json.loads(
                page.eval(
                    f"JSON.stringify(Chart.getChart(document.getElementById('{canvas}')).data.datasets"
                    ".map(d => [d.label, d.data]))"
                )
            )
        )
        assert got["real USD"] == [g["cost_usd"] for g in month[group]]
        assert got["simulated USD (not charged)"] == [g["simulated_usd"] for g in month[group]]
    # the month against the 5 before it: a bar chart on screen at 390 px, each month's figures
    # equal `ledger month YYYY-MM --json`, real and simulated apart
    got = dict(
        json.loads(
            page.eval(
                "JSON.stringify(Chart.getChart(document.getElementById('trend-chart')).data.datasets"
                ".map(d => [d.label, d.data]))"
            )
        )
    )
    months = json.loads(page.eval("JSON.stringify(Chart.getChart(document.getElementById('trend-chart')).data.labels)"))
    assert months == ["2026-06", "2026-07", "2026-08", "2026-09", "2026-10", "2026-11"]
    cli = [json.loads(run_cli(dash_env, "ledger", "month", m, "--tz", "UTC", "--json").stdout) for m in months]
    assert got["real USD"] == [c["total_usd"] for c in cli] and got["simulated USD (not charged)"] == [
        c["simulated_usd"] for c in cli
    ]
    assert (
        cli[2]["simulated_usd"] > 0 == cli[2]["total_usd"] and cli[3]["total_usd"] > 0
    )  # Aug simulated only, Sep real
    box = json.loads(
        page.eval(
            "(b => JSON.stringify([b.left, b.right, b.width, b.height]))"
            "(document.getElementById('trend-chart').getBoundingClientRect())"
        )
    )
    assert box[0] >= 0 and box[1] <= 390 and box[2] > 200 and box[3] > 100, box
    line = page.eval("document.getElementById('trend-line').innerText")
    assert (
        f"${cli[5]['total_usd']:,.2f} this month (2026-11) vs ${cli[4]['total_usd']:,.2f} last month (2026-10)" in line
    ), line
    page.screenshot(artifacts_dir() / "served-open-boxes-390px.png")
