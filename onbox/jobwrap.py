"""Run the job detached from the laptop: ``python3 jobwrap.py --dir RUN_DIR -- COMMAND...``.

Started with setsid/nohup (its own session and process group, which the job inherits), so a
dropped SSH connection or a closed laptop does not touch the job. Writes into RUN_DIR:
``job.pid`` (the job's pid), ``heartbeat`` (a counter rewritten every HEARTBEAT_S seconds while
the wrapper lives: a laptop that sees it stop changing knows the wrapper died), ``job.log`` (stdout+stderr, appended), ``exit_code`` (the job's exit
status: 128+N for a signal, written atomically) and then ``exit_marker`` (its presence means the
job has ended and ``exit_code`` is final). Stdlib only, python3 >= 3.8.

Containment: on Linux the wrapper makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``,
prctl(2), Linux >= 3.4), so every process the job starts stays its descendant even when it leaves
the job's session and process group (``setsid``, a double fork, ``env -i``): an orphan is
re-parented to the wrapper, not to init. When the job exits, and when the wrapper is told to stop
(SIGTERM/SIGINT), every descendant left is sent SIGTERM, then SIGKILL after ``--grace`` seconds,
and reaped; the exit marker is written once none is left. A descendant is found by walking the
parent links of /proc, so the rule needs nothing the job could change (its environment, its group).

On a local box that asks for it (``CONTAIN_ENV`` in the wrapper's environment, set by
gpuops.box.local.LocalBox: JSON ``{"keep": BOX, "hide": [PATH, ...]}``) the job is started through
``contain.py`` (its own user, mount and PID namespace: it cannot see the hidden paths or its
parents' /proc); the variable itself never reaches the job. Everything above holds unchanged: the
namespace's processes are this wrapper's descendants.
"""

import os
import signal
import sys
import time

HEARTBEAT_S = 1.0
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
DEFAULT_GRACE_S = 2.0
CONTAIN_ENV = "GPUOPS_LOCAL_CONTAIN"


def contained(spec, cmd, grace_s):
    """``cmd`` run through contain.py as ``spec`` (the JSON of ``CONTAIN_ENV``) asks.

    Raises ValueError when ``spec`` is not ``{"keep": str, "hide": [str, ...]}``."""
    import json

    d = json.loads(spec)
    keep, hide = (d.get("keep"), d.get("hide")) if isinstance(d, dict) else (None, None)
    if not isinstance(keep, str) or not isinstance(hide, list) or not all(isinstance(h, str) for h in hide):
        raise ValueError("%s is not {keep, hide}" % CONTAIN_ENV)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "contain.py")
    out = [sys.executable, "-I", "-S", here, "--keep", keep, "--grace", str(grace_s)]
    for h in hide:
        out += ["--hide", h]
    return out + ["--"] + cmd


def become_subreaper():
    """Make this process a child subreaper (Linux); True when the kernel said yes."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(root_pid):
    """PIDs whose parent chain in /proc leads to ``root_pid`` (live or zombie), [] without /proc."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read().decode("ascii", "replace")
            ppid = int(data[data.rfind(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root_pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _reap_all():
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _live(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data[data.rfind(")") + 2 :].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def end_descendants(grace_s, me=None):
    """End every descendant of this process (TERM, then KILL after ``grace_s``); returns how many.

    SIGTERM every descendant of this process, SIGKILL the ones still there after ``grace_s`` (and
    any started meanwhile), reap them all. Returns how many were signalled."""
    me = os.getpid() if me is None else me
    seen: set[int] = set()
    deadline = time.monotonic() + grace_s
    sig = signal.SIGTERM
    while True:
        _reap_all()
        left = [p for p in descendants(me) if _live(p)]
        if not left:
            return len(seen)
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL
        for p in left:
            if p not in seen or sig == signal.SIGKILL:
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
                seen.add(p)
        time.sleep(0.05)
        if sig == signal.SIGKILL and time.monotonic() > deadline + 10:
            return len(seen)  # unkillable (D state): give up rather than hold the exit marker forever


def _write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv=None):
    # imported here: contain.py imports this module for end_descendants at every job's start
    import argparse
    import subprocess
    import threading

    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument(
        "--grace", type=float, default=DEFAULT_GRACE_S, help="seconds between SIGTERM and SIGKILL of leftovers"
    )
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("no command")
    os.makedirs(a.dir, exist_ok=True)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup semantics: a closed terminal is not a stop
    log = open(os.path.join(a.dir, "job.log"), "ab", buffering=0)
    beat_path = os.path.join(a.dir, "heartbeat")

    def beat():
        n = 0
        while True:
            n += 1
            try:
                _write_atomic(beat_path, "%d\n" % n)
            except OSError:
                pass
            time.sleep(HEARTBEAT_S)

    threading.Thread(target=beat, daemon=True).start()
    become_subreaper()  # before the job starts: every process it makes stays below us
    started = time.time()
    spec = os.environ.pop(CONTAIN_ENV, None)  # the job never sees it
    try:
        if spec is not None:
            cmd = contained(spec, cmd, a.grace)
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except (OSError, ValueError) as e:
        log.write(("gpuops: cannot start job: %s\n" % e).encode())
        code = 127
    else:
        _write_atomic(os.path.join(a.dir, "job.pid"), str(child.pid))

        def forward(signum, _frame):
            try:
                child.send_signal(signum)
            except OSError:
                pass

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        rc = child.wait()
        code = 128 - rc if rc < 0 else rc  # -9 -> 137, as a shell reports it
    ended = time.time()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the leftovers end first, then the markers
    end_descendants(a.grace)
    _write_atomic(os.path.join(a.dir, "exit_code"), "%d\n%.3f\n%.3f\n" % (code, started, ended))
    _write_atomic(os.path.join(a.dir, "exit_marker"), "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
