"""On-box teardown agent: ``python3 agent.py --config agent.json``. Stdlib only, python3 >= 3.8.

Started by the laptop right after SSH answers and before bootstrap, detached (its own session).
Without ``--worker`` it is the supervisor: it holds ``<state>/agent.supervisor.lock`` (a second
start is a no-op), runs the worker, and restarts it (1 s, doubling to 30 s) whenever it dies
without having finished. The worker samples the GPUs every ``sample_seconds`` (NVML through
``pynvml`` when the image has it, else ``nvidia-smi``), watches the job's exit marker every
``poll_seconds``, applies ``policy.decide`` and, when it says destroy, destroys the box through
the narrowest credential the box has, then exits 0 (the supervisor then exits).

Destroy, by ``destroy.kind`` in the config:

* ``local``: end every process group listed in ``<root>/.gpuops/pgids`` except the agent's own,
  then every process still marked ``GPUOPS_LOCAL_BOX=<root>`` (TERM, then KILL after
  ``kill_grace_seconds``), then write ``<root>/destroyed.json`` -- the conventions of
  ``gpuops.providers.local``.
* ``runpod``: ``POST {url}/graphql`` ``mutation { podTerminate(input: {podId: "<id>"}) }`` with the
  pod-scoped ``RUNPOD_API_KEY`` and ``RUNPOD_POD_ID`` read from PID 1's environment (an SSH
  session does not inherit them). url: config ``destroy.url``, else ``$RUNPOD_API_BASE_URL``, else
  https://api.runpod.io (the runpod SDK's default; the pod's variables:
  https://docs.runpod.io/pods/templates/environment-variables).
* ``vast``: ``DELETE {url}/api/v0/instances/<id>/`` with the per-instance ``CONTAINER_API_KEY``
  and ``CONTAINER_ID`` from PID 1's environment. url: config ``destroy.url``, else ``$VAST_URL``,
  else https://console.vast.ai (vastai 1.9.1 ``destroy_instance``; the instance's variables:
  https://docs.vast.ai/guides/instances/docker-environment).

The account key never comes to the box. Status (``<state>/agent-status.json``, rewritten
atomically every loop): ``{"version", "session", "pid", "agent_started_at", "heartbeat",
"samples": [...], "decision": {...}, "job": {...}, "destroy": null|{...}, "restarts", "errors"}``.
The config (written by the laptop, ``gpuops.agentctl.agent_config``) is documented there.
"""

import argparse
import errno
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

if __package__:
    from . import localbox, policy
else:  # run as a script on the box: policy.py sits next to this file
    import localbox
    import policy

STATUS_VERSION = 1
MAX_ERRORS_KEPT = 20
SSH_SESSION_RE = re.compile(r"^sshd(?:-session)?: (\S+?)@(pts/\d+|tty\S*)")


def log(msg):
    sys.stderr.write("%s agent[%d] %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), os.getpid(), msg))
    sys.stderr.flush()


def write_atomic(path, text):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


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


def ssh_sessions(users=None):
    """Number of interactive SSH sessions: processes titled ``sshd: USER@pts/N`` (or
    ``sshd-session: ...`` on OpenSSH >= 9.8). ``@notty`` channels (scp, the laptop's own exec) and a
    tty held by a container's PID 1 are not sessions. ``users``: count only these (None = any)."""
    n = 0
    for pid in localbox.pids():
        first = _cmdline(pid).split("\0", 1)[0].strip()
        m = SSH_SESSION_RE.match(first)
        if m and (not users or m.group(1) in users):
            n += 1
    return n


def pid_alive(pid, must_contain=None):
    """True when ``pid`` runs (not a zombie) and, if given, its cmdline contains ``must_contain``
    (guards against a recycled pid)."""
    st = localbox.proc_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return False
    if must_contain and must_contain not in _cmdline(pid):
        return False
    return True


def bootstrap_running(pidfile, root=None):
    """True while bootstrap runs: the pid in ``pidfile`` is alive (``gpuops.agentctl.bootstrap_command``),
    or a process running ``bootstrap/bootstrap.py`` has ``root`` as its working directory (however
    the laptop started it)."""
    try:
        with open(pidfile) as f:
            pid = int(f.read().split()[0])
        if pid_alive(pid, "bootstrap"):
            return True
    except (OSError, ValueError, IndexError):
        pass
    if root is None:
        return False
    for p in localbox.pids():
        if "bootstrap/bootstrap.py" not in _cmdline(p):
            continue
        try:
            cwd = os.readlink("/proc/%s/cwd" % p)
        except OSError:
            continue
        if os.path.realpath(cwd) == os.path.realpath(root) and pid_alive(p):
            return True
    return False


def job_state(run_dir):
    """``{"ended_at", "exit_code"}`` from jobwrap's files (both None while running/not started)."""
    marker = os.path.join(run_dir, "exit_marker")
    if not os.path.exists(marker):
        return {"ended_at": None, "exit_code": None}
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
    return {"ended_at": ended, "exit_code": code}


def sample_gpus(smi, timeout):
    """One reading of every GPU via nvidia-smi (``smi``: argv prefix). Never raises."""
    try:
        out = subprocess.run(list(smi) + policy.SMI_ARGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return {"gpus": [], "error": "nvidia-smi not found"}
    except subprocess.TimeoutExpired:
        return {"gpus": [], "error": "nvidia-smi timed out after %.0f s" % timeout}
    except OSError as e:
        return {"gpus": [], "error": "nvidia-smi: %s" % e}
    return policy.parse_smi(out.stdout.decode("utf-8", "replace"), out.returncode, out.stderr.decode("utf-8", "replace"))


def sample_nvml():
    """One reading of every GPU via NVML (the ``pynvml`` module, when the image has it), in
    ``policy.parse_smi``'s shape; None when pynvml is not importable or NVML does not start
    (then nvidia-smi is used). A value NVML does not support for a GPU is None (unknown)."""
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
            g = {"index": i, "util": None, "mem_used_mib": None, "mem_total_mib": None}
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
def destroy_local(cfg, root):
    """End the session's processes except the agent's own group (bootstrap/localbox.py, the same
    rule the laptop's destroy applies), then write destroyed.json. Idempotent."""
    n = localbox.end_box(root, float(cfg.get("kill_grace_seconds", 10.0)), spare_pgid=os.getpgrp(), by="agent")
    return "ended %d process group(s)" % n


def _http(method, url, headers, body, timeout=20.0):
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def destroy_runpod(cfg, env):
    key = env.get("RUNPOD_API_KEY")
    pod = env.get("RUNPOD_POD_ID") or cfg.get("instance_id")
    if not key or not pod:
        raise RuntimeError("RUNPOD_API_KEY / RUNPOD_POD_ID not in PID 1's environment")
    base = cfg.get("url") or os.environ.get("RUNPOD_API_BASE_URL") or "https://api.runpod.io"
    # json.dumps yields a valid GraphQL string literal for the id (quotes and backslashes escaped).
    doc = "mutation { podTerminate(input: { podId: %s }) }" % json.dumps(str(pod))
    status, text = _http("POST", base.rstrip("/") + "/graphql",
                         {"Content-Type": "application/json", "Authorization": "Bearer " + key},
                         json.dumps({"query": doc}).encode())
    if status != 200:
        raise RuntimeError("podTerminate: HTTP %d %s" % (status, text[:200]))
    try:
        errors = json.loads(text).get("errors")
    except ValueError:
        raise RuntimeError("podTerminate: non-JSON reply %s" % text[:200])
    if errors:
        msg = str(errors[0].get("message", errors[0]))
        if "not found" in msg.lower() or "does not exist" in msg.lower():
            return "pod %s already gone" % pod
        raise RuntimeError("podTerminate: %s" % msg[:200])
    return "podTerminate %s" % pod


def destroy_vast(cfg, env):
    key = env.get("CONTAINER_API_KEY")
    iid = env.get("CONTAINER_ID") or cfg.get("instance_id")
    if not key or not iid:
        raise RuntimeError("CONTAINER_API_KEY / CONTAINER_ID not in PID 1's environment")
    base = cfg.get("url") or os.environ.get("VAST_URL") or "https://console.vast.ai"
    url = "%s/api/v0/instances/%s/" % (base.rstrip("/"), urllib.parse.quote(str(iid), safe=""))
    status, text = _http("DELETE", url, {"Content-Type": "application/json", "Authorization": "Bearer " + key}, b"{}")
    if status == 404:
        return "instance %s already gone" % iid
    if status >= 300:
        raise RuntimeError("destroy instance: HTTP %d %s" % (status, text[:200]))
    return "destroyed instance %s" % iid


# -- the worker ------------------------------------------------------------------------------------
class Agent:
    def __init__(self, config_path):
        with open(config_path) as f:
            self.cfg = json.load(f)
        cfg = self.cfg
        self.root = os.path.abspath(cfg.get("root") or os.path.dirname(os.path.dirname(os.path.abspath(config_path))))
        self.state_dir = os.path.join(self.root, cfg.get("state_dir", ".gpuops"))
        self.status_path = os.path.join(self.state_dir, "agent-status.json")
        self.run_dir = os.path.join(self.root, cfg.get("run_dir", ".gpuops/run"))
        self.pidfile = os.path.join(self.root, cfg.get("bootstrap_pidfile", ".gpuops/bootstrap.pid"))
        self.settings = cfg.get("teardown", {})
        self.sample_s = float(self.settings.get("sample_seconds", 10.0))
        self.poll_s = min(float(cfg.get("poll_seconds", 1.0)), self.sample_s)
        self.smi = cfg.get("nvidia_smi") or ["nvidia-smi"]
        if isinstance(self.smi, str):
            self.smi = [self.smi]
        self.ssh_users = cfg.get("ssh_users") or None
        # "auto": NVML when pynvml imports and starts, else nvidia-smi; "nvidia-smi": only that.
        self.gpu_source = cfg.get("gpu_source", "auto")
        self.destroy_cfg = cfg.get("destroy") or {"kind": "local"}
        self.environ_file = cfg.get("environ_file", "/proc/1/environ")
        self.started = time.time()
        self.samples = []
        self.errors = []
        self.destroy = None
        self.restarts = 0
        idle_min = policy.idle_minutes_of(self.settings)
        window_samples = int((idle_min or 0) * 60.0 / self.sample_s) + 5
        self.keep = max(30, min(2000, window_samples))
        self._resume()

    def _resume(self):
        """Carry samples and restart count over from the previous worker's status (same session)."""
        try:
            with open(self.status_path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            return
        if old.get("session") != self.cfg.get("session"):
            return
        self.samples = list(old.get("samples") or [])[-self.keep:]
        self.restarts = int(old.get("restarts", 0)) + (1 if old.get("pid") != os.getpid() else 0)
        self.started = float(old.get("agent_started_at") or self.started)
        self.destroy = old.get("destroy")

    def box_state(self, job):
        return policy.BoxState(
            started_at=float(self.cfg.get("started_at") or self.started),
            job_ended_at=job["ended_at"],
            job_exit_code=job["exit_code"],
            usd_per_hour=self.cfg.get("usd_per_hour"),
        )

    def take_sample(self):
        t = time.time()  # when the reading starts: the GPU state it reports is at least this recent
        r = sample_nvml() if self.gpu_source in ("auto", "nvml") else None
        if r is None:
            r = sample_gpus(self.smi, timeout=max(2.0, min(self.sample_s, 20.0)))
        s = {"t": round(t, 3), "gpus": r["gpus"], "error": r["error"],
             "bootstrap": bootstrap_running(self.pidfile, self.root), "ssh": ssh_sessions(self.ssh_users)}
        if r["error"]:
            self.error(r["error"])
        self.samples.append(s)
        del self.samples[:-self.keep]
        return s

    def error(self, msg):
        if not self.errors or self.errors[-1]["msg"] != msg:
            log(msg)
        self.errors.append({"t": round(time.time(), 3), "msg": msg})
        del self.errors[:-MAX_ERRORS_KEPT]

    def write_status(self, decision, job):
        status = {
            "version": STATUS_VERSION,
            "session": self.cfg.get("session"),
            "pid": os.getpid(),
            "agent_started_at": self.started,
            "heartbeat": round(time.time(), 3),
            "sample_seconds": self.sample_s,
            "teardown": self.settings,
            "started_at": self.cfg.get("started_at"),
            "usd_per_hour": self.cfg.get("usd_per_hour"),
            "samples": self.samples,
            "decision": decision.as_dict() if decision else None,
            "job": job,
            "destroy": self.destroy,
            "restarts": self.restarts,
            "errors": self.errors,
        }
        write_atomic(self.status_path, json.dumps(status))

    def do_destroy(self, decision, job):
        """Destroy through the narrowest credential; retry with backoff until ``destroy_deadline_s``
        (then exit non-zero: the supervisor starts a new worker, which tries again)."""
        if not self.destroy or self.destroy.get("reason") is None:
            self.destroy = {"reason": decision.reason, "explanation": decision.explanation,
                            "requested_at": round(time.time(), 3), "done_at": None, "attempts": 0, "result": None}
        # Said before it is done: whoever finds the box gone (watchdog, reconcile, `up` waking up)
        # can read why, even if this process dies mid-destroy.
        self.write_status(decision, job)
        kind = self.destroy_cfg.get("kind", "local")
        deadline = time.time() + float(self.destroy_cfg.get("deadline_seconds", 1800))
        delay = 1.0
        while True:
            self.destroy["attempts"] += 1
            try:
                if kind == "local":
                    result = destroy_local(dict(self.destroy_cfg, kill_grace_seconds=self.settings.get("kill_grace_seconds", 10.0)), self.root)
                elif kind == "runpod":
                    result = destroy_runpod(dict(self.destroy_cfg, instance_id=self.cfg.get("instance_id")), read_environ(self.environ_file))
                elif kind == "vast":
                    result = destroy_vast(dict(self.destroy_cfg, instance_id=self.cfg.get("instance_id")), read_environ(self.environ_file))
                else:
                    raise RuntimeError("unknown destroy kind %r" % kind)
            except Exception as e:  # any failure: log, back off, try again until the deadline
                self.error("destroy attempt %d failed: %s" % (self.destroy["attempts"], e))
                self.write_status(decision, job)
                if time.time() + delay > deadline:
                    return 3
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            self.destroy["done_at"] = round(time.time(), 3)
            self.destroy["result"] = result
            log("destroyed (%s): %s; %s" % (decision.reason, decision.explanation, result))
            self.write_status(decision, job)
            return 0

    def run(self):
        os.makedirs(self.state_dir, exist_ok=True)
        lock = open(os.path.join(self.state_dir, "agent.lock"), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log("another worker holds the lock; exiting")
            return 0
        log("worker up: session %s, sample %.3g s, destroy %s" % (self.cfg.get("session"), self.sample_s, self.destroy_cfg.get("kind")))
        next_sample = time.time()
        last_line = None
        job = {"ended_at": None, "exit_code": None}
        decision = None
        if self.destroy and self.destroy.get("done_at"):
            return 0
        while True:
            # Nothing left to guard: the box was destroyed by someone else (the local provider
            # writes destroyed.json) or its directory is gone. On a rented box this process dies
            # with the box; here it must end itself.
            if not os.path.isdir(self.root) or os.path.exists(os.path.join(self.root, "destroyed.json")):
                log("box %s is gone; exiting" % self.root)
                return 0
            now = time.time()
            job = job_state(self.run_dir)
            if now >= next_sample:
                self.take_sample()
                # A fixed grid (no drift); after a stall (suspend, slow nvidia-smi) restart from now.
                next_sample += self.sample_s
                if next_sample <= now:
                    next_sample = now + self.sample_s
                now = time.time()
            decision = policy.decide(self.samples, now, self.box_state(job), self.settings)
            if decision.explanation.split(":")[0] != last_line:
                last_line = decision.explanation.split(":")[0]
                log(decision.explanation)
            if decision.action == policy.DESTROY:
                return self.do_destroy(decision, job)
            self.write_status(decision, job)
            # Wake for the next sample, the next marker poll, or the moment a rule comes due (the
            # idle window's end, the TTL, the grace after job end), whichever is first.
            wake = min(next_sample, now + self.poll_s)
            if decision.next_due is not None:
                wake = min(wake, decision.next_due)
            time.sleep(max(0.02, wake - time.time()))


# -- the supervisor --------------------------------------------------------------------------------
def supervise(config_path, max_backoff=30.0):
    """Run the worker until it exits 0; restart it (backoff 1 s doubling to ``max_backoff``)
    when it dies any other way. Returns 0 at once when another supervisor runs for this config."""
    with open(config_path) as f:
        cfg = json.load(f)
    root = os.path.abspath(cfg.get("root") or os.path.dirname(os.path.dirname(os.path.abspath(config_path))))
    state_dir = os.path.join(root, cfg.get("state_dir", ".gpuops"))
    os.makedirs(state_dir, exist_ok=True)
    lock = open(os.path.join(state_dir, "agent.supervisor.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            log("supervisor already running for %s" % config_path)
            return 0
        raise
    write_atomic(os.path.join(state_dir, "agent.pid"), "%d\n" % os.getpid())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    state = {"child": None, "stopping": False}

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
    backoff = 1.0
    while True:
        t0 = time.time()
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--config", config_path, "--worker"],
                                 stdin=subprocess.DEVNULL)
        state["child"] = child
        rc = child.wait()
        if state["stopping"]:
            return 0
        if rc == 0:
            log("worker finished; supervisor exits")
            return 0
        log("worker exited %d; restarting in %.0f s" % (rc, backoff))
        time.sleep(backoff)
        backoff = 1.0 if time.time() - t0 > 60 else min(backoff * 2, max_backoff)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--worker", action="store_true", help="run the sampling loop (the supervisor starts this)")
    a = p.parse_args(argv)
    if a.worker:
        return Agent(a.config).run()
    return supervise(a.config)


if __name__ == "__main__":
    sys.exit(main())
