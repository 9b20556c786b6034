"""The Box interface, ``q``, and the copy-back's trust rules.

The Box interface (run, run_detached, put, get, read_file on a session's machine), ``q`` (every
value in a command goes through it), and the copy-back's trust rules: names, symlinks, caps."""

from __future__ import annotations

import codecs
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpuops.errors import GpuopsError

q = shlex.quote

LineSink = Callable[[str], None]

# The longest piece of one output line handed on at once, characters: a line without end (from a
# job or a command on a box that is not trusted) comes in pieces of this size, so memory stays flat.
MAX_LINE_CHARS = 64 * 1024
# The largest piece ``Box.read_into`` hands on at once, bytes.
READ_INTO_BYTES = 1 << 20


class OutputLines:
    """A box's output bytes (a job's log, a command's stdout) as lines of text, in order, each handed to ``emit`` (no newline).

    UTF-8 is decoded incrementally (``codecs`` incremental decoder), so a character split between
    two reads, or at a long line's piece boundary, arrives whole; only bytes that are not UTF-8
    become U+FFFD. A line whose end has not come within ``max_chars`` characters is emitted in
    pieces of ``max_chars`` (memory stays bounded: one read plus ``max_chars``). Call ``close()``
    once at the end for a last line without a newline."""

    def __init__(self, emit: Callable[[str], None], max_chars: int = MAX_LINE_CHARS):
        self.emit, self.max_chars = emit, max_chars
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self._pending = ""

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the output; emit the lines they end (and pieces of a long one)."""
        *whole, self._pending = (self._pending + self._decode(chunk)).split("\n")
        for line in whole:
            self.emit(line)
        while len(self._pending) > self.max_chars:
            self.emit(self._pending[: self.max_chars])
            self._pending = self._pending[self.max_chars :]

    def close(self) -> None:
        """Emit what is left (a last line without a newline; a cut character as U+FFFD)."""
        rest, self._pending = self._pending + self._decode(b"", final=True), ""
        if rest:
            self.emit(rest)


# Caps of one copy-back (``Box.get``): what a laptop accepts from a box it does not trust.
GET_MAX_BYTES = 50 * 2**30  # 50 GiB; pass max_bytes to change it
GET_MAX_FILES = 200_000
GET_MAX_DEPTH = 64


class UnsafeCopy(GpuopsError):
    """A copy-back went past its size/file caps (what was copied so far stays)."""


def safe_name(name: str) -> bool:
    """True for one plain path component: not empty, not ``.``/``..``, no ``/``, ``\\`` or NUL."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


class _CopyBudget:
    """Counts a copy-back against ``max_bytes`` (bytes) and ``max_files``; raises UnsafeCopy past them."""

    def __init__(self, max_bytes: int, max_files: int):
        self.max_bytes, self.max_files = int(max_bytes), int(max_files)
        self.bytes = 0
        self.files = 0
        self.skipped: list[str] = []

    def file(self, declared: int = 0) -> None:
        self.files += 1
        if self.files > self.max_files:
            raise UnsafeCopy(
                f"results hold more than {self.max_files} files", "write fewer, larger files, or copy them yourself"
            )
        if self.bytes + max(0, declared) > self.max_bytes:
            raise UnsafeCopy(f"results exceed {self.max_bytes} bytes", "pass a larger max_bytes, or copy them yourself")

    def charge(self, n: int) -> None:
        self.bytes += n
        if self.bytes > self.max_bytes:
            raise UnsafeCopy(f"results exceed {self.max_bytes} bytes", "pass a larger max_bytes, or copy them yourself")


def _local_dir(root: Path, parts: list[str]) -> Path:
    """``root/parts...`` as a real directory made here, never through a symlink."""
    cur = root
    for part in parts:
        if not safe_name(part):
            raise UnsafeCopy(f"refused a path component from the box: {part!r}")
        cur = cur / part
        try:
            os.mkdir(cur, 0o700)
        except FileExistsError:
            pass
        if os.path.islink(cur) or not cur.is_dir():
            raise UnsafeCopy(f"refused to write through {cur}: not a plain directory")
    return cur


def _local_file(root: Path, parts: list[str]):
    """Open ``root/parts...`` for writing (0600, created, truncated), never following a symlink."""
    d = _local_dir(root, parts[:-1])
    if not safe_name(parts[-1]):
        raise UnsafeCopy(f"refused a file name from the box: {parts[-1]!r}")
    fd = os.open(d / parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    return os.fdopen(fd, "wb")


def _copy_tree_safely(src: Path, local: Path, budget: _CopyBudget) -> None:
    """Copy the local directory ``src`` into ``local`` by the copy-back rules (LocalBox.get)."""
    import stat as st

    real_src = os.path.realpath(src)
    local.mkdir(parents=True, exist_ok=True)

    def walk(d: Path, parts: list[str]) -> None:
        if len(parts) > GET_MAX_DEPTH:
            budget.skipped.append("/".join(parts) + " (too deep)")
            return
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            rel = parts + [entry.name]
            path = Path(entry.path)
            if entry.is_symlink():
                target = os.path.realpath(path)
                if not (target + "/").startswith(real_src + "/") or not os.path.isfile(target):
                    budget.skipped.append("/".join(rel) + " (symlink leaving the results)")
                    continue
                path = Path(target)
            mode = os.stat(path).st_mode
            if st.S_ISDIR(mode):
                _local_dir(local, rel)
                walk(path, rel)
            elif st.S_ISREG(mode):
                budget.file(os.stat(path).st_size)
                with open(path, "rb") as fin, _local_file(local, rel) as fout:
                    while chunk := fin.read(1 << 20):
                        budget.charge(len(chunk))
                        fout.write(chunk)
            else:
                budget.skipped.append("/".join(rel) + " (not a file)")

    walk(src, [])


class Box(Protocol):
    """A session's machine. ``root`` is the absolute directory the session owns on it."""

    root: str

    def run(
        self, command: str, *, timeout: float, env: dict[str, str] | None = None, on_line: LineSink | None = None
    ) -> int:
        """Run ``command`` (bash) in ``root``, stream stdout+stderr lines to ``on_line``, return the exit status.

        Raises TimeoutError after ``timeout`` seconds (the command is killed)."""
        ...

    def run_detached(self, command: str, *, env: dict[str, str] | None = None) -> None:
        """Start ``command`` in its own session (setsid), not tied to this connection."""
        ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a file or directory to ``remote`` (relative to ``root`` unless absolute)."""
        ...

    def get(self, remote: str, local: Path) -> bool:
        """Copy ``remote`` (file or dir) to ``local``; False when it does not exist."""
        ...

    def read_file(self, remote: str, offset: int = 0, limit: int | None = None) -> bytes | None:
        """Bytes of ``remote`` from ``offset`` on (at most ``limit``), or None when it does not exist."""
        ...

    def read_into(self, remote: str, offset: int, sink: Callable[[bytes], None]) -> bool:
        """Hand ``remote``'s bytes from ``offset`` to its size when the read starts to ``sink``, in order.

        One bulk transfer at the link's rate (an SSH box pipelines its SFTP reads), in pieces of at
        most ``READ_INTO_BYTES``; memory stays flat. False when ``remote`` does not exist. ``sink``
        may raise to stop the transfer (the exception propagates)."""
        ...

    def close(self) -> None: ...
