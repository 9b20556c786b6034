"""Ending a local box's processes.

The one rule both the laptop (gpuops.providers.local) and the on-box agent (onbox/agent.py)
apply, so a box ends the same way whoever destroys it.

A local box is a directory ROOT. Every process gpuops starts for it runs in a process group
recorded in ``ROOT/.gpuops/pgids`` and carries ``GPUOPS_LOCAL_BOX=<abs ROOT>`` in its environment
(gpuops.box.local.LocalBox), which its descendants inherit even when they leave the group (setsid,
daemons). The marker is not enough (``env -i`` drops it): the job wrapper is a child subreaper
(onbox/jobwrap.py), so every process the job starts stays a descendant of a recorded group's
process. Destroy = note every descendant of the recorded groups' processes (parent links in /proc),
TERM the groups, KILL what is left after the grace, then TERM/KILL the noted descendants and the
marked strays, then write ``ROOT/destroyed.json``. Stdlib only, python3 >= 3.8, Linux /proc
(groups only elsewhere).
"""

import json
import os
import signal
import time

TYPE_CHECKING = False  # as typing's, without importing typing: the annotations' names for the type checker only
if TYPE_CHECKING:
    from typing import Any

MARKER = "GPUOPS_LOCAL_BOX"


def proc_stat(pid):
    """(state letter, pgrp) of ``pid`` from /proc, or None when it does not exist."""
    try:
        with open("/proc/%s/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2 :].split()
    try:
        return rest[0], int(rest[2])
    except (IndexError, ValueError):
        return None


def pids():
    """Every process id in /proc ([] where there is no /proc)."""
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _reap():
    """Collect our own exited children: a zombie still answers kill(0) and holds its group."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _alive(pid):
    """True while ``pid`` exists and is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _group_alive(pgid):
    if os.path.isdir("/proc/self"):
        return any(st is not None and st[1] == pgid and st[0] not in ("Z", "X") for st in map(proc_stat, pids()))
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False


def _marked(pid, needle):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def group_is_marked(pgid, root):
    """True when a live process of group ``pgid`` carries ``GPUOPS_LOCAL_BOX=<root>``.

    Where there is no /proc the mark cannot be read and the group is trusted (the old rule)."""
    if not os.path.isdir("/proc/self"):
        return True
    needle = ("%s=%s" % (MARKER, os.path.abspath(root))).encode()
    for pid in pids():
        st = proc_stat(pid)
        if st is not None and st[1] == pgid and st[0] not in ("Z", "X") and _marked(pid, needle):
            return True
    return False


def marked_processes(root, spare_pgid=None):
    """PIDs (not ours, not in ``spare_pgid``) whose environment holds ``GPUOPS_LOCAL_BOX=<root>``."""
    needle = ("%s=%s" % (MARKER, os.path.abspath(root))).encode()
    out = []
    for pid in pids():
        st = proc_stat(pid)
        if pid == os.getpid() or st is None or st[0] in ("Z", "X") or (spare_pgid is not None and st[1] == spare_pgid):
            continue
        if _marked(pid, needle):
            out.append(pid)
    return out


def _below_groups(groups, spare_pgid=None):
    """PIDs that descend from a live process of one of ``groups``, outside them and ``spare_pgid``.

    PIDs that descend (parent links in /proc) from a live process of one of ``groups``, outside
    those groups and ``spare_pgid`` -- what a job wrapper (a child subreaper) holds after setsid."""
    if not groups or not os.path.isdir("/proc/self"):
        return []
    stats: dict[int, Any] = {}
    children: dict[int, list[int]] = {}
    for pid in pids():
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                data = f.read().decode("ascii", "replace")
            rest = data[data.rfind(")") + 2 :].split()
            stats[pid] = (rest[0], int(rest[1]), int(rest[2]))
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(stats[pid][1], []).append(pid)
    wanted = set(groups)
    todo = [p for p, st in stats.items() if st[2] in wanted and st[0] not in ("Z", "X")]
    out, seen = [], set(todo)
    while todo:
        for c in children.get(todo.pop(), []):
            if c in seen:
                continue
            seen.add(c)
            todo.append(c)
            st = stats.get(c)
            if st is not None and st[2] not in wanted and st[2] != spare_pgid and c != os.getpid():
                out.append(c)
    return out


# How often a destroy looks whether the TERMed processes are gone (seconds): a job and an agent
# that exit at once on SIGTERM end the box within this, not within a fixed 50 ms step.
TERM_POLL_S = 0.01


def _term_then_kill(targets, send, alive, grace_seconds):
    for t in targets:
        try:
            send(t, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace_seconds
    left = list(targets)
    while left and time.monotonic() < deadline:
        time.sleep(TERM_POLL_S)
        _reap()
        left = [t for t in left if alive(t)]
    for t in left:
        try:
            send(t, signal.SIGKILL)
        except OSError:
            pass


def end_box(root, grace_seconds, spare_pgid=None, by="gpuops", now=None):
    """End every process of the local box at ``root`` but group ``spare_pgid``; idempotent.

    End every process of the local box at ``root`` except group ``spare_pgid`` (the caller's), TERM
    first and KILL after ``grace_seconds``; write destroyed.json once (``destroyed_at``: ``now()``
    when given -- the agent passes its ledger-timeline clock -- else ``time.time()``). Idempotent: a
    box already destroyed only has its marked strays ended (its recorded group ids may be reused). A
    recorded group is signalled only while one of its processes carries this box's marker (a
    recycled id, or one a job wrote into the file, is left alone). Returns the number of recorded
    groups signalled."""
    done = os.path.join(root, "destroyed.json")
    groups = []
    if not os.path.exists(done):
        try:
            with open(os.path.join(root, ".gpuops", "pgids")) as f:
                groups = sorted({int(x) for x in f.read().split()})
        except (OSError, ValueError):
            groups = []
        groups = [g for g in groups if g > 1 and g != spare_pgid and g != os.getpgrp() and group_is_marked(g, root)]
    below = _below_groups(groups, spare_pgid)  # before any signal: a dying subreaper hands its orphans to init
    if groups:
        _term_then_kill(groups, os.killpg, _group_alive, grace_seconds)
    strays = sorted(set(marked_processes(root, spare_pgid)) | {p for p in below if _alive(p)})
    _term_then_kill(strays, os.kill, _alive, grace_seconds)
    if not os.path.exists(done):
        tmp = "%s.%d.tmp" % (done, os.getpid())
        with open(tmp, "w") as f:
            f.write(json.dumps({"destroyed_at": now() if now is not None else time.time(), "by": by}))
        os.replace(tmp, done)
    return len(groups)
