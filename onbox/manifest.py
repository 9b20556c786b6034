"""List a results directory with sizes and sha256, and optionally keep a verified copy elsewhere.

``python3 manifest.py DIR [--keep-to DEST]`` prints one JSON line per regular file,
``{"path": "a/b.txt", "size": <bytes>, "sha256": "<hex>"}`` (``path`` relative to DIR, ``/``
separated), one ``{"skipped": "<path>", "why": "..."}`` per entry left out (symlinks, devices,
sockets: the laptop copies plain files only), then ``{"files": N, "bytes": B}``. With
``--keep-to``, each file is also copied to DEST (same relative path, written to a temporary name,
its sha256 checked, then renamed) and the last line adds ``"kept": DEST``; this is how results stay
on a persistent volume when the laptop is unreachable. Exit 0, or 2 when DIR is not a directory.
Stdlib only, python3 >= 3.8.
"""

import hashlib
import json
import os
import shutil
import stat
import sys

CHUNK = 1 << 20


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def walk(root):
    """Yield (relative path, absolute path, lstat) for every entry under ``root``, sorted, never following a symlink."""
    stack = [""]
    while stack:
        rel = stack.pop()
        here = os.path.join(root, rel) if rel else root
        names = sorted(os.listdir(here), reverse=True)
        for name in names:
            r = rel + "/" + name if rel else name
            p = os.path.join(here, name)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                stack.append(r)
            yield r, p, st


def keep(src, dest_root, rel, digest):
    """Copy ``src`` to ``dest_root/rel`` through a temporary name; the copy's sha256 must match."""
    dest = os.path.join(dest_root, rel)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = dest + ".gpuops-part"
    shutil.copyfile(src, tmp)
    if _sha256(tmp) != digest:
        os.remove(tmp)
        raise OSError("copy of %s to %s does not match its sha256" % (rel, dest_root))
    os.replace(tmp, dest)


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    keep_to = None
    if "--keep-to" in args:
        i = args.index("--keep-to")
        keep_to = args[i + 1]
        del args[i : i + 2]
    if len(args) != 1 or not os.path.isdir(args[0]):
        sys.stderr.write("manifest: %r is not a directory\n" % (args[:1] or [""])[0])
        return 2
    root = args[0]
    files = total = 0
    kept_errors = []
    for rel, path, st in walk(root):
        if stat.S_ISDIR(st.st_mode):
            continue
        if not stat.S_ISREG(st.st_mode):
            why = "symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            print(json.dumps({"skipped": rel, "why": why}), flush=True)
            continue
        if rel.endswith(".gpuops-part"):
            continue
        digest = _sha256(path)
        print(json.dumps({"path": rel, "size": st.st_size, "sha256": digest}), flush=True)
        files += 1
        total += st.st_size
        if keep_to:
            try:
                keep(path, keep_to, rel, digest)
            except OSError as e:
                kept_errors.append("%s: %s" % (rel, e))
    last: dict[str, object] = {"files": files, "bytes": total}
    if keep_to:
        last["kept"] = keep_to
        if kept_errors:
            last["keep_errors"] = kept_errors[:20]
    print(json.dumps(last), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
