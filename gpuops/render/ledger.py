"""Rendering of the ledger reports: rich tables, a terminal bar chart of daily spend, CSV and JSON.

Every report is a JSON-ready dict from ``gpuops/accounting/ledger_service.py``; ``emit(kind, report, fmt)`` prints it
as a table (``fmt="table"``), JSON or CSV. rich is imported inside the functions (fast startup).
"""

from __future__ import annotations

import sys

from gpuops.render import money
from ledger.reports import SESSION_FIELDS

GROUP_COLUMNS = [
    "name",
    "cost_usd",
    "simulated_usd",
    "gpu_hours",
    "sessions",
    "open_sessions",
    "tokens",
    "usd_per_mtoken",
    "usd_per_mtoken_job",
    "simulated_usd_per_mtoken",
    "simulated_usd_per_mtoken_job",
    "storage_usd",
    "charged_sessions",
]
DAY_COLUMNS = ["date", "cost_usd", "simulated_usd", "gpu_hours", "sessions", "tokens", "storage_usd"]
SYNC_COLUMNS = [
    "session",
    "provider",
    "instance_id",
    "ours_usd",
    "cost_source",
    "theirs_usd",
    "theirs_storage_usd",
    "diff_usd",
    "status",
]
# The month's tables show the biggest groups; the rest are one summary row (all of them: --json,
# --csv, or `ledger experiments`). People look at a month before they read it.
MONTH_TABLE_ROWS = 15
# Eighth blocks give a bar 8x the resolution of its width in characters.
_BLOCKS = " ▏▎▍▌▋▊▉█"


def _console():
    """The reports' console.

    User text (experiment, note, a provider's line description) is printed literally: no markup, no
    highlighting, no emoji codes (``:fire:`` stays ``:fire:``; rich then never loads its 1.6 ms
    emoji table either: the month's hot path)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, markup=False, emoji=False)


def usd(x: float | None) -> str:
    """USD with 4 decimals (``-`` for None); a figure that rounds to zero is ``0.0000``, never ``-0.0000``."""
    if x is None:
        return "-"
    return f"{0.0 if round(x, 4) == 0 else x:,.4f}"


def diff_usd(x: float | None, dollar: str = "") -> str:
    """A difference between two bills.

    Within half a cent (rounding on either side, not money) is ``0.0000``; else signed before the
    dollar sign (``-$0.0123``, ``+$1.5000``)."""
    if x is None:
        return "-"
    if abs(x) < 0.005:
        return f"{dollar}0.0000"
    return f"{'-' if x < 0 else '+'}{dollar}{abs(x):,.4f}"


def csv_text(kind: str, rep: dict) -> str:
    """The report as CSV text (header first; ``gpuops.render.emit``'s cells and times).

    ``month``: a ``group`` column (total, experiment, card, provider) then ``GROUP_COLUMNS``; with
    days, the day rows then a ``total`` row. ``experiments``: one row per experiment with
    ``latest_conclusion``. ``show``: one row of every session column (times ISO-8601 UTC). ``sync``:
    one row per session, then ``unbooked`` lines as status ``unbooked``."""
    from gpuops.render.emit import csv_text as write_csv, machine

    if kind == "month" and "days" in rep:
        total = {
            "date": "total",
            "cost_usd": rep["total_usd"],
            "simulated_usd": rep["simulated_usd"],
            "gpu_hours": rep["gpu_hours"],
            "sessions": rep["sessions"],
            "tokens": rep["tokens"],
            "storage_usd": rep.get("storage_usd"),
        }
        return write_csv(([d[c] for c in DAY_COLUMNS] for d in rep["days"] + [total]), DAY_COLUMNS)
    if kind == "month":
        total = {"name": rep["month"], "cost_usd": rep["total_usd"]} | {c: rep.get(c) for c in GROUP_COLUMNS[2:]}
        rows = [["total"] + [total[c] for c in GROUP_COLUMNS]]
        for key, group in (("by_experiment", "experiment"), ("by_card", "card"), ("by_provider", "provider")):
            rows += [[group] + [r[c] for c in GROUP_COLUMNS] for r in rep[key]]
        return write_csv(rows, ["group"] + GROUP_COLUMNS)
    if kind == "experiments":
        cols = GROUP_COLUMNS + ["latest_conclusion"]
        return write_csv(([r[c] for c in cols] for r in rep["experiments"]), cols)
    if kind == "show":
        cols = list(SESSION_FIELDS) + ["bootstrap_seconds", "job_cost_usd", "usd_per_mtoken", "usd_per_mtoken_job"]
        row = machine({c: rep.get(c) for c in cols})
        return write_csv([[row[c] for c in cols]], cols)
    if kind == "sync":
        rows = [[r[c] for c in SYNC_COLUMNS] for r in rep["sessions"]]
        rows += [
            ["", u["provider"], u["instance_id"], "", "", u["usd"], "", u["usd"], "unbooked"] for u in rep["unbooked"]
        ]
        rows += [["", a["provider"], "", "", "", a["usd"], a["usd"], "", "account"] for a in rep.get("account", [])]
        return write_csv(rows, SYNC_COLUMNS)
    return write_csv([[machine(rep)[k] for k in rep]], list(rep))


def emit(kind: str, rep: dict, fmt: str = "table", plot: bool = False, days_table: bool = True) -> None:
    """Print report ``rep`` of ``kind`` (month, experiments, show, tokens, note, import, sync) as ``fmt``.

    Table (rich), json or csv. ``plot``: the month's bar chart of daily spend (needs
    ``rep["days"]``); ``days_table``: also the month's day-by-day table when ``days`` is there."""
    from gpuops.render.emit import json_text

    if fmt == "json":
        sys.stdout.write(json_text(rep))
    elif fmt == "csv":
        sys.stdout.write(csv_text(kind, rep))
    else:
        from gpuops.textsafe import safe_tree

        # notes, experiments, card names from CSV: shown, never run by the terminal
        rep = _safe_month(rep) if kind == "month" else safe_tree(rep)
        {
            "month": lambda: render_month(rep, plot, days_table),
            "experiments": lambda: render_experiments(rep),
            "show": lambda: render_show(rep),
            "sync": lambda: render_sync(rep),
        }.get(kind, lambda: render_plain(rep))()


def _safe_month(rep: dict) -> dict:
    """``safe_tree(rep)`` for what the month's tables show.

    Of a group list longer than ``MONTH_TABLE_ROWS``, the rows past it only add their numbers to the
    "(N more)" row (``_fold``), so their text is left as it is (a 200-experiment month: 15 rows, not
    200)."""
    from gpuops.textsafe import safe_tree

    out = {}
    for k, v in rep.items():
        if k in ("by_experiment", "by_card", "by_provider") and isinstance(v, list) and len(v) > MONTH_TABLE_ROWS:
            out[k] = safe_tree(v[:MONTH_TABLE_ROWS]) + v[MONTH_TABLE_ROWS:]
        else:
            out[k] = safe_tree(v)
    return out


def render_plain(rep: dict) -> None:
    _console().print(" | ".join(f"{k}: {v}" for k, v in rep.items()))


def _fold(rows: list[dict], keep: int) -> list[dict]:
    """The first ``keep`` rows (biggest spend first) and one row summing the rest."""
    if len(rows) <= keep:
        return rows
    rest = rows[keep:]
    other = {"name": f"({len(rest)} more)", "open_sessions": sum(r["open_sessions"] for r in rest)}
    for k in ("cost_usd", "simulated_usd", "storage_usd", "charged_sessions", "gpu_hours", "sessions", "tokens"):
        other[k] = sum(r.get(k, 0) for r in rest)
    for k in ("usd_per_mtoken", "usd_per_mtoken_job", "simulated_usd_per_mtoken", "simulated_usd_per_mtoken_job"):
        other[k] = None
    return rows[:keep] + [other]


# The order in which the group tables leave columns out when the terminal is too narrow (the
# group's name and its cost stay): the job-only $/Mtok first, the GPU-hours last.
GROUP_DROP_ORDER = ("latest conclusion", "$/Mtok job", "sim USD", "tokens", "$/Mtok all-in", "sessions", "GPU-h")


def _group_rows(rows: list[dict], conclusion: bool = False) -> list[list[str]]:
    out = []
    for r in rows:
        sim = r["usd_per_mtoken"] is None and r["simulated_usd_per_mtoken"] is not None
        allin = r["simulated_usd_per_mtoken"] if sim else r["usd_per_mtoken"]
        job = r["simulated_usd_per_mtoken_job"] if sim else r["usd_per_mtoken_job"]
        mark = " sim" if sim else ""
        cells = [
            r["name"],
            money.total(r["cost_usd"]),
            money.total(r["simulated_usd"]),
            f"{r['gpu_hours']:,.3f}",
            str(r["sessions"]) + (f" ({r['open_sessions']} open)" if r["open_sessions"] else ""),
            f"{r['tokens']:,}",
            usd(allin) + (mark if allin is not None else ""),
            usd(job) + (mark if job is not None else ""),
        ]
        if conclusion:
            cells.append(r.get("latest_conclusion") or "")
        out.append(cells)
    return out


def _print_group_table(c, title: str, first: str, rows: list[dict], conclusion: bool = False) -> None:
    """One group table (by experiment, card or provider, or experiments) through the one table rule.

    One group table (by experiment / card / provider, or experiments) through the one table rule
    (``gpuops.render.tables``): amounts never cut, names wrap, columns left out by
    ``GROUP_DROP_ORDER`` with a line naming them."""
    from gpuops.render.tables import NAME, TEXT, Col, print_table, ranked

    cols = [
        Col(first, NAME),
        Col("cost USD"),
        Col("sim USD"),
        Col("GPU-h"),
        Col("sessions"),
        Col("tokens"),
        Col("$/Mtok all-in"),
        Col("$/Mtok job"),
    ]
    if conclusion:
        cols.append(Col("latest conclusion", TEXT))
    print_table(c, title, ranked(cols, GROUP_DROP_ORDER), _group_rows(rows, conclusion))


def render_month(rep: dict, plot: bool = False, days_table: bool = True) -> None:
    """Totals line, then by experiment, card, provider (and the days, and the plot)."""
    from gpuops.render.session_history import plural, zone_words

    c = _console()
    per, job = rep["usd_per_mtoken"], rep["usd_per_mtoken_job"]
    sim_tokens = rep.get("simulated_tokens") or 0
    real_tokens = rep["tokens"] - sim_tokens
    sim_per, sim_job = rep.get("simulated_usd_per_mtoken"), rep.get("simulated_usd_per_mtoken_job")
    # $/Mtoken: each money over the tokens of its own sessions, labelled (real dollars never over simulated tokens)
    if sim_tokens:
        tokens = f" | {real_tokens:,} tokens real, {sim_tokens:,} simulated"
    else:
        tokens = f" | {rep['tokens']:,} tokens"
    per_words = (
        [f"${per:,.4f}/Mtoken all-in, ${job:,.4f} job only" + (" (real)" if sim_tokens else "")]
        if per is not None
        else []
    )
    if sim_per is not None:
        per_words.append(
            f"${sim_per:,.4f}/Mtoken all-in, ${sim_job:,.4f} job only (simulated)"
            if sim_job is not None
            else f"${sim_per:,.4f}/Mtoken all-in (simulated)"
        )
    c.print(
        f"[bold]{rep['month']}[/] (days in {zone_words(rep['tz'])}): spent ${money.total(rep['total_usd'])}"
        + (f" (of which ${money.total(rep['storage_usd'])} storage)" if rep.get("storage_usd") else "")
        + (f" + ${money.total(rep['simulated_usd'])} simulated" if rep["simulated_usd"] else "")
        + f" | {rep['gpu_hours']:,.3f} GPU-h | {plural(rep['sessions'], 'session')}"
        + (f" ({rep['open_sessions']} open, still accruing: `gpuops ps`)" if rep["open_sessions"] else "")
        + tokens
        + "".join(f" | {w}" for w in per_words),
        markup=True,
    )
    if "watchdogs" in rep:
        from gpuops.render.ui import render_watchdogs

        render_watchdogs(rep["watchdogs"], c)
    closed = rep["sessions"] - rep["open_sessions"]
    if closed:
        charged = rep.get("charged_sessions", 0)
        c.print(
            f"costs: {charged} of {closed} closed sessions at the provider's own charge (ledger sync --apply), "
            f"{closed - charged} our estimate (price x billed seconds); split across the hours they ran in"
        )
    if not rep["sessions"]:
        c.print("no sessions this month")
    for key, title in (("by_experiment", "experiment"), ("by_card", "card"), ("by_provider", "provider")):
        if rep[key]:
            _print_group_table(c, f"by {title}", title, _fold(rep[key], MONTH_TABLE_ROWS))
    if "days" in rep and days_table:
        from gpuops.render.tables import ID, Col, print_table, ranked

        cols = [Col("date", ID), Col("cost USD"), Col("sim USD"), Col("GPU-h"), Col("sessions"), Col("tokens")]
        print_table(
            c,
            "by day",
            ranked(cols, GROUP_DROP_ORDER),
            [
                [
                    d["date"],
                    money.total(d["cost_usd"]),
                    money.total(d["simulated_usd"]),
                    f"{d['gpu_hours']:,.3f}",
                    str(d["sessions"]),
                    f"{d['tokens']:,}",
                ]
                for d in rep["days"]
            ],
        )
    if plot:
        for line in bar_lines(rep.get("days", [])):
            c.print(line, markup=True)


def bar_lines(days: list[dict], width: int = 50) -> list[str]:
    """A bar chart of daily spend as rich-markup lines.

    Real spend in green, simulated in yellow, stacked, scaled to the largest day (``width``
    characters). Pure: returns the lines."""
    if not days:
        return []
    top = max(d["cost_usd"] + d["simulated_usd"] for d in days)
    if top <= 0:
        return ["daily spend: nothing spent this month"]
    out = [f"[bold]daily spend[/] (full bar = ${top:,.2f}; [green]real[/], [yellow]simulated[/])"]
    for d in days:
        real = _bar(d["cost_usd"], top, width)
        both = _bar(d["cost_usd"] + d["simulated_usd"], top, width)
        sim = both[len(real.rstrip()) :] if len(both) > len(real.rstrip()) else ""
        label = f"${d['cost_usd']:,.2f}" + (f" +${d['simulated_usd']:,.2f} sim" if d["simulated_usd"] else "")
        out.append(f"{d['date'][5:]} [green]{real.rstrip()}[/][yellow]{sim.rstrip()}[/] {label}".rstrip())
    return out


def _bar(value: float, top: float, width: int) -> str:
    if top <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / top * width * 8))
    full, rest = divmod(eighths, 8)
    return "█" * full + (_BLOCKS[rest] if rest else "")


def render_experiments(rep: dict) -> None:
    c = _console()
    window = f"{rep['since'] or 'the beginning'} .. {rep['until'] or 'now'}"
    if not rep["experiments"]:
        c.print(f"no sessions from {window}")
        return
    _print_group_table(c, f"experiments, {window}", "experiment", rep["experiments"], conclusion=True)


# Fields `ledger show` prints under its tables, each whole on its own line: (label, field).
SHOW_BELOW = {"log": "log_path", "results": "results_path"}


def render_show(d: dict) -> None:
    """Every field of one session, its bootstrap steps and its events.

    The fields are a two-column table: names never cut, values wrap."""
    from gpuops.render.tables import ID, NAME, NUM, TEXT, Col, print_table

    c = _console()
    times = d.get("times", {})
    fields = []
    from gpuops.render.ui import field_text

    for k in SESSION_FIELDS:
        if k in SHOW_BELOW.values():
            continue
        v = times.get(k) or d.get(k)
        if k.endswith("_seconds") and isinstance(v, float):
            v = f"{v:.3f}"  # a measured duration: milliseconds are enough
        fields.append([k, field_text(v)])
    for k in ("bootstrap_seconds", "job_cost_usd", "usd_per_mtoken", "usd_per_mtoken_job"):
        fields.append([k, field_text(d.get(k))])
    # Values are ids, times and amounts: a value column as wide as the longest value that fits,
    # folding (never cutting) the rare longer one (a log path, an error).
    print_table(c, f"session {d['id']}", [Col("field", ID, style="bold"), Col("value", TEXT)], fields, header=False)
    if d["steps"]:
        print_table(
            c,
            "bootstrap steps",
            [Col("step", NAME), Col("status", ID), Col("seconds", NUM), Col("detail", TEXT)],
            [[s["name"], s["status"], f"{s['seconds']:.2f}", s["detail"]] for s in d["steps"]],
        )
    print_table(
        c,
        "events",
        [Col("time", ID), Col("kind", ID), Col("detail", TEXT)],
        [[e["time"], e["kind"], e["detail"]] for e in d["events"]],
    )
    for ln in d.get("cost_lines", []):
        c.print(
            f"{ln['kind']} line: {usd(ln['usd'])} USD ({ln['description'] or ln['provider']}), booked apart from GPU time"
        )
    if d.get("cost_source") == "charged":
        c.print(
            f"cost: the provider's own charge {usd(d.get('charged_usd'))} USD; our estimate was {usd(d.get('estimated_usd'))} USD"
        )
    # Paths under the tables, one a line, never folded inside a name (a table cell broke them
    # mid-word at 80 columns): a narrow terminal wraps the line itself, and the path copies whole.
    import sys

    from gpuops.textsafe import safe

    if d.get("job_args"):  # what ran: the job's argv as a shell would show it
        import shlex

        sys.stdout.write(f"args: {safe(shlex.join(d['job_args']))}\n")
    for key, field in SHOW_BELOW.items():
        sys.stdout.write(f"{key}: {safe(str(d.get(field) or '-'))}\n")


SYNC_DROP_ORDER = ("instance", "provider", "theirs USD", "ours USD")


def render_sync(rep: dict) -> None:
    """Per session: ours (booked: GPU time + storage lines, charged or estimated) vs theirs.

    Then the charges that match no row (never booked), account-level storage, and the month's
    invoice."""
    from rich.markup import escape

    from gpuops.render.tables import ID, NUM, TEXT, Col, print_table, ranked

    c = _console()
    for name, why in rep.get("skipped", {}).items():  # the reason's "[providers.runpod]" is text, not a style
        c.print(f"[yellow]{escape(name)}:[/] not compared ({escape(why)})", markup=True)
    for f in rep.get("flags", []):  # the provider's own figures disagree
        c.print(f"[yellow]{escape(f['provider'])}: flag:[/] {escape(f['note'])}", markup=True)
    cols = [
        Col("session", ID),
        Col("provider", ID),
        Col("instance", ID),
        Col("ours USD", NUM),
        Col("theirs USD", NUM),
        Col("diff USD", NUM),
        Col("status", TEXT),
    ]
    rows = []
    for r in rep["sessions"]:
        storage = r.get("theirs_storage_usd") or 0.0
        rows.append(
            [
                r["session"],
                r["provider"],
                r["instance_id"] or "-",
                usd(r["ours_usd"]),
                usd(r["theirs_usd"]),
                diff_usd(r["diff_usd"]),
                f"{r['status']}, {r.get('cost_source') or 'estimated'}"
                + (f", storage {usd(storage)}" if storage else ""),
            ]
        )
    rows += [
        [
            "-",
            u["provider"],
            u["instance_id"] or u.get("label") or "-",
            "-",
            usd(u["usd"]),
            diff_usd(u["usd"]),
            "not ours: not booked",
        ]
        for u in rep["unbooked"]
    ]
    rows += [
        ["-", a["provider"], "(account)", "-", usd(a["usd"]), "", "account storage"] for a in rep.get("account", [])
    ]
    if not rep.get("providers"):  # no provider's billing was read: no total, no "the providers bill $0"
        c.print(
            f"nothing compared: no provider's billing was read ({rep.get('month', '')}: the books hold "
            f"${usd(rep.get('month_usd') or 0)}, not checked against any bill)"
        )
        return
    if rows:
        print_table(c, f"our books vs provider billing, {rep.get('month', '')}", ranked(cols, SYNC_DROP_ORDER), rows)
    c.print(
        f"total: ours ${usd(rep['ours_usd'])}, theirs ${usd(rep['theirs_usd'])}, difference {diff_usd(rep['diff_usd'], '$')}"
    )
    if "invoice_usd" in rep:
        c.print(
            f"{rep.get('month', '')}: the providers bill ${usd(rep['invoice_usd'])}; the books hold ${usd(rep.get('month_usd') or 0)}"
            + (
                f" (${sum(u['usd'] for u in rep['unbooked']):,.4f} of instances not ours, not booked)"
                if rep["unbooked"]
                else ""
            )
        )
    ap = rep.get("applied")
    if ap and not (ap["sessions"] or ap["storage_lines"] or ap["account_lines"]):
        c.print(
            "applied: nothing new"
            + (f" ({ap['unchanged']} sessions already booked at the provider's charge)" if ap.get("unchanged") else "")
        )
    elif ap:
        c.print(
            f"applied: {ap['sessions']} sessions booked at the provider's charge (our estimate kept beside it), "
            f"{ap['storage_lines']} storage lines (${ap['storage_usd']:,.4f}), {ap['account_lines']} account storage lines"
        )
    elif rep["sessions"]:
        c.print("nothing booked: run `gpuops ledger sync --apply` to book the providers' charges")
