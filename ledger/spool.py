"""The spool's two guards: a folder only we can write, and a line only applied when it checks out.

What we wrote ourselves is input too: a spool line crosses a boundary (the disk, another version,
another user who got to the folder first), so

* ``own_dir(path)`` makes the spool folder (0700, by the current user) and refuses one whose owner
  or mode lets anyone else write into it (``SpoolRefused``, one line naming it and the fix), before
  anything in it is read or written; ``own_file(fd, path)`` does the same for an opened spool file
  (0600, ours);
* ``check_line(entry, row_of, run_of, now)`` admits a line only when it names an operation of the
  closed list ``OPS`` with the arguments that operation takes, each of its type and range: money
  finite and >= 0, times finite, not before the row was written (a close's end: not before its
  instance's create, by the provider's clock) and not more than ``FUTURE_S``
  seconds after ``now``, end reasons, statuses and event kinds from the vocabulary, and nothing
  that reopens or rewrites a closed row. A line that fails raises ``BadLine`` (the store moves it to
  the quarantine file and reports it; the lines behind it are still applied). ``gpuops ledger
  replay 'LINE'`` goes through the same check.

``SpoolFiles`` is the spool itself (append a refused write, list, claim, quarantine); the store
(``ledger/store.py``: ``Ledger._guarded``) sends a write there when the database refuses it and
replays each line through the same writes it would have made.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onbox.vocabulary import EndReason, EventKind, RowStatus

# A spooled time may lie this many seconds after the replaying clock (the same machine wrote it).
FUTURE_S = 5.0


class SpoolRefused(OSError):
    """A spool folder or file whose owner or mode is not ours alone (the message names it and the fix)."""


class BadLine(ValueError):
    """A spool line that fails ``check_line`` (the message says which argument and why)."""


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _check_dir(path: Path, *, mine_only: bool, spool: Path | None = None) -> None:
    """Refuse ``path`` unless it is a real directory of ours (or root's) no one else can write.

    ``mine_only``: the spool folder itself: ours, and no group/other bits at all (0700). Else (a
    folder above ``spool``): ours or root's, and not writable by group/other unless sticky (like /tmp)."""
    st = os.lstat(path)
    uid = _uid()
    if not stat.S_ISDIR(st.st_mode):
        raise SpoolRefused(f"spool folder {path} is not a directory (a link or a file): refused; remove it")
    if uid is None:
        return
    mode = stat.S_IMODE(st.st_mode)
    if mine_only:
        if st.st_uid != uid or mode & 0o077:
            raise SpoolRefused(
                f"spool folder {path} is owned by uid {st.st_uid} with mode {mode:04o}, not ours alone "
                f"(uid {uid}, 0700): refused; remove it (another user may have made it) and retry"
            )
        return
    if st.st_uid not in (uid, 0) or (mode & 0o022 and not mode & stat.S_ISVTX):
        raise SpoolRefused(
            f"spool folder {spool or path} sits in {path}, owned by uid {st.st_uid} with mode {mode:04o}, which others "
            "can write: refused; point GPUOPS_SPOOL_DIR at a folder of your own"
        )


def own_dir(path: Path) -> Path:
    """Make the spool folder ``path`` (each missing folder 0700, by us) and check it is ours alone.

    Checks ``path`` (ours, 0700) and the folder above it (ours or root's, not writable by others
    unless sticky). Returns ``path``. Raises SpoolRefused naming the folder and the fix, OSError
    when it cannot be made."""
    path = Path(path)
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass  # made meanwhile: checked below like any folder we found
    _check_dir(path.parent, mine_only=False, spool=path)
    _check_dir(path, mine_only=True)
    return path


def check_dir(path: Path) -> bool:
    """Whether the spool folder ``path`` exists and is ours alone (False: absent); SpoolRefused when not ours."""
    if not os.path.lexists(path):
        return False
    _check_dir(Path(path).parent, mine_only=False, spool=Path(path))
    _check_dir(Path(path), mine_only=True)
    return True


def own_file(fd: int, path: Path) -> None:
    """Refuse the opened spool file ``fd`` unless it is a regular file of ours, mode 0600 or less."""
    st = os.fstat(fd)
    uid = _uid()
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISREG(st.st_mode) or (uid is not None and (st.st_uid != uid or mode & 0o077)):
        raise SpoolRefused(
            f"spool file {path} is owned by uid {st.st_uid} with mode {mode:04o}, not ours alone (0600): "
            "refused; remove it"
        )


# -- the lines -----------------------------------------------------------------------------------
_STR, _OPT_STR, _INT, _OPT_INT, _MONEY, _TIME, _OPT_TIME, _SECONDS, _BOOL = (
    "str",
    "str?",
    "int",
    "int?",
    "money",
    "time",
    "time?",
    "seconds",
    "bool",
)

# Each operation the store spools, with the arguments it takes (all but the ``?`` ones required
# unless listed in ``_OPTIONAL``); ``update``/``close``/``run_update`` also take columns (below).
OPS: dict[str, dict[str, str]] = {
    "event": {"session_id": _STR, "kind": "kind", "detail": _STR, "at": _OPT_TIME},
    "update": {"session_id": _STR},
    "heartbeat": {"session_id": _STR, "at": _TIME},
    "request_end": {"session_id": _STR, "reason": "reason", "by": _STR, "detail": _STR},
    "close": {"session_id": _STR, "ended_at": _TIME, "reason": "reason", "exit_code": _OPT_INT},
    "steps": {"session_id": _STR, "steps": "steps"},
    "run_update": {"run_id": _STR},
    "run_close": {"run_id": _STR, "ended_at": _TIME, "reason": _STR, "detail": _STR},
}
_OPTIONAL = {"by", "detail", "exit_code", "at"}

# The ``sessions`` columns a spooled ``update`` may set, by kind (``ledger.models.sessions``).
SESSION_COLUMNS: dict[str, str] = {
    **dict.fromkeys(
        ("experiment", "job", "provider", "card", "label", "conclusion", "note", "log_path", "results_path"), _STR
    ),
    **dict.fromkeys(("instance_id", "offer_id", "owner", "account", "run_id", "cost_source"), _OPT_STR),
    "gpu_count": _INT,
    "attempt": _OPT_INT,
    "tokens": "tokens",
    "spot": _BOOL,
    "simulated": _BOOL,
    "status": "status",
    **dict.fromkeys(
        ("usd_per_hour", "bid_usd_per_hour", "estimated_usd", "charged_usd", "max_session_usd", "cost_usd"), _MONEY
    ),
    **dict.fromkeys(("instance_created_at", "ready_at", "last_heartbeat_at"), _OPT_TIME),
    **dict.fromkeys(
        ("job_seconds", "billing_increment_seconds", "max_hours", "ready_timeout_seconds", "idle_minutes"), _SECONDS
    ),
}
# What only ``close`` books: a spooled ``update`` never sets these (no reopening, no rewritten end).
CLOSING_COLUMNS = frozenset({"status", "ended_at", "end_reason", "end_source", "billed_seconds", "cost_usd"})
# What a spooled ``close`` takes beside its own arguments.
CLOSE_COLUMNS: dict[str, str] = {
    "tokens": "tokens",
    "end_source": _OPT_STR,
    "billing_increment_seconds": _SECONDS,
}
RUN_COLUMNS: dict[str, str] = {
    "attempts": _INT,
    "note": _STR,
    "detail": _STR,
    "max_hours": _SECONDS,
    "max_usd": _MONEY,
}


def _value(name: str, kind: str, v: Any, life: tuple[float, float] | None, now: float) -> None:
    """Refuse ``v`` unless it is a ``kind`` value (BadLine naming ``name``)."""

    def bad(why: str) -> BadLine:
        return BadLine(f"{name}={v!r}: {why}")

    if v is None and (kind.endswith("?") or kind in (_MONEY, _SECONDS)):
        return
    if kind in (_STR, _OPT_STR):
        if not isinstance(v, str):
            raise bad("not text")
    elif kind in (_INT, _OPT_INT, "tokens"):
        if not isinstance(v, int) or isinstance(v, bool):
            raise bad("not a whole number")
        if kind == "tokens" and v < 0:
            raise bad("a negative count")
    elif kind == _BOOL:
        if not isinstance(v, bool):
            raise bad("not true/false")
    elif kind in (_MONEY, _SECONDS, _TIME, _OPT_TIME):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad("not a finite number")
        if kind in (_MONEY, _SECONDS) and v < 0:
            raise bad("negative")
        if kind in (_TIME, _OPT_TIME):
            lo, hi = life if life is not None else (0.0, now + FUTURE_S)
            if v < lo:
                raise bad(f"before the row was written ({lo:.3f})")
            if v > hi:
                raise bad(f"more than {FUTURE_S:g} s after now ({now:.3f})")
    elif kind == "reason":
        if EndReason.parse(v) is None:
            raise bad("not an end reason")
    elif kind == "status":
        if RowStatus.parse(v) is None or v == RowStatus.CLOSED:
            raise bad("not an open row status (only a close closes a row)")
    elif kind == "kind":
        if EventKind.parse(v) is None:
            raise bad("not an event kind")
    elif kind == "steps":
        if not isinstance(v, list) or not all(isinstance(s, dict) for s in v):
            raise bad("not a list of steps")
        for s in v:
            extra = set(s) - {"step", "status", "seconds", "detail"}
            if extra or not isinstance(s.get("step"), str) or not isinstance(s.get("status", ""), str):
                raise bad("a step that is not {step, status, seconds, detail}")
            _value("seconds", _SECONDS, s.get("seconds", 0.0), life, now)
    else:  # pragma: no cover  (a kind the tables above do not use)
        raise bad(f"unknown kind {kind}")


def check_line(
    entry: Any,
    row_of: Callable[[str], Any],
    run_of: Callable[[str], Any],
    now: float,
) -> tuple[str, dict]:
    """``(op, args)`` of a spool line once it checks out; BadLine saying why it does not.

    ``entry``: the parsed line (``{"op", "args", "t"}``). ``row_of(session_id)``: the session row
    as the ledger holds it (None: not in this ledger); ``run_of(run_id)``: the run (None: none).
    ``now``: epoch s. Times must fall in the row's life: not before its ``created_at`` (a close's
    end: not before its instance's create, which the provider's clock may put before the intent),
    not more than ``FUTURE_S`` after ``now``. A closed row takes no ``update`` of what only a close books and
    no new close (the first close stands; the store would ignore it anyway)."""
    if not isinstance(entry, dict):
        raise BadLine("not a JSON object")
    extra = set(entry) - {"op", "args", "t"}
    if extra:
        raise BadLine(f"unknown field(s) {', '.join(sorted(map(str, extra)))}")
    op, args = entry.get("op"), entry.get("args")
    if op not in OPS:
        raise BadLine(f"op {op!r} is not one of {', '.join(OPS)}")
    if not isinstance(args, dict):
        raise BadLine(f"{op}: args is not an object")
    spec = OPS[op]
    columns = {"update": SESSION_COLUMNS, "close": CLOSE_COLUMNS, "run_update": RUN_COLUMNS}.get(op, {})
    unknown = sorted(set(args) - set(spec) - set(columns))
    if unknown:
        refused = sorted(set(unknown) & CLOSING_COLUMNS) if op == "update" else []
        raise BadLine(
            f"{op}: "
            + (f"sets {', '.join(refused)}, which only a close books" if refused else "unknown argument(s) ")
            + ("" if refused else ", ".join(map(str, unknown)))
        )
    missing = sorted(k for k in spec if k not in args and k not in _OPTIONAL)
    if missing:
        raise BadLine(f"{op}: missing {', '.join(missing)}")
    life = None
    if "session_id" in spec:
        sid = args["session_id"]
        if not isinstance(sid, str):
            raise BadLine(f"{op}: session_id is not text")
        row = row_of(sid)
        if row is None:
            raise BadLine(f"{op}: no session {sid!r} in this ledger")
        life = (float(row.created_at), now + FUTURE_S)
        if op == "close" and row.instance_created_at is not None:
            # a rental's life starts at its instance's create, by the provider's clock (the end-time
            # rule's start): a provider clock behind ours puts it before our intent
            life = (min(life[0], float(row.instance_created_at)), life[1])
        if op == "close" and row.status == RowStatus.CLOSED:
            raise BadLine(f"close: session {sid} is closed already (at {row.ended_at})")
        if op == "update" and row.status == RowStatus.CLOSED and "status" in args:
            raise BadLine(f"update: status={args['status']!r} would reopen session {sid}, closed at {row.ended_at}")
    else:
        rid = args["run_id"]
        run = run_of(rid) if isinstance(rid, str) else None
        if run is None:
            raise BadLine(f"{op}: no run {rid!r} in this ledger")
        life = (float(run.created_at), now + FUTURE_S)
        if op == "run_close" and run.status == "closed":
            raise BadLine(f"run_close: run {rid} is closed already")
    for k, v in args.items():
        if k in ("session_id", "run_id"):
            continue
        _value(k, spec.get(k) or columns[k], v, life, now)
    if op == "close":
        row = row_of(args["session_id"])
        start = row.instance_created_at or row.created_at
        if args["ended_at"] < float(start):
            raise BadLine(f"close: ended_at={args['ended_at']!r} is before the instance was created ({start})")
    return op, dict(args)


def _when(e: Any) -> float:
    """The time a spool line was written (epoch s; 0 when it names none)."""
    t = e.get("t") if isinstance(e, dict) else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) else 0.0


class SpoolFiles:
    """The files where refused writes wait: JSON lines, one write each, in the folders ``paths()`` names.

    ``paths()``: the spool files, first choice first (``Ledger.spool_path``, then the fallback on
    another filesystem). Each folder is checked ours alone (``own_dir``/``check_dir``) before
    anything in it is read or written and each file when opened (``own_file``); a refused one is
    skipped and said once through ``say``. A line no file could take goes to ``lost``."""

    def __init__(self, paths: Callable[[], list[Path]], say: Callable[[str], None], lost: list[str]) -> None:
        self.paths, self.say, self.lost = paths, say, lost

    def dir_ok(self, path: Path, make: bool) -> bool:
        """Whether ``path``'s folder may be used: exists (made when ``make``) and is ours alone."""
        try:
            if make:
                own_dir(path.parent)
                return True
            return check_dir(path.parent)
        except SpoolRefused as e:
            self.say(str(e))
        except OSError:
            pass
        return False

    def leftovers(self, path: Path) -> list[Path]:
        """``<spool>.<pid>[-n].replay`` files a replay claimed and never finished (its process is gone)."""
        out: list[Path] = []
        try:
            names = os.listdir(path.parent)
        except OSError:
            return out
        for n in names:
            if not (n.startswith(path.name + ".") and n.endswith(".replay")):
                continue
            pid = n[len(path.name) + 1 : -len(".replay")].split("-", 1)[0]
            if not pid.isdigit():
                continue
            if int(pid) != os.getpid():
                try:
                    os.kill(int(pid), 0)
                    continue  # another process is replaying it now
                except ProcessLookupError:
                    pass
                except OSError:
                    continue
            out.append(path.parent / n)
        return sorted(out)

    def waiting(self) -> bool:
        """True when writes wait in a spool folder of ours (a spool file, or a replay left unfinished)."""
        return any(self.dir_ok(p, False) and (p.exists() or bool(self.leftovers(p))) for p in self.paths())

    def append(self, path: Path, line: str) -> None:
        """Append ``line`` to the spool file ``path`` (0600, ours, no link followed). Raises OSError.

        Each line starts with a newline, so a line a full disk cut short never swallows the next one."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            own_file(fd, path)
            data = ("\n" + line + "\n").encode("utf-8")
            if os.write(fd, data) != len(data):
                raise OSError("short write")
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, path: Path) -> str:
        """The text of the spool file ``path`` once it is checked ours (0600, no link). Raises OSError."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            own_file(fd, path)
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read().decode("utf-8", "replace")
        finally:
            os.close(fd)

    def put(self, line: str) -> None:
        """Append one line to the first spool that takes it, else keep it in ``lost``. Never raises."""
        for path in self.paths():
            if not self.dir_ok(path, True):
                continue
            try:
                self.append(path, line)
                return
            except SpoolRefused as e:
                self.say(str(e))
            except OSError:
                continue
        self.lost.append(line)

    def entries(self) -> list[dict[str, Any]]:
        """The writes waiting in the spools, oldest first (``{"op", "args", "t"}``), unchecked."""
        out = []
        for path in self.paths():
            if not self.dir_ok(path, False):
                continue
            for f in [path, *self.leftovers(path)]:
                try:
                    text = self.read(f)
                except OSError:
                    continue
                for line in text.splitlines():
                    try:
                        e = json.loads(line) if line.strip() else None
                    except ValueError:
                        continue  # a line cut by a crash or a full disk mid-write
                    if isinstance(e, dict):
                        out.append(e)
        return sorted(out, key=_when)

    def claim(self) -> tuple[list[tuple[Path, Path]], list[tuple[Path, str, Any]], set[Path]]:
        """Claim every spool file for this process and read its lines, oldest first.

        Each file is renamed first (``<spool>.<pid>.replay``), so two processes never replay the
        same lines; a claimed file whose process is gone is picked up again. Returns ((spool file,
        claimed copy) pairs, (spool file, line, its JSON or None) oldest first, the claimed copies
        that could not be read: left where they are, said through ``say``)."""
        claimed: list[tuple[Path, Path]] = []
        for path in self.paths():
            if not self.dir_ok(path, False):
                continue
            sources = ([path] if path.exists() else []) + self.leftovers(path)
            for k, src in enumerate(sources):
                mine = path.with_name(path.name + f".{os.getpid()}{'-' + str(k) if k else ''}.replay")
                if src != mine:
                    try:
                        os.replace(src, mine)
                    except OSError:
                        continue
                claimed.append((path, mine))
        lines: list[tuple[Path, str, Any]] = []
        unread: set[Path] = set()
        for spool, c in claimed:
            try:
                text = self.read(c)
            except OSError as e:
                self.say(f"spool file {c} could not be read ({e}); left where it is")
                unread.add(c)
                continue
            for line in text.splitlines():
                if not line.strip():
                    continue
                try:
                    lines.append((spool, line, json.loads(line)))
                except ValueError:
                    lines.append((spool, line, None))
        lines.sort(key=lambda x: _when(x[2]))
        return claimed, lines, unread

    def release(self, claimed: list[tuple[Path, Path]], unread: set[Path]) -> None:
        """Remove the claimed copies a replay went through (not the unread ones)."""
        for _, c in claimed:
            if c in unread:
                continue
            try:
                c.unlink()
            except OSError:
                pass

    def quarantine(self, spool: Path, line: str, why: str) -> None:
        """Keep a line that failed the check in ``<spool>.quarantine`` and say so."""
        q = spool.with_name(spool.name + ".quarantine")
        doc = json.dumps({"why": why, "line": line, "at": time.time()}, sort_keys=True)
        try:
            self.append(q, doc)
            self.say(f"a spool line was not applied ({why}); it is kept in {q}")
        except OSError:
            self.say(f"a spool line was not applied ({why}) and could not be kept: {line[:200]}")
