"""Results come home: a resumable, checksummed copy of the box's results directory.

1. On the box, ``onbox/manifest.py`` (stdlib, shipped with the runner at ``arm``) lists every
   regular file with its size (bytes) and sha256; when a persistent volume is mounted it first
   keeps a verified copy at ``<volume>/gpuops/results/<session>/`` (so results survive the destroy
   even when the laptop cannot take them).
2. Here, each file goes to ``<dest>/<path>.gpuops-part`` in chunks (``CHUNK`` bytes) read at an
   offset; after a dropped connection the copy reconnects and resumes at the partial file's size,
   until ``deadline``. A finished file must have the manifest's size and sha256, else it is
   fetched once more from zero and then counted failed; only then is it renamed into place. A file
   already home with the right size and sha256 is not fetched again (a re-run resumes).
3. Names from the box are trusted only as plain path components (no ``/``, ``..``, NUL, absolute);
   anything else is skipped and listed, and nothing is written through a symlink. A component
   holding control or bidi characters (a newline, ESC) is written home under its escaped name
   (``gpuops.textsafe.safe``, the one escaping every renderer uses) and listed in ``renamed``;
   what the box left out for safety (symlinks, FIFOs, devices) is listed in ``skipped``, and the
   summary line names both.

The on-box agent must not destroy the box during the copy: the laptop holds its presence lease
(``gpuops.agent.agentctl.hold_presence``, when that agent build is present) for the whole copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuops.agent.bootstrap_config import RUNNER_DIR

CHUNK = 4 << 20  # bytes read per request; also the most a drop can cost to re-read
MANIFEST = f"{RUNNER_DIR}/manifest.py"  # shipped with the runner
RETRY_WAIT_S = 0.5  # first wait after a dropped connection; doubles up to 8 s
MAX_BYTES = 50 * 2**30  # what a laptop accepts from a box it does not trust (as gpuops.box.remote's copy-back caps)
MAX_FILES = 200_000


@dataclass
class Entry:
    """One file of the manifest: ``path`` relative, ``/``-separated; ``size`` bytes; ``sha256`` hex."""

    path: str
    size: int
    sha256: str


@dataclass
class CopyReport:
    """What the copy did.

    ``ok``: every listed file is home and verified. ``bytes`` copied now
    (resumed bytes not re-read are in ``resumed_bytes``); ``seconds`` wall time; ``reconnects``:
    connections re-made after a drop; ``failed``: "path: why"; ``skipped``: entries not copied
    (symlinks, FIFOs, unsafe names), "path (why)"; ``renamed``: "box name -> name home" for names
    with control characters, both escaped; ``kept``: the box-side copy on the volume (or None).
    Every path in the lists is escaped (``gpuops.textsafe.safe``)."""

    ok: bool = True
    files: int = 0
    total_bytes: int = 0
    bytes: int = 0
    resumed_bytes: int = 0
    seconds: float = 0.0
    reconnects: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    renamed: list[str] = field(default_factory=list)
    kept: str | None = None
    error: str | None = None

    def as_json(self) -> dict:
        return {
            k: getattr(self, k)
            for k in (
                "ok",
                "files",
                "total_bytes",
                "bytes",
                "resumed_bytes",
                "seconds",
                "reconnects",
                "failed",
                "skipped",
                "renamed",
                "kept",
                "error",
            )
        }

    def line(self) -> str:
        """One line for the summary: what came home, what was renamed and what was skipped for safety."""
        kept = f"; a verified copy is on the volume at {self.kept}" if self.kept else ""

        def listed(what: str, items: list[str], n: int = 5) -> str:
            more = f" and {len(items) - n} more" if len(items) > n else ""
            return f"; {what}: {', '.join(items[:n])}{more}" if items else ""

        names = listed("renamed (control characters in the name)", self.renamed) + listed(
            "skipped for safety", self.skipped
        )
        if self.ok:
            return (
                f"{self.files} files, {self.total_bytes:,} bytes, sha256 verified"
                + (f" ({self.reconnects} reconnects)" if self.reconnects else "")
                + names
                + kept
            )
        what = self.error or f"{len(self.failed)} of {self.files} files failed: {'; '.join(self.failed[:3])}"
        return (
            f"NOT all copied home: {what}"
            + names
            + (kept or "; the box is destroyed, so what did not come home is lost")
        )


def safe_parts(path: str) -> list[str] | None:
    """``path`` split into plain components, or None when it is not a safe relative path.

    Unsafe: a component that is empty, ``.``, ``..``, or holds a backslash or NUL, or an absolute path."""
    if not path or path.startswith("/"):
        return None
    parts = path.split("/")
    if any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        return None
    return parts


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(
    box, remote_dir: str, *, keep_to: str | None = None, timeout: float = 600.0
) -> tuple[list[Entry], list[str], dict]:
    """Run the manifest on the box: (entries, skipped "path (why)", last line).

    Raises GpuopsError when it fails; FileNotFoundError when ``remote_dir`` does not exist."""
    import shlex

    from gpuops.errors import GpuopsError
    from gpuops.textsafe import safe

    entries: list[Entry] = []
    skipped: list[str] = []
    last: dict = {}
    errors: list[str] = []

    def on_line(line: str) -> None:
        try:
            obj = json.loads(line)
        except ValueError:
            errors.append(line)
            return
        if not isinstance(obj, dict):
            return
        if "path" in obj:
            try:
                entries.append(Entry(str(obj["path"]), int(obj["size"]), str(obj["sha256"]).lower()))
            except (KeyError, TypeError, ValueError):
                skipped.append(f"{safe(repr(obj.get('path')))} (malformed manifest line)")
        elif "skipped" in obj:
            skipped.append(f"{safe(obj['skipped'])} ({safe(obj.get('why', '?'))})")
        elif "files" in obj:
            last.update(obj)

    cmd = f"python3 {shlex.quote(MANIFEST)} {shlex.quote(remote_dir)}"
    if keep_to:
        cmd += f" --keep-to {shlex.quote(keep_to)}"
    rc = box.run(cmd, timeout=timeout, on_line=on_line)
    if rc == 2:
        raise FileNotFoundError(remote_dir)
    if rc != 0 or not last:
        raise GpuopsError(
            f"listing the results on the box failed (exit {rc}): {' '.join(errors)[:200]}",
            "the box's python3 must run .gpuops/onbox/manifest.py",
        )
    return entries, skipped, last


class _Reader:
    """Reads a box file at an offset, over SFTP for an SSHBox or directly for a LocalBox.

    After a dropped connection ``reset()`` makes the next read reconnect."""

    def __init__(self, box):
        self.box = box
        self._f = None
        self._path = None

    def read(self, remote_abs: str, offset: int, n: int) -> bytes:
        if self._f is None or self._path != remote_abs:
            self.close()
            if hasattr(self.box, "sftp"):
                self._f = self.box.sftp().open(remote_abs, "rb")
            else:
                self._f = open(remote_abs, "rb")
            self._path = remote_abs
        self._f.seek(offset)
        return self._f.read(n)

    def close(self) -> None:
        if self._f is not None:
            with contextlib.suppress(Exception):  # closing a handle on a dead connection may raise anything
                self._f.close()
        self._f = None

    def reset(self) -> None:
        self._f = None  # the handle died with its connection
        drop = getattr(self.box, "_drop", None)
        if drop is not None:
            drop()  # the next sftp() reconnects (SSHBox._transport)


def _transient(e: BaseException) -> bool:
    """A dropped connection or a timeout (worth reconnecting), not a missing file or a bug."""
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    try:
        import paramiko

        if isinstance(e, paramiko.SSHException):
            return True
    except ImportError:  # paramiko is a dependency; a LocalBox run does not need it
        pass
    from gpuops.errors import GpuopsError

    return isinstance(e, (EOFError, OSError, ConnectionError)) or (
        isinstance(e, GpuopsError) and "connect" in str(e).lower()
    )


def _no_sftp(e: BaseException) -> bool:
    return type(e).__name__ == "NoSftp"


def _read_chunk(reader: _Reader, remote_abs: str, offset: int, size: int, deadline: float, rep: CopyReport) -> bytes:
    """Read ``size`` bytes of ``remote_abs`` from ``offset``, reconnecting after a dropped connection.

    It reads again, waiting ``RETRY_WAIT_S`` doubling to 8 s, while the next wait ends by ``deadline``
    (a ``time.monotonic()`` value). Raises the last error when the deadline passes, any other at once."""
    from gpuops.providers.retry import RetryPolicy, call_with_retries

    def reconnect(_state) -> None:
        reader.reset()
        rep.reconnects += 1

    policy = RetryPolicy(attempts=None, wait_s=RETRY_WAIT_S, max_wait_s=8.0, budget_s=None)  # the deadline bounds it
    return call_with_retries(
        lambda: reader.read(remote_abs, offset, size),
        policy,
        retry_on=lambda err: _transient(err) and not _no_sftp(err),
        retry_after=False,
        deadline=deadline,
        before_sleep=reconnect,
    )


def _fetch_one(
    reader: _Reader, remote_abs: str, target: Path, e: Entry, deadline: float, rep: CopyReport, on_progress=None
) -> str | None:
    """Copy one file into ``target`` (resuming ``target.gpuops-part``); None on success, else why."""
    part = target.with_name(target.name + ".gpuops-part")
    for attempt in range(2):  # a sha256 mismatch earns one fetch from zero
        have = part.stat().st_size if part.exists() and not part.is_symlink() else 0
        if have > e.size:
            part.unlink()
            have = 0
        if attempt == 0:
            rep.resumed_bytes += have
        if not part.exists():  # an empty file has no chunk to create it
            os.close(os.open(part, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600))
        while have < e.size:
            try:
                chunk = _read_chunk(reader, remote_abs, have, min(CHUNK, e.size - have), deadline, rep)
            except Exception as err:
                if _no_sftp(err):  # a box without SFTP (gpuops.box.remote, agent build): whole-file copy over exec
                    return _fetch_whole(reader.box, remote_abs, target, part, e, rep)
                if not _transient(err):
                    return f"{type(err).__name__}: {err}"
                return f"connection lost and the copy deadline passed ({type(err).__name__})"
            if not chunk:
                return f"the file is shorter on the box than listed ({have} of {e.size} bytes)"
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "ab") as f:
                f.write(chunk)
            have += len(chunk)
            rep.bytes += len(chunk)
            if on_progress is not None:
                on_progress(rep)
        if _sha256_file(part) == e.sha256:
            os.replace(part, target)
            return None
        part.unlink()
    return "sha256 mismatch after a fresh copy"


def _fetch_whole(box, remote_abs: str, target: Path, part: Path, e: Entry, rep: CopyReport) -> str | None:
    """The file in one ``Box.get`` (no offset reads on this box), then the same size and sha256 check.

    ``Box.get`` writes a name of its own making (the box's sha256 of the file): it checks the name it
    writes like a name from the box, and an escaped name home holds backslashes."""
    if part.exists():
        part.unlink()
    got = part.with_name(f".{e.sha256[:32]}.gpuops-part")
    try:
        if not box.get(remote_abs, got):
            return "the file is gone from the box"
        os.replace(got, part)
    except Exception as err:  # whatever the transport raises, the file did not come home
        with contextlib.suppress(OSError):
            got.unlink()
        return f"{type(err).__name__}: {err}"
    if part.is_symlink() or not part.is_file() or part.stat().st_size != e.size or _sha256_file(part) != e.sha256:
        part.unlink(missing_ok=True)
        return "size or sha256 differs from the box's listing"
    rep.bytes += e.size
    os.replace(part, target)
    return None


def fetch_results(
    box,
    remote_dir: str,
    dest: Path,
    *,
    deadline_s: float = 900.0,
    keep_to: str | None = None,
    on_progress=None,
    max_bytes: int | None = None,
    max_files: int | None = None,
) -> CopyReport:
    """Copy ``remote_dir`` (relative to the box root) into ``dest`` with sizes and sha256 checked.

    It resumes after dropped connections, within ``deadline_s`` seconds. ``keep_to``: an absolute
    directory on the box (on a persistent volume) that first receives a verified copy.
    ``on_progress(report)`` is called after every chunk written.
    ``max_bytes``/``max_files``: caps on what the box lists (default ``MAX_BYTES``, ``MAX_FILES``);
    past them nothing is copied. Never raises for a failed copy: the report says what failed
    (``ok`` False, ``error``)."""
    t0 = time.monotonic()
    deadline = t0 + deadline_s
    rep = CopyReport()
    dest = Path(dest)
    try:
        entries, skipped, last = read_manifest(box, remote_dir, keep_to=keep_to, timeout=max(1.0, deadline_s))
    except FileNotFoundError:
        rep.error = None
        rep.seconds = round(time.monotonic() - t0, 3)
        return rep  # no results directory: nothing to copy, nothing failed
    except Exception as failure:  # the manifest could not run (connection gone, no python3): say so, do not raise
        rep.ok, rep.error = False, f"{type(failure).__name__}: {failure}"
        rep.seconds = round(time.monotonic() - t0, 3)
        return rep
    rep.skipped = skipped
    if keep_to and not last.get("keep_errors"):
        rep.kept = keep_to
    from gpuops.textsafe import safe

    plain: list[tuple[Entry, list[str]]] = []  # each entry with the components it is written home under
    for e in entries:
        if safe_parts(e.path) is None or e.size < 0:
            rep.skipped.append(f"{safe(repr(e.path))} (not a plain relative path)")
        else:
            plain.append((e, [safe(p) for p in safe_parts(e.path) or []]))
    taken = {e.path for e, _ in plain}
    homed = []
    for e, parts in plain:
        name = "/".join(parts)
        if name != e.path:  # a newline or ESC in a name from the box: home under its escaped name
            if name in taken:
                rep.skipped.append(f"{safe(e.path)} (its escaped name {name} is another file's)")
                continue
            taken.add(name)
            rep.renamed.append(f"{safe(repr(e.path))} -> {name}")
        homed.append((e, parts))
    entries = [e for e, _ in homed]
    home_parts = {id(e): parts for e, parts in homed}
    rep.files = len(entries)
    rep.total_bytes = sum(e.size for e in entries)
    cap_b, cap_f = MAX_BYTES if max_bytes is None else max_bytes, MAX_FILES if max_files is None else max_files
    if rep.total_bytes > cap_b or rep.files > cap_f:
        rep.ok = False
        rep.error = (
            f"the box lists {rep.files} files, {rep.total_bytes:,} bytes: over the copy-back caps ({cap_f} files, {cap_b:,} bytes); "
            "nothing copied"
        )
        rep.seconds = round(time.monotonic() - t0, 3)
        return rep
    dest.mkdir(parents=True, exist_ok=True)
    reader = _Reader(box)
    root_abs = box._abs(remote_dir.rstrip("/"))  # both Box kinds resolve paths against their root
    try:
        for e in entries:
            parts = home_parts[id(e)]
            target = dest
            try:
                for p in parts[:-1]:
                    target = target / p
                    target.mkdir(mode=0o700, exist_ok=True)
                    if target.is_symlink() or not target.is_dir():
                        raise OSError(f"{target} is not a plain directory")
                target = target / parts[-1]
                if target.is_symlink():
                    raise OSError(f"{target} is a symlink")
            except OSError as err:
                rep.failed.append(f"{safe(e.path)}: {err}")
                continue
            if target.exists() and target.stat().st_size == e.size and _sha256_file(target) == e.sha256:
                rep.resumed_bytes += e.size
                continue  # already home and verified
            if time.monotonic() > deadline:
                rep.failed.append(f"{safe(e.path)}: the copy deadline ({deadline_s:g} s) passed")
                continue
            why = _fetch_one(reader, str(root_abs) + "/" + e.path, target, e, deadline, rep, on_progress)
            if why:
                rep.failed.append(f"{safe(e.path)}: {why}")
    finally:
        reader.close()
    rep.ok = not rep.failed
    rep.seconds = round(time.monotonic() - t0, 3)
    return rep


def presence(box):
    """The laptop's presence lease on ``box`` while copying, or a no-op context where there is none.

    The lease is gpuops.agent.agentctl.hold_presence, where this build has it."""
    try:
        from gpuops.agent.agentctl import hold_presence
    except ImportError:
        return contextlib.nullcontext()
    return hold_presence(box)
