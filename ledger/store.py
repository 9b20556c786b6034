"""The ledger store: the few writes the lifecycle needs, each in its own short transaction.

The engine and migrations are ``ledger/engine.py``; the rental's writes and single-session reads,
written once as SQL, ``ledger/writes.py``; report reads ``ledger/reads.py``. A crash leaves every
committed transition in place.

A write the database refuses (disk full, a lock held past the busy timeout, an unreachable
server: ``sqlalchemy.exc.OperationalError``) is not lost: events, field updates, heartbeats, end
requests, bootstrap steps and closes go to a local spool file (JSON lines, ``Ledger.spool_path``)
and are replayed, in order, before the next write that succeeds, by the next ``open_sessions()``
(``ps``, ``watchdog``, ``reconcile``), or by ``replay_spool()``. When that file cannot be written
either (the same full disk) the line goes to a second spool on another filesystem
(``fallback_spool_path``: the user's runtime dir or /dev/shm); when that fails too the line is kept
in ``Ledger.lost`` for the caller to print as a ``gpuops ledger replay 'LINE'`` command.

Around a destroy nothing may wait on the database: ``with ledger.bounded():`` gives every write a
short deadline (``BOUNDED_S``: a short busy timeout / connect and statement timeout, and a thread
that gives up waiting) after which the write is spooled; once one write was refused, the next ones
within ``REFUSED_HOLD_S`` go straight to the spool. The rows this Ledger wrote or read are kept in
memory (``held``), so ending a rental needs no read. An SQLite file removed under a running
process is noticed at the next write (``notices``): the file is created anew and the held rows are
booked into it again. Vocabulary members (``onbox.vocabulary``) are stored as their plain
strings.

One way to the database: the ledger's SQLAlchemy engine (``ledger/engine.py``), a write in
``engine.begin()`` (``_write``), a read on a connection that takes no write lock (``reads``,
``ledger/reads.py``). The tables (``ledger/models.py``, SQLAlchemy Core) are imported by the first write,
or before a replay of the spool that is on no destroy's way, or past a destroy
(``_load_write_tables``); a command that only reads loads SQLAlchemy Core alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from operator import itemgetter
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import sqlalchemy as sa

from ledger.billing import billed_cost
from ledger.engine import sqlite_file
from ledger.reads import Reads
from ledger.spool import SpoolFiles
from onbox.vocabulary import EventKind, RowStatus

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine, Row

    from ledger.books import Books

T = TypeVar("T")
D = TypeVar("D")


def _spooled_errors() -> tuple[type[BaseException], ...]:
    """The errors that send a write to the spool: the database refusing it, as SQLAlchemy raises it."""
    return (sa.exc.OperationalError,)


def _file_id(path: Path | None) -> tuple[int, int] | None:
    """(device, inode) of ``path``, None when it does not exist (or is no file)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _plain(v: Any) -> Any:
    """A vocabulary member as its plain str (drivers and JSON get exactly the old text)."""
    return str.__str__(v) if isinstance(v, str) and type(v) is not str else v


# Writes inside ``Ledger.bounded()`` wait at most this long for the database (seconds): a short
# lock, a slow commit and a network round trip fit; a locked, full or stopped ledger does not.
BOUNDED_S = 2.0
# After a bounded write was refused, the next ones skip the database for this long (seconds): a
# ledger that is down costs one deadline, not one per write between the job's end and the destroy.
REFUSED_HOLD_S = 15.0


class _Late(Exception):
    """A bounded write that did not finish by its deadline (spooled like a refused one)."""


# Called with each session row a spool replay closed (a close that was spooled, booked only now),
# after the replay: the one way a spooled end is told. gpuops' notifier adds itself here
# (``gpuops.notify.notifier.use``), since ledger/ imports nothing of gpuops; a listener's error is
# its own and stops neither the replay nor the other listeners.
CLOSE_REPLAYED: list[Callable[[Any], None]] = []


def _spool_name(url: str) -> str:
    """The spool file's name for the ledger at ``url``: ``<sha256(url)[:12]>.jsonl``.

    An SQLite URL counts without its ``timeout`` (how long to wait for a lock, ``ledger.engine``):
    a new timeout leaves what waits in the spool where every later actor looks for it."""
    if url.startswith("sqlite") and "?" in url:
        from urllib.parse import parse_qsl, urlencode

        base, query = url.split("?", 1)
        pairs = parse_qsl(query, keep_blank_values=True)
        kept = [(k, v) for k, v in pairs if k != "timeout"]
        if len(kept) < len(pairs):
            url = base + ("?" + urlencode(kept) if kept else "")
    return hashlib.sha256(url.encode()).hexdigest()[:12] + ".jsonl"


def fallback_spool_path(url: str) -> Path:
    """Return the second spool, for when the first cannot be written.

    The second spool, for when the first cannot be written (its disk is the ledger's, and full):
    ``$GPUOPS_SPOOL_FALLBACK_DIR``, else ``$XDG_RUNTIME_DIR/gpuops/spool``, else
    ``/dev/shm/gpuops-<uid>/spool`` (memory-backed: another filesystem than any disk), else the
    temp dir; file ``_spool_name(url)``. It lives until reboot: every later actor replays it."""
    import tempfile

    base = os.environ.get("GPUOPS_SPOOL_FALLBACK_DIR")
    if not base:
        run = os.environ.get("XDG_RUNTIME_DIR")
        if run and os.path.isdir(run):
            base = os.path.join(run, "gpuops", "spool")
        elif os.path.isdir("/dev/shm"):
            base = os.path.join("/dev/shm", f"gpuops-{os.getuid() if hasattr(os, 'getuid') else 'user'}", "spool")
        else:
            base = os.path.join(tempfile.gettempdir(), "gpuops-spool")
    return Path(base) / _spool_name(url)


def default_spool_path(url: str) -> Path:
    """Return where the writes a ledger refused wait.

    Where writes a ledger refused wait: ``$GPUOPS_SPOOL_DIR`` (else the user cache dir
    ``~/.cache/gpuops/spool``) / ``_spool_name(url)`` -- not next to the database, whose
    disk may be the one that is full."""
    base = os.environ.get("GPUOPS_SPOOL_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpuops", "spool"
    )
    return Path(base) / _spool_name(url)


__all__ = ["Ledger", "billed_cost", "ImportRejected"]


# ``import_rows`` on SQLite drops the secondary indexes of ``sessions`` once it has written this many
# rows and more than the ledger held: measured on a 2-core machine, a million rows took 9.4 s with
# the indexes kept up to date and 4.8 s + 2.0 s to build them after; below ~20k rows it makes no
# difference worth a schema change.
IMPORT_DEFER_INDEXES_ROWS = 20_000


def _sql_literal(value: Any, dialect: str) -> str:
    """Return ``value`` as an SQL literal of ``dialect``.

    ``value`` (None, a bool, an int or float, or one of OUR constant strings, never a user's) as an
    SQL literal of ``dialect`` (a bool is 0/1 on SQLite, as its driver binds it)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value)) if dialect == "sqlite" else ("TRUE" if value else "FALSE")
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


class ImportRejected(ValueError):
    """An import that wrote nothing.

    ``errors``: (line number, message) pairs, in line order (at
    most ``LineErrors.KEEP`` of them); ``total``: how many there were."""

    def __init__(self, errors: list[tuple[int, str]], total: int | None = None):
        self.errors = errors
        self.total = len(errors) if total is None else total
        first = "; ".join(f"line {n}: {m}" for n, m in errors[:3])
        more = f" (and {self.total - 3} more)" if self.total > 3 else ""
        super().__init__(f"{self.total} bad row(s), nothing imported: {first}{more}")


def _load_write_tables() -> None:
    """Import the write statements' tables now, outside any write's deadline.

    The tables are ``ledger.writes._tables`` (``ledger/models.py``, which a process's first write imports).
    A replay's deadline bounds the wait on
    the database, never this process's own first import (seconds on a loaded machine, which made
    the first replayed write late, and spooled again, against a ledger that answered at once).
    Never called on the way to a destroy, where an import must not come first. An import error is
    left to the write that needs the tables."""
    import ledger.writes as writes

    try:
        writes._tables()
    except Exception:  # noqa: BLE001, S110  the write that needs them raises it
        pass


class Ledger:
    """A ledger at ``url`` (SQLAlchemy URL): the one implementation of ``ledger.books.Books``.

    Creates the SQLite file's folder and applies pending migrations on open. The rental's writes
    and single-session reads (``add_session``, ``event``, ``update``, ``add_steps``,
    ``request_end``, ``close``, ``get``, ``events``) are ``ledger/writes.py``'s statements, each in
    one transaction of the ledger's engine, answering read-only rows (SQLAlchemy ``Row``)."""

    def __init__(self, url: str, spool_path: str | Path | None = None) -> None:
        self.url = url
        self.spool_path = Path(spool_path) if spool_path is not None else default_spool_path(url)
        self.fallback_spool_path = fallback_spool_path(url)
        self.lost: list[str] = []  # spool lines no spool could take: print them as `gpuops ledger replay` commands
        self.notices: list[str] = []  # what the caller should tell the user (a ledger file that vanished)
        self._held: dict[str, dict[str, Any]] = {}  # session id -> the row as this process last wrote or read it
        self._held_runs: dict[str, dict[str, Any]] = {}  # run id -> the run as this process last wrote it
        self._bound: float | None = None  # the deadline of ``bounded()`` writes, seconds
        self._short: Engine | None = None  # the engine of bounded writes (short timeouts)
        self._refused_at: float | None = None  # monotonic time of the last bounded write the ledger refused
        self._replay_stopped: str | None = None  # why the last replay put lines back in the spool (None: it did not)
        self._engine: Engine | None = None
        self._reads: dict[Engine, Reads] = {}  # an engine -> its Reads
        self._files = SpoolFiles(self._spool_paths, self._say, self.lost)
        self._file = sqlite_file(url)
        self._engine = self.engine  # migrate now
        self._file_id = _file_id(self._file)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (opened, and migrations applied, on first use).

        Inside ``bounded()`` the short-deadline engine."""
        from ledger.engine import open_engine

        if self._bound is not None:
            if self._short is None:
                self._short = open_engine(self.url, deadline_s=self._bound)
                if self._file_id is None:
                    self._file_id = _file_id(self._file)
            return self._short
        if self._engine is None:
            self._engine = open_engine(self.url)
            self._file_id = _file_id(self._file)
        return self._engine

    @property
    def reads(self) -> Reads:
        """Every read of ``ledger/reads.py`` on this ledger's engine (inside ``bounded()`` the short-deadline one)."""
        eng = self.engine
        got = self._reads.get(eng)
        if got is None:
            got = self._reads[eng] = Reads(eng)
        return got

    @contextmanager
    def _write(self) -> Iterator[tuple[Connection, Reads]]:
        """One write transaction (``engine.begin()``) and the reads on its connection."""
        reads = self.reads
        with reads.engine.begin() as conn:
            yield conn, reads.on(conn)

    # -- bounded writes, rows held in memory, a file that vanished -----------------------------
    @contextmanager
    def bounded(self, seconds: float = BOUNDED_S) -> Iterator[Ledger]:
        """Bound how long writes and ``quick`` reads wait for the database.

        Inside: every spoolable write and every ``quick`` read waits at most ``seconds`` for the
        database, then is spooled (a read: answers its default). Re-entrant (the shortest wins)."""
        prev = self._bound
        self._bound = seconds if prev is None else min(prev, seconds)
        try:
            yield self
        finally:
            self._bound = prev

    def _run(self, fn: Callable[..., T], args: dict[str, Any]) -> T:
        """Call ``fn(**args)``, inside ``bounded()`` in a worker thread with a deadline.

        ``fn(**args)``; inside ``bounded()`` in a worker thread given the deadline plus 1 s
        (raises _Late after it: a server that stopped answering mid-statement cannot hold us; the
        late write may still land, which the replay of its spooled copy makes at worst a repeated
        event -- closes, end requests and updates apply once)."""
        if self._bound is None:
            return fn(**args)
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["out"] = fn(**args)
            except BaseException as e:  # noqa: BLE001  handed to the caller's thread
                box["err"] = e

        t = threading.Thread(target=work, name="gpuops-ledger-write", daemon=True)
        t.start()
        t.join(self._bound + 1.0)
        if t.is_alive():
            raise _Late(f"the ledger did not answer within {self._bound:g} s")
        if "err" in box:
            raise box["err"]
        return cast(T, box.get("out"))

    def _refusing(self) -> bool:
        """True inside ``bounded()`` while a refusal is recent: skip the database, spool at once."""
        return (
            self._bound is not None
            and self._refused_at is not None
            and time.monotonic() - self._refused_at < REFUSED_HOLD_S
        )

    @overload
    def quick(self, fn: Callable[[], T]) -> T | None: ...
    @overload
    def quick(self, fn: Callable[[], T], default: D) -> T | D: ...
    def quick(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run the read ``fn()`` bounded like a write, returning ``default`` on failure.

        ``fn()`` (a read of this ledger) bounded like a write inside ``bounded()``; ``default``
        when the database fails or is late (never raises a database error)."""
        if self._refusing():
            return default
        try:
            return self._run(lambda: fn(), {})
        except _spooled_errors() + (_Late,):
            if self._bound is not None:
                self._refused_at = time.monotonic()
            return default

    def prepare_writes(self) -> None:
        """Import the write statements' tables now (``_load_write_tables``).

        The bounded writes after it then wait only on the database. For a caller past its destroy
        (the import takes seconds on a loaded machine); never on the way to one."""
        _load_write_tables()

    def try_replay(self) -> int:
        """Try once, bounded, to apply the spool now.

        One bounded attempt to apply the spool now, whatever a recent refusal said (`up` makes it
        once the box is destroyed: a ledger back by then gets the close at once). Returns how many
        writes were applied (0 when the ledger still refuses)."""
        if not self.has_spool():
            return 0
        self._refused_at = None
        _load_write_tables()  # before the replay's deadlines: they bound the database, not this import
        with self.bounded():
            return self.replay_spool()

    def held(self, session_id: str) -> Any | None:
        """Return the session row as this Ledger last wrote or read it, or None.

        The session row as this Ledger last wrote or read it (attribute access; no database
        read), or None when this process never saw it. Closing it in the spool closes it here too,
        with the cost the database would book (``billed_cost``)."""
        d = self._held.get(session_id)
        return SimpleNamespace(**d) if d is not None else None

    def _hold(self, op: str, args: dict[str, Any], out: Any = None) -> None:
        sid = cast(str, args.get("session_id"))
        if op == "row" and out is not None:
            self._held[out.id] = dict(out._mapping)
            return
        d = self._held.get(sid) if sid else None
        if d is None:
            return
        if op == "update":
            d.update({k: v for k, v in args.items() if k != "session_id"})
        elif op == "request_end" and d.get("status") != str(RowStatus.CLOSED) and not d.get("end_reason"):
            d["end_reason"] = args["reason"]
        elif op == "heartbeat" and (d.get("last_heartbeat_at") or 0) < args["at"]:
            d["last_heartbeat_at"] = args["at"]
        elif op == "close":
            if out is not None:
                self._held[sid] = dict(out._mapping)
            elif d.get("status") != str(RowStatus.CLOSED):
                fields = {k: v for k, v in args.items() if k not in ("session_id", "ended_at", "reason", "exit_code")}
                inc = fields.pop("billing_increment_seconds", d.get("billing_increment_seconds"))
                seconds, cost = billed_cost(d.get("usd_per_hour"), d.get("instance_created_at"), args["ended_at"], inc)
                d.update(
                    fields,
                    status=str(RowStatus.CLOSED),
                    ended_at=args["ended_at"],
                    end_reason=d.get("end_reason") or args["reason"],
                    end_source=fields.get("end_source") or d.get("end_source") or "destroy",
                    billed_seconds=seconds,
                    cost_usd=cost,
                    billing_increment_seconds=inc,
                )
                if args.get("exit_code") is not None:
                    d["exit_code"] = args["exit_code"]

    def _check_vanished(self) -> None:
        """Handle an SQLite file removed or replaced under this process.

        An SQLite file removed or replaced under this process: say so (``notices``), drop the
        engines (their connections write to the removed file), create the file anew and book the
        held rows into it again. Cheap: one stat."""
        if self._file is None or self._file_id is None or _file_id(self._file) == self._file_id:
            return
        for eng in (self._engine, self._short):
            if eng is not None:
                eng.dispose()
        self._engine = self._short = None
        self._reads.clear()
        self._file_id = None
        n = self._rebook()
        self.notices.append(
            f"the ledger file {self._file} vanished during this run (removed or replaced); "
            f"a new one was made there and the {n} session(s) this run holds were booked into it again"
        )

    def _rebook(self) -> int:
        """Insert the held rows the ledger no longer has and return how many.

        Insert the held rows the ledger no longer has (with an ``intent`` and a ``rebooked``
        event); returns how many. Database errors leave the rest to the spool."""
        import ledger.writes as writes

        done = 0
        for d in list(self._held.values()):
            try:
                with self._write() as (conn, reads):
                    done += writes.rebook(conn, reads, d, "the ledger file vanished; rebooked from memory")
            except _spooled_errors():
                break
        if self._file is not None:
            self._file_id = _file_id(self._file)
        return done

    # -- the spool ----------------------------------------------------------------------------
    # A refused write goes to the spool's files (``ledger.spool.SpoolFiles``: folders and files
    # checked ours alone, lines claimed before a replay) and comes back through the same writes
    # (``_apply``). Every line replayed passes ``ledger.spool.check_line``; one that fails goes to
    # ``<spool file>.quarantine`` (said in ``notices``) and the lines behind it are still applied.
    def _spool_paths(self) -> list[Path]:
        return [self.spool_path] + ([self.fallback_spool_path] if self.fallback_spool_path != self.spool_path else [])

    def _say(self, text: str) -> None:
        if text not in self.notices:
            self.notices.append(text)

    def has_spool(self) -> bool:
        """True when writes wait in a spool folder of ours (a spool file, or a replay left unfinished)."""
        return self._files.waiting()

    def _spool_line(self, line: str) -> None:
        self._files.put(line)

    def _spool(self, op: str, **args: Any) -> None:
        """Append one refused write to the spool, else to the fallback spool, else keep it in ``lost``.

        Append one refused write to the spool, else to the fallback spool (another filesystem),
        else keep it in ``lost`` (the caller prints it as a replay command). Each line starts with
        a newline, so a line a full disk cut short never swallows the next one. A spool folder or
        file that is not ours alone is not used (``notices`` names it). Never raises."""
        self._spool_line(
            json.dumps({"op": op, "args": {k: _plain(v) for k, v in args.items()}, "t": time.time()}, sort_keys=True)
        )

    def spooled(self) -> list[dict[str, Any]]:
        """The writes waiting in the spools, oldest first (``{"op", "args", "t"}``), unchecked."""
        return self._files.entries()

    def _check(self, e: Any) -> tuple[str, dict[str, Any]]:
        """``ledger.spool.check_line`` against the rows as the database holds them now."""
        import ledger.writes as writes
        from ledger.spool import check_line

        return check_line(
            e,
            lambda sid: writes._one(self.reads, sid),
            self.get_run,
            time.time(),
        )

    def replay_line(self, line: str) -> bool:
        """Apply one spool line (``gpuops ledger replay 'LINE'``); True once applied.

        Apply one spool line (``gpuops ledger replay 'LINE'``: what was printed when no spool
        could be written), after the same check as every spooled line (``ledger.spool.check_line``).
        Raises ``ledger.spool.BadLine`` saying why a line is refused (not one line of JSON, an
        unknown operation or argument, a value out of range, a closed row, a session not in this
        ledger). Database errors propagate."""
        from ledger.spool import BadLine

        lines = [x for x in line.splitlines() if x.strip()]
        if len(lines) != 1:
            raise BadLine("not one line")
        try:
            e = json.loads(lines[0])
        except ValueError:
            raise BadLine("not JSON") from None
        op, args = self._check(e)
        try:
            self._apply(op, args)
        except KeyError as k:
            raise BadLine(f"no {k} in this ledger") from None
        return True

    def _apply(self, op: str, args: dict[str, Any]) -> Any:
        """Apply one checked spool write (``ledger.spool.check_line``'s answer); a close returns the closed row."""
        args = dict(args)
        if op == "event":
            self._event(args["session_id"], args["kind"], args.get("detail", ""), args.get("at"))
        elif op == "update":
            self._set_with_event(args.pop("session_id"), None, "", **args)
        elif op == "heartbeat":
            self._heartbeat(**args)
        elif op == "request_end":
            self._request_end(**args)
        elif op == "close":
            return self._close(**args)
        elif op == "steps":
            self._add_steps(**args)
        elif op == "run_update":
            self._run_update(**args)
        elif op == "run_close":
            self._run_close(**args)

    def replay_spool(self) -> int:
        """Apply spooled writes in order and return how many were applied.

        Apply spooled writes in order; returns how many were applied. Each spool file is claimed
        by renaming it first (``<spool>.<pid>.replay``), so two processes never replay the same
        lines; a claimed file whose process is gone is picked up again. Every line is checked
        (``ledger.spool.check_line``): one that fails is moved to ``<spool>.quarantine`` and said in
        ``notices``, and the lines behind it are still applied. Writes the database refuses go back
        to the spool. Raises nothing for database errors (they re-spool). Inside ``bounded()`` the
        deadline is each write's, as for any write (``_run``), never the whole replay's: a ledger
        that answers every line in time is replayed to the end however many lines wait, and the
        first line refused or late puts itself and the rest back in the spool (and the ledger is
        taken as refusing, ``_refusing``)."""
        from ledger.spool import BadLine

        self._replay_stopped = None
        claimed, lines, unread = self._files.claim()
        if not claimed:
            return 0
        done = 0
        sessions: set[str] = set()
        closed: list[Any] = []
        for i, (spool, line, entry) in enumerate(lines):
            try:
                if entry is None:
                    raise BadLine("not JSON (a line cut short?)")
                op, args = self._check(entry)
                out = self._run(self._apply, {"op": op, "args": args})
                if op == "close" and out is not None:
                    closed.append(out)
            except _spooled_errors() + (_Late,) as refused:
                if self._bound is not None:
                    self._refused_at = time.monotonic()
                self._replay_stopped = str(getattr(refused, "orig", None) or refused)  # the driver's words
                for _, rest, _e in lines[i:]:
                    self._spool_line(rest)
                break
            except BadLine as why:
                self._files.quarantine(spool, line, str(why))
                continue
            except (KeyError, TypeError, ValueError) as why:  # passed the check, refused by the write
                self._files.quarantine(spool, line, f"{type(why).__name__}: {why}")
                continue
            done += 1
            sid = args.get("session_id")
            if sid:
                sessions.add(sid)
        self._files.release(claimed, unread)
        for sid in sessions:
            if self._refusing():
                break  # a label on the replay, not worth a deadline each
            try:
                self._run(self._event, {"session_id": sid, "kind": EventKind.SPOOL_REPLAYED, "detail": "", "at": None})
            except KeyError:
                pass
            except _spooled_errors() + (_Late,):
                if self._bound is not None:
                    self._refused_at = time.monotonic()
        for row in closed:
            for listener in list(CLOSE_REPLAYED):
                try:
                    listener(row)
                except Exception:  # noqa: BLE001, S110  a listener's error is its own
                    pass
        return done

    def _guarded(self, op: str, fn: Callable[..., T], **args: Any) -> T | None:
        """Run one write, spooling it when it is refused or late.

        Run one write; a refused (or, inside ``bounded()``, late) write is spooled (returns
        None), else pending spool lines are replayed before it (what was spooled first happened
        first). The held row follows either way."""
        try:
            self._check_vanished()
        except Exception:  # noqa: BLE001  a new file that cannot be made: the write below spools
            pass
        if not self._refusing() and self.has_spool():
            self.replay_spool()  # each line bounded; one refused or late re-spools the rest (refusing)
        if self._refusing():  # ours goes behind what waits in the spool
            self._spool(op, **args)
            self._hold(op, args)
            return None
        tables_loaded = "ledger.models" in sys.modules
        try:
            out = self._run(fn, args)
        except _spooled_errors() + (_Late,) as refused:
            # A write late while this process still imported the tables may have waited on that
            # import, not on the database: no refusal is held for the writes after it.
            if self._bound is not None and (tables_loaded or not isinstance(refused, _Late)):
                self._refused_at = time.monotonic()
            self._spool(op, **args)
            self._hold(op, args)
            return None
        self._refused_at = None
        self._hold(op, args, out)
        return out

    # -- writes -------------------------------------------------------------------------------
    def add_session(self, row: dict[str, Any]) -> None:
        """Insert the intent row and its first event in one transaction.

        Insert the intent row (status provisioning) and its first event in one transaction.
        ``row``: its ``sessions`` columns (``id`` and ``created_at`` required; the table's defaults
        for the rest, ``ledger/models.py``). ValueError for an unknown column."""
        import ledger.writes as writes

        with self._write() as (conn, reads):
            got = writes.add_session(conn, reads, {k: _plain(v) for k, v in row.items()})
        self._hold("row", {}, got)

    def update(self, session_id: str, **fields: Any) -> None:
        """Set fields of a session row in one short transaction.

        Set fields of a session row in one short transaction (spooled when the database refuses
        it). KeyError for an unknown id."""
        fields = {k: _plain(v) for k, v in fields.items()}
        self._guarded(
            "update",
            lambda session_id, **f: self._set_with_event(session_id, None, "", **f),
            session_id=session_id,
            **fields,
        )

    def event(self, session_id: str, kind: str, detail: Any = "", at: float | None = None) -> None:
        """Append an event to a session.

        Append an event (``kind``: an ``EventKind``; ``detail``: text or JSON-able, stored as
        JSON text; ``at``: epoch s, default now). Spooled when the database refuses it."""
        text = _plain(detail) if isinstance(detail, str) else json.dumps(detail, sort_keys=True)
        self._guarded(
            "event",
            self._event,
            session_id=session_id,
            kind=_plain(kind),
            detail=text,
            at=at if at is not None else time.time(),
        )

    def _event(self, session_id: str, kind: str, detail: str, at: float | None) -> None:
        import ledger.writes as writes

        with self._write() as (conn, _):
            writes.event(conn, session_id, _plain(kind), detail, at)

    def add_steps(self, session_id: str, steps: Iterable[dict[str, Any]]) -> None:
        """Store bootstrap step lines for a session.

        Store bootstrap step lines ``{"step", "status", "seconds", "detail"}`` (spooled when the
        database refuses them)."""
        steps = [{k: s.get(k) for k in ("step", "status", "seconds", "detail") if k in s} for s in steps]
        self._guarded("steps", self._add_steps, session_id=session_id, steps=steps)

    def _add_steps(self, session_id: str, steps: list[dict[str, Any]]) -> None:
        import ledger.writes as writes

        with self._write() as (conn, _):
            writes.add_steps(conn, session_id, steps)

    def request_end(self, session_id: str, reason: str, by: str = "", detail: str = "") -> str | None:
        """Record why a session is being ended, before its destroy.

        Record why a session is being ended, BEFORE its destroy: whoever closes the row then
        books this reason (the first request wins; a crash between destroy and close still leaves
        it). Event ``end_requested`` with detail ``{"reason", "by", "detail"}``. Returns the reason
        the row will close with (an earlier request's, or ``reason``), None when the write was
        spooled. KeyError for an unknown session."""
        return self._guarded(
            "request_end", self._request_end, session_id=session_id, reason=_plain(reason), by=_plain(by), detail=detail
        )

    def _request_end(self, session_id: str, reason: str, by: str = "", detail: str = "") -> str:
        import ledger.writes as writes

        with self._write() as (conn, _):
            return writes.request_end(conn, session_id, reason, by, detail)

    def close(
        self, session_id: str, ended_at: float, reason: str, exit_code: int | None = None, **fields: Any
    ) -> Row[Any] | None:
        """Close a session with its end time, reason, billed seconds and cost.

        Close a session: end time (confirmed destroy, or the provider's/agent's time), reason,
        billed seconds and cost from the charged price. A reason recorded earlier with
        ``request_end`` wins over ``reason``. Closing a closed row changes nothing. Returns the
        closed row, or None when the database refused the write (spooled: replayed later)."""
        fields = {k: _plain(v) for k, v in fields.items()}
        return self._guarded(
            "close",
            self._close,
            session_id=session_id,
            ended_at=ended_at,
            reason=_plain(reason),
            exit_code=exit_code,
            **fields,
        )

    def _close(
        self, session_id: str, ended_at: float, reason: str, exit_code: int | None = None, **fields: Any
    ) -> Row[Any]:
        import ledger.writes as writes

        with self._write() as (conn, reads):
            return writes.close(conn, reads, session_id, ended_at, reason, exit_code, fields)

    def heartbeat(self, session_id: str, at: float) -> None:
        """Record the on-box agent's heartbeat time (epoch s).

        Record the on-box agent's heartbeat time (epoch s); only moves forward. Spooled when
        the database refuses it."""
        self._guarded("heartbeat", self._heartbeat, session_id=session_id, at=at)

    def _heartbeat(self, session_id: str, at: float) -> None:
        import ledger.writes as writes

        with self._write() as (conn, _):
            writes.heartbeat(conn, session_id, at)

    def set_tokens(self, session_id: str, tokens: int) -> Row[Any]:
        """Set a session's token count after the fact and log an event.

        Set a session's token count after the fact (``ledger tokens SESSION N``) and log an event.
        Raises ValueError for a negative count, KeyError for an unknown session."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        return self._set_with_event(session_id, str(EventKind.TOKENS), str(tokens), tokens=int(tokens))

    def note(self, session_id: str, text: str) -> Row[Any]:
        """Set the session's one-line conclusion (``ledger note SESSION TEXT``) and log an event."""
        line = " ".join(text.split())
        return self._set_with_event(session_id, str(EventKind.NOTE), line, conclusion=line)

    def _set_with_event(self, session_id: str, kind: str | None, detail: str, **fields: Any) -> Row[Any]:
        import ledger.writes as writes

        with self._write() as (conn, reads):
            return writes.set_fields(conn, reads, session_id, kind, detail, fields)

    def import_rows(
        self,
        pairs: Iterable[tuple[int, Any]],
        errors: list[tuple[int, str]] | None = None,
        chunk: int = 5000,
        columns: Iterable[str] | None = None,
        constants: dict[str, Any] | None = None,
    ) -> int:
        """Import (line number, row) pairs in batches of ``chunk`` via ``import_chunks``.

        ``import_chunks`` of (line number, row) pairs, ``chunk`` of them per batch. A row is a
        dict of columns (absent ones NULL) or a tuple of ``columns`` (default every column of
        ``ledger.models.sessions``; the id first)."""
        if columns is None:
            from ledger.models import sessions

            columns = sessions.c.keys()
        cols = tuple(columns)

        def batches() -> Iterator[tuple[list[int], list[tuple[Any, ...]]]]:
            it = iter(pairs)
            while part := list(islice(it, chunk)):
                yield (
                    [line for line, _ in part],
                    [tuple(map(r.get, cols)) if isinstance(r, dict) else r for _, r in part],
                )

        return self.import_chunks(batches(), errors, cols, constants)

    def import_chunks(
        self,
        chunks: Iterable[tuple[Sequence[int], Sequence[tuple[Any, ...]]]],
        errors: list[tuple[int, str]] | None = None,
        columns: Iterable[str] | None = None,
        constants: dict[str, Any] | None = None,
        expected_rows: int = 0,
    ) -> int:
        """Stream batches of rows into ``sessions`` in ONE transaction.

        Stream batches of rows into ``sessions`` in ONE transaction, one executemany (or COPY) per
        batch: memory holds one batch, whatever the file's size. A batch is (line numbers, rows),
        each row a tuple of ``columns`` (default every column of ``ledger.models.sessions``; the id first)
        (``ledger.csvio.CsvImport.chunks``). ``errors``: a list the producer appends bad lines to
        while it is consumed; an id already in the ledger (or earlier in the same stream) is one
        too, reported when no line is otherwise bad. After the last batch, any error rolls
        everything back and raises ImportRejected naming every bad line; otherwise commits and
        returns the count written. Database errors roll back and propagate (as SQLAlchemy's, e.g.
        IntegrityError). ``constants``: {column: value} the same for every row, written as SQL
        literals (ours, never a user's string), so each row binds only ``columns``. On PostgreSQL
        (psycopg) each batch goes in by COPY after its ids are looked up; on SQLite each batch is
        inserted under a savepoint and its ids looked up only when the primary key refuses one,
        and a big import rebuilds the secondary indexes after its last row
        (``IMPORT_DEFER_INDEXES_ROWS``; before its first one when ``expected_rows``, the caller's
        estimate, says it will be big)."""
        import sqlalchemy as sa

        from ledger.csvio import LineErrors

        if columns is None:
            from ledger.models import sessions

            columns = sessions.c.keys()
        cols = tuple(columns)
        fixed = dict(constants or {})
        errors = errors if errors is not None else []
        clashes = LineErrors()
        count = 0
        with self.engine.begin() as conn:
            sqlite = conn.dialect.name == "sqlite"
            mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
            insert = (
                f"INSERT INTO sessions ({', '.join(cols + tuple(fixed))}) "
                f"VALUES ({', '.join([mark] * len(cols) + [_sql_literal(v, conn.dialect.name) for v in fixed.values()])})"
            )
            # Each id is looked up with whether THIS import wrote it (an id repeated further apart than
            # a batch): SQLite by rowid, PostgreSQL by the row's inserting transaction (xmin, 32 bits).
            mine = {"sqlite": "rowid > :before", "postgresql": "xmin::text::bigint = txid_current() %% 4294967296"}.get(
                conn.dialect.name, "0 = 1"
            )
            before = 0
            if sqlite:
                before = int(conn.exec_driver_sql("SELECT coalesce(max(rowid), 0) FROM sessions").scalar() or 0)
            lookup = f"SELECT id, {mine.replace(':before', str(int(before)))} FROM sessions WHERE id IN ({{}})"
            fixed_values = tuple(fixed.values())
            copy_sql = None
            if conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg":
                copy_sql = f"COPY sessions ({', '.join(cols + tuple(fixed))}) FROM STDIN"
            # SQLite: once this import outgrows the ledger it goes into, the secondary indexes are
            # dropped and rebuilt at the end in one sorted pass each (a third faster at a million
            # rows than updating nine B-trees per row); same transaction, so a failure restores them.
            deferred: list[str] = []
            defer_at = max(IMPORT_DEFER_INDEXES_ROWS, before) if sqlite else None

            def defer_indexes() -> None:
                unique = {r[1] for r in conn.exec_driver_sql("PRAGMA index_list(sessions)") if r[2]}
                for name, sql in conn.exec_driver_sql(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                    "AND tbl_name = 'sessions' AND sql IS NOT NULL"
                ).fetchall():
                    if name not in unique:
                        deferred.append(sql)
                        conn.exec_driver_sql('DROP INDEX "{}"'.format(name.replace('"', '""')))

            if defer_at is not None and expected_rows >= defer_at:
                defer_indexes()

            def look_up(batch: dict[str, tuple[int, tuple[Any, ...]]]) -> None:
                """Name the ids of ``batch`` already in the ledger (as clashes) and drop them from it."""
                ids = list(batch)
                for i in range(0, len(ids), 900):  # SQLite allows 999 parameters per statement
                    part = ids[i : i + 900]
                    for sid, repeat in conn.exec_driver_sql(lookup.format(", ".join([mark] * len(part))), tuple(part)):
                        clashes.append(
                            (
                                batch.pop(sid)[0],
                                f"session {sid} repeats an earlier line of this file"
                                if repeat
                                else f"session {sid} is already in the ledger (imported before?)",
                            )
                        )

            def write(batch: dict[str, tuple[int, tuple[Any, ...]]]) -> None:
                nonlocal count
                if sqlite and not clashes:  # the primary key finds a known id: look up only then
                    conn.exec_driver_sql("SAVEPOINT import_batch")
                    try:
                        conn.exec_driver_sql(insert, [r for _, r in batch.values()])
                    except sa.exc.IntegrityError:
                        conn.exec_driver_sql("ROLLBACK TO import_batch")
                        conn.exec_driver_sql("RELEASE import_batch")
                        look_up(batch)
                        if not clashes:
                            raise
                        return
                    conn.exec_driver_sql("RELEASE import_batch")
                else:
                    look_up(batch)
                    if not batch or clashes:
                        return
                    if copy_sql is not None:  # PostgreSQL: COPY, the bulk path (same values, same transaction)
                        dbapi = conn.dialect.loaded_dbapi
                        driver = conn.connection.driver_connection
                        assert driver is not None  # the connection this transaction holds
                        try:
                            with driver.cursor() as cur, cur.copy(copy_sql) as copy:
                                for _, r in batch.values():
                                    copy.write_row(r + fixed_values)
                        except dbapi.Error as e:  # as SQLAlchemy raises it for an INSERT (IntegrityError, ...)
                            raise sa.exc.DBAPIError.instance(
                                copy_sql, None, e, dbapi.Error, dialect=conn.dialect
                            ) from e
                    else:
                        conn.exec_driver_sql(insert, [r for _, r in batch.values()])
                count += len(batch)
                if defer_at is not None and count >= defer_at and not deferred:
                    defer_indexes()

            for lines, rows in chunks:
                if errors:  # a bad line rejects the file: stop writing, keep reading for more bad lines
                    continue
                batch = dict(zip(map(itemgetter(0), rows), zip(lines, rows)))
                if len(batch) != len(rows):  # an id twice in the batch: the later lines are clashes
                    batch = {}
                    for line, row in zip(lines, rows):
                        if row[0] in batch:
                            clashes.append((line, f"session {row[0]} repeats line {batch[row[0]][0]}"))
                        else:
                            batch[row[0]] = (line, row)
                if batch:
                    write(batch)
            if errors or clashes:  # bad lines first: ids are only compared once every line parses
                bad = errors or clashes
                raise ImportRejected(sorted(bad), getattr(bad, "total", len(bad)))
            for sql in deferred:
                conn.exec_driver_sql(sql)
        return count

    # -- runs (m010): the user's job across rentals --------------------------------------------
    @staticmethod
    def _runs_table() -> sa.Table:
        from ledger.models import runs

        return runs

    def add_run(self, run: dict[str, Any]) -> None:
        """Insert a ``runs`` row before its first rental.

        ``run``: its columns (``id`` and ``created_at`` required; the table's defaults for the
        rest, ``ledger/models.py``). ValueError for an unknown column."""
        runs = self._runs_table()
        bad = sorted(set(run) - set(runs.c.keys()))
        if bad:
            raise ValueError(f"unknown runs column(s): {', '.join(bad)}")
        if not run.get("id") or run.get("created_at") is None:
            raise ValueError("a run row needs its id and created_at")
        defaults = {c.name: getattr(c.default, "arg", None) for c in runs.c}
        fields = defaults | {k: _plain(v) for k, v in run.items()}
        with self._write() as (conn, _):
            conn.execute(sa.insert(self._runs_table()).values(**fields))
        self._held_runs[str(fields["id"])] = fields

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set fields of a run (spooled when the database refuses). KeyError for an unknown id."""
        fields = {k: _plain(v) for k, v in fields.items()}
        if run_id in self._held_runs:
            self._held_runs[run_id].update(fields)
        self._guarded("run_update", self._run_update, run_id=run_id, **fields)

    def _run_update(self, run_id: str, **fields: Any) -> None:
        runs = self._runs_table()
        bad = sorted(set(fields) - set(runs.c.keys()) - {"id"}) + (["id"] if "id" in fields else [])
        if bad:
            raise ValueError(f"unknown runs column(s): {', '.join(bad)}")
        with self._write() as (conn, _):
            if conn.execute(sa.update(runs).where(runs.c.id == run_id).values(**fields)).rowcount == 0:
                raise KeyError(run_id)

    def close_run(self, run_id: str, ended_at: float, reason: str, detail: str = "") -> None:
        """Close a run with its outcome and one line of detail.

        Close a run with its outcome (``reason``: the last rental's end reason, or what the run
        ran out of) and one line of ``detail``; closing a closed run changes nothing. Spooled when
        the database refuses it."""
        held = self._held_runs.get(run_id)
        if held is not None and held.get("status") != "closed":
            held.update(status="closed", ended_at=ended_at, end_reason=_plain(reason), detail=detail)
        self._guarded(
            "run_close", self._run_close, run_id=run_id, ended_at=ended_at, reason=_plain(reason), detail=detail
        )

    def _run_close(self, run_id: str, ended_at: float, reason: str, detail: str = "") -> None:
        runs = self._runs_table()
        with self._write() as (conn, _):
            status = conn.execute(sa.select(runs.c.status).where(runs.c.id == run_id)).scalar()
            if status is None:
                raise KeyError(run_id)
            if status == "closed":
                return
            conn.execute(
                sa.update(runs)
                .where(runs.c.id == run_id)
                .values(status="closed", ended_at=ended_at, end_reason=reason, detail=detail)
            )

    def held_run(self, run_id: str) -> Any | None:
        """The run as this Ledger last wrote or read it (no database read), or None."""
        d = self._held_runs.get(run_id)
        return SimpleNamespace(**d) if d is not None else None

    def get_run(self, run_id: str) -> Row[Any] | None:
        """The ``runs`` row (every column of ``ledger.models.runs``), or None."""
        got = self.reads.rows("runs", where=["id = :id"], params={"id": run_id})
        return got[0] if got else None

    def run_rentals(self, run_id: str) -> list[Row[Any]]:
        """The rentals (``sessions`` rows) of a run, in attempt order."""
        return cast(
            "list[Row[Any]]",
            self.reads.rows("sessions", where=["run_id = :rid"], params={"rid": run_id}, order="attempt, created_at"),
        )

    def runs(self, since: float | None = None, limit: int | None = None) -> list[Any]:
        """Return runs newest first, each with its rentals' totals.

        Runs newest first (``since``: created at or after, epoch s), each with its rentals'
        totals: ``rentals``, ``cost_usd`` (their sum; None while none has a cost), ``billed_seconds``,
        ``tokens``, ``simulated`` (any rental simulated). Rows with attribute access."""
        cols = (
            "r.id, r.experiment, r.provider, r.status, r.created_at, r.ended_at, r.end_reason, r.detail, r.recover, "
            "r.attempts, r.max_hours, r.max_usd, r.owner"
        )
        sql = (
            f"SELECT {cols}, COUNT(s.id) AS rentals, SUM(s.cost_usd) AS cost_usd, "
            "SUM(s.billed_seconds) AS billed_seconds, COALESCE(SUM(s.tokens), 0) AS tokens, "
            "MAX(CASE WHEN s.simulated THEN 1 ELSE 0 END) AS simulated "
            "FROM runs r LEFT JOIN sessions s ON s.run_id = r.id "
            + ("WHERE r.created_at >= :since " if since is not None else "")
            + f"GROUP BY {cols} ORDER BY r.created_at DESC, r.id DESC"
            + (" LIMIT :limit" if limit is not None else "")
        )
        params: dict[str, Any] = {}
        if since is not None:
            params["since"] = since
        if limit is not None:
            params["limit"] = int(limit)
        names = [c.strip().removeprefix("r.") for c in cols.split(",")]
        names += ["rentals", "cost_usd", "billed_seconds", "tokens", "simulated"]
        out = []
        for r in self.reads.query(sql, params):
            d = dict(zip(names, r))
            out.append(SimpleNamespace(**{**d, "simulated": bool(d["simulated"])}))
        return out

    # -- reads --------------------------------------------------------------------------------
    def get(self, session_id: str) -> Row[Any] | None:
        """The session row (None when there is none); this Ledger then holds it (``held``)."""
        from ledger.writes import _one

        row = _one(self.reads, session_id)
        if row is not None and (session_id not in self._held or not self.has_spool()):
            self._hold("row", {}, row)  # not over a held row whose later writes still wait in the spool
        return row

    def find(self, prefix: str) -> list[Row[Any]]:
        """Return the sessions whose id starts with ``prefix``, by id.

        Sessions whose id starts with ``prefix`` (users type short ids). On SQLite (binary
        collation) a key range on the primary key; elsewhere LIKE (a linguistic collation does not
        order every string with the prefix inside that range)."""
        if self.reads.dialect == "sqlite" and prefix and ord(prefix[-1]) < 0x10FFFF:
            where, params = ["id >= :lo", "id < :hi"], {"lo": prefix, "hi": prefix[:-1] + chr(ord(prefix[-1]) + 1)}
        else:
            escaped = prefix.replace("/", "//").replace("%", "/%").replace("_", "/_")
            where, params = ["id LIKE :pattern ESCAPE '/'"], {"pattern": escaped + "%"}
        rows = self.reads.rows("sessions", where=where, params=params, order="id")
        return [r for r in rows if r.id.startswith(prefix)]

    def open_sessions(self) -> list[Row[Any]]:
        """Return every session not closed, oldest intent first.

        Every session not closed, oldest intent first, as read-only rows (SQLAlchemy ``Row``;
        re-read with ``get`` before writing). Answered from the partial index ``ix_sessions_open``:
        a handful of rows whatever the ledger's size. Spooled writes are replayed first (bounded:
        ``bounded()``), so a spooled close is finished by whoever lists the open sessions next
        (``ps``, ``watchdog``, ``reconcile``) instead of being taken for a box still running or one
        that vanished. When writes still wait in the spool after it (the ledger refused or was late,
        or another process is replaying them), ``notices`` says so: the rows listed may not hold
        them yet (a spooled close lists its box as open)."""
        if self.has_spool():
            why = "a ledger write was refused moments ago"
            _load_write_tables()  # before the replay's deadlines: they bound the database, not this import
            with self.bounded():
                if not self._refusing():
                    self.replay_spool()
                    why = self._replay_stopped or "another gpuops is replaying them"
            if self.has_spool():
                self._say(
                    f"{len(self.spooled())} ledger write(s) still wait in the spool, not booked before this listing "
                    f"({why}): a spooled close still lists its box as open; the next `gpuops ps` or "
                    "`gpuops ledger replay` books them"
                )
        return cast("list[Row[Any]]", self.reads.open_sessions())

    def last_event(self, session_id: str, kind: str) -> tuple[float, Any] | None:
        """Return the newest ``kind`` event of ``session_id`` as (epoch s, detail), or None.

        (epoch s, detail parsed from JSON, else the text) of the newest ``kind`` event of
        ``session_id``, or None."""
        got = self.reads.last_event(session_id, kind)
        if got is None:
            return None
        at, text = got
        try:
            detail = json.loads(text) if text else ""
        except ValueError:
            detail = text
        return float(at), detail

    def active_refusals(self) -> list[Row[Any]]:
        """Refusals not lifted (``refusals`` rows, oldest first) as read-only rows."""
        return cast("list[Row[Any]]", self.reads.active_refusals())

    def watchdog_passes(self) -> list[Row[Any]]:
        """The newest pass of each watchdog (host, owner), newest first (``watchdog_passes`` rows)."""
        return cast("list[Row[Any]]", self.reads.watchdog_passes())

    def rows_between(
        self, start: float | None = None, end: float | None = None, columns: Iterable[str] | None = None
    ) -> list[Row[Any]]:
        """Session rows whose intent time (``created_at``, epoch s) is in [start, end), oldest first.

        ``columns``: which to load (default all); see ``ledger.reads.Reads.rows_between``."""
        return cast("list[Row[Any]]", self.reads.rows_between(start, end, columns))  # a list: not streamed

    def overlapping(
        self, start: float | None, end: float | None, columns: Iterable[str] | None = None
    ) -> Iterator[Row[Any]]:
        """Stream the narrow session rows that may have spent money in [start, end) epoch s.

        (``ledger.reads.Reads.overlapping``)."""
        return cast("Iterator[Row[Any]]", self.reads.overlapping(start, end, columns))

    def cost_lines(self, start: float | None, end: float | None) -> list[Row[Any]]:
        """Cost lines (storage, USD) whose period overlaps [start, end) epoch s (``ledger.reads.Reads.cost_lines``)."""
        return cast("list[Row[Any]]", self.reads.cost_lines(start, end))

    @property
    def dialect(self) -> str:
        """``sqlite`` or the SQLAlchemy dialect name (``postgresql``)."""
        return self.reads.dialect

    def iter_query(self, sql: str, params: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
        """Tuples of a read-only ``sql`` with named ``:params``, streamed (flat memory)."""
        return self.reads.iter_query(sql, params)

    def steps(self, session_id: str) -> list[Row[Any]]:
        """The session's bootstrap steps in the order written (``name``, ``status``, ``seconds`` wall s, ``detail``)."""
        return cast(
            "list[Row[Any]]",
            self.reads.rows("bootstrap_steps", where=["session_id = :sid"], params={"sid": session_id}, order="id"),
        )

    def events(self, session_id: str) -> list[Row[Any]]:
        """The session's events, oldest first (``id, session_id, at`` epoch s``, kind, detail``)."""
        import ledger.writes as writes

        return writes.events(self.reads, session_id)


if TYPE_CHECKING:

    def _implements(ledger: Ledger) -> Books:
        """The type checker's proof that ``Ledger`` is a ``ledger.books.Books``."""
        return ledger
