"""Rendering for the CLI: the live `up` reporter, summaries and tables (rich, imported lazily)."""

from __future__ import annotations

import shlex
import sys
import time
from typing import Any

from gpuops.textsafe import safe  # noqa: F401  (the one sanitizer; re-exported for renderers)
from gpuops.units import money  # noqa: F401  (re-exported for renderers)


def console(stderr: bool = False):
    from rich.console import Console

    return Console(
        stderr=stderr, highlight=False, soft_wrap=True, markup=False
    )  # user text is literal; styled lines pass markup=True


def _esc(text: str) -> str:
    """User text made literal inside rich markup, control and bidi characters shown escaped.

    User text (job names, step names, error messages) made literal inside rich markup, with control
    and bidi characters shown escaped (``safe``)."""
    from rich.markup import escape

    return escape(safe(text))


def print_json(obj: Any) -> None:
    """``obj`` as the one JSON convention (``gpuops.render.emit.json_text``)."""
    from gpuops.render.emit import json_text

    sys.stdout.write(json_text(obj))


def render_interactive(summ: dict, teardown) -> None:
    """What `up --interactive` prints once its box is bootstrapped: where it is, what ends it, the way in.

    ``summ``: launcher.summary's dict with ``interactive``; ``teardown``: the session's TeardownSettings."""
    idle = teardown.idle_minutes
    price = summ["usd_per_hour"]
    print(
        f"box {summ['session']} is up: {summ['provider']} {summ['card']} x{summ.get('gpu_count') or 1}"
        + (f" at ${price:,.4f}/h" + (" (simulated)" if summ.get("simulated") else "") if price is not None else "")
    )
    ends = [f"TTL {teardown.max_hours:g} h"]
    if idle != "off":
        ends.insert(0, f"{idle:g} min with no GPU busy and no session open")
    print("it ends after " + " or ".join(ends) + f", or by `{summ['interactive']['down']}`")
    print(summ["interactive"]["ssh"])


def render_summary(summ: dict) -> None:
    from gpuops.render.tables import ID, TEXT, Col, console as table_console, print_table

    sim = bool(summ.get("simulated"))
    rows = [
        ("provider", summ["provider"]),
        ("card", f"{summ['card']} x{summ.get('gpu_count') or 1}"),
        (
            "price",
            f"${summ['usd_per_hour']:,.4f}/h" + (" (simulated)" if sim else " (spot bid)" if summ.get("spot") else "")
            if summ["usd_per_hour"] is not None
            else "-",
        ),
        ("billed", f"{summ['seconds']:.1f} s"),
        ("cost", money(summ["cost_usd"], sim)),
        ("tokens", f"{summ['tokens']:,}"),
        (
            "$/Mtoken",
            money(summ["usd_per_mtoken"], sim) if summ["usd_per_mtoken"] is not None else "- (no tokens reported)",
        ),
        ("end reason", summ["end_reason"]),
        ("job exit code", str(summ["exit_code"]) if summ["exit_code"] is not None else "- (the job did not finish)"),
        ("slowest step", _slowest(summ)),
    ]
    run = summ.get("run")
    if run:  # up --recover: the figures above are the whole run's; one line per rental below
        rows.insert(
            0,
            (
                "run",
                f"{run['id']}: {run['end_reason']} after {run['rentals']} rental(s)"
                + (f" ({run['detail']})" if run.get("detail") else ""),
            ),
        )
        for r in summ.get("rentals", []):
            cost = "open" if r["cost_usd"] is None else money(r["cost_usd"], sim)
            rows.append(
                (
                    f"rental {r['attempt']}",
                    f"{r['session']}"
                    + (f" on {r['provider']}" if r.get("provider") else "")
                    + f": {r['end_reason']}, {float(r['seconds'] or 0):.1f} s, {cost}",
                )
            )
    if (summ.get("results_copy") or {}).get("line"):
        rows.append(("results copy", summ["results_copy"]["line"]))
    books = summ.get("ledger") or {}
    for note in books.get("notices", []):
        rows.append(("ledger", note))
    if books.get("spooled"):
        rows.append(
            (
                "ledger",
                f"{books['spooled']} write(s) wait in the spool: the next `gpuops ps`, `watchdog` or `reconcile` books them",
            )
        )
    for cmd in books.get("replay", []):
        rows.append(("ledger lost", f"no spool could hold this write; book it with: {cmd}"))
    # a key/value table through the one table rule: values (end reasons, the copy line) wrap, never cut
    c = table_console()
    print_table(
        c,
        f"session {summ['session']}",
        [Col("key", ID, style="bold"), Col("value", TEXT)],
        [[k, str(v)] for k, v in rows],
        header=False,
    )
    # Paths under the table, one a line, never folded inside a name: a narrow terminal wraps the
    # line itself, and the path copies whole (a table cell would break it mid-name at 80 columns).
    for key in ("log", "results"):
        if summ.get(key):
            sys.stdout.write(f"{key}: {safe(str(summ[key]))}\n")


def _slowest(summ: dict) -> str:
    """The slowest bootstrap step with its seconds.

    "-" when there were none or all took < 0.01 s (naming one of several 0.00 s steps would be
    noise)."""
    name, secs = summ.get("slowest_step"), summ.get("slowest_step_seconds")
    if not name or (secs is not None and secs < 0.005):
        return "-"
    return name if secs is None else f"{name} ({secs:.2f} s)"


def setting_text(v: Any) -> str:
    """A setting's value as infra.toml spells it: ``true``/``false``, ``unset`` for None, else ``str``."""
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def field_text(v: Any) -> str:
    """A ledger field's value for a person: ``-`` for None or empty, ``yes``/``no`` for a flag, else ``str``."""
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def render_dry_run(plan: dict) -> None:
    c = console()
    if "experiment" in plan:
        c.print(
            f"experiment: {safe(plan['experiment'])}" + (f"; note: {safe(plan['note'])}" if plan.get("note") else ""),
            markup=False,
        )
    sim = " (simulated: catalog reference price)" if plan["simulated"] else ""
    od = plan.get("on_demand_usd_per_hour")
    kind = f"spot bid (on-demand ${od:.4f}/h)" if od is not None else ("spot bid" if plan["spot"] else "on-demand")
    c.print(
        f"would rent: {safe(plan['card'])} x{plan['gpu_count']} on {plan['provider']} at "
        f"${plan['usd_per_hour']:.4f}/h{sim}, {kind}"
    )
    c.print(
        f"projected cost of max_hours={plan['max_hours']:g}: {money(plan['projected_cost_usd'], plan['simulated'])}"
    )
    if plan.get("volume"):
        v = plan["volume"]
        c.print(
            f"volume: {v['provider']}:{v['name'] or v['id']} ({v['size_gb']:g} GB, {v['region']}) mounted at {v['mount_path']}; "
            "caches and kept results go there; it is not deleted at teardown",
            markup=False,
        )
    ranked = plan.get("ranked") or []
    if len({r["provider"] for r in ranked}) > 1 or plan.get("any_provider"):  # up --provider any: the order it rents in
        c.print(f"the first {len(ranked)} offers, in the order `up` tries them:")
        for r in ranked:
            c.print(
                f"  #{r['rank']} {r['provider']} offer {safe(r['offer_id'])}: {safe(r['card'])} x{r['gpu_count']}, "
                f"{'spot' if r['spot'] else 'on-demand'}; {r['why']}",
                markup=False,
            )
    if plan.get("setup"):
        c.print(f"would set up: {', '.join(safe(n) for n in plan['setup'])}", markup=False)
    if plan.get("job"):
        names = plan.get("job_env") or []
        c.print(
            f"would run: {safe(plan['job'])}"
            + (f" {safe(shlex.join(plan['job_args']))}" if plan.get("job_args") else "")
            + (f" with env {', '.join(names)} (values not shown)" if names else ""),
            markup=False,
        )
    td = plan["teardown"]
    c.print("teardown: " + ", ".join(f"{k}={setting_text(v)}" for k, v in td.items()))
    c.print(f"settings file: {plan['settings_file'] or '(none; defaults + GPUOPS_* environment)'}")
    c.print("dry run: nothing rented, nothing booked")


# Columns `ps` leaves out, first to last, when the terminal is too narrow (the session id, card,
# price, accrued cost and TTL left stay: what is billing and for how long).
PS_DROP_ORDER = ("owner", "instance", "provider", "experiment", "status", "age", "idle", "tokens")
SIMULATED_MARK = "*"


def duration(seconds: float | None) -> str:
    """Seconds as a short span a user reads at a glance: ``45s``, ``12m05s``, ``3h07m``, ``2d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def render_sessions(rows: list[dict], title: str) -> None:
    """Open sessions as a table (``gpuops.render.tables``).

    The session id (what `down` and `logs` need), the price (USD/h), what it has cost so far, the
    TTL left, the idle streak and tokens (from the last status the ledger holds:
    ``gpuops.teardown.live``); ids and money never cut. Simulated money is marked ``*``; under the
    table one line per kind of money (real and simulated never added)."""
    if not rows:  # the common answer of `gpuops ps`: no need to load rich for one line
        sys.stdout.write(f"{title}: none\n")
        return
    from gpuops.render.tables import ID, NAME, NUM, Col, console as table_console, print_table, ranked
    from gpuops.teardown.live import totals

    c = table_console()
    cols = [
        Col("session", ID),
        Col("owner", ID),
        Col("experiment", NAME),
        Col("provider", ID),
        Col("card", ID),
        Col("status", ID),
        Col("instance", ID),
        Col("USD/h", NUM),
        Col("accrued", NUM),
        Col("TTL left", NUM),
        Col("idle", NUM),
        Col("tokens", NUM),
        Col("age", NUM),
    ]
    now = time.time()

    from gpuops.render import money

    def usd(v, sim, fmt=money.rate):
        return "-" if v is None else f"${fmt(v)}" + (SIMULATED_MARK if sim else "")

    print_table(
        c,
        title,
        ranked(cols, PS_DROP_ORDER),
        [
            [
                r["session"],
                r.get("owner") or "-",
                r["experiment"],
                r["provider"],
                f"{r['card']} x{r.get('gpu_count') or 1}",
                r["status"],
                r["instance_id"] or "-",
                usd(r["usd_per_hour"], r["simulated"]),
                usd(r.get("accrued_usd"), r["simulated"], money.rental),
                duration(r.get("ttl_left_seconds")),
                "busy" if r.get("idle_seconds") == 0 else duration(r.get("idle_seconds")),
                f"{r.get('tokens') or 0:,}",
                duration(now - r["created_at"]),
            ]
            for r in rows
        ],
    )
    t = totals(rows)
    for kind, label in (
        ("real", "real"),
        ("simulated", f"simulated{SIMULATED_MARK} (catalog reference price, never charged)"),
    ):
        k = t[kind]
        if k["boxes"]:
            c.print(
                f"{label}: ${k['usd_per_hour']:,.4f}/h now, ${k['accrued_usd']:,.4f} so far, {k['boxes']} box{'es' if k['boxes'] != 1 else ''}",
                markup=False,
                highlight=False,
            )


def render_watchdogs(passes: list[dict], out=None) -> None:
    """Who enforces the money layer.

    One line per watchdog (``gpuops.teardown.watchdog_passes.health_lines``), the warnings (no fresh
    pass) in the warning colour, wrapped to the terminal. ``out``: a rich console (default: stdout;
    rich loads only for a warning)."""
    from gpuops.teardown.watchdog_passes import health_lines

    for text, warn in health_lines(passes):
        if out is not None:
            out.print(text, style="yellow" if warn else None, markup=False)
        elif warn:
            from rich.console import Console

            Console(highlight=False, markup=False, soft_wrap=False).print(text, style="yellow")
        else:
            import shutil
            import textwrap

            sys.stdout.write(
                textwrap.fill(text, max(40, shutil.get_terminal_size().columns), subsequent_indent="  ") + "\n"
            )
