"""Run a local job where it cannot reach gpuops' books.

``python3 contain.py --keep BOX [--hide PATH]... [--grace S] -- COMMAND...``

The local provider's job wrapper (onbox/jobwrap.py) starts the job through this when the
platform allows it (``gpuops.providers.local.compute.LocalProvider.contained`` probes it once per
process by running this with ``-- true``). Linux only, stdlib only (ctypes), python3 >= 3.8:

1. ``unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)``, this user mapped to root of the new
   user namespace (one line in ``uid_map``/``gid_map``, ``setgroups`` denied), then fork: the child
   is PID 1 of the new PID namespace (the "init"), this process waits for it, hands it SIGTERM and
   SIGINT, and exits with its status.
2. The init makes every mount private, mounts a fresh ``/proc`` (only the new namespace's
   processes: no parent's ``/proc/PID/environ``, ``cwd`` or ``root``), covers every ``--hide``
   directory with an empty tmpfs (a file: with ``/dev/null``) and binds ``--keep`` (the box, which
   sits under the data dir) back at its own path, so the job's log, exit marker and results stay
   where gpuops reads them.
3. The init forks the job into one more user + mount namespace: every mount above is then locked
   (a less privileged mount namespace cannot unmount one to see what it covers), and the job's
   root holds no capability over the init (it cannot ptrace it or read its ``/proc`` entries).
4. The init hands the job SIGTERM and SIGINT, reaps whatever is orphaned to it, and when the job
   ends ends every descendant left (jobwrap's rule: TERM, then KILL after ``--grace``), then exits
   with the job's status (128+N for signal N). When the init dies the kernel kills whatever is
   left in the namespace.

The job still runs with the user's rights on everything it can see (the rest of the file system,
the network). A step that fails writes one line ``gpuops: cannot contain the job: ...`` to stderr
(the job log) and exits ``CANNOT``, before the job runs.
"""

import ctypes
import os
import signal
import sys

TYPE_CHECKING = False  # as typing's, without importing typing on the box
if TYPE_CHECKING:  # the type checker reads the package's
    from .jobwrap import end_descendants
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script, with -I too
    from jobwrap import end_descendants  # the rule the wrapper applies outside, one level in

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
CANNOT = 125  # exit status when the job could not be contained (it never ran)
TMPFS_OPTIONS = "mode=0700,size=1m"  # what covers a hidden folder: empty, small, this user's


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def _b(s):
    return None if s is None else os.fsencode(s)


def _mount(libc, source, target, fstype, flags, data=None):
    _check(libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), "mount %s" % target)


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _new_user_ns(libc, flags, uid, gid):
    """unshare(CLONE_NEWUSER | ``flags``), mapping ``uid``/``gid`` (outside) to root inside."""
    _check(libc.unshare(CLONE_NEWUSER | flags), "unshare")
    try:
        _write("/proc/self/setgroups", "deny")
    except FileNotFoundError:  # kernels before 3.19 have no setgroups file
        pass
    _write("/proc/self/uid_map", "0 %d 1" % uid)
    _write("/proc/self/gid_map", "0 %d 1" % gid)


def _cover(libc, keep, hides):
    """Step 2 of the module doc (in the init): fresh /proc, hidden paths covered, ``keep`` bound back.

    Paths are resolved first (a data dir reached through a symlink is covered where it is), and
    each covered path is looked at afterwards: one that still shows anything but the way to
    ``keep`` raises OSError, so the job never runs believing it is contained when it is not."""
    keep = os.path.realpath(keep)
    hides = [os.path.realpath(p) for p in hides]
    _mount(libc, "none", "/", None, MS_REC | MS_PRIVATE)
    keep_fd = os.open(keep, os.O_PATH | os.O_DIRECTORY)  # the box, reachable after its parent is covered
    try:
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        covered = []
        for p in hides:
            if not os.path.lexists(p):
                continue  # nothing to hide (or already under a covered folder)
            if os.path.isdir(p):
                _mount(libc, "none", p, "tmpfs", MS_NOSUID | MS_NODEV, TMPFS_OPTIONS)
            else:
                _mount(libc, "/dev/null", p, None, MS_BIND)
            covered.append(p)
        above = [p for p in covered if keep == p or keep.startswith(p.rstrip("/") + "/")]
        if above:
            os.makedirs(keep, mode=0o700, exist_ok=True)
            _mount(libc, "/proc/self/fd/%d" % keep_fd, keep, None, MS_BIND | MS_REC)
    finally:
        os.close(keep_fd)
    for p in covered:
        if os.path.isdir(p):
            way = os.path.relpath(keep, p).split(os.sep)[0] if p in above else None
            left = [n for n in os.listdir(p) if n != way]
        else:
            left = [p] if os.path.getsize(p) else []
        if left:
            raise OSError("%s still shows %s after it was covered" % (p, left[:3]))


def _status(st):
    code = os.waitstatus_to_exitcode(st) if hasattr(os, "waitstatus_to_exitcode") else _old_status(st)
    return 128 - code if code < 0 else code


def _old_status(st):
    return -os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st)


def _forward_to(pid):
    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, forward)


def _init(libc, a, cmd):
    """PID 1 of the new namespace: steps 2 to 4 of the module doc; never returns."""
    try:
        _cover(libc, os.path.abspath(a.keep), [os.path.abspath(p) for p in a.hide])
    except OSError as e:
        sys.stderr.write("gpuops: cannot contain the job: %s\n" % e)
        sys.stderr.flush()
        os._exit(CANNOT)
    job = os.fork()
    if job == 0:
        try:
            _new_user_ns(libc, CLONE_NEWNS, 0, 0)  # locks every mount above for the job
            for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):  # what Python ignores, as subprocess restores it
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            os.execvp(cmd[0], cmd)
        except OSError as e:
            sys.stderr.write("gpuops: cannot contain the job: %s\n" % e)
            sys.stderr.flush()
            os._exit(CANNOT)
    _forward_to(job)
    code = CANNOT
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == job:
            code = _status(st)
            break
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    end_descendants(a.grace)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class _Args:
    keep = None
    grace = 2.0

    def __init__(self):
        self.hide = []


def parse(argv):
    """(options, command) from ``argv``; ValueError naming what is wrong.

    By hand, not argparse: its imports (re, gettext) would weigh on every job's start."""
    a, i = _Args(), 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] not in ("--keep", "--hide", "--grace") or i + 1 >= len(argv):
            raise ValueError("usage: contain.py --keep BOX [--hide PATH]... [--grace S] -- COMMAND...")
        name, value = argv[i][2:], argv[i + 1]
        if name == "hide":
            a.hide.append(value)
        elif name == "grace":
            a.grace = float(value)
        else:
            a.keep = value
        i += 2
    cmd = argv[i + 1 :]
    if a.keep is None or not cmd:
        raise ValueError("contain.py needs --keep BOX and a command after --")
    return a, cmd


def main(argv=None):
    try:
        a, cmd = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        sys.stderr.write("gpuops: cannot contain the job: %s\n" % e)
        return CANNOT
    uid, gid = os.getuid(), os.getgid()
    try:
        libc = _libc()
        _new_user_ns(libc, CLONE_NEWNS | CLONE_NEWPID, uid, gid)
    except (OSError, AttributeError) as e:
        sys.stderr.write("gpuops: cannot contain the job: %s\n" % e)
        return CANNOT
    init = os.fork()
    if init == 0:
        _init(libc, a, cmd)
    _forward_to(init)
    while True:
        try:
            _, st = os.waitpid(init, 0)
            return _status(st)
        except ChildProcessError:
            return CANNOT


if __name__ == "__main__":
    sys.exit(main())
