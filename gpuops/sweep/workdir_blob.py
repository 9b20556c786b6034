"""A sweep job's workdir in the queue: the tree `up --workdir` would send, as one tar stored by its sha256.

``pack`` (at enqueue, on the machine that has the folder) takes what ``gpuops.rental.workdir.scan``
listed -- the one walk with `up`'s excludes, git's listing and skip rules -- and writes it as a plain
(uncompressed) POSIX tar, deterministic: members sorted by path, mtime 0, uid/gid 0, no user or group
names, each file's permission bits as the uploader keeps them (``st_mode & 0o777``), a symlink as a
symlink with the relative target ``scan`` made. The same tree packs to the same bytes, so two jobs
sharing a workdir store one ``sweep_blobs`` row. A file that changed since ``scan`` read its sha256
is refused.

``unpack`` (at the executor, possibly another machine reading the team's ledger) trusts nothing it
reads, though we wrote it: the bytes must hash to the sha256 the job names; then every member must be
a regular file or a symlink with a plain relative name (no absolute path, no ``..``, no ``.``, no
empty or control-character part; never a device, FIFO, hard link or folder entry, never two members
on one path or one under another); files are written first (``O_EXCL | O_NOFOLLOW``, folders
0700), symlinks last, and each symlink must resolve inside the folder; last, ``scan`` of the folder
(what the job's `up --workdir` will send from it) must list exactly the stored files, by sha256, and
links. Any breach is
``WorkdirRefused``, one line; the job then fails before anything is rented.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import stat
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from gpuops.errors import BadInput, GpuopsError

if TYPE_CHECKING:
    from gpuops.rental.workdir import WorkTree

# The most one workdir may pack to in the queue (bytes of the tar). It is one value of one row:
# the enqueue's transaction sends it whole and every executor that runs the job reads it whole into
# memory (PostgreSQL's bytea even travels hex-encoded, twice its size, and caps a value at 1 GB).
# A workdir is code and configs; data belongs on a volume or is fetched by the job.
MAX_BYTES = 64 * 2**20
BLOB_NAME = "workdir.tar"  # the sweep_blobs row's name (a script's row holds the script's file name)


class WorkdirRefused(GpuopsError):
    """A stored workdir that does not hash to its name or holds a member this module refuses (module doc)."""


def _too_big(job: str, size: int) -> BadInput:
    return BadInput(
        f"sweep job {job}: its workdir packs to {size / 2**20:.1f} MiB, more than the {MAX_BYTES / 2**20:g} MiB "
        "a sweep stores in the ledger",
        'leave data out with workdir_exclude (e.g. workdir_exclude = ["data"]) and fetch it in the job, '
        "or put it on a volume",
    )


def pack(tree: WorkTree, job: str) -> bytes:
    """The tar of ``tree`` (module doc: deterministic), at most ``MAX_BYTES``.

    ``job``: the sweep job's name, for the errors. Raises BadInput, one line naming the fix, before
    anything is written: a tree or tar over ``MAX_BYTES``, a file changed or gone since ``scan``."""
    from gpuops.rental.workdir import WorkLink

    if tree.bytes > MAX_BYTES:
        raise _too_big(job, tree.bytes)
    buf = io.BytesIO()
    entries = sorted([(f.path, f) for f in tree.files] + [(x.path, x) for x in tree.links], key=lambda e: e[0])
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, entry in entries:
            info = tarfile.TarInfo(path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if isinstance(entry, WorkLink):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
                tar.addfile(info)
                continue
            try:
                data = entry.source.read_bytes()
                mode = os.stat(entry.source).st_mode & 0o777
            except OSError as e:
                raise BadInput(
                    f"sweep job {job}: workdir file {path} could not be read: {e.strerror}", "run the sweep again"
                ) from None
            if hashlib.sha256(data).hexdigest() != entry.sha256:
                raise BadInput(
                    f"sweep job {job}: workdir file {path} changed while the sweep was being queued",
                    "run the sweep again once nothing writes into the workdir",
                )
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    out = buf.getvalue()
    if len(out) > MAX_BYTES:
        raise _too_big(job, len(out))
    return out


def _refuse(sha: str, why: str) -> WorkdirRefused:
    return WorkdirRefused(
        f"the sweep's workdir {sha[:12]} in the ledger is refused: {why}; nothing was rented",
        "queue the sweep again from its folder (`gpuops sweep FILE --detach`)",
    )


def _plain(name: str) -> bool:
    from gpuops.box.base import safe_name

    parts = name.split("/")
    return not name.startswith("/") and all(safe_name(p) and p.isprintable() and p not in (".", "..") for p in parts)


def unpack(data: bytes, sha: str, dest: Path) -> None:
    """Write the workdir tar ``data`` into the empty folder ``dest`` after every check of the module doc.

    ``sha``: the sha256 (hex) the job names it by. Raises WorkdirRefused, one line, on any breach
    (what was written so far stays in ``dest``: the caller removes it)."""
    if hashlib.sha256(data).hexdigest() != sha:
        raise _refuse(sha, "its bytes do not hash to its sha256 (changed after it was queued)")
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:")  # a plain tar: nothing to decompress
        members = tar.getmembers()
    except tarfile.TarError as e:
        raise _refuse(sha, f"not a tar ({e})") from None
    seen: set[str] = set()
    want: dict[str, str] = {}  # path -> sha256 of a file, "-> target" of a symlink
    links: list[tarfile.TarInfo] = []
    root = os.path.realpath(dest)
    for m in members:
        if not _plain(m.name):
            raise _refuse(sha, f"member {m.name!r} is not a plain relative path")
        if not (m.isreg() or m.issym()):
            kinds = ((m.isfifo, "FIFO"), (m.isdev, "device"), (m.islnk, "hard link"), (m.isdir, "folder"))
            kind = next((k for test, k in kinds if test()), "special file")  # isdev() holds for a FIFO too
            raise _refuse(sha, f"member {m.name} is a {kind}")
        parts = m.name.split("/")
        if m.name in seen or any("/".join(parts[:i]) in seen for i in range(1, len(parts))):
            raise _refuse(sha, f"member {m.name} is stored twice or under another member")
        seen.add(m.name)
        if m.issym():
            target = m.linkname
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(m.name), target))
            if not target or target.startswith("/") or resolved == ".." or resolved.startswith("../"):
                raise _refuse(sha, f"symlink {m.name} points outside the workdir")
            links.append(m)
            want[m.name] = f"-> {target}"
            continue
        path = dest.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        src = tar.extractfile(m)
        assert src is not None  # a regular member has a body
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        body = src.read()
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        want[m.name] = hashlib.sha256(body).hexdigest()
        os.chmod(path, stat.S_IMODE(m.mode) & 0o777)
    for m in links:  # last: no file is ever written through a link
        path = dest.joinpath(*m.name.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.symlink(m.linkname, path)
    for m in links:  # a chain of links inside may still lead out: judged by where each resolves
        real = os.path.realpath(dest.joinpath(*m.name.split("/")))
        if real != root and not real.startswith(root + os.sep):
            raise _refuse(sha, f"symlink {m.name} points outside the workdir")
    from gpuops.rental.workdir import scan

    tree = scan(dest)  # what the job's `up --workdir` will send from here: exactly what was stored
    got = {f.path: f.sha256 for f in tree.files} | {x.path: f"-> {x.target}" for x in tree.links}
    differ = sorted(p for p in set(want) | set(got) if want.get(p) != got.get(p))
    if differ:
        raise _refuse(sha, f"{len(differ)} path(s) would not go up as stored, e.g. {differ[0]}")
