"""The dashboard page as HTML text (Jinja2, autoescaped).

One template for the served page and the self-contained file (``inline=True``: the chart library and
the page script are inlined, so the file opens offline with nothing fetched).

Charts: Chart.js 4.6.1 (MIT, https://www.chartjs.org, license in ``static/chart.js-LICENSE.md``),
vendored as ``static/chart.umd.min.js`` from the npm package ``chart.js@4.6.1`` (file
``dist/chart.umd.min.js``): no CDN at view time.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
CHART_JS = STATIC / "chart.umd.min.js"
PAGE_JS = STATIC / "dashboard.js"

# How often the served page re-reads the open boxes' figures (``/api/open.json``: the ledger only).
POLL_SECONDS = 5.0

ALLIN_HELP = (
    "every dollar paid per million tokens: bootstrap, idle time after the job and failed runs "
    "of the same group included (cost / tokens x 1e6)"
)
JOB_HELP = (
    "only the job's own seconds x the price, per million tokens, over the sessions that produced "
    "tokens: what the work itself cost"
)


def tz_words(tz: str | None) -> str:
    """How the page names the zone: the IANA name, or "local time (CET)" for the machine's zone."""
    if tz and tz != "local":
        return f"{tz} time"
    from datetime import datetime

    return f"this machine's time zone, {datetime.now().astimezone().tzname()}"


def fmt(value, kind: str = "total") -> str:
    """A figure as the page shows it.

    Money by ``gpuops.render.money``'s rule, with its ``$``: ``total`` (a month's, a day's, a
    group's, a balance: cents, ``$25.84``; ``<$0.01`` for less than half a cent spent), ``rental``
    (one rental: to 4 places under $1, cents from $1), ``rate`` (USD/h, $/Mtoken: 4 places,
    ``$0.3400``). Hours with 3 decimals, counts with separators, ``pct`` a fraction as a
    percentage; None as "-"."""
    if value is None:
        return "-"
    if kind == "int":
        return f"{value:,}"
    if kind == "hours":
        return f"{value:,.3f}"
    if kind == "pct":
        return f"{value * 100:,.1f}%"
    from gpuops.render import money

    rule = {"total": money.total, "rental": money.rental, "rate": money.rate}[kind]
    text = rule(abs(value))
    if text.startswith("<"):  # under half a cent: spent, or a refund that rounds to nothing
        return "<$0.01" if value > 0 else "$" + rule(0.0)
    return ("-$" if value < 0 and text.strip("0.,") else "$") + text


def duration(seconds) -> str:
    """Seconds as "2 h 05 min", "12 min", "40 s"; negative as "overdue 3 min"."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if s < 0:
        return "overdue " + duration(-s)
    if s < 60:
        return f"{s:.0f} s"
    m = int(s // 60)
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"


# How each live figure of the page reads (``fmt``'s kinds; "duration": ``duration``).
LIVE_KINDS = {"usd_per_hour": "rate", "accrued_usd": "rental", "ttl_left_seconds": "duration"}
LIVE_TOTAL_KINDS = {"usd_per_hour": "rate", "accrued_usd": "total"}


def with_live_text(live: dict) -> dict:
    """``live`` (``gpuops.accounting.dashboard.live``) with the words the page shows for each figure.

    The page's script never formats money itself: every open box gets ``"text": {figure: words}``
    for ``LIVE_KINDS``, and ``billing_now`` a ``"text": {"real.usd_per_hour": words, ...}``.
    Returns a new dict; ``live`` is left as it was."""

    def words(value, kind: str) -> str:
        return duration(value) if kind == "duration" else fmt(value, kind)

    boxes = [dict(b, text={k: words(b.get(k), kind) for k, kind in LIVE_KINDS.items()}) for b in live["open_boxes"]]
    totals = {
        f"{side}.{k}": words(live["billing_now"][side][k], kind)
        for side in ("real", "simulated")
        for k, kind in LIVE_TOTAL_KINDS.items()
    }
    return dict(live, open_boxes=boxes, billing_now=dict(live["billing_now"], text=totals))


@lru_cache(maxsize=1)
def _env():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
    )
    env.filters["fmt"] = fmt
    env.filters["duration"] = duration
    from ledger.periods import zone_minute

    env.filters["zone_minute"] = zone_minute  # the data's UTC times, shown in the month's zone
    return env


def _script_text(path: Path):
    """A script file's text made safe to sit inside <script>...</script> (no closing tag in it)."""
    from markupsafe import Markup

    text = path.read_text(encoding="utf-8")
    return Markup(re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE))


@lru_cache(maxsize=1)
def _zones() -> tuple[str, ...]:
    from zoneinfo import available_timezones

    return tuple(sorted(z for z in available_timezones() if "/" in z or z == "UTC"))


def render(data: dict, inline: bool = False, tz_value: str | None = None) -> str:
    """The page for ``data`` (``gpuops.accounting.dashboard.build``).

    ``inline``: the self-contained file (scripts inlined, no form); else the served page (scripts
    from ``static/``, a month and time zone form). ``tz_value``: what the zone field shows (None:
    empty = local)."""
    from urllib.parse import quote

    from gpuops.version import __version__

    words = tz_words(data["tz"])
    rep = data["report"]

    def bars(name: str, cost: float, sim: float) -> dict:  # a bar's figures and the words its tooltip shows
        return {
            "name": name,
            "cost_usd": cost,
            "simulated_usd": sim,
            "cost_text": fmt(cost),
            "simulated_text": fmt(sim),
        }

    chart = {
        "month": data["month"],
        "tz_words": words,
        "days": [bars(d["date"], d["cost_usd"], d["simulated_usd"]) for d in rep["days"]],
        "by_experiment": [bars(g["name"], g["cost_usd"], g["simulated_usd"]) for g in rep["by_experiment"]],
        "by_card": [bars(g["name"], g["cost_usd"], g["simulated_usd"]) for g in rep["by_card"]],
        "trend": [bars(t["month"], t["total_usd"], t["simulated_usd"]) for t in data["trend"]],
        "live_url": "api/open.json" + (f"?tz={quote(tz_value)}" if tz_value else "") if not inline else None,
        "poll_seconds": POLL_SECONDS,
    }
    return (
        _env()
        .get_template("page.html")
        .render(
            d=data,
            served=not inline,
            version=__version__,
            tz_words=words,
            tz_value=tz_value or "",
            zones=_zones() if not inline else (),
            allin_help=ALLIN_HELP,
            job_help=JOB_HELP,
            chart=chart,
            chart_js=_script_text(CHART_JS) if inline else "",
            page_js=_script_text(PAGE_JS) if inline else "",
        )
    )
