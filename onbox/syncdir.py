"""Make the box's copy of ``up --workdir`` hold what the laptop's tree holds, and nothing else.

``python3 syncdir.py DIR PLAN`` reads PLAN (JSON written by the laptop: ``{"files": [path, ...],
"links": {path: target}}``, paths relative to DIR, ``/`` separated) and, inside DIR only:

- removes every entry the plan does not name: a file, a symlink, a FIFO, a folder no planned path
  lies under (with all it holds); and whatever stands where a planned symlink goes, unless it is
  that symlink already;
- makes each planned symlink (its target as planned, never resolved here).

It never follows a symlink and never leaves DIR: every step goes through a descriptor of the folder
it acts in, opened with ``O_NOFOLLOW`` from DIR down (a folder on the box swapped for a symlink
stops the walk with ELOOP instead of acting where it points). Planned files are not written here;
the laptop sends the ones whose sha256 differs afterwards (manifest.py lists them).

Prints one JSON line per removed entry, ``{"removed": "<path>"}``, one per symlink as read back
after it was made, ``{"link": "<path>", "target": "<target>"}``, then ``{"removed": N, "links": L}``.
Exit 0; 2 when DIR is not a folder or PLAN is not a plan. Stdlib only, python3 >= 3.8.
"""

import json
import os
import stat
import sys

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def plain_path(path):
    """True for a relative ``/``-separated path of plain parts (no empty part, ``.``, ``..`` or NUL)."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        return False
    return all(p not in ("", ".", "..") for p in path.split("/"))


def remove_tree(parent_fd, name, rel, out):
    """Remove folder ``name`` under ``parent_fd`` and all it holds, following no symlink."""
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        for child in os.listdir(fd):
            st = os.stat(child, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                remove_tree(fd, child, rel + "/" + child, out)
            else:
                os.unlink(child, dir_fd=fd)
                out(rel + "/" + child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def prune(fd, rel, files, links, folders, out):
    """Remove under ``fd`` (the folder ``rel``) what the plan does not name."""
    for name in sorted(os.listdir(fd)):
        r = rel + "/" + name if rel else name
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            if r in folders:
                sub = os.open(name, DIR_FLAGS, dir_fd=fd)
                try:
                    prune(sub, r, files, links, folders, out)
                finally:
                    os.close(sub)
            else:
                remove_tree(fd, name, r, out)
                out(r)
            continue
        if stat.S_ISREG(st.st_mode) and r in files:
            continue
        if stat.S_ISLNK(st.st_mode) and r in links and os.readlink(name, dir_fd=fd) == links[r]:
            continue
        os.unlink(name, dir_fd=fd)
        if r not in links:  # a planned link's old version is made again below, not removed
            out(r)


def make_link(root_fd, path, target):
    """Make symlink ``path`` -> ``target`` under ``root_fd`` (its folders made as needed); return what it reads back."""
    parts = path.split("/")
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            sub = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
        name = parts[-1]
        try:
            if os.readlink(name, dir_fd=fd) == target:
                return target
        except OSError:
            pass
        os.symlink(target, name, dir_fd=fd)
        return os.readlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.stderr.write("usage: syncdir.py DIR PLAN\n")
        return 2
    try:
        with open(args[1]) as f:
            plan = json.load(f)
        files = set(plan["files"])
        links = dict(plan["links"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.stderr.write("syncdir: %r is not a plan: %s\n" % (args[1], e))
        return 2
    bad = [p for p in list(files) + list(links) if not plain_path(p)]
    bad += [p for p, t in links.items() if not isinstance(t, str) or not t or "\0" in t]
    if bad:
        sys.stderr.write("syncdir: the plan names paths that are not plain: %r\n" % bad[:5])
        return 2
    folders = set()  # type: set
    for p in list(files) + list(links):
        parts = p.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
    try:
        root_fd = os.open(args[0], DIR_FLAGS)
    except OSError as e:
        sys.stderr.write("syncdir: %r is not a folder: %s\n" % (args[0], e))
        return 2
    removed = []

    def out(rel):
        removed.append(rel)
        print(json.dumps({"removed": rel}), flush=True)

    try:
        prune(root_fd, "", files, links, folders, out)
        for path in sorted(links):
            print(json.dumps({"link": path, "target": make_link(root_fd, path, links[path])}), flush=True)
    finally:
        os.close(root_fd)
    print(json.dumps({"removed": len(removed), "links": len(links)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
