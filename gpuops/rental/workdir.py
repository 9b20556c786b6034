"""`up --workdir DIR`: a directory of this machine uploaded to the box before the job.

What goes up (``scan``, before anything is rented): in a git work tree, what ``git ls-files
--others --cached --exclude-standard`` lists (tracked files and untracked ones that ``.gitignore``,
``.git/info/exclude`` and the global excludes do not ignore); elsewhere every file under DIR but
``.git/`` and ``__pycache__/`` (no ``.gitignore`` is read without git). Then ``--workdir-exclude``
patterns drop more (fnmatch on the relative path, on the name and on each folder: ``data``,
``*.ckpt``, ``runs/*``).

A symlink is carried as a symlink, as git and ``rsync -a`` carry it, when what it points to (a
file or a folder) is inside DIR: its target is written relative to the link's folder (an absolute
target inside DIR would point elsewhere on the box), and what it points to goes up only if the
listing has it. A symlink pointing out of DIR, or at nothing, is not followed and is listed as
skipped. Special files (FIFO, socket, device; git's listing leaves them out without a word, so a
walk that skips what git ignores finds them) are listed as skipped with their kind, a submodule
too, and so is a name with control characters. `up` prints the skipped list's count and first
paths before renting (``skipped_line``). The total is capped by ``[job] workdir_max_mb``: over it
is bad input, one line naming the fix.

Where it goes: ``<box root>/workdir`` (``WORKDIR``), given to the job as ``$GPUOPS_WORKDIR``.
How (``upload``, during the bootstrap stage, beside bootstrap.py's steps on a second connection):
the box's copy is made to hold only what the tree holds (``onbox/syncdir.py``: every file, symlink,
special file or folder under the box's workdir that the tree does not name is removed, inside the
workdir only, never following a symlink; the tree's symlinks are made and read back), then listed
with ``onbox/manifest.py`` (sha256 per file, as the results' copy-back does); only files whose
sha256 differs or that are missing go up (each to a temporary name, then renamed), and the manifest
runs again: the box's files must then be exactly the tree's, each with this machine's sha256, else
the upload failed. So a warm box's copy equals DIR: what was deleted here is deleted there too
(what the job itself wrote into the workdir as well).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuops.errors import BadInput, GpuopsError

WORKDIR = "workdir"  # under the box root; the job's $GPUOPS_WORKDIR
GIT_TIMEOUT_S = 60.0  # listing a work tree with git
SKIPPED_SHOWN = 3  # paths `up` names in its one skipped line before "and N more"
# The special files' kinds, by stat(2)'s file type (S_ISFIFO, S_ISSOCK, S_ISCHR, S_ISBLK).
SPECIAL_KINDS = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


@dataclass
class WorkFile:
    """One file to send: ``path`` relative to DIR (``/``-separated), ``source`` the file read here."""

    path: str
    source: Path
    size: int
    sha256: str


@dataclass
class WorkLink:
    """One symlink to make: ``path`` relative to DIR, ``target`` relative to the link's folder, inside DIR."""

    path: str
    target: str


@dataclass
class WorkTree:
    """What ``scan`` found: ``files``, ``links``, ``skipped`` ("path (why)"), ``bytes`` in all, ``listed_by`` git|walk."""

    root: Path
    files: list[WorkFile] = field(default_factory=list)
    links: list[WorkLink] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    bytes: int = 0
    listed_by: str = "walk"


def skipped_line(tree: WorkTree) -> str | None:
    """The one line `up` prints before renting: the count and the first ``SKIPPED_SHOWN`` of them; None when none."""
    if not tree.skipped:
        return None
    shown = ", ".join(tree.skipped[:SKIPPED_SHOWN])
    more = len(tree.skipped) - SKIPPED_SHOWN
    return f"--workdir: {len(tree.skipped)} skipped: {shown}" + (f" and {more} more" if more > 0 else "")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _git(root: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S)


def _git_listing(root: Path) -> list[str] | None:
    """What git would send under ``root`` (module doc), special files it does not ignore included; None outside git."""
    try:
        inside = _git(root, "rev-parse", "--is-inside-work-tree")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if inside.returncode != 0 or inside.stdout.decode().strip() != "true":
        return None
    got = _git(root, "ls-files", "-z", "--others", "--cached", "--exclude-standard")
    if got.returncode != 0:
        raise BadInput(
            f"git could not list {root}: {got.stderr.decode('utf-8', 'replace').strip()[:200]}",
            "fix the work tree, or pass a --workdir outside git",
        )
    listed = {p for p in got.stdout.decode("utf-8", "surrogateescape").split("\0") if p}
    ignored = _git(root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
    pruned = {p.rstrip("/") for p in ignored.stdout.decode("utf-8", "surrogateescape").split("\0") if p}
    specials = [p for p in _walk_listing(root, pruned) if p not in listed and _special_kind(root / p)]
    if specials:  # git lists no FIFO, socket or device: the ones it would not ignore are named as skipped
        asked = _git(root, "check-ignore", "-z", "--stdin", "--no-index", stdin="\0".join(specials).encode())
        dropped = set(asked.stdout.decode("utf-8", "surrogateescape").split("\0"))
        listed.update(p for p in specials if p not in dropped)
    return sorted(listed)


def _special_kind(path: Path) -> str | None:
    """FIFO, socket, character or block device for such a file; None for any other (or one gone)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    return next((kind for test, kind in SPECIAL_KINDS if test(mode)), None)


def _walk_listing(root: Path, pruned: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Every entry under ``root`` but folders (``.git``, ``__pycache__`` and ``pruned`` not entered); a symlink not followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):  # never follows a symlinked folder
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__") and prefix + d not in pruned)
        for name in filenames:
            out.append(prefix + name)
        for d in list(dirnames):  # a symlink to a folder: listed (then judged as a link), not walked into
            if os.path.islink(os.path.join(dirpath, d)):
                dirnames.remove(d)
                out.append(prefix + d)
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


def _inside(path: str, real_root: str) -> bool:
    return path == real_root or path.startswith(real_root + os.sep)


def scan(directory: str | Path, excludes: tuple[str, ...] = (), max_bytes: int | None = None) -> WorkTree:
    """What ``up --workdir DIR`` sends (module doc): each file's size and sha256, read here; its symlinks.

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
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(path)
            if not _inside(target, real_root):
                tree.skipped.append(f"{rel} (symlink out of the tree, not followed)")
            elif not os.path.exists(target):
                tree.skipped.append(f"{rel} (symlink to nothing)")
            else:
                tree.links.append(WorkLink(rel, os.path.relpath(target, os.path.realpath(path.parent))))
            continue
        if stat.S_ISDIR(st.st_mode):
            tree.skipped.append(f"{rel} (a git submodule, not sent)")
            continue
        kind = next((k for test, k in SPECIAL_KINDS if test(st.st_mode)), None)
        if kind is not None or not stat.S_ISREG(st.st_mode):
            tree.skipped.append(f"{rel} ({kind or 'not a regular file'}, not sent)")
            continue
        tree.files.append(WorkFile(rel, path, st.st_size, _sha256(path)))
        tree.bytes += st.st_size
        if max_bytes is not None and tree.bytes > max_bytes:
            raise BadInput(
                f"--workdir {directory} holds more than {max_bytes / 2**20:g} MiB ([job] workdir_max_mb)",
                "exclude what the job does not need (--workdir-exclude 'data'), or raise [job] workdir_max_mb",
            )
    return tree


@dataclass
class UploadReport:
    """What ``upload`` did: counts of files, links and removed entries, and its seconds.

    ``files`` in the tree, ``sent`` of them now (``sent_bytes``), ``unchanged`` already on the box,
    ``removed`` entries the box had that the tree has not, ``links`` made, ``seconds``."""

    files: int
    sent: int
    sent_bytes: int
    unchanged: int
    seconds: float
    skipped: list[str]
    removed: int = 0
    links: int = 0

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
                "removed": self.removed,
                "links": self.links,
                "skipped": self.skipped[:20],
            },
        }


def _sync(box, tree: WorkTree, timeout_s: float) -> tuple[list[str], dict[str, str]]:
    """Run ``onbox/syncdir.py`` on the box's workdir for ``tree``: (removed paths, each symlink as read back).

    Raises GpuopsError when it fails. Its lines are the box's: read as text only, never as a path here."""
    import shlex

    from gpuops.agent.bootstrap_config import BOX_DIR, RUNNER_DIR
    from gpuops.textsafe import safe

    plan = {"files": [f.path for f in tree.files], "links": {x.path: x.target for x in tree.links}}
    with tempfile.TemporaryDirectory(prefix="gpuops-workdir-") as d:
        local = Path(d) / "plan.json"
        local.write_text(json.dumps(plan))
        remote_plan = f"{BOX_DIR}/workdir-plan.json"
        box.put(local, remote_plan)
    removed: list[str] = []
    links: dict[str, str] = {}
    errors: list[str] = []
    done: list[dict] = []

    def on_line(line: str) -> None:
        try:
            obj = json.loads(line)
        except ValueError:
            errors.append(safe(line))
            return
        if not isinstance(obj, dict):
            return
        if isinstance(obj.get("removed"), str):
            removed.append(safe(obj["removed"]))
        elif isinstance(obj.get("link"), str) and isinstance(obj.get("target"), str):
            links[obj["link"]] = obj["target"]
        elif isinstance(obj.get("removed"), int):
            done.append(obj)

    cmd = f"python3 {shlex.quote(RUNNER_DIR + '/syncdir.py')} {WORKDIR} {shlex.quote(remote_plan)}"
    rc = box.run(cmd, timeout=timeout_s, on_line=on_line)
    if rc != 0 or not done:
        raise GpuopsError(
            f"workdir upload: making the box's copy equal the tree failed (exit {rc}): {' '.join(errors)[:200]}",
            "run `gpuops up` again; the box's python3 must run .gpuops/onbox/syncdir.py",
        )
    return removed, links


def upload(
    box, tree: WorkTree, *, on_progress: Callable[[str], None] | None = None, timeout_s: float = 3600.0
) -> UploadReport:
    """Make ``<box root>/workdir`` equal ``tree`` (module doc) and verify it.

    It removes what the tree lacks, makes its symlinks and sends only the files that differ by sha256.

    Raises GpuopsError when the box's files are not then exactly the tree's with this machine's sha256,
    or a symlink does not read back as made."""
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
    removed, links = _sync(box, tree, timeout_s)
    wrong_links = [x.path for x in tree.links if links.get(x.path) != x.target]
    if wrong_links:
        raise GpuopsError(
            f"workdir upload: {len(wrong_links)} symlink(s) on the box do not read back as made: {', '.join(wrong_links[:5])}",
            "run `gpuops up` again",
        )
    if on_progress and removed:
        on_progress(
            f"workdir: removed {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} the tree no longer has: "
            + ", ".join(removed[:SKIPPED_SHOWN])
            + (f" and {len(removed) - SKIPPED_SHOWN} more" if len(removed) > SKIPPED_SHOWN else "")
        )
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
    wanted = {f.path: f.sha256 for f in tree.files}
    wrong = sorted(p for p in set(wanted) | set(after) if after.get(p) != wanted.get(p))
    if wrong:
        from gpuops.textsafe import safe

        raise GpuopsError(
            f"workdir upload: {len(wrong)} file(s) on the box do not match the tree here: "
            + ", ".join(safe(p) for p in wrong[:5]),
            "run `gpuops up` again; only what differs goes up",
        )
    return UploadReport(
        len(tree.files),
        len(todo),
        sent,
        len(tree.files) - len(todo),
        time.monotonic() - t0,
        tree.skipped,
        removed=len(removed),
        links=len(tree.links),
    )
