"""The spreadsheet view of the ledger: CSV export of closed rentals and CSV import of session rows.

An import parses a CSV (ours, or the one a user kept before gpuops) into session rows and
reports every bad row with its line number.

Columns: ``date, experiment, provider, card, gpu_count, usd_per_hour, hours, cost_usd, tokens,
conclusion``, then two columns of ours that an import may omit: ``simulated`` and ``session``.

Round trip: ``export`` writes floats in Python's shortest exact form and dates as ISO 8601 UTC, so
export -> import -> export gives the same text byte for byte.

Formula injection (OWASP "CSV Injection"): a text cell starting with ``=``, ``+``, ``-``, ``@``, tab
or carriage return would run as a formula in a spreadsheet, so export writes it with a leading
single quote (``'=cmd``); a cell that already starts with quotes before such a character gets one
more, so import strips exactly one and gets the text back (numeric columns are written by us as
numbers and never quoted).

Both directions stream: export writes row by row from a cursor (a common row is one f-string,
odd rows go through the csv module; the bytes are the same either way); import reads batches of
``IMPORT_CHUNK_ROWS`` lines, splits a batch of plain lines into columns in C (``_split_plain``; a
batch with quotes goes through the csv module), checks each column of a batch at once with
parsers compiled for the file's header (a batch with anything to say goes line by line, which
words it), and the ledger inserts each batch with 14 bound values per row inside one
transaction, so memory stays flat at a million rows. A big SQLite export is
written by two processes in turns, slice by slice of its time range (``write_export_forked``):
Python's sqlite3 holds the GIL while it builds each row, so a reader thread overlaps nothing.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from itertools import chain, islice, repeat
from math import fsum
from operator import add, attrgetter, itemgetter, mul, sub
from typing import Any, Protocol, TextIO, cast

COLUMNS = [
    "date",
    "experiment",
    "provider",
    "card",
    "gpu_count",
    "usd_per_hour",
    "hours",
    "cost_usd",
    "tokens",
    "conclusion",
]
EXTRA_COLUMNS = ["simulated", "session"]
ALL_COLUMNS = COLUMNS + EXTRA_COLUMNS
REQUIRED = {"date", "provider", "card"}
_TRUE = {"true", "1", "yes", "y"}
_FALSE = {"false", "0", "no", "n", ""}
# Characters that make a spreadsheet read a cell as a formula (OWASP CSV Injection guidance,
# https://owasp.org/www-community/attacks/CSV_Injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A cost further than this from usd_per_hour x hours is reported (provider invoices show cents).
COST_TOLERANCE_USD = 0.01
# The longest cell import reads (characters). The csv module's default limit, 131,072, is below
# a conclusion `ledger note` accepts and export writes, so a longer one failed the round trip; a
# cell over this one is a bad line, named as such.
MAX_CELL_CHARS = 1 << 24


def neutralize(text: str) -> str:
    """Return ``text`` made safe to open in a spreadsheet.

    ``text`` safe to open in a spreadsheet: one leading ``'`` when it would start a formula
    (after any quotes it already starts with; see the module docstring). ``unneutralize`` undoes it."""
    return "'" + text if text.lstrip("'")[:1] in FORMULA_START and text[:1] else text


def unneutralize(text: str) -> str:
    """The text ``neutralize`` was given: one leading quote removed when it guards a formula start."""
    return text[1:] if text[:1] == "'" and text.lstrip("'")[:1] in FORMULA_START and text.lstrip("'") else text


_EXPORTED = ["status = 'closed'", "(instance_id IS NOT NULL OR instance_created_at IS NOT NULL)"]


def _export_select(where: list[str], order: str) -> str:
    return (
        "SELECT created_at, experiment, provider, card, gpu_count, usd_per_hour, billed_seconds / 3600.0, cost_usd, "
        f"tokens, conclusion, simulated, id FROM sessions WHERE {' AND '.join(where)} ORDER BY {order}"
    )


def export_sql(dialect: str, start: float | None = None, end: float | None = None) -> tuple[str, dict]:
    """Return the (SQL, params) that select the rows ``write_export`` writes.

    (SQL, params) selecting what ``write_export`` writes, in CSV column order (the date as the
    epoch seconds it is formatted from): closed sessions that got an instance, intent time in
    [start, end) (None: open side), oldest first, equal times by session id. On ``sqlite`` the
    SQL orders by time only (the index order; a sort by id as well costs a quarter of the query)
    and ``write_export(..., sort_ties=True)`` orders equal times by id, as SQLite's binary
    collation would; elsewhere (``postgresql``: its collation) the database orders both."""
    where = list(_EXPORTED)
    params: dict = {}
    if start is not None:
        where.append("created_at >= :start")
        params["start"] = start
    if end is not None:
        where.append("created_at < :end")
        params["end"] = end
    return _export_select(where, "created_at" if dialect == "sqlite" else "created_at, id"), params


def export_run_sql(created: float) -> tuple[str, dict]:
    """Return the (SQL, params) that select the ``export_sql`` rows of one intent time.

    (SQL, params) selecting the rows of ``export_sql`` whose intent time is ``created``, by id
    (``write_export``'s ``run_by_id``)."""
    return _export_select(_EXPORTED + ["created_at = :created"], "id"), {"created": created}


_RISKY_START = frozenset(FORMULA_START) | {"'"}
# ``write_export(sort_ties=True)`` orders at most this many rows of one time in memory (a sheet of
# dates without times imports every rental of a day at 00:00); a longer run is read again by id.
_TIE_RUN_MAX = 10_000
# Bounded caches of the export loop (a ledger repeats its experiment, provider and card names,
# prices and billed durations): cleared when they reach this many entries, so memory stays flat.
_CACHE_MAX = 4096
_HH_MM = [f"{h:02d}:{m:02d}:" for h in range(24) for m in range(60)]
_SS = [f"{s:02d}" for s in range(60)]
_MS = [f"{i:03d}" for i in range(1000)]  # microseconds as two halves: 123456 -> "123" "456"


def _csv_cell(text) -> str | None:
    """Return one CSV cell of ``write_export``, or None when the row needs the csv module.

    ``text`` neutralized and as the csv module writes it in a row of ``write_export`` (quoted
    when it holds a comma, a double quote or a line feed, quotes doubled), or None when the row
    must go through the csv module itself: a carriage return (the row is then quoted whole, see
    ``write_export``) or not a string."""
    if type(text) is not str:
        return None
    if text[:1] in _RISKY_START:
        text = neutralize(text)
    if "\r" in text:
        return None
    if "," in text or '"' in text or "\n" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


class TextSink(Protocol):
    """Where ``write_export`` writes: a text stream, or ``write_export_forked``'s turn-taking sink."""

    def write(self, text: str, /) -> object: ...


def write_export(
    rows: Iterable[tuple],
    out: TextSink,
    sort_ties: bool = False,
    run_by_id: Callable[[float], Iterable[tuple]] | None = None,
    header: bool = True,
) -> int:
    """Write the rows of ``export_sql`` to ``out`` as CSV and return the number of sessions written.

    Write the rows of ``export_sql`` to ``out`` as CSV (header first; floats in Python's shortest
    exact form, dates ISO 8601 UTC, text ``neutralize``d); returns the number of sessions written.
    ``sort_ties``: the rows come ordered by time only; order rows of equal time by session id, in
    memory up to ``_TIE_RUN_MAX`` of them, beyond that (memory stays flat) from ``run_by_id(t)``:
    the rows of time ``t`` ordered by id (``export_run_sql``). ``header``: write the header line.

    Streams (a few thousand lines buffered) and formats each common row with one f-string: the
    cells the ledger repeats (names, prices, durations) come from bounded caches, dates from a
    per-day prefix. Any other row (a carriage return in a cell, a value of an odd type, a date
    outside 1970-9999) is written by the csv module, so the bytes are always those of
    ``csv.writer(out, lineterminator="\\n")`` fed the neutralized record, a record with a carriage
    return fully quoted (tests/books/test_csv_export_exact.py compares the two on hostile rows)."""
    utc = timezone.utc
    fromts = datetime.fromtimestamp
    hh_mm, ss = _HH_MM, _SS
    cell, cache_max = _csv_cell, _CACHE_MAX
    days: dict[int, str] = {}
    risky = _RISKY_START
    cells: dict[str, str | None] = {}
    floats: dict[float, str] = {}
    if header:
        csv.writer(out, lineterminator="\n").writerow(ALL_COLUMNS)
    one = io.StringIO()  # the csv module's rendering of one odd row
    plain = csv.writer(one, lineterminator="\n")
    # With "\n" line ends the csv module leaves a lone "\r" unquoted, which splits the record on
    # reading: such a record is written fully quoted.
    quoted = csv.writer(one, lineterminator="\n", quoting=csv.QUOTE_ALL)
    buf: list[str] = []
    add, write = buf.append, out.write

    def date_of(created: float) -> str:
        whole = int(created)
        us = round((created - whole) * 1e6)
        if created < 0 or us >= 1_000_000:
            return fromts(created, utc).isoformat()
        day, sec = divmod(whole, 86400)
        prefix = days.get(day)
        if prefix is None:
            if len(days) >= cache_max:
                days.clear()
            try:
                prefix = days[day] = fromts(day * 86400, utc).strftime("%Y-%m-%dT")
            except (ValueError, OverflowError, OSError):
                return fromts(created, utc).isoformat()  # raises as it always did
        t = hh_mm[sec // 60] + ss[sec % 60]
        return f"{prefix}{t}.{us:06d}+00:00" if us else f"{prefix}{t}+00:00"

    def number(x) -> str:
        text = "" if x is None else repr(float(x))
        if x:  # never 0.0 (-0.0 compares equal) nor None
            if len(floats) >= cache_max:
                floats.clear()
            floats[x] = text
        return text

    def text_cell(t) -> str | None:
        c = cell(t)
        if type(t) is str:
            if len(cells) >= cache_max:
                cells.clear()
            cells[t] = c
        return c

    def by_csv_module(created, exp, prov, card, gpus, price, hours, cost, tokens, concl, sim, sid) -> str:
        rec = (
            date_of(created),
            neutralize(exp) if exp[:1] in _RISKY_START else exp,
            neutralize(prov) if prov[:1] in _RISKY_START else prov,
            neutralize(card) if card[:1] in _RISKY_START else card,
            gpus,
            None if price is None else float(price),
            None if hours is None else float(hours),
            None if cost is None else float(cost),
            tokens or 0,
            (neutralize(concl) if concl[:1] in _RISKY_START else concl) if concl else "",
            "true" if sim else "false",
            neutralize(sid) if sid[:1] in _RISKY_START else sid,
        )
        cr = "\r" in rec[1] or "\r" in rec[2] or "\r" in rec[3] or "\r" in rec[9] or "\r" in rec[11]
        one.seek(0)
        one.truncate()
        (quoted if cr else plain).writerow(rec)
        return one.getvalue()

    n = 0
    lo = hi = 0  # [lo, hi): the epoch seconds of the day ``prefix`` names
    prefix = ""
    prev_created = prev_sid = tie_created = spilled = None
    tie_at, tie_sids = 0, []
    names: dict[tuple, str | None] = {}  # (experiment, provider, card) -> their three cells
    ms = _MS
    for row in rows:
        created, exp, prov, card, gpus, price, hours, cost, tokens, concl, sim, sid = row
        key = (exp, prov, card)
        epc = names.get(key, key)
        if epc is key:
            if len(names) >= cache_max:
                names.clear()
            e, p, c = text_cell(exp), text_cell(prov), text_cell(card)
            epc = names[key] = None if e is None or p is None or c is None else f"{e},{p},{c}"
        k = cells[concl] if concl in cells else text_cell(concl if concl else "")
        if (
            epc is None
            or k is None
            or type(sid) is not str
            or sid[:1] in risky
            or "," in sid
            or '"' in sid
            or "\n" in sid
            or "\r" in sid
            or type(gpus) is not int
            or type(tokens) is not int
            or type(created) is not float
        ):
            line = by_csv_module(*row)
        else:
            whole = int(created)
            us = round((created - whole) * 1e6)
            if lo <= whole < hi and us < 1_000_000:
                m, sec = divmod(whole - lo, 60)
                date = (
                    f"{prefix}{hh_mm[m]}{ss[sec]}.{ms[us // 1000]}{ms[us % 1000]}+00:00"
                    if us
                    else f"{prefix}{hh_mm[m]}{ss[sec]}+00:00"
                )
            else:
                date = date_of(created)
                if created >= 0 and us < 1_000_000 and whole // 86400 in days:
                    lo = whole // 86400 * 86400
                    hi, prefix = lo + 86400, days[whole // 86400]
            line = (
                f"{date},{epc},{gpus},{floats[price] if price in floats else number(price)},"
                f"{floats[hours] if hours in floats else number(hours)},{'' if cost is None else repr(float(cost))},"
                f"{tokens},{k},{'true' if sim else 'false'},{sid}\n"
            )
        n += 1
        if sort_ties and created == prev_created:
            if created == spilled:  # this run was written from ``run_by_id``
                n -= 1
                continue
            # Equal times arrive in table order: keep the run at the end of ``buf`` sorted by id.
            if tie_created != created:
                tie_created, tie_at, tie_sids = created, len(buf) - 1, [prev_sid]
            at = bisect_right(tie_sids, sid)
            tie_sids.insert(at, sid)
            buf.insert(tie_at + at, line)
            if len(tie_sids) > _TIE_RUN_MAX and run_by_id is not None:
                # Too long to sort here: what precedes the run, then the run as the database orders it.
                write("".join(buf[:tie_at]))
                buf.clear()
                n += write_export(run_by_id(created), out, header=False) - len(tie_sids)
                spilled = created
        else:
            if len(buf) >= 2048:  # never inside a run of equal times
                write("".join(buf))
                buf.clear()
            add(line)
        prev_created, prev_sid = created, sid
    write("".join(buf))
    return n


# ``write_export_forked``: below this many sessions (SQLite's largest rowid, an upper bound on the
# rows) one process writes the export (a fork costs more than it saves); above it the time range
# is cut into one slice per ``_FORK_SLICE_ROWS`` sessions (at most ``_FORK_SLICES``), written
# alternately by this process and one forked child. Each slice hands the turn over once: fewer,
# larger slices wait less for the other process to be scheduled on a busy machine.
_FORK_MIN_ROWS = 100_000
_FORK_SLICE_ROWS = 20_000
_FORK_SLICES = 64
# A slice's text held in memory while the other process writes its slice (characters): past it the
# process waits for its turn and writes the rest straight out, so memory stays flat whatever the
# spread of dates.
_FORK_HOLD_MAX = 4 << 20


def export_bounds_sql() -> str:
    """Return the SQL that reads the bounds of ``sessions`` for ``write_export_forked``.

    SQL for (min created_at, max created_at, max rowid) of ``sessions``: three index look-ups on
    SQLite (``write_export_forked``'s slicing)."""
    return (
        "SELECT (SELECT min(created_at) FROM sessions), (SELECT max(created_at) FROM sessions), "
        "(SELECT max(rowid) FROM sessions)"
    )


def _fork_slices(lo, hi, start: float | None, end: float | None, k: int) -> list[tuple[float | None, float | None]]:
    """Cut [start, end) into up to ``k`` slices of equal time.

    [start, end) cut into up to ``k`` slices of equal time over the ledger's [lo, hi] (open ends
    stay open, so every row of ``export_sql(start, end)`` is in exactly one slice)."""
    cuts = [lo + (hi - lo) * i / k for i in range(1, k)]
    cuts = [c for c in cuts if (start is None or c > start) and (end is None or c < end)]
    edges = [start] + sorted(set(cuts)) + [end]
    return list(zip(edges[:-1], edges[1:]))


class _Turn:
    """The text sink of one process of ``write_export_forked``.

    The text sink of one process of ``write_export_forked``: holds a slice's text until it is
    this process's turn (a byte on ``turn_in``), then writes to ``fd``; hands the turn on with
    ``done``."""

    def __init__(self, fd: int, encoding: str, errors: str, turn_in: int, turn_out: int, hold_max: int):
        self.fd, self.encoding, self.errors = fd, encoding, errors
        self.turn_in, self.turn_out, self.hold_max = turn_in, turn_out, hold_max
        self.held: list[str] = []
        self.size = 0
        self.mine = False

    def _flush(self) -> None:
        data = memoryview("".join(self.held).encode(self.encoding, self.errors))
        self.held.clear()
        self.size = 0
        while data:
            data = data[os.write(self.fd, data) :]

    def wait(self) -> None:
        if not self.mine:
            if os.read(self.turn_in, 1) != b"t":
                raise _PeerGone()
            self.mine = True
        self._flush()

    def write(self, text: str) -> int:
        self.held.append(text)
        self.size += len(text)
        if self.mine or self.size > self.hold_max:
            self.wait()
        return len(text)

    def done(self, last: bool) -> None:
        self.wait()
        self.mine = False
        if not last:
            try:
                os.write(self.turn_out, b"t")
            except BrokenPipeError:  # the other process is gone: its error is the one to raise
                raise _PeerGone() from None


class _PeerGone(Exception):
    pass


def write_export_forked(
    query: Callable[[str, dict], Iterable[tuple]], out: TextIO, start: float | None = None, end: float | None = None
) -> int:
    """Export like ``write_export`` from SQLite with this process and one forked child taking turns.

    ``write_export`` of SQLite's ``export_sql(start, end)`` (header included) to ``out``, a text
    stream on a file descriptor, by this process and one forked child in turns: the time range is
    cut into slices; while one writes its slice the other formats the next (two cores; the bytes
    are the same as one process's). ``query(sql, params)`` must open its own connection per call
    (``ledger.reads.Reads.iter_query``): the child runs it after the fork. A small ledger (under
    ``_FORK_MIN_ROWS``) or dates without finite bounds are written by this process alone. Returns
    the number of sessions written; raises what either process raised (the child's exception
    pickled over a pipe, else RuntimeError), the child always reaped."""
    import pickle
    import signal

    lo, hi, rows = (list(query(export_bounds_sql(), {})) or [(None, None, None)])[
        0
    ]  # its connection closed before the fork
    fd = out.fileno()
    if (
        rows is None
        or rows < _FORK_MIN_ROWS
        or not (isinstance(lo, float) and isinstance(hi, float))
        or not (-1e300 < lo <= hi < 1e300)
    ):
        return write_export(
            query(*export_sql("sqlite", start, end)), out, sort_ties=True, run_by_id=lambda t: query(*export_run_sql(t))
        )
    slices = _fork_slices(lo, hi, start, end, min(_FORK_SLICES, max(2, rows // _FORK_SLICE_ROWS)))
    csv.writer(out, lineterminator="\n").writerow(ALL_COLUMNS)
    out.flush()
    encoding, errors = out.encoding, out.errors or "strict"
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    result_r, result_w = os.pipe()

    def write_slices(me: int, sink: _Turn) -> int:
        n = 0
        for i in range(me, len(slices), 2):
            a, b = slices[i]
            n += write_export(
                query(*export_sql("sqlite", a, b)),
                sink,
                sort_ties=True,
                run_by_id=lambda t: query(*export_run_sql(t)),
                header=False,
            )
            sink.done(last=i == len(slices) - 1)
        return n

    reply: tuple[str, Any]  # ("ok", sessions written) or ("error", the pickled exception or None)
    pid = os.fork()
    if pid == 0:  # the child: odd slices; never returns
        code = 1
        try:
            os.close(to_child_w)
            os.close(to_parent_r)
            os.close(result_r)
            try:
                reply = ("ok", write_slices(1, _Turn(fd, encoding, errors, to_child_r, to_parent_w, _FORK_HOLD_MAX)))
                code = 0
            except BaseException as e:  # reported to the parent, which raises it
                try:
                    reply = ("error", pickle.dumps(e))
                except Exception:
                    reply = ("error", pickle.dumps(RuntimeError(f"ledger export: {type(e).__name__}: {e}")))
            data = memoryview(pickle.dumps(reply))
            while data:
                data = data[os.write(result_w, data) :]
        finally:
            os._exit(code)
    os.close(to_child_r)
    os.close(to_parent_w)
    os.close(result_w)
    reaped = False
    try:
        sink = _Turn(fd, encoding, errors, to_parent_r, to_child_w, _FORK_HOLD_MAX)
        sink.mine = True  # slice 0 is first
        try:
            n = write_slices(0, sink)
        except _PeerGone:
            n = None
        chunks = []
        while chunk := os.read(result_r, 1 << 16):
            chunks.append(chunk)
        os.waitpid(pid, 0)
        reaped = True
        reply = pickle.loads(b"".join(chunks)) if chunks else ("error", None)
        if reply[0] != "ok":
            err = (
                pickle.loads(reply[1])
                if reply[1] is not None
                else RuntimeError("ledger export: the writing process died")
            )
            raise err
        if n is None:
            raise RuntimeError("ledger export: the writing process stopped")
        return n + cast(int, reply[1])  # an "ok" reply: the child's count
    finally:
        if not reaped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
        for f in (to_parent_r, to_child_w, result_r):
            os.close(f)


class LineErrors(list):
    """A list of (line number, message) pairs that keeps the first ``KEEP`` and counts them all.

    (line number, message) pairs: the first ``KEEP`` appended are kept, ``total`` counts them all.
    A file whose every line is bad (a date format, the same file imported twice) held one message
    per line: 330 MB at a million lines, where an import otherwise stays flat."""

    KEEP = 1000

    def __init__(self, items: Iterable[tuple[int, str]] = ()):
        super().__init__()
        self.total = 0
        self.extend(items)

    def append(self, item: tuple[int, str]) -> None:
        self.total += 1
        if len(self) < self.KEEP:
            super().append(item)

    def extend(self, items: Iterable[tuple[int, str]]) -> None:
        for item in items:
            self.append(item)


class _Bad(ValueError):
    pass


_INF = float("inf")
# Plausibility bounds for one imported rental (the sheet is untrusted: 1e300 would swamp every
# total and overflow the end time). The dearest single boxes listed are 8x H200/B200 at about
# $30-60/h (RunPod/Vast.ai price pages, 2026); $1000/h leaves room for any real box. A rental
# longer than a year is a unit mistake.
MAX_IMPORT_HOURS = 24.0 * 366
MAX_IMPORT_USD_PER_HOUR = 1000.0
# The columns' ranges (ledger/models.py): gpu_count INTEGER (PostgreSQL int4), tokens BIGINT; a
# larger number was an OverflowError (SQLite) or a DataError (PostgreSQL) traceback mid-import.
MAX_IMPORT_GPU_COUNT = 2**31 - 1
MAX_IMPORT_TOKENS = 2**63 - 1
# A rental's start and end, epoch seconds, as every report and the export can write them: inside
# datetime's years 1-9999 with a day to spare for a time zone (9999-12-31T23:00-05:00 was booked,
# and every later `ledger export` died on "year 10000 is out of range").
_FIRST_TIME = datetime(1, 1, 2, tzinfo=timezone.utc).timestamp()
_LAST_TIME = datetime(9999, 12, 31, tzinfo=timezone.utc).timestamp()


def _float(v: str, name: str) -> float | None:
    try:
        f = float(v)  # a plain number (the common case: no strip, no "$")
    except ValueError:
        v = v.strip().replace("$", "")
        if v == "":
            return None
        try:
            f = float(v)
        except ValueError:
            raise _Bad(f"{name} {v!r} is not a number") from None
    if not 0 <= f < _INF:  # NaN compares false
        raise _Bad(f"{name} must be a number >= 0, got {v.strip()!r}")
    return f


def _int(v: str, name: str, default: int) -> int:
    try:
        i = int(v)
    except ValueError:
        f = _float(v, name)
        if f is None:
            return default
        if f != int(f):
            raise _Bad(f"{name} must be a whole number, got {v!r}") from None
        return int(f)
    if i < 0:
        raise _Bad(f"{name} must be a number >= 0, got {v.strip()!r}")
    return i


def _date(v: str, tzinfo) -> float:
    try:
        d = datetime.fromisoformat(v)
    except ValueError:
        v = v.strip()
        if not v:
            raise _Bad("date is empty") from None
        try:
            d = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise _Bad(f"date {v!r} is not ISO 8601 (2026-11-03 or 2026-11-03T14:05:00+00:00)") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=tzinfo)  # None: naive stays local
    return d.timestamp()


# What an import says of a line that repeats an earlier one exactly and has no session id. It is
# booked (two equal rentals on one day are real: a run repeated at the same price and length) but
# noted, since a pasted-twice line doubles its cost; with --strict it is refused.
REPEATED_LINE_NOTE = (
    "repeats an earlier line exactly and has no session id: two rentals alike, or one line "
    "pasted twice? (delete the copy, or give each row a session id)"
)


def _row_id(cells: list[str], seen: dict[bytes, int]) -> tuple[str, int]:
    """(the row's id, how many times this exact line has been seen so far, this one included)."""
    # Same spreadsheet, same ids: importing a file twice is refused instead of doubling the books.
    # Identical lines are distinct rentals, so the occurrence count is part of the key.
    import hashlib  # its OpenSSL binding costs ~2 ms of start-up: only rows without a session id need it

    key = "\x1f".join(c.strip() for c in cells)
    digest = hashlib.sha256(key.encode()).digest()
    seen[digest] = seen.get(digest, 0) + 1
    return "imp-" + hashlib.sha256(f"{key}\x1e{seen[digest]}".encode()).hexdigest()[:16], seen[digest]


# What a ``session`` cell may hold: the ids this tool writes (``new_session_id``'s
# ``YYYYMMDD-HHMMSS-xxxx``, ``up --name``'s lower-case names, ``imp-`` + hex for imported rows
# without one) and a teammate's sheet's own (upper case, ``.``, ``_``, ``:``), 64 characters at
# most. An id is shown in every report and passed back on the command line (``ledger note ID``):
# no spaces, quotes, ``;`` or control characters.
SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
SESSION_ID_RULE = "1-64 letters, digits and . _ : - (e.g. s-0001 or 20261103-140500-3f9a)"


# A rental that ends later than now by more than this is refused: it is not over (a row of a past
# rental), or its year is a typo (2099). The slack is clock skew between machines, never a day.
END_SLACK_S = 300.0


def _future_end(v_date: str, hours: float) -> _Bad:
    return _Bad(
        f"date {v_date.strip()!r} plus {hours:g} h ends in the future: a rental not over yet, or a typo in the year?"
    )


def _typo_of(name: str, known: Collection[str]) -> str | None:
    """The known name ``name`` is a misspelling of (``runpood`` -> ``runpod``), else None."""
    import difflib

    close = difflib.get_close_matches(name.lower(), sorted(known), n=1, cutoff=0.75)
    return close[0] if close else None


def _bad_session_id(sid: str) -> _Bad:
    shown = repr(sid[:40]) + (f" (+{len(sid) - 40} more characters)" if len(sid) > 40 else "")
    return _Bad(f"session {shown} is not a session id: use {SESSION_ID_RULE}")


# Lines ``CsvImport.chunks`` reads and checks together (and the ledger inserts in one executemany).
IMPORT_CHUNK_ROWS = 5000


class CsvImport:
    """Read a CSV (ours, or a user's spreadsheet) into ``sessions`` rows, one at a time.

    Needs a header naming at least ``date, provider, card`` and two of ``usd_per_hour, hours,
    cost_usd`` (the third is derived); other columns of ``ALL_COLUMNS`` are optional, unknown ones
    are an error. Dates without an offset are read in ``tz`` (None = local); a date alone is 00:00.
    ``providers`` / ``cards``: the known names (lower case; None: not checked); a row naming
    another, or whose cost differs from usd_per_hour x hours by more than ``COST_TOLERANCE_USD``,
    is a ``warnings`` entry (an error with ``strict``). Iterating yields (line number, row) with
    the row a tuple of ``IMPORT_ROW`` (``parse_csv`` gives dicts of ``IMPORT_COLUMNS``);
    ``errors`` and ``warnings`` (lists of (line, message)) fill as it goes, so read them after the
    iteration. Nothing of the file is kept but the current row (and, for rows without a session
    id, a digest per distinct line, to number identical lines apart)."""

    def __init__(
        self,
        f: TextIO | str,
        tz: str | None = None,
        providers: Collection[str] | None = None,
        cards: Collection[str] | None = None,
        strict: bool = False,
    ):
        self.f = io.StringIO(f) if isinstance(f, str) else f
        self.tz, self.providers, self.cards, self.strict = tz, providers, cards, strict
        self.errors: list[tuple[int, str]] = LineErrors()
        self.warnings: list[tuple[int, str]] = []
        self.rows = 0

    def __iter__(self) -> Iterator[tuple[int, tuple]]:
        for lines, rows in self.chunks():
            yield from zip(lines, rows)

    def chunks(self, size: int = IMPORT_CHUNK_ROWS) -> Iterator[tuple[Sequence[int], list[tuple]]]:
        """Yield the good rows in batches of at most ``size`` lines read.

        The good rows in batches of at most ``size`` lines read: (their line numbers, their
        ``IMPORT_ROW`` tuples). A batch is checked column by column first (``_chunk_parser``: the
        same conversions, bounds and notes, each run over a whole column in C); a batch with
        anything to say (a bad or odd cell, a warning, a row without a session id, a line of
        another width) goes line by line through ``_row_parser``, which words each problem."""
        if csv.field_size_limit() < MAX_CELL_CHARS:  # process-wide: it only ever grows here
            csv.field_size_limit(MAX_CELL_CHARS)
        # strict: a quote never closed is an error at the end of the file, not one cell that swallowed
        # every later line (and a quote closing a cell mid-cell, where such a cell usually ends).
        src = iter(self.f)
        reader = csv.reader(src, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            self.errors.append((1, "the file is empty; expected a header line: " + ",".join(COLUMNS)))
            return
        except csv.Error as e:  # a cell over MAX_CELL_CHARS, a NUL byte on older Pythons, ...
            self.errors.append((1, _csv_problem(e)))
            return
        names = [h.strip().lower().lstrip("\ufeff") for h in header]
        problem = _header_problem(names)
        if problem:
            self.errors.append((1, problem))
            return
        seen: dict[bytes, int] = {}
        absent = len(names)  # each row gets one trailing "" that absent columns read
        ix = tuple(names.index(c) if c in names else absent for c in ALL_COLUMNS)
        try:
            from ledger.reports import zone  # zoneinfo: only the import needs it

            tzinfo = zone(self.tz)
        except ValueError as e:
            self.errors.append((1, str(e)))
            return
        width = len(names)
        parse = _row_parser(ix, seen, tzinfo, self.providers, self.cards)
        parse_chunk = _chunk_parser(ix, width, tzinfo, self.providers, self.cards)
        # A text stream's lines each end at their one line break: those without quotes, carriage
        # returns or NULs split into columns in C (``_split_plain``); any other batch is read by a
        # csv reader from the same lines on, so the records and line numbers are the csv module's.
        plain = isinstance(self.f, io.TextIOBase)
        line_no = reader.line_num  # lines read so far (the header's)
        head: list[str] | None
        columns: list[list[str]] | None
        while True:
            start = line_no
            head = list(islice(src, size))
            if not head:
                break
            columns = _split_plain(head, width) if plain else None
            broken = None
            if columns is not None:
                line_no += len(head)
                lines: Sequence[int] = range(start + 1, line_no + 1)
                rows = parse_chunk(None, columns)
                cells_of = list(map(list, zip(*columns))) if rows is None else []
                head = columns = None  # not held while the batch is inserted
            else:
                reader = csv.reader(chain(head, src), strict=True)  # a record is >= 1 line: reads all of head
                cells_of = []
                try:
                    cells_of.extend(islice(reader, size))  # keeps the lines read before a csv.Error
                except csv.Error as e:  # the reader cannot go on past it: this line and the rest are not read
                    broken = e
                line_no += reader.line_num
                if broken is None and reader.line_num == len(cells_of):
                    lines = range(start + 1, line_no + 1)  # one line per row
                else:
                    lines = _line_numbers(cells_of, start)
                rows = parse_chunk(cells_of) if broken is None else None
            if rows is not None:
                self.rows += len(rows)
                yield lines, rows
            else:
                good_lines, rows = [], []
                for line, cells in zip(lines, cells_of):
                    if len(cells) != width:
                        if not "".join(cells).strip():
                            continue  # blank line
                        self.errors.append((line, f"has {len(cells)} fields, the header has {width}"))
                        continue
                    cells.append("")
                    try:
                        row, notes = parse(cells)
                    except _Bad as e:
                        if "".join(cells).strip():
                            self.errors.append((line, str(e)))
                        continue  # a line of empty cells is blank
                    if notes:
                        (self.errors if self.strict else self.warnings).extend((line, n) for n in notes)
                        if self.strict:
                            continue
                    good_lines.append(line)
                    rows.append(row)
                self.rows += len(rows)
                if rows:
                    yield good_lines, rows
            if broken is not None:
                after = (lines[-1] + _breaks(cells_of[-1])) if cells_of else start
                self.errors.append((after + 1, _csv_problem(broken)))
                return
        if not self.rows and not self.errors:
            self.errors.append((1, "no data rows after the header"))


def _csv_problem(e: csv.Error) -> str:
    """The one line an import says of a record the csv module cannot read (``strict`` reader)."""
    text = str(e)
    if text == "unexpected end of data" or "expected after '\"'" in text:
        return (
            "a quoted cell that starts on this line is never closed, so every later line would be part of it: "
            'close it with " (and write a quote inside a quoted cell as ""); nothing after it was read'
        )
    return f"not readable as CSV: {text}; nothing after it was read"


def _breaks(cells: list[str]) -> int:
    """How many line breaks the quoted cells of one record span (CR, LF or CRLF each one line)."""
    return sum(c.count("\n") + c.count("\r") - c.count("\r\n") for c in cells)


def _line_numbers(records: list[list[str]], before: int) -> list[int]:
    """The line each record starts on, the first one starting after line ``before``."""
    lines, line = [], before
    for cells in records:
        lines.append(line + 1)
        line += 1 + _breaks(cells)
    return lines


def _header_problem(names: list[str]) -> str | None:
    unknown = [h for h in names if h not in ALL_COLUMNS]
    missing = sorted(REQUIRED - set(names))
    if unknown or missing or len(set(names)) != len(names):
        parts = []
        if unknown:  # an empty name or one with a line break or control character is shown quoted
            shown = ", ".join(h if h.isprintable() and h.strip() else repr(h) for h in unknown)
            parts.append(
                f"unknown column(s) {shown}" + (" (an empty header cell: a trailing comma?)" * ("" in unknown))
            )
        if missing:
            parts.append("missing column(s) " + ", ".join(missing))
        if len(set(names)) != len(names):
            parts.append("a column appears twice")
        return "; ".join(parts) + "; expected " + ",".join(ALL_COLUMNS)
    if sum(c in names for c in ("usd_per_hour", "hours", "cost_usd")) < 2:
        return "need two of usd_per_hour, hours, cost_usd (the third is derived)"
    return None


# What an imported row sets: ``IMPORT_ROW`` varies per line (the tuple ``CsvImport`` yields, in this
# order), ``IMPORT_CONSTANTS`` is the same for every line (an imported rental is closed, booked from
# the sheet; the insert writes them as literals, so each line binds 14 values, not 32).
IMPORT_ROW = (
    "id",
    "experiment",
    "provider",
    "card",
    "gpu_count",
    "usd_per_hour",
    "simulated",
    "created_at",
    "instance_created_at",
    "ended_at",
    "billed_seconds",
    "cost_usd",
    "tokens",
    "conclusion",
)
IMPORT_CONSTANTS = {
    "job": "",
    "spot": False,
    "label": "",
    "instance_id": None,
    "offer_id": None,
    "bid_usd_per_hour": None,
    "status": "closed",
    "ready_at": None,
    "end_reason": "imported",
    "exit_code": None,
    "job_seconds": None,
    "note": "",
    "log_path": "",
    "results_path": "",
    "billing_increment_seconds": None,
    "last_heartbeat_at": None,
    "end_source": "import",
    "source": "import",
}
# Every column an imported row sets.
IMPORT_COLUMNS = IMPORT_ROW + tuple(IMPORT_CONSTANTS)


def _row_parser(
    ix: tuple[int, ...],
    seen: dict[bytes, int],
    tzinfo,
    providers: Collection[str] | None,
    cards: Collection[str] | None,
):
    """Compile the per-line parser for one header.

    The per-line parser compiled for one header: ``parse(cells) -> (IMPORT_ROW tuple, notes or
    None)``, raising ``_Bad`` with the first problem of the line. ``ix``: the cell index of each of
    ``ALL_COLUMNS`` (an absent column points at the trailing "" ``CsvImport`` appends). The checks,
    their order and their messages are those of the one generic path (``_float``, ``_int``,
    ``_date``); the common case (plain numbers, an ISO date) is tried first, inline."""
    pick = itemgetter(*ix)
    fromiso = datetime.fromisoformat
    inf, max_hours, max_price, max_cost = (
        _INF,
        MAX_IMPORT_HOURS,
        MAX_IMPORT_USD_PER_HOUR,
        MAX_IMPORT_USD_PER_HOUR * MAX_IMPORT_HOURS,
    )
    true, false = _TRUE, _FALSE

    session_id = SESSION_ID.fullmatch
    future = time.time() + END_SLACK_S
    to_seconds: dict[float, float] = {}  # hours -> round(hours * 3600, 3): durations repeat, round(x, 3) is slow

    def parse(cells: list[str]) -> tuple[tuple, list[str] | None]:
        (v_date, experiment, provider, card, v_gpus, v_price, v_hours, v_cost, v_tokens, conclusion, raw_flag, sid) = (
            pick(cells)
        )
        try:
            d = fromiso(v_date)
        except ValueError:
            created = _date(v_date, tzinfo)
        else:
            created = (d if d.tzinfo is not None else d.replace(tzinfo=tzinfo)).timestamp()
        provider, card = provider.strip(), card.strip()
        if provider[:1] == "'":
            provider = unneutralize(provider)
        if card[:1] == "'":
            card = unneutralize(card)
        if not provider or not card:
            raise _Bad("provider and card must not be empty")
        price: float | None
        hours: float | None
        cost: float | None
        try:
            price = float(v_price)
        except ValueError:
            price = _float(v_price, "usd_per_hour")
        else:
            if not 0 <= price < inf:
                _float(v_price, "usd_per_hour")  # raises, worded once
        try:
            hours = float(v_hours)
        except ValueError:
            hours = _float(v_hours, "hours")
        else:
            if not 0 <= hours < inf:
                _float(v_hours, "hours")
        try:
            cost = float(v_cost)
        except ValueError:
            cost = _float(v_cost, "cost_usd")
        else:
            if not 0 <= cost < inf:
                _float(v_cost, "cost_usd")
        notes = None
        if cost is None:
            if price is None or hours is None:
                raise _Bad("need two of usd_per_hour, hours, cost_usd")
            cost = round(price * hours, 6)
        elif hours is None:
            if price is None:
                raise _Bad("need two of usd_per_hour, hours, cost_usd")
            hours = cost / price if price else 0.0
        elif price is None:
            price = cost / hours if hours else 0.0
        elif abs(cost - price * hours) > COST_TOLERANCE_USD:
            notes = [
                f"cost_usd {cost:g} differs from usd_per_hour x hours = {price:g} x {hours:g} = {price * hours:.4f}"
                f" by more than ${COST_TOLERANCE_USD:g}"
            ]
        if hours > max_hours:
            raise _Bad(
                f"hours {hours:g} is more than one rental can last ({MAX_IMPORT_HOURS:g} h = 366 days): minutes or seconds in the hours column?"
            )
        if price > max_price:
            raise _Bad(
                f"usd_per_hour {price:g} is above ${MAX_IMPORT_USD_PER_HOUR:g}/h, more than any box costs: a total in the price column?"
            )
        if cost > max_cost:
            raise _Bad(f"cost_usd {cost:g} is more than a year of the dearest box: a typo?")
        if providers is not None and provider.lower() not in providers:
            typo = _typo_of(provider, providers)
            if typo is not None:  # a misspelt provider would split its money off in every report
                raise _Bad(f"unknown provider {provider!r}: did you mean {typo!r}?")
            notes = (notes or []) + [f"unknown provider {provider!r} (known: {', '.join(sorted(providers))})"]
        if cards is not None and card.lower() not in cards:
            notes = (notes or []) + [f"unknown card {card!r} (`gpuops cards` lists the known cards)"]
        if raw_flag == "false":
            simulated = False
        elif raw_flag == "true":
            simulated = True
        else:
            flag = raw_flag.strip().lower()
            if flag not in true and flag not in false:
                raise _Bad(f"simulated must be true or false, got {raw_flag!r}")
            simulated = flag in true
        try:
            gpus = int(v_gpus)
        except ValueError:
            gpus = _int(v_gpus, "gpu_count", 1)
        else:
            if gpus < 0:
                gpus = _int(v_gpus, "gpu_count", 1)  # the error
        if gpus < 1:
            raise _Bad("gpu_count must be >= 1")
        if gpus > MAX_IMPORT_GPU_COUNT:
            raise _Bad(f"gpu_count {gpus} is above {MAX_IMPORT_GPU_COUNT:,} (the ledger's gpu_count column)")
        try:
            tokens = int(v_tokens)
        except ValueError:
            tokens = _int(v_tokens, "tokens", 0)
        else:
            if tokens < 0:
                tokens = _int(v_tokens, "tokens", 0)  # the error
        if tokens > MAX_IMPORT_TOKENS:
            raise _Bad(f"tokens {tokens} is above {MAX_IMPORT_TOKENS:,} (the ledger's tokens column)")
        sid = sid.strip()
        sid = unneutralize(sid) if sid[:1] == "'" else sid
        if not sid:
            sid, repeat = _row_id(cells[:-1], seen)
            if repeat > 1:
                notes = (notes or []) + [REPEATED_LINE_NOTE]
        experiment = experiment.strip()
        if experiment[:1] == "'":
            experiment = unneutralize(experiment)
        conclusion = conclusion.strip()
        if conclusion[:1] == "'":
            conclusion = unneutralize(conclusion)
        if "\0" in conclusion or "\0" in sid:  # PostgreSQL text refuses it (a DataError mid-import); SQLite kept it
            raise _Bad(
                ("session" if "\0" in sid else "conclusion") + " contains a NUL character (\\x00); use visible text"
            )
        if not session_id(sid):  # every imp- id fits
            raise _bad_session_id(sid)
        seconds = to_seconds.get(hours) if hours else None  # never 0.0: -0.0 is equal and hashes alike
        if seconds is None:
            seconds = round(hours * 3600.0, 3)
            if hours:
                if len(to_seconds) >= 4096:
                    to_seconds.clear()
                to_seconds[hours] = seconds
        if not _FIRST_TIME <= created <= _LAST_TIME - seconds:
            raise _Bad(
                f"date {v_date.strip()!r} (to its end, {hours:g} h later) is outside 0001-01-02 .. 9999-12-31 UTC"
            )
        if created + seconds > future:
            raise _future_end(v_date, hours)
        return (
            sid,
            experiment or "default",
            provider,
            card,
            gpus,
            price,
            simulated,
            created,
            created,
            created + seconds,
            seconds,
            cost,
            tokens,
            conclusion,
        ), notes

    return parse


# A column's distinct values converted one by one when the plain conversion fails on some cell (a
# "$" price, an empty tokens cell, a column the header leaves out), up to this many of them.
_DISTINCT_MAX = 256
_SKIP = object()  # ``_column``: the batch goes line by line
_TZINFO = attrgetter("tzinfo")


def _column(cells: Sequence[str], plain: Callable, careful: Callable) -> Any:  # a list, or _SKIP
    """Convert a column of cells, fast where possible, or return ``_SKIP``.

    ``cells`` converted by ``plain`` (a C builtin mapped over the column), or where one cell
    refuses it by ``careful`` once per distinct value; ``_SKIP`` when ``careful`` raises ``_Bad``
    or there are too many distinct values to convert that way."""
    try:
        return list(map(plain, cells))
    except (ValueError, KeyError):
        distinct = set(cells)
        if len(distinct) > _DISTINCT_MAX:
            return _SKIP
        try:
            known = {v: careful(v) for v in distinct}
        except _Bad:
            return _SKIP
        return list(map(known.__getitem__, cells))


def _texts(cells: Sequence[str]) -> list[str]:
    """Text cells as ``_row_parser`` reads them: stripped, one formula guard removed."""
    out = list(map(str.strip, cells))
    if _any_quoted(out):
        out = [unneutralize(t) if t[:1] == "'" else t for t in out]
    return out


def _any_quoted(texts: list[str]) -> bool:
    """Tell whether a text may start with ``'``.

    Whether a text may start with ``'`` (one scan in C; a quote after a line feed inside a
    text is a false alarm, which only costs the exact look)."""
    return "\n'" in "\n" + "\n".join(texts)


def _split_plain(lines: list[str], width: int) -> list[list[str]] | None:
    """Split lines without quotes into columns, as the csv module would, or return None.

    ``lines`` (each ending in ``"\\n"``, the last one may end the file without it) as ``width``
    columns of one cell per line: exactly the records ``csv.reader(lines, strict=True)`` gives,
    transposed, when no line holds a quote, a carriage return or a NUL and every line has
    ``width - 1`` commas; None otherwise (the csv module reads those). One ``str.split`` over the
    batch and slices of it, all in C: no list per line. Every comma of the text splits a cell,
    each newline ends a line: with ``n`` lines, the ``n * (width - 1) + 1`` pieces between commas
    hold one newline in every ``(width - 1)``-th piece (a line's last cell, then the next line's
    first) and none elsewhere exactly when each line has ``width - 1`` commas."""
    text = "".join(lines)
    n, m = len(lines), width - 1
    if not n or m < 1 or '"' in text or "\r" in text or "\0" in text or len(text) > MAX_CELL_CHARS:
        return None
    if text[-1] != "\n":
        text += "\n"
    cells = text.split(",")
    if len(cells) != n * m + 1:
        return None
    ends = cells[m::m]  # "last cell\nnext line's first cell", the last one "last cell\n"
    if set(map(str.count, ends, repeat("\n", n))) != {1}:
        return None
    edge = "\n".join(ends).split("\n")  # last, first, last, first, ..., last, ""
    return [[cells[0], *edge[1:-1:2]], *(cells[j : n * m : m] for j in range(1, m)), edge[0::2]]


def _chunk_parser(
    ix: tuple[int, ...], width: int, tzinfo, providers: Collection[str] | None, cards: Collection[str] | None
):
    """Compile the batch parser for one header.

    The batch parser compiled for one header: ``parse(records, columns=None) -> [IMPORT_ROW
    tuple]`` for a batch of records (lists of cells; or ``columns``, the same batch as one sequence
    of cells per column, every record of the header's width, ``records`` then unused), or None
    when any record must go through ``_row_parser`` (another width, a cell it would refuse or note,
    an empty session id, a date near the ends of time). Every value comes from the same
    conversions as ``_row_parser``'s (``float``, ``int``, ``datetime.fromisoformat``, ``round``),
    each mapped over a column in C, so the rows are equal to what it gives; the checks are its
    bounds over each column's min and max."""
    fromiso = datetime.fromisoformat
    session_id = SESSION_ID.fullmatch
    future = time.time() + END_SLACK_S
    max_hours, max_price, max_cost = (
        MAX_IMPORT_HOURS,
        MAX_IMPORT_USD_PER_HOUR,
        MAX_IMPORT_USD_PER_HOUR * MAX_IMPORT_HOURS,
    )
    absent = width
    names: dict[
        tuple[str, bool], str | None
    ] = {}  # (a provider or card cell, is a provider) -> its name, None when it needs a word

    def name_of(raw: str, known: Collection[str] | None) -> str | None:
        name = raw.strip()
        if name[:1] == "'":
            name = unneutralize(name)
        return name if name and (known is None or name.lower() in known) else None

    def flag(raw: str) -> bool:
        f = raw.strip().lower()
        if f not in _TRUE and f not in _FALSE:
            raise _Bad(raw)
        return f in _TRUE

    def parse(records: list[list[str]] | None, columns: Sequence[Sequence[str]] | None = None) -> list[tuple] | None:
        if columns is None:
            assert records is not None  # one of the two is given
            n = len(records)
            if not n or set(map(len, records)) != {width}:
                return None
            columns = list(zip(*records))
        else:
            n = len(columns[0])
        blank = ("",) * n
        (v_date, v_exp, v_prov, v_card, v_gpus, v_price, v_hours, v_cost, v_tokens, v_concl, v_flag, v_sid) = (
            columns[i] if i != absent else blank for i in ix
        )
        sids = list(map(str.strip, v_sid))
        if not all(sids):
            return None  # rows without a session id are numbered line by line (``_row_id``)
        try:
            dates = list(map(fromiso, v_date))
        except ValueError:
            return None
        if None in set(map(_TZINFO, dates)):
            dates = [d if d.tzinfo is not None else d.replace(tzinfo=tzinfo) for d in dates]
        created = list(map(datetime.timestamp, dates))
        provs: list[str | None] = []
        card_names: list[str | None] = []
        for col, known, out in ((v_prov, providers, provs), (v_card, cards, card_names)):
            table = {}
            for raw in set(col):
                key = (raw, known is providers)
                if key not in names:
                    if len(names) >= 4096:
                        names.clear()
                    names[key] = name_of(raw, known)
                table[raw] = names[key]
            if None in table.values():
                return None
            out.extend(map(table.__getitem__, col))
        prices = _column(v_price, float, lambda v: _float(v, "usd_per_hour"))
        hours = _column(v_hours, float, lambda v: _float(v, "hours"))
        costs = _column(v_cost, float, lambda v: _float(v, "cost_usd"))
        if _SKIP in (prices, hours, costs):
            return None
        missing = [c for c in (prices, hours, costs) if None in c]
        if missing:
            if len(missing) > 1 or set(missing[0]) != {None}:
                return None  # some rows derive another column than others: line by line
            if costs is missing[0]:
                costs = list(map(round, map(mul, prices, hours), repeat(6, n)))
            elif hours is missing[0]:
                hours = [c / p if p else 0.0 for c, p in zip(costs, prices)]
            else:
                prices = [c / h if h else 0.0 for c, h in zip(costs, hours)]
        elif max(map(abs, map(sub, costs, map(mul, prices, hours)))) > COST_TOLERANCE_USD:
            return None  # noted line by line
        for col, top in ((prices, max_price), (hours, max_hours), (costs, max_cost)):
            total = fsum(col)  # NaN or inf in the column: not finite
            if not (total < _INF and min(col) >= 0 and max(col) <= top):
                return None
        sims = _column(v_flag, {"false": False, "true": True}.__getitem__, flag)
        gpus = _column(v_gpus, int, lambda v: _int(v, "gpu_count", 1))
        tokens = _column(v_tokens, int, lambda v: _int(v, "tokens", 0))
        if _SKIP in (sims, gpus, tokens):
            return None
        if min(gpus) < 1 or max(gpus) > MAX_IMPORT_GPU_COUNT or min(tokens) < 0 or max(tokens) > MAX_IMPORT_TOKENS:
            return None
        if _any_quoted(sids):
            sids = [unneutralize(s) if s[:1] == "'" else s for s in sids]
        experiments = _texts(v_exp)
        if not all(experiments):
            experiments = [e or "default" for e in experiments]
        conclusions = _texts(v_concl)
        if "\0" in "".join(conclusions) or not all(map(session_id, sids)):
            return None  # a NUL or an id off SESSION_ID: worded line by line
        seconds = list(map(round, map(mul, hours, repeat(3600.0, n)), repeat(3, n)))
        if not (min(created) >= _FIRST_TIME and max(created) <= _LAST_TIME - max(seconds) - 86400.0):
            return None  # near the ends of time: refused line by line
        ends = list(map(add, created, seconds))
        if max(ends) > future:
            return None  # ends in the future: refused line by line
        return list(
            zip(
                sids,
                experiments,
                provs,
                card_names,
                gpus,
                prices,
                sims,
                created,
                created,
                ends,
                seconds,
                costs,
                tokens,
                conclusions,
            )
        )

    return parse


def parse_csv(
    text: TextIO | str,
    tz: str | None = None,
    providers: Collection[str] | None = None,
    cards: Collection[str] | None = None,
    strict: bool = False,
) -> tuple[list[dict], list[int], list[tuple[int, str]]]:
    """Read a whole CSV with ``CsvImport`` and return its rows, line numbers and errors.

    ``CsvImport`` read whole: (rows, their line numbers, errors as (line, message)); with
    errors, import nothing. For small files and tests; ``ledger import`` streams instead."""
    imp = CsvImport(text, tz, providers, cards, strict)
    rows, lines = [], []
    for line, row in imp:
        rows.append(dict(zip(IMPORT_ROW, row), **IMPORT_CONSTANTS))
        lines.append(line)
    return rows, lines, imp.errors
