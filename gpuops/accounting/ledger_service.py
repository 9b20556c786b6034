"""The `gpuops ledger ...` command bodies.

Open the ledger, call the pure reports in ``ledger/``, return JSON-ready dicts (rendering is
``gpuops/render/ledger.py``). Bad input raises BadInput."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.errors import BadInput, GpuopsError

if TYPE_CHECKING:
    from ledger.books import Books
    from ledger.reads import LedgerReader


def _tz_checked(tz: str | None) -> str | None:
    from ledger.reports import zone

    try:
        zone(tz)
    except ValueError as e:
        raise BadInput(str(e), "pass an IANA name, e.g. --tz Europe/Berlin or --tz UTC") from None
    return tz


def month(
    ledger: Books | LedgerReader,
    month: str | None = None,
    tz: str | None = None,
    by: str | None = None,
    plot: bool = False,
    watchdogs: bool = False,
) -> dict:
    """``ledger month``: the month report for ``YYYY-MM`` (default: this month in ``tz``).

    ``ledger month``: the month report (``ledger.reports.month_report``, summed by the database:
    ``ledger.aggregate``) for ``YYYY-MM`` (default: this month in ``tz``), with ``days`` when
    ``by == "day"`` or ``plot``; with ``watchdogs``, also
    ``watchdogs``: each watchdog's newest pass (``gpuops.teardown.watchdog_passes.last_passes``), as
    `ledger month` and the dashboard show them. Raises BadInput for a bad month, zone or ``by``."""
    from ledger.reports import this_month

    tz = _tz_checked(tz)
    if by not in (None, "day"):
        raise BadInput(f"--by must be 'day', got {by!r}", "use --by day for a day-by-day table")
    rep = _month_report(ledger, month or this_month(tz), tz, by_day=by == "day" or plot)
    if watchdogs:
        from gpuops.teardown.watchdog_passes import last_passes

        rep["watchdogs"] = last_passes(ledger)  # who enforces the money layer now (gpuops.teardown.watchdog_passes)
    return rep


def _month_report(ledger: Books | LedgerReader, month: str, tz: str | None, by_day: bool = False) -> dict:
    """``ledger.reports.month_report`` of ``month`` in ``tz`` (checked), summed by the database; ``days`` when ``by_day``.

    The one path to a month's money (``ledger month``, its ``--by day``, the dashboard, ``ledger
    sync``'s ``month_usd``). Raises BadInput for a bad month."""
    from ledger.aggregate import day_rows, group_rows
    from ledger.reports import day_edges, month_bounds, month_report

    try:
        start, end = month_bounds(month, tz)
    except ValueError as e:
        raise BadInput(str(e), "pass the month as YYYY-MM, e.g. 2026-11") from None
    q = _query(ledger)
    lines = ledger.cost_lines(start, end)
    days = day_rows(q, day_edges(month, tz)[0]) if by_day else None
    return month_report(group_rows(q, start, end), month, tz, lines, _line_keys(q, lines), days)


def experiments(ledger: Books, since: str | None = None, until: str | None = None, tz: str | None = None) -> dict:
    """``ledger experiments``.

    per-experiment totals over [since 00:00, until 24:00) in ``tz`` (dates ``YYYY-MM-DD``; either
    may be omitted). Raises BadInput for a bad date or zone."""
    from ledger.reports import day_start

    tz = _tz_checked(tz)
    try:
        start = day_start(since, tz) if since else None
        end = _day_after(until, tz) if until else None  # not +86400: a DST day has 23 or 25 hours
    except ValueError as e:
        raise BadInput(str(e), "pass dates as YYYY-MM-DD, e.g. --since 2026-11-01") from None
    if start is not None and end is not None and end <= start:
        raise BadInput(f"--until {until} is before --since {since}", "swap the two dates")
    from ledger.aggregate import EXPERIMENT_KEYS, group_rows, latest_conclusions
    from ledger.reports import experiments_report

    q = _query(ledger)
    lines = ledger.cost_lines(start, end)
    groups = group_rows(q, start, end, EXPERIMENT_KEYS, conclusion=True)
    return experiments_report(
        groups, latest_conclusions(q, groups, start, end), since, until, start, end, lines, _line_keys(q, lines)
    )


def _query(ledger: Books | LedgerReader):
    """SQL text runner for ``ledger.aggregate`` (``ledger.reads.Reads.query``) of a ``Ledger`` or a ``LedgerReader``."""
    return ledger.reads.query


def _line_keys(q, lines) -> dict[str, dict[str, str]]:
    """{session id: {"experiment","card","provider"}} of the sessions owning cost ``lines``."""
    from ledger.reports import card_name

    ids = sorted({ln.session_id for ln in lines if ln.session_id is not None})
    out: dict[str, dict[str, str]] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        marks = ", ".join(f":i{j}" for j in range(len(chunk)))
        for sid, exp, card, n, prov in q(
            f"SELECT id, experiment, card, gpu_count, provider FROM sessions WHERE id IN ({marks})",
            {f"i{j}": x for j, x in enumerate(chunk)},
        ):
            out[sid] = {
                "experiment": exp,
                "card": card_name(type("R", (), {"card": card, "gpu_count": n})),
                "provider": prov,
            }
    return out


def _day_after(day: str, tz: str | None) -> float:
    from datetime import date, timedelta

    from ledger.reports import day_start

    day_start(day, tz)  # validates
    nxt = date.fromisoformat(day) + timedelta(days=1)
    return day_start(nxt.isoformat(), tz)


def show(ledger: Books, ref: str, tz: str | None = None) -> dict:
    """``ledger show``: one session's every field, steps, events, cost figures and cost lines.

    ``ledger show``: every field, steps, events, derived cost figures (``session_detail``), plus
    ``cost_lines`` [{"kind","usd","start_at","end_at","provider","description"}] (storage booked
    apart from GPU time), ``storage_usd`` and ``job_args``: the job's argv as its ``job_started``
    event booked it (a list of str; [] for none, None when no job started)."""
    from gpuops.rental.sessions import resolve_session
    from ledger.reports import session_detail

    tz = _tz_checked(tz)
    row = resolve_session(ledger, ref)
    d = session_detail(row, ledger.steps(row.id), ledger.events(row.id), tz)
    d["cost_lines"] = [
        {
            "kind": ln.kind,
            "usd": ln.usd,
            "start_at": ln.start_at,
            "end_at": ln.end_at,
            "provider": ln.provider,
            "description": ln.description,
        }
        for ln in ledger.reads.session_cost_lines(row.id)
    ]
    d["storage_usd"] = round(sum(ln["usd"] for ln in d["cost_lines"]), 6)
    d["job_args"] = _job_args(d["events"])
    return d


def _job_args(events: list[dict]) -> list[str] | None:
    """The argv the rental's job started with (its ``job_started`` event's ``args``), None when no job started."""
    import json

    for e in events:
        if e["kind"] == "job_started":
            try:
                detail = json.loads(e["detail"]) if e["detail"].startswith("{") else {}
            except ValueError:
                detail = {}
            args = detail.get("args", []) if isinstance(detail, dict) else []
            return [str(a) for a in args] if isinstance(args, list) else []
    return None


def show_run(ledger: Books, run_id: str, tz: str | None = None) -> dict:
    """``ledger show run-...``: a run and its rentals, in attempt order, with why each ended.

    Returns ``{"run": {id, experiment, provider, status, started, ended, end_reason, detail,
    recover, recover_on, attempts, max_hours, max_usd}, "rentals": [{session, attempt, started,
    card, usd_per_hour, seconds, cost_usd, end_reason, why}], "cost_usd", "seconds", "tokens"}``;
    ``why``: the end reason with what the provider showed (taken back: stopped, offline) or the
    stage that failed. ``run_id``: the id or a unique prefix. BadInput for an unknown or ambiguous
    run."""
    import json

    from ledger.periods import utc_iso

    tz = _tz_checked(tz)
    run = ledger.get_run(run_id)
    if run is None:  # a unique prefix, as for sessions (runs are few: a scan of their ids)
        ids = [r.id for r in ledger.runs() if r.id.startswith(run_id)]
        if len(ids) > 1:
            raise BadInput(f"{run_id!r} names {len(ids)} runs: {', '.join(ids[:5])}", "type more of the run id")
        run = ledger.get_run(ids[0]) if ids else None
    if run is None:
        raise BadInput(f"no run {run_id!r} in the ledger", "list runs with `gpuops ledger sessions --runs`")
    rentals: list[dict[str, Any]] = []
    for r in ledger.run_rentals(run.id):
        why = r.end_reason or r.status
        for e in ledger.events(r.id):
            try:
                d = json.loads(e.detail) if e.detail.startswith("{") else {}
            except ValueError:
                d = {}
            if e.kind == "taken_back":
                why = f"{r.end_reason}: the provider showed it {d.get('raw_status') or d.get('status')} during {d.get('stage')}"
            elif e.kind == "stage_failed" and r.end_reason != "preempted":
                why = f"{r.end_reason}: {d.get('stage')} failed: {d.get('error')}"
        closed = r.status == "closed"
        rentals.append(
            {
                "session": r.id,
                "attempt": r.attempt,
                "started": utc_iso(r.created_at),
                "card": r.card,
                "usd_per_hour": r.usd_per_hour,
                "seconds": r.billed_seconds if closed else None,
                "cost_usd": round(r.cost_usd or 0.0, 6) if closed else None,
                "tokens": r.tokens or 0,
                "end_reason": r.end_reason,
                "why": why,
            }
        )
    return {
        "run": {
            "id": run.id,
            "experiment": run.experiment,
            "provider": run.provider,
            "status": run.status,
            "started": utc_iso(run.created_at),
            "ended": None if run.ended_at is None else utc_iso(run.ended_at),
            "end_reason": run.end_reason,
            "detail": run.detail,
            "recover": run.recover,
            "recover_on": run.recover_on,
            "attempts": run.attempts,
            "max_hours": run.max_hours,
            "max_usd": run.max_usd,
        },
        "rentals": rentals,
        "cost_usd": round(sum(x["cost_usd"] or 0.0 for x in rentals), 6),
        "seconds": round(sum(x["seconds"] or 0.0 for x in rentals), 3),
        "tokens": sum(x["tokens"] for x in rentals),
    }


MAX_TOKENS = 2**63 - 1  # the ledger's tokens column: a 64-bit signed integer (SQLite INTEGER, PostgreSQL BIGINT)


def tokens(ledger: Books, ref: str, n: int) -> dict:
    """``ledger tokens SESSION N``: set the session's token count after the fact.

    Returns ``{"session","tokens","cost_usd","simulated","usd_per_mtoken"}`` (``cost_usd``: the
    session's whole booked cost, GPU time; ``simulated``: a catalog price, not money). BadInput for
    N < 0 or N > ``MAX_TOKENS``."""
    from gpuops.rental.sessions import resolve_session
    from ledger.reports import per_mtoken

    if n < 0:
        raise BadInput(f"tokens must be >= 0, got {n}", "pass the number of tokens the job produced")
    if n > MAX_TOKENS:  # SQLite INTEGER / PostgreSQL BIGINT hold 64-bit signed integers
        raise BadInput(
            f"tokens must be at most {MAX_TOKENS:,}, got {n:,}", "pass the number of tokens the job produced"
        )
    row = ledger.set_tokens(resolve_session(ledger, ref).id, n)
    cost = row.cost_usd if row.status == "closed" else None
    return {
        "session": row.id,
        "tokens": row.tokens,
        "cost_usd": cost,
        "simulated": bool(row.simulated),
        "usd_per_mtoken": per_mtoken(cost, row.tokens) if cost is not None else None,
    }


def note(ledger: Books, ref: str, text: str) -> dict:
    """``ledger note SESSION TEXT``: set the one-line conclusion. Returns ``{"session","conclusion"}``."""
    from gpuops.rental.sessions import resolve_session

    if not text.strip():
        raise BadInput("the note is empty", "pass the conclusion as one line of text")
    row = ledger.note(resolve_session(ledger, ref).id, text)
    return {"session": row.id, "conclusion": row.conclusion}


def _can_fork_export(ledger: Books, out) -> bool:
    """True when ``ledger export`` may be written by two processes (``ledger.csvio.write_export_forked``).

    An SQLite ledger, an output with a file descriptor, Linux (a fork without exec is unsafe
    on macOS, where Python itself spawns instead), and no other thread in this process (a lock
    another thread holds would stay held in the child)."""
    import sys
    import threading

    if ledger.reads.dialect != "sqlite" or not sys.platform.startswith("linux") or threading.active_count() != 1:
        return False
    try:
        out.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return False
    return True


def export(ledger: Books, out, month: str | None = None, tz: str | None = None) -> int:
    """``ledger export --csv``.

    Write closed rentals (all, or of ``month``) as CSV to the text stream ``out``; returns the
    number of sessions written."""
    from ledger.csvio import export_run_sql, export_sql, write_export

    start = end = None
    if month:
        from ledger.reports import month_bounds  # zoneinfo: only a month needs it

        try:
            start, end = month_bounds(month, _tz_checked(tz))
        except ValueError as e:
            raise BadInput(str(e), "pass the month as YYYY-MM, e.g. 2026-11") from None
    dialect = ledger.dialect
    if _can_fork_export(ledger, out):
        from ledger.csvio import write_export_forked

        return write_export_forked(ledger.iter_query, out, start, end)
    return write_export(
        ledger.iter_query(*export_sql(dialect, start, end)),
        out,
        sort_ties=dialect == "sqlite",
        run_by_id=lambda t: ledger.iter_query(*export_run_sql(t)),
    )


# Bytes per line ``import_csv`` assumes to estimate a file's rows (a line of our export is 110-130).
IMPORT_LINE_BYTES = 100


def import_csv(ledger: Books, path: str | Path, tz: str | None = None, strict: bool = False) -> dict:
    """``ledger import FILE.csv``: all rows or none, in one transaction, streamed (flat memory).

    Returns ``{"file","imported","cost_usd","simulated_usd","warnings"}``; ``warnings`` are [(line,
    message)] for unknown provider or card names and a cost that is not usd_per_hour x hours within
    a cent (imported anyway; ``strict`` refuses them). A provider misspelt (``runpood``) and a row
    that ends in the future are bad rows. Any bad row raises BadInput naming the count
    and the first bad lines (``errors`` attribute: [(line, message)], the first
    ``ledger.csvio.LineErrors.KEEP``); nothing is written then."""
    from gpuops.catalog import cards
    from gpuops.providers import NAMES
    from ledger.csvio import CsvImport
    from ledger.store import ImportRejected

    tz = _tz_checked(tz)
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"{path} is not a file", "pass the CSV file to import")
    known_cards = {n.lower() for c in cards() for n in (c.name, c.family, *c.aliases)}
    money = {False: 0.0, True: 0.0}

    import gc
    from functools import reduce
    from itertools import compress
    from operator import add, itemgetter, not_

    from gpuops.textsafe import UNSAFE, bad_chars
    from ledger.csvio import IMPORT_CONSTANTS, IMPORT_ROW

    i_sim, i_cost = IMPORT_ROW.index("simulated"), IMPORT_ROW.index("cost_usd")
    names = [(c, IMPORT_ROW.index(c)) for c in ("experiment", "card", "provider")]
    pick_names = itemgetter(*(i for _, i in names))
    unsafe = UNSAFE.search

    def checked(line: int, row: tuple) -> bool:
        # Tab, CR and LF are kept (ledger export round-trips them, ledger/csvio.py; every
        # renderer shows them escaped); ESC, other C0/C1 controls and bidi overrides are refused.
        bad = [(c, [x for x in bad_chars(str(row[i] or "")) if x not in ("\\x09", "\\x0d", "\\x0a")]) for c, i in names]
        bad = [(c, b) for c, b in bad if b]
        for c, b in bad:  # names label every report: no terminal control or bidi characters in them
            imp.errors.append(
                (line, f"{c} contains control or bidi characters ({', '.join(dict.fromkeys(b))}); use visible text")
            )
        return not bad

    def counted(chunks):
        for lines, rows in chunks:
            # One scan in C over the batch's names; line by line only for a hit.
            if any(unsafe("".join(map(itemgetter(i), rows))) for _, i in names):
                kept = [
                    (line, row)
                    for line, row in zip(lines, rows)
                    if not unsafe("".join(pick_names(row))) or checked(line, row)
                ]
                lines, rows = [line for line, _ in kept], [row for _, row in kept]
            costs, sims = list(map(itemgetter(i_cost), rows)), list(map(itemgetter(i_sim), rows))
            # Added in line order, as one running sum per kind, whatever the batch size.
            money[True] = reduce(add, compress(costs, sims), money[True])
            money[False] = reduce(add, compress(costs, map(not_, sims)), money[False])
            yield lines, rows

    # The import makes millions of short-lived lists and tuples that form no cycles: the cyclic
    # collector's passes over them were a tenth of its time, and it has nothing to find.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with p.open(newline="", encoding="utf-8-sig") as f:
            imp = CsvImport(f, tz, providers=set(NAMES), cards=known_cards, strict=strict)
            errors: list = []
            total = 0
            try:
                # A line of a sheet is rarely under IMPORT_LINE_BYTES: the row count this estimates
                # is low, so the ledger only drops its indexes up front for a file surely big.
                n = ledger.import_chunks(
                    counted(imp.chunks()),
                    imp.errors,
                    columns=IMPORT_ROW,
                    constants=IMPORT_CONSTANTS,
                    expected_rows=p.stat().st_size // IMPORT_LINE_BYTES,
                )
            except ImportRejected as e:
                errors, total = e.errors, e.total
    except UnicodeDecodeError as e:
        raise BadInput(f"{path} is not UTF-8 text ({e.reason})", "save the spreadsheet as CSV UTF-8") from None
    finally:
        if collecting:
            gc.enable()
    if errors:
        err = BadInput(
            _errors_line(p, errors, total),
            "fix those lines and import again; nothing was imported"
            + ("" if not strict else " (--strict refuses unknown names and costs off price x hours)"),
        )
        err.errors = errors
        raise err
    return {
        "file": str(p),
        "imported": n,
        "cost_usd": round(money[False], 6),
        "simulated_usd": round(money[True], 6),
        "warnings": imp.warnings,
    }


def _errors_line(p: Path, errors: list[tuple[int, str]], total: int | None = None) -> str:
    total = len(errors) if total is None else total  # errors: the first ones only (ledger.csvio.LineErrors)
    shown = "; ".join(f"{p.name}:{n}: {m}" for n, m in errors[:5])
    more = f"; and {total - 5} more bad rows" if total > 5 else ""
    return f"{total} bad row(s): {shown}{more}"


def fetch_billing(
    settings, names: Iterable[str], since: float, until: float, get_provider: Callable[[str, Any], Any] | None = None
) -> tuple[list, list[str], dict[str, str]]:
    """Each provider's billing lines over [since, until) epoch s, and why a provider could not answer.

    Ask each provider in ``names`` for its billing lines over [since, until) epoch s via the
    ``Provider.billing(since, until) -> list[ChargeLine]`` (UNSUPPORTED by default), each line
    stamped with the account whose key read it (``ChargeLine.account``). Returns (lines,
    providers that answered, {provider: why not} for those that could not)."""
    from dataclasses import replace

    if get_provider is None:
        from gpuops.providers import get_provider as registry_provider

        get_provider = registry_provider
    lines: list = []
    answered: list[str] = []
    skipped: dict[str, str] = {}
    for name in names:
        try:
            prov = get_provider(name, settings)
        except GpuopsError as e:
            skipped[name] = e.message
            continue
        try:
            account = getattr(prov, "account", None)  # whose key read them: a charge is keyed by it too
            lines.extend(replace(c, account=account) for c in prov.billing(since, until))
        except GpuopsError as e:
            skipped[name] = str(e)
            continue
        answered.append(name)
    return lines, answered, skipped


def billing_increment(settings, provider: str) -> float:
    """Seconds ``provider`` rounds billed time up to.

    ``[providers.<name>] billing_increment_seconds``, else the unit its documentation states
    (``ProviderEntry.billing_increment_s`` in the registry: per second for RunPod and Vast), else
    per second. What a close passes as ``billing_increment_seconds`` so our estimate rounds as they
    do."""
    from gpuops.providers import billing_increment as documented
    from ledger.billing import DEFAULT_INCREMENT_S

    cfg = getattr(getattr(settings, "providers", None), provider, None) if settings is not None else None
    inc = getattr(cfg, "billing_increment_seconds", None)
    return float(inc) if inc else (documented(provider) or DEFAULT_INCREMENT_S)


def sync(
    ledger: Books | LedgerReader,
    settings,
    month: str | None = None,
    tz: str | None = None,
    providers: Iterable[str] | None = None,
    get_provider: Callable[[str, Any], Any] | None = None,
    apply: bool = False,
) -> dict:
    """``ledger sync [--month M] [--apply]``: the providers' own billing against our books.

    Compared: every real rental that spent money in the month (attributed by time), each WHOLE (a
    rental across the month boundary is fetched and compared over both months), per session:
    provider charge, our booked cost (GPU time + booked storage), the difference; plus the charges
    that match no row (``unbooked``: someone else's instance, or one made before gpuops: listed,
    never booked) and account-level storage (``account``: RunPod network volumes).
    ``apply``: ``ledger`` must be a writable ``Ledger``. First an open row whose instance the
    provider no longer has is closed at the end its billing shows (never "now"); then every closed
    session's charge is booked as its cost (``ledger.sync.apply_charges``: estimate kept beside it,
    storage as its own lines, an event). Returns ``ledger.billing.compare_billing``'s dict plus
    ``month``, ``skipped`` {provider: reason}, ``flags`` [{provider, instance_id, note}] (where a
    provider's own figures disagree, ``ChargeLine.note``), ``window`` [since, until] epoch s, ``month_usd``
    (the books' month total after the run, attributed by time), ``applied`` (when ``apply``).
    ``providers``: whose billing is read (default: every provider with billing, the registry's
    ``WITH_BILLING``). Raises BadInput for a bad month or zone.
    """
    from gpuops.providers import WITH_BILLING
    from ledger.billing import compare_billing
    from ledger.reports import month_bounds, this_month
    from ledger.sync import apply_charges, booked_storage, known_instances

    providers = WITH_BILLING if providers is None else tuple(providers)
    tz = _tz_checked(tz)
    month = month or this_month(tz)
    try:
        lo, hi = month_bounds(month, tz)
    except ValueError as e:
        raise BadInput(str(e), "pass the month as YYYY-MM, e.g. 2026-11") from None
    rows = _sync_rows(ledger, lo, hi)
    # The window covers every compared rental whole; the month's own figures are cut from it.
    since = min([lo] + [r.instance_created_at for r in rows if r.instance_created_at is not None])
    until = max([hi] + [r.ended_at for r in rows if r.ended_at is not None])
    if get_provider is None:
        from gpuops.providers import get_provider as registry_provider

        get_provider = registry_provider
    lines, answered, skipped = fetch_billing(settings, providers, since, until, get_provider)

    def compare() -> dict:
        mine = {(r.provider, str(r.instance_id)) for r in rows if r.instance_id is not None}
        other = {(c.provider, str(c.instance_id)) for c in lines if c.instance_id is not None} - mine
        return compare_billing(
            rows,
            lines,
            answered,
            lo=lo,
            hi=hi,
            booked_storage=booked_storage(ledger.engine, [r.id for r in rows]),
            elsewhere=known_instances(ledger.engine, other) if other else set(),
        )

    rep = compare()
    applied = None
    if apply:
        from ledger import Ledger

        assert isinstance(ledger, Ledger)  # --apply books: the command opens the ledger for writing
        closed_any = False
        for r in rep["sessions"]:
            if r["status"] != "open" or r["provider_end"] is None:
                continue
            try:
                gone = get_provider(r["provider"], settings).get(str(r["instance_id"])) is None
            except GpuopsError:
                continue  # cannot tell: the row stays open, a later sync closes it
            if gone:  # the one way to end a rental; the end is the provider's billed end, never "now"
                from gpuops.providers.base import Instance, InstanceStatus
                from gpuops.teardown.lifecycle import end_rental
                from onbox.vocabulary import Actor, EndReason

                gone_inst = Instance(
                    id=str(r["instance_id"]), label=f"gpuops-{r['session']}", status=InstanceStatus.GONE
                )
                end_rental(
                    ledger,
                    get_provider(r["provider"], settings),
                    r["session"],
                    EndReason.INTERRUPTED,
                    by=f"{Actor.RECONCILE}:ledger-sync",
                    instance=gone_inst,
                    detail="instance gone; end from the provider's billing",
                    ended_at=r["provider_end"],
                    end_source="provider",
                )
                closed_any = True
        if closed_any:
            rows = _sync_rows(ledger, lo, hi)
            rep = compare()
        applied = apply_charges(ledger.engine, rep, lines)
        rows = _sync_rows(ledger, lo, hi)
        rep = compare()
    rep.pop("lines", None)
    rep.update(
        month=month,
        skipped=skipped,
        flags=[{"provider": c.provider, "instance_id": c.instance_id, "note": c.note} for c in lines if c.note],
        window=[since, until],
        applied=applied,
        month_usd=_month_report(ledger, month, tz)["total_usd"],
    )
    return rep


def _sync_rows(ledger: Books | LedgerReader, lo: float, hi: float) -> list:
    return [
        r
        for r in ledger.overlapping(lo, hi, SYNC_COLUMNS)
        if r.instance_id is not None or r.instance_created_at is not None
    ]


SYNC_COLUMNS = (
    "id",
    "provider",
    "account",
    "instance_id",
    "instance_created_at",
    "created_at",
    "ended_at",
    "status",
    "simulated",
    "cost_usd",
    "cost_source",
    "usd_per_hour",
)
