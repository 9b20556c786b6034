"""The spreadsheet view of the ledger: export closed rentals to CSV, and parse a CSV (ours, or the
one a user kept before gpuops) into session rows, reporting every bad row with its line number.

Columns: ``date, experiment, provider, card, gpu_count, usd_per_hour, hours, cost_usd, tokens,
conclusion`` (the seeds' day-23 spreadsheet: date, experiment, card, hourly price, duration, cost,
one line of conclusion; plus provider, GPU count and tokens), then two columns of ours that an
import may omit: ``simulated`` and ``session``.

Round trip: ``export`` writes floats in Python's shortest exact form and dates as ISO 8601 UTC, so
export -> import -> export gives the same text byte for byte.
"""

from __future__ import annotations

import csv
import hashlib
import io
from datetime import datetime, timezone
from typing import Any, Iterable, TextIO

from ledger.reports import got_instance, zone

COLUMNS = ["date", "experiment", "provider", "card", "gpu_count", "usd_per_hour", "hours", "cost_usd", "tokens", "conclusion"]
EXTRA_COLUMNS = ["simulated", "session"]
ALL_COLUMNS = COLUMNS + EXTRA_COLUMNS
REQUIRED = {"date", "provider", "card"}
_TRUE = {"true", "1", "yes", "y"}
_FALSE = {"false", "0", "no", "n", ""}


def _num(x: float | None) -> str:
    return "" if x is None else repr(float(x))


def export_rows(sessions: Iterable[Any]) -> Iterable[list[str]]:
    """CSV records (header first) for every closed session that got an instance, in the order
    given. Never-rented and still-open sessions are not rentals with a cost yet and are left out."""
    yield ALL_COLUMNS
    for s in sessions:
        if s.status != "closed" or not got_instance(s):
            continue
        hours = None if s.billed_seconds is None else s.billed_seconds / 3600.0
        yield [
            datetime.fromtimestamp(s.created_at, timezone.utc).isoformat(),
            s.experiment, s.provider, s.card, str(s.gpu_count), _num(s.usd_per_hour), _num(hours),
            _num(s.cost_usd), str(s.tokens or 0), s.conclusion or "", "true" if s.simulated else "false", s.id,
        ]


def export_csv(sessions: Iterable[Any], out: TextIO) -> int:
    """Write ``export_rows`` to ``out``; returns the number of sessions written."""
    w = csv.writer(out, lineterminator="\n")
    n = -1
    for n, rec in enumerate(export_rows(sessions)):
        w.writerow(rec)
    return n


class _Bad(ValueError):
    pass


def _float(v: str, name: str) -> float | None:
    v = v.strip().replace("$", "")
    if v == "":
        return None
    try:
        f = float(v)
    except ValueError:
        raise _Bad(f"{name} {v!r} is not a number") from None
    if f != f or f in (float("inf"), float("-inf")) or f < 0:
        raise _Bad(f"{name} must be a number >= 0, got {v!r}")
    return f


def _int(v: str, name: str, default: int) -> int:
    f = _float(v, name)
    if f is None:
        return default
    if f != int(f):
        raise _Bad(f"{name} must be a whole number, got {v!r}")
    return int(f)


def _date(v: str, tz: str | None) -> float:
    v = v.strip()
    if not v:
        raise _Bad("date is empty")
    try:
        d = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise _Bad(f"date {v!r} is not ISO 8601 (2026-11-03 or 2026-11-03T14:05:00+00:00)") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=zone(tz))  # None: naive stays local
    return d.timestamp()


def _row_id(cells: list[str], seen: dict[str, int]) -> str:
    # Same spreadsheet, same ids: importing a file twice is refused instead of doubling the books.
    # Identical lines are distinct rentals, so the occurrence count is part of the key.
    key = "\x1f".join(c.strip() for c in cells)
    seen[key] = seen.get(key, 0) + 1
    return "imp-" + hashlib.sha256(f"{key}\x1e{seen[key]}".encode()).hexdigest()[:16]


def parse_csv(text: TextIO | str, tz: str | None = None) -> tuple[list[dict], list[int], list[tuple[int, str]]]:
    """Parse a CSV into ``sessions`` rows for ``Ledger.import_sessions``.

    Needs a header naming at least ``date, provider, card`` and two of ``usd_per_hour, hours,
    cost_usd`` (the third is derived); other columns of ``ALL_COLUMNS`` are optional, unknown ones
    are an error. Dates without an offset are read in ``tz`` (None = local); a date alone is 00:00.
    Returns (rows, line numbers of the rows, errors as (line, message)); with errors, import nothing.
    """
    f = io.StringIO(text) if isinstance(text, str) else text
    reader = csv.reader(f)
    errors: list[tuple[int, str]] = []
    try:
        header = next(reader)
    except StopIteration:
        return [], [], [(1, "the file is empty; expected a header line: " + ",".join(COLUMNS))]
    names = [h.strip().lower().lstrip("\ufeff") for h in header]
    unknown = [h for h in names if h not in ALL_COLUMNS]
    missing = sorted(REQUIRED - set(names))
    if unknown or missing or len(set(names)) != len(names):
        parts = []
        if unknown:
            parts.append("unknown column(s) " + ", ".join(unknown))
        if missing:
            parts.append("missing column(s) " + ", ".join(missing))
        if len(set(names)) != len(names):
            parts.append("a column appears twice")
        return [], [], [(1, "; ".join(parts) + "; expected " + ",".join(ALL_COLUMNS))]
    if sum(c in names for c in ("usd_per_hour", "hours", "cost_usd")) < 2:
        return [], [], [(1, "need two of usd_per_hour, hours, cost_usd (the third is derived)")]
    rows: list[dict] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    ids: dict[str, int] = {}
    prev = reader.line_num
    for cells in reader:
        line, prev = prev + 1, reader.line_num
        if not any(c.strip() for c in cells):
            continue  # blank line
        if len(cells) != len(names):
            errors.append((line, f"has {len(cells)} fields, the header has {len(names)}"))
            continue
        v = dict(zip(names, cells))
        try:
            created = _date(v["date"], tz)
            provider, card = v["provider"].strip(), v["card"].strip()
            if not provider or not card:
                raise _Bad("provider and card must not be empty")
            price = _float(v.get("usd_per_hour", ""), "usd_per_hour")
            hours = _float(v.get("hours", ""), "hours")
            cost = _float(v.get("cost_usd", ""), "cost_usd")
            if sum(x is None for x in (price, hours, cost)) > 1:
                raise _Bad("need two of usd_per_hour, hours, cost_usd")
            if cost is None:
                cost = round(price * hours, 6)
            elif hours is None:
                hours = cost / price if price else 0.0
            elif price is None:
                price = cost / hours if hours else 0.0
            flag = v.get("simulated", "").strip().lower()
            if flag not in _TRUE | _FALSE:
                raise _Bad(f"simulated must be true or false, got {v['simulated']!r}")
            gpus = _int(v.get("gpu_count", ""), "gpu_count", 1)
            if gpus < 1:
                raise _Bad("gpu_count must be >= 1")
            tokens = _int(v.get("tokens", ""), "tokens", 0)
            sid = v.get("session", "").strip() or _row_id(cells, seen)
            if sid in ids:
                raise _Bad(f"session {sid} repeats line {ids[sid]}")
        except _Bad as e:
            errors.append((line, str(e)))
            continue
        ids[sid] = line
        seconds = round(hours * 3600.0, 3)
        rows.append({
            "id": sid, "experiment": v.get("experiment", "").strip() or "default", "job": "",
            "provider": provider, "card": card, "gpu_count": gpus, "spot": False, "label": "",
            "instance_id": None, "offer_id": None, "usd_per_hour": price, "bid_usd_per_hour": None,
            "simulated": flag in _TRUE, "status": "closed", "created_at": created,
            "instance_created_at": created, "ready_at": None, "ended_at": created + seconds,
            "end_reason": "imported", "exit_code": None, "billed_seconds": seconds, "cost_usd": cost,
            "tokens": tokens, "job_seconds": None, "conclusion": v.get("conclusion", "").strip(), "note": "",
            "log_path": "", "results_path": "", "billing_increment_seconds": None, "last_heartbeat_at": None,
            "end_source": "import", "source": "import",
        })
        lines.append(line)
    if not rows and not errors:
        errors.append((1, "no data rows after the header"))
    return rows, lines, errors
