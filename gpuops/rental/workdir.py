"""`up --workdir DIR`: a directory of this machine uploaded to the box before the job.

What goes up (``scan``, before anything is rented): in a git work tree, what ``git ls-files
--others --cached --exclude-standard`` lists (tracked files and untracked ones that ``.gitignore``,
``.git/info/exclude`` and the global excludes do not ignore); elsewhere every file under DIR but
``.git/`` and ``__pycache__/`` (no ``.gitignore`` is read without git). Then ``--workdir-exclude``
patterns drop more (fnmatch on the relative path, on the name and on each folder: ``data``,
``*.ckpt``, ``runs/*``). A symlink is sent as the file it points to when that file is inside DIR;
one pointing out of DIR (or at a folder) is not followed and is listed as skipped. A name with
control characters is skipped. The total is capped by ``[job] workdir_max_mb``: over it is bad
input, one line naming the fix.

Where it goes: ``<box root>/workdir`` (``WORKDIR``), given to the job as ``$GPUOPS_WORKDIR``.
How (``upload``, during the bootstrap stage, beside bootstrap.py's steps on a second connection):
the box's copy is listed first with ``onbox/manifest.py`` (sha256 per file, as the results'
copy-back does), only files whose sha256 differs or that are missing go up (each to a temporary
name, then renamed), and the manifest runs again: every file must then have this machine's sha256,
else the upload failed. Files on the box that the tree no longer has are left where they are.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuops.errors import BadInput, GpuopsError

WORKDIR = "workdir"  # under the box root; the job's $GPUOPS_WORKDIR
GIT_TIMEOUT_S = 60.0  # listing a work tree with git


@dataclass
class WorkFile:
    """One file to send: ``path`` relative to DIR (``/``-separated), ``source`` the file read here."""

    path: str
    source: Path
    size: int
    sha256: str


@dataclass
class WorkTree:
    """What ``scan`` found: ``files``, ``skipped`` ("path (why)"), ``bytes`` in all, ``listed_by`` git|walk."""

    root: Path
    files: list[WorkFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    bytes: int = 0
    listed_by: str = "walk"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _git_listing(root: Path) -> list[str] | None:
    """``git ls-files --others --cached --exclude-standard`` under ``root``, or None when not a git work tree."""
    try:
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return None
    got = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--others", "--cached", "--exclude-standard"],
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
    )
    if got.returncode != 0:
        raise BadInput(
            f"git could not list {root}: {got.stderr.decode('utf-8', 'replace').strip()[:200]}",
            "fix the work tree, or pass a --workdir outside git",
        )
    return sorted({p for p in got.stdout.decode("utf-8", "surrogateescape").split("\0") if p})


def _walk_listing(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):  # never follows a symlinked folder
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__"))
        rel = os.path.relpath(dirpath, root)
        for name in filenames:
            out.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
        for d in list(dirnames):  # a symlink to a folder: listed (then skipped), not walked into
            if os.path.islink(os.path.join(dirpath, d)):
                dirnames.remove(d)
                out.append(d if rel == "." else f"{rel}/{d}".replace(os.sep, "/"))
    return sorted(out)


def _excluded(path: str, patterns: tuple[str, ...]) -> bool:
    parts = path.split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        if fnmatch.fnmatchcase(path, pat) or fnmatch.fnmatchcase(parts[-1], pat):
            return True
        if any(
            fnmatch.fnmatchcase("/".join(parts[:i]), pat) or fnmatch.fnmatchcase(parts[i - 1], pat)
            for i in range(1, len(parts))
        ):
            return True
    return False


def scan(directory: str | Path, excludes: tuple[str, ...] = (), max_bytes: int | None = None) -> WorkTree:
    """What ``up --workdir DIR`` sends (module doc): each file's size and sha256, read here.

    ``max_bytes``: the cap (``[job] workdir_max_mb`` x 2**20); over it, or a DIR that is not a
    folder, is BadInput."""
    from gpuops.box.base import safe_name

    root = Path(directory).expanduser()
    if not root.is_dir():
        raise BadInput(f"--workdir {directory} is not a directory", "pass the folder to upload, e.g. --workdir .")
    real_root = os.path.realpath(root)
    listing = _git_listing(root)
    tree = WorkTree(root=root, listed_by="git" if listing is not None else "walk")
    for rel in listing if listing is not None else _walk_listing(root):
        if _excluded(rel, excludes):
            continue
        if not all(safe_name(p) and p.isprintable() for p in rel.split("/")):
            tree.skipped.append(f"{rel!r} (not a plain name)")
            continue
        path = root / rel
        try:
            st = os.lstat(path)
        except OSError:
            continue  # listed by git, deleted since
        source = path
        if os.path.islink(path):
            target = os.path.realpath(path)
            if not (target.startswith(real_root + os.sep) and os.path.isfile(target)):
                tree.skipped.append(f"{rel} (symlink out of the tree, not followed)")
                continue
            source, st = Path(target), os.stat(target)
        elif not path.is_file():
            continue  # a folder git lists (a submodule), a FIFO, a device
        tree.files.append(WorkFile(rel, source, st.st_size, _sha256(source)))
        tree.bytes += st.st_size
        if max_bytes is not None and tree.bytes > max_bytes:
            raise BadInput(
                f"--workdir {directory} holds more than {max_bytes / 2**20:g} MiB ([job] workdir_max_mb)",
                "exclude what the job does not need (--workdir-exclude 'data'), or raise [job] workdir_max_mb",
            )
    return tree


@dataclass
class UploadReport:
    """``files`` in the tree, ``sent`` of them now (``sent_bytes``), ``unchanged`` already on the box, ``seconds``."""

    files: int
    sent: int
    sent_bytes: int
    unchanged: int
    seconds: float
    skipped: list[str]

    def as_step(self) -> dict:
        """The bootstrap step line this upload is booked as (table bootstrap_steps)."""
        return {
            "step": "workdir",
            "status": "done",
            "seconds": round(self.seconds, 3),
            "detail": {
                "files": self.files,
                "sent": self.sent,
                "sent_bytes": self.sent_bytes,
                "unchanged": self.unchanged,
                "skipped": self.skipped[:20],
            },
        }


def upload(
    box, tree: WorkTree, *, on_progress: Callable[[str], None] | None = None, timeout_s: float = 3600.0
) -> UploadReport:
    """Send ``tree`` to ``<box root>/workdir``: only what differs by sha256, then verify every file there.

    Raises GpuopsError when a file on the box does not have this machine's sha256 afterwards."""
    from gpuops.rental.results import read_manifest

    t0 = time.monotonic()
    remote = f"{str(box.root).rstrip('/')}/{WORKDIR}"

    def listed() -> dict[str, str]:
        try:
            entries, _, _ = read_manifest(box, remote, timeout=timeout_s)
        except FileNotFoundError:
            return {}
        return {e.path: e.sha256 for e in entries}

    box.run(f"mkdir -p {WORKDIR}", timeout=60)
    there = listed()
    todo = [f for f in tree.files if there.get(f.path) != f.sha256]
    total = sum(f.size for f in todo)
    if on_progress:
        on_progress(
            f"workdir: {len(todo)} of {len(tree.files)} file(s) to send, {total / 2**20:.1f} MiB"
            + (f" ({len(tree.files) - len(todo)} unchanged)" if len(todo) < len(tree.files) else "")
        )
    sent = 0
    for i, f in enumerate(todo, 1):
        box.put(f.source, f"{WORKDIR}/{f.path}")
        sent += f.size
        if on_progress and (i == len(todo) or i % 100 == 0):
            on_progress(f"workdir: {i}/{len(todo)} file(s), {sent / 2**20:.1f} of {total / 2**20:.1f} MiB")
    after = listed()
    wrong = [f.path for f in tree.files if after.get(f.path) != f.sha256]
    if wrong:
        raise GpuopsError(
            f"workdir upload: {len(wrong)} file(s) on the box do not match their sha256 here: {', '.join(wrong[:5])}",
            "run `gpuops up` again; only what differs goes up",
        )
    return UploadReport(
        len(tree.files), len(todo), sent, len(tree.files) - len(todo), time.monotonic() - t0, tree.skipped
    )
