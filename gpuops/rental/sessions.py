"""Session-level operations outside `up`: list open sessions, take one down, show one, note it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from gpuops.config import Settings
    from ledger.books import Books


def open_ledger(settings: Settings) -> Books:
    """The ledger of ``settings`` (``Settings.ledger_url``), opened on first use.

    With ``[notify]`` targets set, this process's notifier is armed first: a spooled close that
    this ledger's replay books (``ps``, ``logs``, ``exec`` replay before they read) is told."""
    from ledger import Ledger

    if settings.notify.urls:
        from gpuops.notify import notifier

        notifier.use(settings)
    return Ledger(settings.ledger_url())


def resolve_session(ledger: Books, ref: str):
    """The session whose id is ``ref`` or starts with it; BadInput when none or ambiguous."""
    row = ledger.get(ref)
    if row is not None:
        return row
    rows = ledger.find(ref) if ref else []
    if len(rows) == 1:
        return rows[0]
    if not rows:
        raise BadInput(
            f"no session {ref!r} in the ledger", "`gpuops ps` lists open sessions, `gpuops ledger sessions` past ones"
        )
    raise BadInput(f"{ref!r} matches {len(rows)} sessions", "type more of the session id")


def row_json(row) -> dict:
    """A session row as a JSON-ready dict, ``session`` first, then the model's columns in order."""
    dumped = dict(row._mapping)  # a sessions row (SQLAlchemy Row): its columns in the table's order
    d = {"session": dumped.pop("id")}
    d.update(dumped)
    d["usd_per_mtoken"] = round(row.cost_usd / row.tokens * 1e6, 6) if row.tokens and row.cost_usd is not None else None
    d["seconds"] = row.billed_seconds
    return d


# What `ps` adds to each open row (gpuops.teardown.live.live_figures), after the row's columns.
LIVE_COLUMNS = ("accrued_usd", "ttl_left_seconds", "idle_seconds", "status_at", "status_age_seconds")
# Where the box answers SSH, booked by `up`'s ready stage (endpoint); None on a local box.
ACCESS_COLUMNS = ("ssh_host", "ssh_port", "ssh_user")


def open_session_columns(ledger: Books) -> tuple[str, ...]:
    """The keys of ``list_open``'s rows in order: the CSV header of ``gpuops ps``, printed even with no open session.

    The ledger's ``sessions`` columns (as the database holds them), then what ``ps`` adds."""
    return (
        "session",
        *(c for c in ledger.reads.columns("sessions") if c != "id"),
        "usd_per_mtoken",
        "seconds",
        *LIVE_COLUMNS,
        *ACCESS_COLUMNS,
    )


def endpoint(ledger: Books, session_id: str) -> dict:
    """Where the box of ``session_id`` answers, booked by `up`'s ready stage.

    ``{"host", "port", "user", "root"}``; host, port and user absent on a local box, all absent
    when no ready stage booked them."""
    from onbox.vocabulary import EventKind

    got = ledger.last_event(session_id, EventKind.READY)
    detail = got[1] if got is not None else None
    return dict(detail) if isinstance(detail, dict) else {}


def list_open(ledger: Books, owner: str | None = None, now: float | None = None) -> list[dict]:
    """Open sessions as dicts with what each has cost so far at ``now``, read from the ledger alone.

    Open sessions as dicts (``row_json``) with what each has cost so far at ``now``
    (``gpuops.teardown.live.live_figures``, from the newest ``live`` event the ledger holds: no
    connection to any box): ``cost_usd`` and ``accrued_usd`` the accrual so far (USD), ``tokens`` so
    far, ``usd_per_mtoken``, ``ttl_left_seconds``, ``idle_seconds``, ``status_at``,
    ``status_age_seconds``, and ``ssh_host``, ``ssh_port``, ``ssh_user`` (None on a local box). ``owner``: only that user's (and rows from before owners were booked),
    None: everyone's."""
    import time

    from gpuops.ownership import is_mine
    from gpuops.teardown.live import live_figures
    from onbox.vocabulary import EventKind

    now = time.time() if now is None else now
    out = []
    for r in ledger.open_sessions():
        if owner is not None and not is_mine(r, owner):
            continue
        d = row_json(r)
        live = live_figures(d, ledger.last_event(r.id, EventKind.LIVE), now)
        d.update({k: live[k] for k in LIVE_COLUMNS})
        where = endpoint(ledger, r.id)
        d.update(ssh_host=where.get("host"), ssh_port=where.get("port"), ssh_user=where.get("user"))
        d.update(
            cost_usd=live["accrued_usd"],
            tokens=live["tokens"],
            usd_per_mtoken=live["usd_per_mtoken"],
            usd_per_hour=live["usd_per_hour"],
        )
        out.append(d)
    return out


def down(settings: Settings, ledger: Books, ref: str | None, all_open: bool) -> list[dict]:
    """Destroy the instance of one open session (or all) and close its row as ``manual``.

    Through ``gpuops.teardown.lifecycle.end_rental``: the reason is on the row before the destroy, so
    an `up` still watching that session reports ``manual`` too.

    Ownership (gpuops/ownership.py): ``--all`` takes this user's open sessions whose provider
    account is held here; a named session of another account is refused (BadInput: only its key
    holder can end it); a row without a recorded account whose instance our key cannot see is
    reported with ``end_reason`` "unknown" and stays open.

    Idempotent: a session already closed is reported, not destroyed again. Returns one dict per
    session: ``{"session","instance_id","destroyed","closed","end_reason"}`` (``instance_id``: the
    one destroyed, which may be ours found by its label, else the row's), plus ``refused`` and
    ``refused_id`` (why the instance under the row's id was not touched: not certainly ours; absent
    when that id, once looked up by label, proved ours and was destroyed) and ``error`` (only
    when the row stays open: a destroy that kept failing or was never confirmed, or a refusal whose
    look-up by label failed too; reconcile retries). Raises BadInput for an unknown/ambiguous
    reference.
    """
    import os
    import socket

    from gpuops.notify import notifier
    from gpuops.ownership import OTHER, account_of, is_mine, standing
    from gpuops.providers import get_provider
    from gpuops.teardown.lifecycle import end_rental
    from onbox.vocabulary import Actor, EndReason, RowStatus

    notifier.use(settings)  # a destroy that fails says so ([notify]); nothing when no target
    providers: dict = {}

    def provider_of(row):
        if row.provider not in providers:
            providers[row.provider] = get_provider(row.provider, settings)
        return providers[row.provider]

    me = settings.owner()
    if all_open:
        rows = [
            r for r in ledger.open_sessions() if is_mine(r, me) and standing(r, account_of(provider_of(r))) != OTHER
        ]
    else:
        if not ref:
            raise BadInput("name a session or pass --all", "see `gpuops ps` for open sessions")
        rows = [resolve_session(ledger, ref)]
        row = rows[0]
        if row.status != RowStatus.CLOSED and standing(row, account_of(provider_of(row))) == OTHER:
            raise BadInput(
                f"session {row.id} was rented by {row.owner} under {row.provider} account {row.account}; "
                "this machine holds no key for that account",
                f"ask {row.owner} to run `gpuops down {row.id}`",
            )
    out = []
    for row in rows:
        if row.status == RowStatus.CLOSED:
            out.append(
                {
                    "session": row.id,
                    "instance_id": row.instance_id,
                    "destroyed": False,
                    "closed": True,
                    "end_reason": row.end_reason,
                }
            )
            continue
        provider = provider_of(row) if row.instance_id else None
        by = f"{Actor.DOWN}:{socket.gethostname()}:{os.getpid()}"
        if provider is not None:  # the rest of the job's log first, if `up` stopped following it
            _keep_log(settings, ledger, provider, row, by)
        ended = end_rental(ledger, provider, row.id, EndReason.MANUAL, by=by)
        item = {
            "session": row.id,
            "instance_id": (ended.instance_id if ended.destroyed else None) or row.instance_id,
            "destroyed": ended.destroyed,
            "closed": ended.closed,
            "end_reason": "unknown" if ended.unknown else ended.reason,
        }
        if ended.refused and not (ended.destroyed and ended.instance_id == row.instance_id):
            item["refused"] = ended.refused  # (an id refused in doubt, then found ours by its label: not refused)
            item["refused_id"] = row.instance_id
        if ended.error and not ended.closed:
            item["error"] = ended.error
        out.append(item)
    return out


def _keep_log(settings: Settings, ledger: Books, provider, row, by: str) -> None:
    """``gpuops.teardown.joblog.keep_log`` for `down`: the box as reconcile reaches it."""
    import time

    from gpuops.teardown.joblog import drained, keep_log
    from gpuops.teardown.reconcile import Context

    if not row.log_path or drained(ledger, row.id):
        return

    def open_box():
        inst = provider.get(row.instance_id)
        return Context(settings, ledger).box(provider, inst) if inst is not None else None

    keep_log(ledger, row, open_box, by=by, deadline=time.monotonic() + settings.teardown.fetch_deadline_seconds)
