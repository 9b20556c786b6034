"""On-box teardown agent: ``python3 agent.py --config agent.json``. Stdlib only, python3 >= 3.8.

Started by the laptop right after SSH answers and before bootstrap, detached (its own session).
Without ``--worker`` it is the supervisor: it holds ``<state>/agent.supervisor.lock`` (a second
start is a no-op), runs the worker, and restarts it (1 s, doubling to 30 s) whenever it dies
without having finished. The worker samples the GPUs every ``sample_seconds`` (NVML through
``pynvml`` when the image has it, else ``nvidia-smi``), watches the job's exit marker every
``poll_seconds``, applies ``policy.decide`` and, when it says destroy, destroys the box through
the narrowest credential the box has, then exits 0 (the supervisor then exits).

Destroy, by ``destroy.kind`` in the config:

* ``local``: end every process group listed in ``<root>/.gpuops/pgids`` except the agent's own
  (and except a group none of whose processes carries the box marker: a recycled id), then every
  process still marked ``GPUOPS_LOCAL_BOX=<root>`` (TERM, then KILL after
  ``kill_grace_seconds``), then write ``<root>/destroyed.json`` -- the conventions of
  ``gpuops.providers.local``.
* ``runpod``: RunPod REST v2 ``DELETE {url}/v2/pods/<id>`` with the pod-scoped ``RUNPOD_API_KEY``
  and ``RUNPOD_POD_ID`` read from PID 1's environment (an SSH session does not inherit them); the
  key's rights are undocumented, so a refused terminate (401/403) becomes ``POST
  {url}/v2/pods/<id>/action`` ``{"action": "stop"}`` (GPU billing ends; the laptop side sees the pod
  EXITED and terminates it), and both refused is an error retried like any other (the watchdog
  and reconcile terminate a box whose agent asked for its end). url: config ``destroy.url``, else
  ``$RUNPOD_API_BASE_URL``, else https://api.runpod.io (docs.runpod.io/api-reference-v2; the pod's
  variables: https://docs.runpod.io/pods/templates/environment-variables).
* ``vast``: ``DELETE {url}/api/v0/instances/<id>/`` with the per-instance ``CONTAINER_API_KEY``
  and ``CONTAINER_ID`` from PID 1's environment. url: config ``destroy.url``, else ``$VAST_URL``,
  else https://console.vast.ai (vastai 1.9.1 ``destroy_instance``; the instance's variables:
  https://docs.vast.ai/guides/instances/docker-environment).

The account key never comes to the box.

Clocks. The box's wall clock is never read for a rule. Every time the rules compare (TTL, session
cap, grace, idle window, the no-job wait) is on one timeline: the laptop's ``armed_at`` at the
moment the supervisor starts, plus the box's monotonic clock since, handed to each worker
(``--anchor``); the box's wall clock only when the config has no ``armed_at`` (a config written by
hand). The money limits come as what is LEFT (``ttl_seconds_left``, ``session_usd_left``: computed by
the laptop at ``armed_at`` from the instance's create time as the provider reported it, less what
was billed by then) and run out that many seconds of the monotonic clock after the arm (late by
the arm's own latency, the config's copy and the detached start: a round trip or two). A box wall
clock hours off can neither fire nor suppress a rule; times written to the status (and the local
``destroyed.json``) are on that timeline too.

Faults it survives. Status writes are best-effort: ENOSPC/EFBIG (full disk, RLIMIT_FSIZE) are
counted (``write_failures``) and never stop a destroy. The worker pulses a pipe to the supervisor
every few seconds (``pulse_interval``); a worker stopped (SIGSTOP) or wedged for
``worker_stale_seconds`` is SIGKILLed and restarted. After arm, a box that gets no job, no
bootstrap, no SSH session and no laptop presence for ``no_job_seconds`` is destroyed (reason
``no_job``). While the laptop's presence lease (``<state>/laptop-presence``, refreshed by
``gpuops.agent.agentctl.hold_presence`` during copy-back) is fresh -- judged on the box's monotonic
clock, never by timestamps -- job end, no_job and idle wait, at most ``presence_max_seconds``
(a job end at most ``job_end_grace_seconds`` + ``fetch_deadline_seconds`` after the job's exit:
the laptop's one deadline for what must come home); TTL and session cap never wait. Each open ``gpuops ssh`` / ``exec`` / ``-L`` holds an activity
lease (``<state>/activity/<id>``, ``gpuops.agent.agentctl.hold_activity``, the same hold rule:
``LeaseFile``), counted in a sample's ``ssh`` beside the terminal sessions: the box is busy while
one is open. A config with ``"interactive": true`` (``gpuops up --interactive``: no job) has no
armed-no-job wait; idle, TTL and the session cap end it.

Status (``<state>/agent-status.json``, rewritten atomically when what the rules read changed, and
every ``status_heartbeat_seconds`` for the heartbeat): ``{"version", "session", "pid",
"agent_started_at", "heartbeat", "samples": [...], "decision": {...}, "job": {...}, "presence",
"destroy": null|{...}, "restarts", "write_failures", "errors"}``; samples are folded into runs
(``policy.merge_sample``), so the file stays a few KB. The config (written by the laptop,
``gpuops.agent.agentctl.agent_config``) is documented there.
"""

import errno
import fcntl
import json
import os
import re
import select
import signal
import sys
import time

TYPE_CHECKING = False  # as typing's, without importing typing (the agent's memory, bench/bench_agent.py)
if TYPE_CHECKING:  # the type checker reads the package
    from typing import Any

    from . import localbox, policy
    from .vocabulary import ProviderName
elif __package__:
    from . import localbox, policy
    from .vocabulary import ProviderName
elif __name__ == "__main__":  # run as a script on the box (they sit next to this file): by the worker only
    localbox = policy = ProviderName = None
else:  # imported as a plain module with this directory on sys.path
    import localbox
    import policy
    from vocabulary import ProviderName


def _import_worker_modules():
    """Import what the worker needs beside this file (script mode).

    The supervisor never does: compiling them costs it ~1 MB of resident memory for nothing."""
    global localbox, policy, ProviderName
    if policy is None and not TYPE_CHECKING:  # the type checker reads the package's (above)
        import localbox
        import policy
        from vocabulary import ProviderName


STATUS_VERSION = 2
MAX_ERRORS_KEPT = 20
MAX_SAMPLE_RUNS = 200
SSH_SESSION_RE = re.compile(r"^sshd(?:-session)?: (\S+?)@(pts/\d+|tty\S*)")
PRESENCE_FILE = "laptop-presence"  # in the state dir; written by gpuops.agent.agentctl.hold_presence
PRESENCE_HOLD_MAX_S = 600.0  # one refresh never holds longer than this, whatever the file says
# In the state dir: one lease file per open `gpuops ssh` / `exec` / `-L` (gpuops.agent.agentctl.hold_activity),
# each counted as an SSH session while fresh (the same hold rule as the presence lease, LeaseFile).
ACTIVITY_DIR = "activity"
WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EIO)


def log(msg):
    """One line to stderr (the agent log). Never raises: a full disk must not stop the agent."""
    try:
        sys.stderr.write("%s agent[%d] %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), os.getpid(), msg))
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def write_atomic(path, text):
    """Write ``text`` to ``path`` through a temporary file and a rename.

    Raises OSError; the temporary file is removed when the write fails (a full disk keeps no half
    file)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- what the box looks like -----------------------------------------------------------------------
def read_environ(path="/proc/1/environ"):
    """PID 1's environment as a dict ({} when unreadable). Provider keys live there, not in SSH."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_pid(path="/proc/loadavg"):
    """The newest pid the kernel handed out in this pid namespace, or None.

    The newest process id the kernel handed out in this pid namespace (the last field of
    /proc/loadavg, proc(5)), or None when unreadable or 0 (gVisor prints 0)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.read(fd, 256)
        finally:
            os.close(fd)
        v = int(data.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return v if v > 0 else None


def _in_pid_range(pid, lo, hi):
    """True when ``pid`` was handed out after ``lo`` and up to ``hi`` (two /proc/loadavg readings).

    Pids count up from the newest and wrap at pid_max."""
    if hi >= lo:
        return lo < pid <= hi
    return pid > lo or pid <= hi


def _ctime(pid):
    """ctime of /proc/PID (ns), None when gone: a new process under a reused pid is a new inode."""
    try:
        return os.stat("/proc/%s" % pid).st_ctime_ns
    except OSError:
        return None


class LeaseFile:
    """A lease the laptop refreshes by rewriting one file: the presence lease, each activity lease.

    A refresh is seen as a change of the file (inode, mtime, size); how long it holds (its JSON
    ``hold_seconds``, default 60, at most ``PRESENCE_HOLD_MAX_S``) is measured on this box's
    monotonic clock from that moment, never from a timestamp in the file. ``released``: over now.
    The first version of the file this worker sees counts its age (the box's own clock, once)."""

    __slots__ = ("path", "sig", "until_mono", "first")

    def __init__(self, path):
        self.path = path
        self.sig = None
        self.until_mono = None
        self.first = True

    def left(self):
        """Seconds the lease still holds (> 0), or None (no file, released, lapsed)."""
        try:
            st = os.stat(self.path)
        except OSError:
            self.sig, self.until_mono = None, None
            return None
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        if sig != self.sig:
            self.sig = sig
            try:
                with open(self.path) as f:
                    doc = json.loads(f.read() or "{}")
            except (OSError, ValueError):
                doc = {}
            doc = doc if isinstance(doc, dict) else {}
            hold = _num_or_none(doc.get("hold_seconds"))
            hold = max(0.0, min(hold if hold is not None else 60.0, PRESENCE_HOLD_MAX_S))
            if doc.get("released"):
                self.until_mono = None
            else:
                base = time.monotonic()
                if self.first:  # written before this worker looked: count its age
                    base -= max(0.0, time.time() - st.st_mtime)
                self.until_mono = base + hold
        self.first = False
        left = None if self.until_mono is None else self.until_mono - time.monotonic()
        return None if left is None or left <= 0 else left


class ProcScanner:
    """``scan_proc`` without reading every process's argv every sample.

    A process's argv is read when its pid is first seen, once more on the next scan (a fresh process
    may still exec, as ``bash -c 'exec -a NAME ...'`` does), and then again only when its title
    starts with ``sshd`` (sshd retitles its session processes) or its pid may have changed hands.

    Which pids are new since the previous scan: the kernel hands pids out counting up from the
    newest (the last field of ``/proc/loadavg``), wrapping at pid_max, so only pids between the
    newest at the previous scan and the newest now can be new processes (an SSH login is one: sshd
    forks for it); the others keep their cached argv without a syscall. When that range is small
    (``PROBE_MAX``) and holds the nvidia-smi this process started since (``run_capture``: the
    count is checked every sample), those pids are looked up one by one instead of listing /proc.
    Where the count cannot be trusted (it reads 0, or a new process turns up outside the range: an
    emulated /proc), each cached pid's /proc entry ctime is compared every scan instead (the
    previous rule); every ``FULL_CHECK_S`` seconds /proc is listed and every entry's ctime
    compared anyway (a full wrap of the pid space within one sample would hide a reuse)."""

    FULL_CHECK_S = 60.0
    PROBE_MAX = 8  # new pids looked up one by one (~25 us each, cold); more: list /proc (~250 us)

    def __init__(self, loadavg="/proc/loadavg", pids=None):
        self.loadavg = loadavg
        self.pids = pids  # () -> [pid, ...]: the live processes (None: localbox.pids)
        # pid -> [ctime_ns, cmdline, ssh user or None, sshd title?, runs bootstrap?, reads]
        self.cache = {}
        self.watch = set()  # pids whose entry can count or may still change: read every scan
        self.prev: tuple[int, int] | None = None  # (newest pid before the previous scan looked, newest pid after)
        self.by_range = True
        self.full_at = None  # monotonic time of the last listing with every entry's ctime compared
        self.spawn_seen = None  # the last run_capture child the previous scan knew of
        self.probed = 0  # scans that looked pids up one by one (for the tests and the bench)

    def _read(self, pid, entry=None, ctime=None):
        cmd = _cmdline(pid)
        first = cmd.split("\0", 1)[0].strip()
        m = SSH_SESSION_RE.match(first)
        user, sshd, boot = m.group(1) if m else None, cmd.startswith("sshd"), "onbox/bootstrap.py" in cmd
        if entry is None:
            entry = [ctime or _ctime(pid), cmd, user, sshd, boot, 1]
            if (sshd or boot) and _is_thread(pid):  # /proc/TID of a thread: its process's argv
                entry = [entry[0], "", None, False, False, 2]
        else:
            entry = [entry[0], cmd, user, sshd, boot, entry[5] + 1]
        self.cache[pid] = entry
        if entry[3] or entry[4] or entry[5] < 2:
            self.watch.add(pid)
        else:
            self.watch.discard(pid)
        return entry

    def _count(self, pid, e, users, real_root, boot):
        """(counts as a session, bootstrap seen) for one entry."""
        if e[2] is not None and (not users or e[2] in users):
            return True, boot
        if real_root and not boot and e[4]:
            try:
                cwd = os.readlink("/proc/%s/cwd" % pid)
            except OSError:
                return False, boot
            return False, os.path.realpath(cwd) == real_root and pid_alive(pid)
        return False, boot

    def _probe(self, lo, hi, users, real_root):
        """The scan when only pids ``lo+1 .. hi`` can be new: look those up, re-read the watched."""
        cache = self.cache
        fresh = set()
        for pid in range(lo + 1, hi + 1):
            ctime = _ctime(pid)
            if ctime is not None:
                self._read(pid, ctime=ctime)
                fresh.add(pid)
            elif cache.pop(pid, None) is not None:
                self.watch.discard(pid)
        n, boot = 0, False
        for pid in list(self.watch):
            e = cache[pid] if pid in fresh else self._read(pid, cache[pid])
            counts, boot = self._count(pid, e, users, real_root, boot)
            n += counts
        self.prev = (hi, hi)
        self.probed += 1
        return n, boot

    def scan(self, users=None, bootstrap_root=None):
        """``(ssh, bootstrap)``: see ``scan_proc``."""
        real_root = os.path.realpath(bootstrap_root) if bootstrap_root else None
        now = time.monotonic()
        full = self.full_at is None or now - self.full_at >= self.FULL_CHECK_S
        spawned = _LAST_SPAWN[0]
        new_spawn = spawned is not None and spawned != self.spawn_seen
        self.spawn_seen = spawned
        before = _last_pid(self.loadavg) if self.by_range else None
        # Look the new pids up one by one when they are few and the count held for our own child.
        if (
            before is not None
            and not full
            and self.prev is not None
            and new_spawn
            and self.prev[0] <= before <= self.prev[0] + self.PROBE_MAX
            and _in_pid_range(spawned, self.prev[0], before)
        ):
            return self._probe(self.prev[0], before, users, real_root)
        live = (self.pids or localbox.pids)()
        after = _last_pid(self.loadavg) if self.by_range else None
        ranged = self.by_range and not full and before is not None and after is not None and self.prev is not None
        if ranged:
            assert self.prev is not None and after is not None  # what ranged checked
            lo, hi = self.prev[0], after
        elif full:
            self.full_at = now
        cache = self.cache
        n, boot = 0, False
        for pid in live:
            e = cache.get(pid)
            if e is None:
                if ranged and not _in_pid_range(pid, lo, hi):
                    log(
                        "/proc/loadavg's newest pid does not tell new processes (pid %d outside %d..%d); "
                        "comparing /proc entry times instead" % (pid, lo, hi)
                    )
                    self.by_range = ranged = False
                e = self._read(pid)
            elif ranged and _in_pid_range(pid, lo, hi):  # handed out since the last scan: a new process
                e = self._read(pid)
            elif pid in self.watch:
                e = self._read(pid, e)
            elif not ranged and _ctime(pid) != e[0]:
                e = self._read(pid)
            counts, boot = self._count(pid, e, users, real_root, boot)
            n += counts
        self.prev = (before, after) if before is not None and after is not None else None
        if len(cache) > len(live) + 256:
            keep = set(live)
            for pid in [p for p in cache if p not in keep]:
                del cache[pid]
                self.watch.discard(pid)
        return n, boot


def _is_thread(pid):
    """True when ``pid`` is a thread id, not a process (its Tgid differs).

    /proc answers for thread ids too, though it does not list them."""
    try:
        with open("/proc/%s/status" % pid, "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1]) != int(pid)
    except (OSError, ValueError, IndexError):
        pass
    return False


_SCANNER = ProcScanner()


def scan_proc(users=None, bootstrap_root=None):
    """One pass over /proc: ``(ssh, bootstrap)``.

    ``ssh``: interactive SSH sessions, processes titled ``sshd: USER@pts/N`` (or ``sshd-session:
    ...`` on OpenSSH >= 9.8); ``@notty`` channels (scp, the laptop's own exec) and a tty held by a
    container's PID 1 are not sessions; ``users``: count only these (None = any). ``bootstrap``:
    with ``bootstrap_root`` set, whether a process running ``onbox/bootstrap.py`` has that
    directory as its working directory (False when not asked). Argv is cached between calls
    (``ProcScanner``)."""
    return _SCANNER.scan(users, bootstrap_root)


def ssh_sessions(users=None):
    """Number of interactive SSH sessions (``scan_proc``)."""
    return scan_proc(users)[0]


def pid_alive(pid, must_contain=None):
    """True when ``pid`` runs (not a zombie) and its cmdline contains ``must_contain`` if given.

    Guards against a recycled pid."""
    st = localbox.proc_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return False
    if must_contain and must_contain not in _cmdline(pid):
        return False
    return True


def bootstrap_pid_state(pidfile):
    """The bootstrap's state from its pidfile: ``"running"``, ``"ended"`` or ``"none"``.

    ``"ended"``: the pidfile names a process that is gone; ``"none"``: no pidfile (bootstrap was not
    started the ``gpuops.agent.bootstrap_config.bootstrap_command`` way)."""
    try:
        with open(pidfile) as f:
            pid = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return "none"
    return "running" if pid_alive(pid, "bootstrap") else "ended"


def bootstrap_running(pidfile, root=None):
    """True while bootstrap runs.

    The pid in ``pidfile`` is alive (``gpuops.agent.bootstrap_config.bootstrap_command``), or a
    process running ``onbox/bootstrap.py`` has ``root`` as its working directory (however the
    laptop started it)."""
    st = bootstrap_pid_state(pidfile)
    if st == "running":
        return True
    return root is not None and scan_proc([], root)[1]


def job_state(run_dir):
    """``{"ended_at", "exit_code", "started"}`` from jobwrap's files.

    ``ended_at`` is the box's wall clock (epoch s) and ``exit_code`` the status, both None while the
    job runs or before it starts; ``started``: the wrapper has begun (its log or marker exists)."""
    marker = os.path.join(run_dir, "exit_marker")
    if not os.path.exists(marker):
        return {"ended_at": None, "exit_code": None, "started": os.path.exists(os.path.join(run_dir, "job.log"))}
    code, ended = None, None
    try:
        with open(os.path.join(run_dir, "exit_code")) as f:
            lines = f.read().split()
        code = int(lines[0])
        ended = float(lines[2])
    except (OSError, ValueError, IndexError):
        try:
            ended = os.path.getmtime(marker)
        except OSError:
            ended = time.time()
    return {"ended_at": ended, "exit_code": code, "started": True}


def _which(name):
    """``name`` resolved on PATH (an absolute path lets subprocess use posix_spawn).

    As given when not found there (the sample then reports "not found")."""
    if os.sep in name:
        return name
    for d in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(d or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return name


def _exit_code(status):
    """A waitpid status as subprocess's returncode: the exit code, or -N for signal N."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


_LAST_SPAWN: "list[int | None]" = [None]  # pid of run_capture's newest child: ProcScanner checks /proc/loadavg with it
# The environment run_capture's children get, as bytes, taken at the first call (the agent never
# changes its own): handing os.environ itself to posix_spawn re-encodes every variable each time.
_SPAWN_ENV: "list[dict[bytes, bytes]]" = []


def _poll_ms(seconds):
    """``seconds`` (> 0) as ``poll()``'s timeout in whole milliseconds, rounded up (never 0: no busy loop)."""
    return int(seconds * 1000.0) + 1


def run_capture(argv, timeout):
    """Run ``argv`` with stdin from /dev/null; ``(returncode, stdout, stderr)`` or None past ``timeout``.

    Run ``argv`` (``argv[0]`` a path, else looked up on PATH) with stdin from /dev/null and return
    ``(returncode, stdout, stderr)`` (bytes); None when it ran past ``timeout`` seconds (it is then
    SIGKILLed and reaped). Raises OSError (FileNotFoundError, PermissionError) when it cannot start.
    ``subprocess.run`` without its machinery (selector, Popen bookkeeping, polling wait): at 1 s
    samples this call is much of the agent's own CPU."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        spawn = os.posix_spawn if os.sep in argv[0] else os.posix_spawnp
        if not _SPAWN_ENV:
            _SPAWN_ENV.append(dict(os.environb))
        pid = spawn(argv[0], list(argv), _SPAWN_ENV[0], file_actions=actions)
        _LAST_SPAWN[0] = pid
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    reading = [out_r, err_r]
    # poll, not select: select() refuses any fd >= FD_SETSIZE (1024) with ValueError, and a busy
    # process can hold that many (the pipes take the lowest free numbers).
    poller = select.poll()
    for fd in reading:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    try:
        while reading:
            left = deadline - time.monotonic()
            ready = poller.poll(_poll_ms(left)) if left > 0 else []
            if not ready:
                break
            for fd, _events in ready:  # POLLIN or POLLHUP: a read answers data or EOF
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    reading.remove(fd)
                    poller.unregister(fd)
        delay = 0.0005
        while not reading:  # both pipes closed: the process is exiting
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return _exit_code(status), b"".join(chunks[out_r]), b"".join(chunks[err_r])
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        return None
    finally:
        os.close(out_r)
        os.close(err_r)


def sample_gpus(smi, timeout):
    """One reading of every GPU via nvidia-smi (``smi``: argv prefix). Never raises."""
    try:
        out = run_capture(list(smi) + policy.SMI_ARGS, timeout)
    except FileNotFoundError:
        return {"gpus": [], "error": "nvidia-smi not found"}
    except OSError as e:
        return {"gpus": [], "error": "nvidia-smi: %s" % e}
    if out is None:
        return {"gpus": [], "error": "nvidia-smi timed out after %.0f s" % timeout}
    code, stdout, stderr = out
    return policy.parse_smi(stdout.decode("utf-8", "replace"), code, stderr.decode("utf-8", "replace"))


def sample_nvml():
    """One reading of every GPU via NVML, or None when NVML is not there (then nvidia-smi is used).

    One reading of every GPU via NVML (the ``pynvml`` module, when the image has it), in
    ``policy.parse_smi``'s shape; None when pynvml is not importable or NVML does not start (then
    nvidia-smi is used). A value NVML does not support for a GPU is None (unknown)."""
    try:
        import pynvml  # optional: not stdlib, present in many CUDA images (nvidia-ml-py)
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: fall back to nvidia-smi
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            g: dict[str, Any] = {"index": i, "util": None, "mem_used_mib": None, "mem_total_mib": None}
            try:
                g["util"] = float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            except pynvml.NVMLError:
                pass
            try:
                m = pynvml.nvmlDeviceGetMemoryInfo(h)
                g["mem_used_mib"], g["mem_total_mib"] = m.used / 2**20, m.total / 2**20
            except pynvml.NVMLError:
                pass
            gpus.append(g)
        return {"gpus": gpus, "error": None if gpus else "no GPU reported"}
    except pynvml.NVMLError as e:
        return {"gpus": [], "error": "NVML: %s" % e}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # shutting down a half-started NVML changes nothing for the reading
            pass


# -- destroy ---------------------------------------------------------------------------------------
def destroy_local(cfg, root, now=None):
    """End the session's processes but the agent's, then write destroyed.json (idempotent).

    End the session's processes except the agent's own group (onbox/localbox.py, the same rule
    the laptop's destroy applies), then write destroyed.json (its time from ``now()``, the agent's
    ledger-timeline clock). Idempotent."""
    n = localbox.end_box(
        root,
        float(cfg.get("kill_grace_seconds", policy.KILL_GRACE_SECONDS)),
        spare_pgid=os.getpgrp(),
        by="agent",
        now=now,
    )
    return "ended %d process group(s)" % n


def _http(method, url, headers, body, timeout=20.0):
    import urllib.error  # only the destroy path needs HTTP: not imported at start (+8 MB RSS)
    import urllib.request

    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def destroy_runpod(cfg, env):
    """Terminate the pod with its pod-scoped key (RunPod REST v2, ``DELETE /v2/pods/{id}``).

    What that key may do is undocumented: refused (401/403), the pod is stopped instead (``POST
    /v2/pods/{id}/action`` ``{"action": "stop"}``: GPU billing ends, the pod shows EXITED to the
    provider, where the laptop side finds and terminates it). A stop answered 409 (not valid for
    the pod's status) counts as stopped only when a read of the pod says EXITED. Both refused, or a
    409 on a pod still running: RuntimeError, and the caller keeps trying (its status stays
    readable over SSH for the watchdog)."""
    import urllib.parse

    key = env.get("RUNPOD_API_KEY")
    pod = env.get("RUNPOD_POD_ID") or cfg.get("instance_id")
    if not key or not pod:
        raise RuntimeError("RUNPOD_API_KEY / RUNPOD_POD_ID not in PID 1's environment")
    base = cfg.get("url") or os.environ.get("RUNPOD_API_BASE_URL") or "https://api.runpod.io"
    url = "%s/v2/pods/%s" % (base.rstrip("/"), urllib.parse.quote(str(pod), safe=""))
    auth = {"Authorization": "Bearer " + key, "Accept": "application/json"}
    status, text = _http("DELETE", url, auth, None)
    if status in (200, 204):
        return "terminated pod %s" % pod
    if status == 404:
        return "pod %s already gone" % pod
    if status not in (401, 403):
        raise RuntimeError("terminate pod: HTTP %d %s" % (status, text[:200]))
    refused = status
    status, text = _http(
        "POST",
        url + "/action",
        dict(auth, **{"Content-Type": "application/json"}),
        json.dumps({"action": "stop"}).encode(),
    )
    if status == 200:
        return "stopped pod %s (its key may not terminate it: HTTP %d); the laptop side terminates it" % (pod, refused)
    if status == 404:
        return "pod %s already gone" % pod
    if status == 409:  # not valid for its status: stopped already only if a read says so
        st, body = _http("GET", url, auth, None)
        try:
            now = json.loads(body).get("status") if st == 200 else None
        except (ValueError, AttributeError):
            now = None
        if now in ("EXITED", "TERMINATED"):
            return "pod %s already stopped (its key may not terminate it: HTTP %d)" % (pod, refused)
        raise RuntimeError(
            "terminate pod: refused (HTTP %d), and stop: HTTP 409 while the pod reads %s"
            % (refused, now or "HTTP %d" % st)
        )
    raise RuntimeError("terminate pod: refused (HTTP %d), and stop: HTTP %d %s" % (refused, status, text[:200]))


def destroy_vast(cfg, env):
    key = env.get("CONTAINER_API_KEY")
    iid = env.get("CONTAINER_ID") or cfg.get("instance_id")
    if not key or not iid:
        raise RuntimeError("CONTAINER_API_KEY / CONTAINER_ID not in PID 1's environment")
    base = cfg.get("url") or os.environ.get("VAST_URL") or "https://console.vast.ai"
    import urllib.parse

    url = "%s/api/v0/instances/%s/" % (base.rstrip("/"), urllib.parse.quote(str(iid), safe=""))
    status, text = _http("DELETE", url, {"Content-Type": "application/json", "Authorization": "Bearer " + key}, b"{}")
    if status == 404:
        return "instance %s already gone" % iid
    if status >= 300:
        raise RuntimeError("destroy instance: HTTP %d %s" % (status, text[:200]))
    return "destroyed instance %s" % iid


# A marketplace box's destroy, by ``destroy.kind`` (a ProviderName value): (destroy cfg, PID 1's
# environment) -> what was done. "local" is destroy_local. tests/providers/test_registry.py checks
# these kinds against the laptop's registry (gpuops/providers/__init__.py).
MARKET_DESTROYS = {"runpod": destroy_runpod, "vast": destroy_vast}


# -- the worker ------------------------------------------------------------------------------------
def _num_or_none(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None


class Agent:
    """The sampling loop.

    ``anchor``: ``(wall, mono)``, the ledger-timeline epoch second ``wall`` that the box's
    ``time.monotonic()`` value ``mono`` stands for (the supervisor's start; default: now on the
    box's own clocks). ``pulse_fd``: a pipe to the supervisor, written every loop. ``restarts``: how
    many workers ran before this one (the supervisor counts)."""

    def __init__(self, config_path, anchor=None, pulse_fd=None, restarts=None):
        with open(config_path) as f:
            self.cfg = json.load(f)
        cfg = self.cfg
        self.root = os.path.abspath(cfg.get("root") or os.path.dirname(os.path.dirname(os.path.abspath(config_path))))
        self.state_dir = os.path.join(self.root, cfg.get("state_dir", ".gpuops"))
        self.status_path = os.path.join(self.state_dir, "agent-status.json")
        self.presence_path = os.path.join(self.state_dir, PRESENCE_FILE)
        self.activity_dir = os.path.join(self.state_dir, ACTIVITY_DIR)
        self.run_dir = os.path.join(self.root, cfg.get("run_dir", ".gpuops/run"))
        self.pidfile = os.path.join(self.root, cfg.get("bootstrap_pidfile", ".gpuops/bootstrap.pid"))
        self.settings = dict(cfg.get("teardown") or {})
        for k in ("max_hours", "no_job_seconds"):  # the session's own, passed at arm
            if self.settings.get(k) is None and cfg.get(k) is not None:
                self.settings[k] = cfg[k]
        self.sample_s = float(self.settings.get("sample_seconds", policy.SAMPLE_SECONDS))
        self.poll_s = min(float(cfg.get("poll_seconds", 1.0)), self.sample_s)
        # The heartbeat alone is rewritten this often; the laptop calls it stale after 3 samples + 15 s.
        self.heartbeat_s = float(cfg.get("status_heartbeat_seconds") or 5.0)
        self.presence_max_s = float(cfg.get("presence_max_seconds") or 3600.0)
        self.util = float(self.settings.get("idle_util_percent", policy.IDLE_UTIL_PERCENT))
        self.smi = cfg.get("nvidia_smi") or ["nvidia-smi"]
        if isinstance(self.smi, str):
            self.smi = [self.smi]
        self.smi = [_which(self.smi[0])] + list(self.smi[1:])
        self.ssh_users = cfg.get("ssh_users") or None
        # "auto": NVML when pynvml imports and starts, else nvidia-smi; "nvidia-smi": only that.
        self.gpu_source = cfg.get("gpu_source", "auto")
        self.destroy_cfg = cfg.get("destroy") or {"kind": "local"}
        self.environ_file = cfg.get("environ_file", "/proc/1/environ")
        if anchor is None:
            anchor = (time.time(), time.monotonic())
        self.anchor_wall, self.anchor_mono = float(anchor[0]), float(anchor[1])
        self.started = self.anchor_wall
        # The money limits as armed (see the module doc, Clocks): the create placed on this timeline
        # is the arm moment less the seconds the laptop counted billed by then.
        armed = _num_or_none(cfg.get("armed_at"))
        self.armed_at = self.started if armed is None else armed
        ttl_s = float(self.settings.get("max_hours", policy.MAX_HOURS)) * 3600.0
        left = _num_or_none(cfg.get("ttl_seconds_left"))
        self.billed_at_arm_s = 0.0 if left is None else ttl_s - max(0.0, left)
        self.billing_started = self.armed_at - self.billed_at_arm_s
        self.rule_settings = dict(self.settings)
        usd_left, price = _num_or_none(cfg.get("session_usd_left")), _num_or_none(cfg.get("usd_per_hour"))
        if usd_left is not None and price:  # policy counts spend from the create: add back what was billed by the arm
            self.rule_settings["max_session_usd"] = max(0.0, usd_left) + self.billed_at_arm_s / 3600.0 * price
        self.pulse_fd = pulse_fd
        self.pulse_every = pulse_interval(worker_stale_seconds(cfg))
        self._pulsed = None  # monotonic time of the last pulse
        self.samples = []
        self.errors = []
        self.destroy = None
        self.restarts = int(restarts or 0)
        self.write_failures = 0
        self._write_errno = None
        self._last_key, self._last_write = None, None
        self._job_seen = False
        self._job_end = None  # (ledger-timeline end, exit code) once the marker was read
        self._presence = LeaseFile(self.presence_path)
        self._activity = {}  # file name -> LeaseFile: the open `gpuops ssh` / `exec` leases (activity())
        self._deferred_since = None
        self._boot_sig, self._boot_state = None, None
        self.no_job_since: float | None = self.started
        self._resume(restarts is None)

    # -- clocks -------------------------------------------------------------------------------
    def clock(self):
        """Now on the ledger's timeline: the anchor plus the box's monotonic clock since."""
        return self.anchor_wall + (time.monotonic() - self.anchor_mono)

    def pulse(self):
        """Tell the supervisor this worker is alive, at most every ``pulse_every`` seconds (each pulse wakes it).

        Never blocks, never raises."""
        if self.pulse_fd is not None:
            now = time.monotonic()
            if self._pulsed is not None and now - self._pulsed < self.pulse_every:
                return
            self._pulsed = now
            try:
                os.write(self.pulse_fd, b".")
            except OSError:
                pass

    def _resume(self, count_restart):
        """Carry samples and the destroy record over from the previous worker's status (same session, same format).

        Best effort: a status that cannot be read costs the idle streak only."""
        try:
            with open(self.status_path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            return
        if old.get("session") != self.cfg.get("session") or old.get("version") != STATUS_VERSION:
            return
        self.samples = [
            s for s in (old.get("samples") or []) if isinstance(s, dict) and _num_or_none(s.get("t")) is not None
        ]
        self.samples = self.samples[-MAX_SAMPLE_RUNS:]
        if count_restart:
            self.restarts = int(old.get("restarts", 0)) + (1 if old.get("pid") != os.getpid() else 0)
        self.write_failures = int(old.get("write_failures") or 0)
        self.destroy = old.get("destroy")
        busy = [s.get("t_last", s["t"]) for s in self.samples if s.get("bootstrap") or s.get("ssh")]
        if busy:
            self.no_job_since = max(self.no_job_since, max(busy))

    # -- readings -----------------------------------------------------------------------------
    def job(self):
        """The job's state, its ``ended_at`` on the ledger timeline.

        The box's wall clock only measures how long ago it ended, once."""
        if self._job_end is None:
            raw = job_state(self.run_dir)
            if raw["started"]:
                self._job_seen = True
            if raw["ended_at"] is not None:
                age = max(0.0, time.time() - float(raw["ended_at"]))
                self._job_end = (round(self.clock() - age, 3), raw["exit_code"])
        if self._job_end is None:
            return {"ended_at": None, "exit_code": None, "started": self._job_seen}
        return {"ended_at": self._job_end[0], "exit_code": self._job_end[1], "started": True}

    def presence(self):
        """Until when (ledger timeline) the laptop's presence lease holds, or None (``LeaseFile``)."""
        left = self._presence.left()
        return None if left is None else self.clock() + left

    def activity(self):
        """How many activity leases (``<state>/activity/*``) are fresh: open ``gpuops ssh`` / ``exec`` / ``-L``.

        Each is one file, written and refreshed by ``gpuops.agent.agentctl.hold_activity`` while its
        command is open on the laptop, removed when it ends; a file no longer refreshed lapses after
        its hold (the laptop went away). Each counts as one SSH session in the sample."""
        try:
            names = [n for n in os.listdir(self.activity_dir) if not n.endswith(".tmp")]
        except OSError:
            names = []
        leases = self._activity
        for gone in [n for n in leases if n not in names]:
            del leases[gone]
        n = 0
        for name in names[:256]:  # bounded: a box flooded with files costs one listing, not one read each
            lease = leases.get(name)
            if lease is None:
                lease = leases[name] = LeaseFile(os.path.join(self.activity_dir, name))
            n += lease.left() is not None
        return n

    def bootstrap_state(self):
        """``bootstrap_pid_state(self.pidfile)``.

        A bootstrap that ended stays ended without a read until the pidfile changes (inode, mtime,
        size): a new run rewrites it."""
        try:
            st = os.stat(self.pidfile)
            sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            sig = None
        if sig is not None and sig == self._boot_sig and self._boot_state == "ended":
            return "ended"
        self._boot_sig, self._boot_state = sig, bootstrap_pid_state(self.pidfile)
        return self._boot_state

    def take_sample(self):
        t = self.clock()  # when the reading starts: the GPU state it reports is at least this recent
        r = sample_nvml() if self.gpu_source in ("auto", "nvml") else None
        if r is None:
            r = sample_gpus(self.smi, timeout=max(2.0, min(self.sample_s, 20.0)))
        boot = self.bootstrap_state()
        # The /proc scan for a bootstrap started some other way only runs until the job starts;
        # the one for SSH sessions only when it can matter: a GPU above the threshold already
        # makes the sample busy (then "ssh" is None: not looked).
        want_boot = self.root if boot == "none" and not self._job_seen else None
        gpu_busy = any(g.get("util") is not None and g["util"] > self.util for g in r["gpus"])
        if gpu_busy and want_boot is None:
            ssh, scanned_boot = None, False
        else:
            ssh, scanned_boot = scan_proc(self.ssh_users, want_boot)
            ssh += self.activity()  # `gpuops ssh` / `exec` / `-L` sessions, interactive or not
        s = {
            "t": round(t, 3),
            "gpus": r["gpus"],
            "error": r["error"],
            "bootstrap": boot == "running" or scanned_boot,
            "ssh": ssh,
        }
        if r.get("warning"):
            s["warning"] = r["warning"]
        if r["error"]:
            self.error(r["error"])
        policy.merge_sample(self.samples, s, self.util, self.sample_s)
        del self.samples[:-MAX_SAMPLE_RUNS]
        return s

    def error(self, msg):
        if self.errors and self.errors[-1]["msg"] == msg:
            self.errors[-1]["n"] = self.errors[-1].get("n", 1) + 1
            self.errors[-1]["t_last"] = round(self.clock(), 3)
            return
        log(msg)
        self.errors.append({"t": round(self.clock(), 3), "msg": msg})
        del self.errors[:-MAX_ERRORS_KEPT]

    # -- status (best effort) -----------------------------------------------------------------
    def write_status(self, decision, job, presence_until=None, force=False):
        """Rewrite the status when what the rules read changed, or every ``heartbeat_s`` seconds.

        Never raises: a failed write (full disk, file-size limit) is counted in ``write_failures``."""
        now = self.clock()
        d = decision.as_dict() if decision else None
        # What the rules read, as a tuple of plain values (compared, never serialised, each loop).
        key = (
            tuple((s["t"], s.get("error"), s.get("bootstrap"), s.get("ssh")) for s in self.samples[-3:]),
            len(self.samples),
            d and (d["action"], d["reason"], d["idle_since"]),
            (job["ended_at"], job["exit_code"], job["started"]),
            self.destroy and json.dumps(self.destroy, sort_keys=True, default=str),
            self.restarts,
            tuple(e["msg"] for e in self.errors),
            presence_until is not None,
            self._deferred_since is not None,
        )
        if (
            not force
            and key == self._last_key
            and self._last_write is not None
            and now - self._last_write < self.heartbeat_s
        ):
            return False
        status = {
            "version": STATUS_VERSION,
            "session": self.cfg.get("session"),
            "pid": os.getpid(),
            "agent_started_at": round(self.started, 3),
            "heartbeat": round(now, 3),
            "sample_seconds": self.sample_s,
            "teardown": self.settings,
            "started_at": round(self.billing_started, 3),
            "usd_per_hour": self.cfg.get("usd_per_hour"),
            "samples": self.samples,
            "decision": d,
            "job": job,
            "presence": {"until": round(presence_until, 3)} if presence_until is not None else None,
            "destroy": self.destroy,
            "restarts": self.restarts,
            "write_failures": self.write_failures,
            "errors": self.errors,
        }
        try:
            write_atomic(self.status_path, json.dumps(status, separators=(",", ":")))
        except OSError as e:
            self.write_failures += 1
            if e.errno != self._write_errno:
                log("status not written (%s); carrying on without it" % e)
            self._write_errno = e.errno
            return False
        self._write_errno = None
        self._last_key, self._last_write = key, now
        return True

    # -- destroy ------------------------------------------------------------------------------
    def _sleep(self, seconds):
        end = time.monotonic() + seconds
        while True:
            self.pulse()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, max(self.poll_s, 0.05)))

    def do_destroy(self, decision, job):
        """Destroy through the narrowest credential.

        Retry with backoff until ``destroy_deadline_s`` (then exit non-zero: the supervisor starts a
        new worker, which tries again). No write is needed for any of it."""
        if not self.destroy or self.destroy.get("reason") is None:
            self.destroy = {
                "reason": decision.reason,
                "explanation": decision.explanation,
                "requested_at": round(self.clock(), 3),
                "done_at": None,
                "attempts": 0,
                "result": None,
            }
        # Said before it is done (when the disk lets us): whoever finds the box gone (watchdog,
        # reconcile, `up` waking up) can read why, even if this process dies mid-destroy.
        self.write_status(decision, job, force=True)
        kind = ProviderName.parse(self.destroy_cfg.get("kind", ProviderName.LOCAL))
        deadline = time.monotonic() + float(self.destroy_cfg.get("deadline_seconds", 1800))
        delay = 1.0
        while True:
            self.pulse()
            self.destroy["attempts"] += 1
            try:
                if kind == ProviderName.LOCAL:
                    result = destroy_local(
                        dict(
                            self.destroy_cfg,
                            kill_grace_seconds=self.settings.get("kill_grace_seconds", policy.KILL_GRACE_SECONDS),
                        ),
                        self.root,
                        self.clock,
                    )
                elif kind in MARKET_DESTROYS:
                    result = MARKET_DESTROYS[kind](
                        dict(self.destroy_cfg, instance_id=self.cfg.get("instance_id")), read_environ(self.environ_file)
                    )
                else:
                    raise RuntimeError("unknown destroy kind %r" % self.destroy_cfg.get("kind"))
            except Exception as e:  # any failure: log, back off, try again until the deadline
                self.error("destroy attempt %d failed: %s" % (self.destroy["attempts"], e))
                self.write_status(decision, job, force=True)
                if time.monotonic() + delay > deadline:
                    return 3
                self._sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            self.destroy["done_at"] = round(self.clock(), 3)
            self.destroy["result"] = result
            log("destroyed (%s): %s; %s" % (decision.reason, decision.explanation, result))
            self.write_status(decision, job, force=True)
            return 0

    # -- the loop -----------------------------------------------------------------------------
    def decide(self, now, job, presence_until):
        """``policy.decide`` on the ledger timeline, with the armed-no-job wait and the presence lease.

        Its hard deadline counts from the moment a deferrable rule first wanted to fire."""
        last = self.samples[-1] if self.samples else None
        if job["started"] or job["ended_at"] is not None or self.cfg.get("interactive"):
            self.no_job_since = None  # (an interactive box has no job to wait for: idle, TTL and caps end it)
        elif presence_until is not None or (last and (last.get("bootstrap") or last.get("ssh"))):
            self.no_job_since = now  # something is happening: the wait starts again from here
        elif self.no_job_since is None:
            self.no_job_since = now
        state = policy.BoxState(
            started_at=self.billing_started,
            job_ended_at=job["ended_at"],
            job_exit_code=job["exit_code"],
            usd_per_hour=self.cfg.get("usd_per_hour"),
            no_job_since=self.no_job_since,
        )
        d = policy.decide(self.samples, now, state, self.rule_settings)
        if (
            d.action == policy.DESTROY
            and d.reason not in (policy.REASON_TTL, policy.REASON_SESSION_CAP)
            and presence_until is not None
        ):
            if self._deferred_since is None:
                self._deferred_since = now
            state.presence_until = presence_until
            state.presence_deadline = self._deferred_since + self.presence_max_s
            if job["ended_at"] is not None:  # what must come home has one deadline from the job's exit
                s = self.rule_settings
                fetch = float(s.get("fetch_deadline_seconds", policy.FETCH_DEADLINE_SECONDS))
                grace = float(s.get("job_end_grace_seconds", policy.JOB_END_GRACE_SECONDS))
                state.presence_deadline = min(state.presence_deadline, float(job["ended_at"]) + grace + fetch)
            d = policy.decide(self.samples, now, state, self.rule_settings)
        elif d.action != policy.DESTROY:
            self._deferred_since = None
        return d

    def run(self):
        try:
            os.makedirs(self.state_dir, exist_ok=True)
        except OSError:
            pass
        try:
            lock = open(os.path.join(self.state_dir, "agent.lock"), "a")
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("another worker holds the lock; exiting")
            return 0
        except OSError as e:  # no lock file on a full/read-only disk: the supervisor is the guard
            log("no worker lock (%s); going on" % e)
        log(
            "worker up: session %s, sample %.3g s, max_hours %s, destroy %s"
            % (self.cfg.get("session"), self.sample_s, self.settings.get("max_hours"), self.destroy_cfg.get("kind"))
        )
        next_sample = self.clock()
        last_line = None
        if self.destroy and self.destroy.get("done_at"):
            return 0
        while True:
            self.pulse()
            # Nothing left to guard: the box was destroyed by someone else (the local provider
            # writes destroyed.json) or its directory is gone. On a rented box this process dies
            # with the box; here it must end itself.
            if not os.path.isdir(self.root) or os.path.exists(os.path.join(self.root, "destroyed.json")):
                log("box %s is gone; exiting" % self.root)
                return 0
            now = self.clock()
            job = self.job()
            if now >= next_sample:
                self.take_sample()
                # A fixed grid (no drift); after a stall (suspend, slow nvidia-smi) restart from now.
                next_sample += self.sample_s
                if next_sample <= now:
                    next_sample = now + self.sample_s
                now = self.clock()
            presence_until = self.presence()
            decision = self.decide(now, job, presence_until)
            head = decision.explanation.split(":")[0]
            if head != last_line:
                last_line = head
                log(decision.explanation)
            if decision.action == policy.DESTROY:
                return self.do_destroy(decision, job)
            self.write_status(decision, job, presence_until)
            # Wake for the next sample, the next marker poll, or the moment a rule comes due (the
            # idle window's end, the TTL, the grace after job end), whichever is first.
            wake = min(next_sample, now + self.poll_s)
            if decision.next_due is not None:
                wake = min(wake, decision.next_due)
            time.sleep(max(0.02, wake - self.clock()))


# -- the supervisor --------------------------------------------------------------------------------
def ledger_anchor(armed_at, box_mono):
    """``(wall, mono)``: the timeline second that the box's monotonic reading ``box_mono`` stands for.

    The laptop's ``armed_at`` (epoch s); the box's wall clock only when the laptop sent none (a
    config written by hand). Never a comparison of the two: the box's clock is not trusted."""
    return (time.time() if armed_at is None else armed_at, box_mono)


def worker_stale_seconds(cfg):
    """How long (s) the supervisor lets a worker go without a pulse before it kills it.

    Config ``worker_stale_seconds``, else max(90, 3 samples + 30 s)."""
    sample_s = float((cfg.get("teardown") or {}).get("sample_seconds", 10.0))
    return float(cfg.get("worker_stale_seconds") or max(90.0, 3 * sample_s + 30.0))


def pulse_interval(stale_s):
    """Seconds between a worker's pulses (and the supervisor's wake-ups when none comes).

    A sixth of the stale limit, at most 5 s -- each one wakes the supervisor."""
    return min(5.0, stale_s / 6.0)


def supervise(config_path, max_backoff=30.0):
    """Run the worker until it exits 0.

    Restart it (backoff 1 s doubling to ``max_backoff``) when it dies any other way, and SIGKILL +
    restart it when it has not pulsed for ``worker_stale_seconds`` (stopped, wedged). Returns 0 at
    once when another supervisor runs for this config. Writes nothing that a destroy depends on."""
    import subprocess  # the supervisor's alone: the worker spawns through run_capture (-0.8 MB RSS)

    with open(config_path) as f:
        cfg = json.load(f)
    anchor = ledger_anchor(_num_or_none(cfg.get("armed_at")), time.monotonic())
    root = os.path.abspath(cfg.get("root") or os.path.dirname(os.path.dirname(os.path.abspath(config_path))))
    state_dir = os.path.join(root, cfg.get("state_dir", ".gpuops"))
    try:
        os.makedirs(state_dir, exist_ok=True)
    except OSError:
        pass
    try:
        lock = open(os.path.join(state_dir, "agent.supervisor.lock"), "a")
    except OSError as e:  # a read-only or full disk: guard the box without the lock
        log("no supervisor lock (%s); going on" % e)
        lock = None
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            log("supervisor already running for %s" % config_path)
            return 0
        raise
    try:
        write_atomic(os.path.join(state_dir, "agent.pid"), "%d\n" % os.getpid())
    except OSError as e:
        log("agent.pid not written (%s)" % e)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    state: dict[str, Any] = {"child": None, "stopping": False}
    stale_s = worker_stale_seconds(cfg)

    def stop(signum, _frame):
        # TERM/INT is the box being destroyed (the local provider signals our whole group): pass it
        # on and reap the worker ourselves, so no orphan zombie outlives the destroy.
        state["stopping"] = True
        if state["child"] is not None:
            try:
                state["child"].send_signal(signum)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    backoff, restarts = 1.0, 0
    while True:
        # Nothing left to guard (the box directory went away, or it was destroyed): a worker could
        # not even read its config, and restarting it forever would outlive the box.
        if (
            not os.path.isdir(root)
            or os.path.exists(os.path.join(root, "destroyed.json"))
            or not os.path.exists(config_path)
        ):
            log("box %s is gone; supervisor exits" % root)
            return 0
        t0 = time.monotonic()
        r, w = os.pipe()
        child = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--config",
                config_path,
                "--worker",
                "--anchor",
                "%r,%r" % anchor,
                "--pulse-fd",
                str(w),
                "--restarts",
                str(restarts),
            ],
            stdin=subprocess.DEVNULL,
            pass_fds=(w,),
        )
        os.close(w)
        state["child"] = child
        rc = _watch(child, r, stale_s, state)
        os.close(r)
        if state["stopping"]:
            return 0
        if rc == 0:
            log("worker finished; supervisor exits")
            return 0
        restarts += 1
        log("worker exited %d; restarting in %.0f s" % (rc, backoff))
        time.sleep(backoff)
        if state["stopping"]:
            return 0
        backoff = 1.0 if time.monotonic() - t0 > 60 else min(backoff * 2, max_backoff)


def _watch(child, pulse_r, stale_s, state):
    """Wait for ``child`` to exit.

    SIGKILL it when it has not pulsed for ``stale_s`` seconds (a SIGSTOPped or wedged worker) or
    does not end within 10 s of a stop. Returns its exit status."""
    import subprocess

    last = time.monotonic()
    stop_seen = None
    wait_s = pulse_interval(stale_s)  # the worker pulses this often; its exit is an EOF, at once
    poller = select.poll()  # not select(): it refuses an fd >= 1024 (run_capture says why)
    poller.register(pulse_r, select.POLLIN)
    while True:
        try:
            ready = poller.poll(_poll_ms(wait_s))
        except (InterruptedError, OSError):
            ready = []
        if ready:
            try:
                data = os.read(pulse_r, 4096)
            except OSError:
                data = b""
            if data:
                last = time.monotonic()
            else:  # the worker closed its end: it is exiting
                try:
                    return child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        rc = child.poll()
        if rc is not None:
            return rc
        now = time.monotonic()
        if state["stopping"]:
            stop_seen = stop_seen or now
            if now - stop_seen > 10:
                child.kill()
                return child.wait()
            continue
        if now - last > stale_s:
            log("worker %d sent no pulse for %.0f s (stopped or wedged); killing it" % (child.pid, now - last))
            child.kill()
            return child.wait()


USAGE = "usage: agent.py --config PATH [--worker [--anchor WALL,MONO] [--pulse-fd N] [--restarts N]]"


def _args(argv):
    """The command line as a dict (no argparse: it costs the agent ~1.5 MB of memory on the box).

    Raises SystemExit(2) with the usage line on anything unknown."""
    out: dict[str, Any] = {"config": None, "worker": False, "anchor": None, "pulse_fd": None, "restarts": None}
    it = iter(argv)
    for a in it:
        key, eq, val = a.partition("=")
        if key == "--worker" and not eq:
            out["worker"] = True
        elif key in ("--config", "--anchor", "--pulse-fd", "--restarts"):
            val = val if eq else next(it, None)
            if val is None:
                break
            out[key[2:].replace("-", "_")] = val
        elif key in ("-h", "--help"):
            sys.stdout.write(__doc__.splitlines()[0] + "\n" + USAGE + "\n")
            raise SystemExit(0)
        else:
            sys.stderr.write("%s\nunknown argument %r\n" % (USAGE, a))
            raise SystemExit(2)
    if not out["config"]:
        sys.stderr.write("%s\n--config is required\n" % USAGE)
        raise SystemExit(2)
    try:
        out["pulse_fd"] = None if out["pulse_fd"] is None else int(out["pulse_fd"])
        out["restarts"] = None if out["restarts"] is None else int(out["restarts"])
        out["anchor"] = None if out["anchor"] is None else tuple(float(x) for x in out["anchor"].split(","))
    except ValueError as e:
        sys.stderr.write("%s\n%s\n" % (USAGE, e))
        raise SystemExit(2) from None
    return out


def main(argv=None):
    a = _args(sys.argv[1:] if argv is None else argv)
    # A file-size limit (RLIMIT_FSIZE) must fail a write with EFBIG, not kill the agent.
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if a["worker"]:
        _import_worker_modules()
        fd = a["pulse_fd"]
        if fd is not None:
            try:
                os.set_inheritable(fd, False)
                os.set_blocking(fd, False)
            except OSError:
                fd = None
        return Agent(a["config"], anchor=a["anchor"], pulse_fd=fd, restarts=a["restarts"]).run()
    return supervise(a["config"])


if __name__ == "__main__":
    sys.exit(main())
