"""Bootstrap a box: ``python3 bootstrap.py --config bootstrap.json [--state-dir DIR]``.

Runs the config's steps, the independent ones at once (``CONCURRENT``: deps, code and weights run
side by side, every other step waits for all before it), and prints one JSON line per step on
stdout as it ends, ``{"step", "status": "done"|"skipped"|"failed"|"stopped", "seconds", "detail"}``,
then ``{"total_seconds", "slowest"}`` (plus, when one failed, ``"failed": NAME``, ``"stopped"``: the
steps ended because of it, ``"not_started"``). A step's ``after`` (names) adds waits; its
``concurrent`` (bool) overrides its kind's default. What the steps' own tools print goes to stderr,
each line prefixed with ``"  | "`` (so no such line starts with ``{``) and with every secret value
replaced by ``***``.

Config: ``{"steps": [{"name": "...", "kind": "...", ...}], "cache_dir": "/workspace/.cache"}``.
Step kinds and their keys (paths relative to the working directory unless absolute):

- ``system``: GPU name, driver, CUDA version, memory, utilization (``nvidia-smi``), disk free. Valid rows
  with a non-zero exit (a warning such as exit 14, "infoROM is corrupted") are kept and the warning
  is reported as ``warning``; only no rows at all fail the step.
  Always runs. ``require_gpu`` (default false): fail when there is no working ``nvidia-smi``.
  A present but failing ``nvidia-smi`` (driver gone) fails the step.
- ``deps``: ``requirements`` (file) and/or ``packages`` (list); ``installer`` auto|uv|pip (auto:
  uv when on PATH or installable, else pip); ``wheelhouse`` (directory: ``--no-index
  --find-links``); ``python`` (interpreter to install into, default this one) or ``venv`` (a
  directory, created when missing, seeing the image's site-packages unless ``system_site_packages``
  is false); ``cache_dir`` (pip/uv cache, default ``<cache_dir>/pip``). A requirement the image
  already meets is not installed again (pip sees the image's packages; uv is passed ``--excludes``
  for them): a GPU image's torch is used as it is. Detail: ``reused`` (``name==version``).
- ``code``: ``repo`` (URL or path), ``ref`` (branch, tag or commit; default HEAD), ``dest``
  (default ``code``). Clone once, then fetch + checkout; re-runs when the ref moves.
- ``secrets``: ``env`` (names of environment variables). Written with mode 0600 to their
  standard places: HF_TOKEN -> ``$HF_HOME/token`` (default ``~/.cache/huggingface/token``),
  WANDB_API_KEY -> ``~/.netrc`` (``api.wandb.ai``), every name -> ``$XDG_CONFIG_HOME/gpuops/secrets.env``
  (default ``~/.config``), which a job can source.
  Values are never printed, and are scrubbed from every later step's output.
- ``weights``: ``source`` ``hf://org/model[@revision]``, ``https://...`` or ``file:///...``;
  ``dest`` (default ``<cache_dir>/weights/<name>``; hf: the HF cache ``<cache_dir>/huggingface/hub``);
  ``sha256`` (single-file sources); ``warm`` (default true: read every file once so the page cache
  holds it); ``workers`` (parallel HTTP ranges, default 8). https: fetched by ranges (each checked:
  206, its Content-Range, its length; the sha256 computed as the file's prefix completes; resumed
  after a kill from ``<file>.gpuops-part.json``), one plain GET when the server serves no ranges.
  hf: ``downloader`` auto|hub|ranged. ranged: the file list from the hub API, every file by ranges
  into huggingface_hub's cache layout (blobs by ETag, snapshot symlinks, refs), LFS files checked
  against their sha256. hub: ``snapshot_download`` runs in ``python`` (the deps venv's, else this
  one; it needs huggingface_hub; hf_transfer switched on when installed there) with ``max_workers``.
  auto: hub when ``python`` has huggingface_hub now, ranged when not or when it is the venv of a
  deps step running beside this one. Both take ``allow_patterns`` (list), the token from the secrets step's HF_TOKEN; a
  dropped connection resumes the file (Range), a killed run restarts it (huggingface_hub 2.4.0
  uses process-unique temporary files) and its stale ``.incomplete`` blobs are removed after
  ``stale_incomplete_s`` (default 600) seconds untouched; a revision pinned to a commit sha whose snapshot is complete in the
  cache (``.gpuops-complete.json``) is ``skipped`` without asking the hub. Detail: bytes, seconds.
- ``verify``: when torch with CUDA is present, measure device-memory copy bandwidth (GB/s,
  10^9 B/s) and dense bf16 matmul TFLOP/s and compare with ``expect`` (``bandwidth_gb_s``,
  ``bf16_tflops``: the catalog figures); ratios below ``threshold`` (default 0.7) are flagged,
  and fail the step when ``strict`` is true.
- ``run``: ``command`` (shell); ``inputs`` (files it reads: a change re-runs it); ``always``.

Every step takes ``timeout`` (seconds, default 3600) for the processes it starts.

Idempotence: a step whose fingerprint (its config plus its inputs: files it reads, the commit
its ref points at, the secret values' keyed hash) matches its last success, and whose outputs
are still there, is ``skipped``. A failed step stops the run: exit 1, naming the step; the steps
running beside it are ended (their processes killed, downloads stopped between blocks) and
reported ``stopped``; none of them is recorded done, so the next run does them again.
State lives in ``--state-dir`` (default ``~/.gpuops-bootstrap``). Stdlib only, python3 >= 3.8.
"""

import argparse
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False  # as typing's, without importing typing: the annotations' names for the type checker only
if TYPE_CHECKING:
    from typing import Any

SECRETS: "set[str]" = set()  # values to scrub from anything we print
CHILDREN: "set[int]" = set()  # process groups of the step processes now running
PROCS: "set[int]" = set()  # step processes kept in our own group (the hf client: a kill of the runner's group ends it)
DEFAULT_TIMEOUT = 3600.0
STOP = threading.Event()  # set when a step failed: the running steps end, no other starts
_OUT = threading.Lock()  # one JSON or log line at a time, whichever step writes it


class StepError(Exception):
    """A step failed; the message is the step's ``detail`` (never contains a secret)."""


def scrub(text):
    for s in SECRETS:
        text = text.replace(s, "***")
    return text


def _emit(obj):
    with _OUT:
        sys.stdout.write(scrub(json.dumps(obj, sort_keys=True)) + "\n")
        sys.stdout.flush()


def _log(text):
    with _OUT:
        for line in text.splitlines():
            sys.stderr.write("  | " + scrub(line) + "\n")
        sys.stderr.flush()


def _killpg(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _kill_children():
    for pgid in list(CHILDREN):
        _killpg(pgid)
    for pid in list(PROCS):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _on_term(signum, _frame):
    """TERM/HUP/INT (the box being torn down, Ctrl-C): end the running steps' processes, then us."""
    _kill_children()
    sys.stderr.write("bootstrap: stopped by signal %d\n" % signum)
    os._exit(128 + signum)


def _sh(argv, step, cwd=None, env=None, shell=False, check=True, quiet=False):
    """Run a process, its output piped line by line (scrubbed) to stderr. Returns (rc, last lines)."""
    timeout = float(step.get("timeout", DEFAULT_TIMEOUT))
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        # Own process group, so a timeout (or our own TERM) ends the step's whole tree.
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            shell=shell,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=os.setpgrp,
        )
    except OSError as e:
        raise StepError("cannot start %s: %s" % (argv if shell else argv[0], e)) from e
    CHILDREN.add(proc.pid)
    expired = []

    def expire():
        expired.append(True)
        _killpg(proc.pid)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    tail: list[str] = []
    assert proc.stdout is not None  # stdout=PIPE above
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            tail = (tail + [line])[-5:]
            if not quiet:
                _log(line)
        rc = proc.wait()
    finally:
        timer.cancel()
        CHILDREN.discard(proc.pid)
    if expired:
        raise StepError("timed out after %.0f s" % timeout)
    if check and rc != 0:
        last = scrub(tail[-1]) if tail else ""
        raise StepError("exited %d%s" % (rc, (": " + last) if last else ""))
    return rc, tail


def _file_sig(path, content_limit=1 << 20):
    """Fingerprint of a file: its sha256 when small, else size and mtime; 'missing' when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    if os.path.isdir(path):
        return "dir:" + ",".join(
            sorted("%s:%d" % (n, os.stat(os.path.join(path, n)).st_size) for n in os.listdir(path))
        )
    if st.st_size <= content_limit:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    return "size:%d:mtime:%d" % (st.st_size, st.st_mtime_ns)


# ---------------------------------------------------------------------------------------------
# system
# ---------------------------------------------------------------------------------------------

SMI_FIELDS = ["name", "driver_version", "memory.total", "memory.used", "utilization.gpu"]


def _num(v):
    v = v.strip()
    if v in ("[N/A]", "N/A", "[Not Supported]", ""):
        return None
    try:
        return float(v) if "." in v else int(v)
    except ValueError:
        return v


def step_system(step, ctx):
    info = {
        "disk_free_gb": round(shutil.disk_usage(os.getcwd()).free / 1e9, 1),
        "python": "%d.%d.%d" % sys.version_info[:3],
    }
    smi = shutil.which("nvidia-smi")
    if not smi:
        if step.get("require_gpu"):
            raise StepError("nvidia-smi not found: this box has no NVIDIA driver")
        info["gpus"] = []
        return info
    try:
        out = subprocess.run(
            [smi, "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise StepError("nvidia-smi did not answer: %s" % e) from e
    gpus = []
    warnings = []
    for line in out.stdout.splitlines():
        if not line.strip():
            continue
        if line.strip().upper().startswith("WARNING"):
            warnings.append(line.strip())
            continue
        vals = [v.strip() for v in line.split(",")]
        if len(vals) != len(SMI_FIELDS):
            continue
        gpus.append(
            {
                "name": vals[0],
                "memory_total_mib": _num(vals[2]),
                "memory_used_mib": _num(vals[3]),
                "utilization_gpu_percent": _num(vals[4]),
            }
        )
        info["driver"] = _num(vals[1]) if _num(vals[1]) is None else vals[1]
    if out.returncode != 0 and not gpus:
        first = next((line for line in out.stdout.splitlines() if line.strip()), "")
        raise StepError("nvidia-smi failed (exit %d): %s" % (out.returncode, first.strip()))
    if out.returncode != 0 or warnings:
        # Valid rows with a non-zero exit: nvidia-smi only warned (exit 14: a corrupted infoROM).
        # The rows stand; the warning is reported, the session goes on.
        info["warning"] = ("nvidia-smi exited %d: " % out.returncode if out.returncode else "") + (
            warnings[0] if warnings else "no message"
        )[:200]
    info["gpus"] = gpus
    try:
        rep = subprocess.run([smi, "-q"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        m = re.search(r"^CUDA Version\s*:\s*(\S+)", rep.stdout, re.M)
        info["cuda"] = None if not m or m.group(1) in ("[N/A]", "N/A") else m.group(1)
    except (OSError, subprocess.TimeoutExpired):
        info["cuda"] = None
    return info


# ---------------------------------------------------------------------------------------------
# deps
# ---------------------------------------------------------------------------------------------


def _target_python(step):
    if step.get("venv"):
        return os.path.join(os.path.abspath(step["venv"]), "bin", "python")
    return step.get("python") or sys.executable


def _find_uv():
    uv = shutil.which("uv")
    if uv:
        return [uv]
    try:
        out = subprocess.run(
            [sys.executable, "-m", "uv", "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30
        )
        if out.returncode == 0:
            return [sys.executable, "-m", "uv"]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return None


def _installer(step, ctx):
    """('uv', argv prefix) or ('pip', None), installing uv when auto and it is installable."""
    want = step.get("installer", "auto")
    if want not in ("auto", "uv", "pip"):
        raise StepError("installer must be auto, uv or pip, not %r" % want)
    if want == "pip":
        return "pip", None
    uv = _find_uv()
    if uv is None:
        wh = step.get("wheelhouse")
        args = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "uv"]
        if wh:
            args[4:4] = ["--no-index", "--find-links", os.path.abspath(wh)]
        rc, _ = _sh(args, step, check=False, quiet=True)
        uv = _find_uv() if rc == 0 else None
    if uv is None:
        if want == "uv":
            raise StepError('uv is not installed and could not be installed; use installer = "pip"')
        return "pip", None
    return "uv", uv


def deps_inputs(step, ctx):
    sig = {"python": _target_python(step) if not step.get("venv") else "venv"}
    if step.get("requirements"):
        sig["requirements"] = _file_sig(step["requirements"])
    if step.get("wheelhouse"):
        sig["wheelhouse"] = _file_sig(step["wheelhouse"])
    return sig


def deps_valid(step, ctx, record):
    return os.path.exists(_target_python(step))


def step_deps(step, ctx):
    if not step.get("requirements") and not step.get("packages"):
        raise StepError("deps needs requirements (a file) or packages (a list)")
    if step.get("requirements") and not os.path.isfile(step["requirements"]):
        raise StepError("requirements file %s not found" % step["requirements"])
    kind, uv = _installer(step, ctx)
    cache = step.get("cache_dir") or (os.path.join(ctx["cache_dir"], "pip") if ctx.get("cache_dir") else None)
    env = {}
    if cache:
        env["UV_CACHE_DIR" if kind == "uv" else "PIP_CACHE_DIR"] = os.path.join(cache, kind)
    # The venv sees the image's packages (torch, CUDA wheels: gigabytes) instead of installing its own.
    shared = ["--system-site-packages"] if step.get("system_site_packages", True) else []
    if step.get("venv") and not os.path.exists(_target_python(step)):
        if kind == "uv":
            _sh(
                uv + ["venv", "-q", "--python", sys.executable] + shared + [os.path.abspath(step["venv"])],
                step,
                env=env,
            )
        else:
            _sh([sys.executable, "-m", "venv"] + shared + [os.path.abspath(step["venv"])], step)
    py = _target_python(step)
    reused = []
    excludes = []
    if kind == "uv" and step.get("venv") and shared:
        # pip counts the system site-packages as installed; uv does not (0.13): tell it which of the
        # requirements the image already meets, so it neither downloads nor installs them again.
        reused = _satisfied(py, _requirement_lines(step))
        if reused:
            path = os.path.join(ctx["state_dir"], "excludes-%s.txt" % hashlib.sha1(py.encode()).hexdigest()[:12])
            with open(path, "w") as f:
                f.write("".join("%s\n" % name for name, _ in reused))
            excludes = ["--excludes", path]
    src = []
    if step.get("wheelhouse"):
        if not os.path.isdir(step["wheelhouse"]):
            raise StepError("wheelhouse %s is not a directory" % step["wheelhouse"])
        src = ["--no-index", "--find-links", os.path.abspath(step["wheelhouse"])]
    what = (["-r", step["requirements"]] if step.get("requirements") else []) + list(step.get("packages", []))
    if kind == "uv":
        argv = uv + ["pip", "install", "--python", py] + src + excludes + what
    else:
        argv = [py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"] + src + what
    argv += list(step.get("extra_args", []))
    _sh(argv, step, env=env)
    return {
        "installer": kind,
        "python": py,
        "packages": len(step.get("packages", [])),
        "requirements": step.get("requirements") or None,
        "wheelhouse": step.get("wheelhouse") or None,
        "reused": ["%s==%s" % nv for nv in reused],
    }


# Run in the new venv's python (its own site-packages still empty, so what it finds is the image's):
# which of the requirement lines on stdin the installed distributions already meet. The parser is
# ``packaging``'s (the image's, else the copy inside pip); without either nothing is reused.
_SATISFIED_SCRIPT = r"""
import json, sys
try:
    from packaging.requirements import Requirement
except ImportError:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        print("[]"); sys.exit(0)
from importlib import metadata
out = []
for line in json.loads(sys.stdin.read()):
    try:
        r = Requirement(line)
    except Exception:
        continue
    if r.url or r.extras or (r.marker is not None and not r.marker.evaluate()):
        continue
    try:
        v = metadata.version(r.name)
    except Exception:
        continue
    if r.specifier.contains(v, prereleases=True):
        out.append([r.name, v])
print(json.dumps(out))
"""


def _requirement_lines(step):
    """The step's requirement specifiers: ``packages`` and the requirements file's plain lines.

    Options, URLs, paths and editables left out)."""
    lines = list(step.get("packages") or [])
    if step.get("requirements"):
        with open(step["requirements"]) as f:
            lines += [line.split(" #", 1)[0].strip() for line in f]
    return [
        line
        for line in lines
        if line and not line.startswith(("-", "#", ".", "/")) and "://" not in line and " @ " not in line
    ]


def _satisfied(py, lines):
    """[(name, version)] of ``lines`` that ``py`` already has at a version they allow; [] when unsure."""
    if not lines:
        return []
    try:
        p = subprocess.run(
            [py, "-c", _SATISFIED_SCRIPT],
            input=json.dumps(lines).encode(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        return [tuple(x) for x in json.loads(p.stdout.decode().strip().splitlines()[-1])] if p.returncode == 0 else []
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return []


# ---------------------------------------------------------------------------------------------
# code
# ---------------------------------------------------------------------------------------------

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}
SHA = re.compile(r"^[0-9a-f]{40}$")


def code_inputs(step, ctx):
    ref = step.get("ref") or "HEAD"
    if SHA.match(ref):
        return {"commit": ref}
    try:
        out = subprocess.run(
            ["git", "ls-remote", "--", step["repo"], ref],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=60,
            env=dict(os.environ, **GIT_ENV),
        )
        lines = out.stdout.split()
        return {"commit": lines[0] if lines else "unresolved:%d" % out.returncode}
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"commit": "unresolved:%s" % type(e).__name__}


def _head(dest):
    try:
        out = subprocess.run(
            ["git", "-C", dest, "rev-parse", "HEAD"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=30,
        )
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def code_valid(step, ctx, record):
    return _head(step.get("dest") or "code") == (record.get("detail") or {}).get("commit")


def step_code(step, ctx):
    if not step.get("repo"):
        raise StepError("code needs repo")
    repo, ref, dest = step["repo"], step.get("ref") or "HEAD", step.get("dest") or "code"
    if not os.path.isdir(os.path.join(dest, ".git")):
        if os.path.exists(dest) and os.listdir(dest):
            raise StepError("%s exists and is not a git checkout; remove it or choose another dest" % dest)
        _sh(["git", "clone", "--no-checkout", "--", repo, dest], step, env=GIT_ENV)
    else:
        _sh(["git", "-C", dest, "remote", "set-url", "origin", repo], step, env=GIT_ENV)
    rc, _ = _sh(["git", "-C", dest, "fetch", "--tags", "origin", ref], step, env=GIT_ENV, check=False)
    target = "FETCH_HEAD"
    if rc != 0:  # a commit the server will not hand out by name: fetch everything and look it up
        _sh(["git", "-C", dest, "fetch", "--tags", "origin"], step, env=GIT_ENV)
        target = ref
    _sh(["git", "-C", dest, "checkout", "--force", "--detach", target], step, env=GIT_ENV)
    return {"repo": repo, "ref": ref, "dest": os.path.abspath(dest), "commit": _head(dest)}


# ---------------------------------------------------------------------------------------------
# secrets
# ---------------------------------------------------------------------------------------------


def _write_private(path, text):
    """Write ``text`` to ``path`` with mode 0600 from the first byte (tmp file + rename)."""
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp.%d" % os.getpid()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _secret_values(step):
    names = step.get("env", [])
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise StepError("secret %s is not set in the bootstrap's environment" % ", ".join(missing))
    return [(n, os.environ[n]) for n in names]


def _salt(ctx):
    path = os.path.join(ctx["state_dir"], "salt")
    if not os.path.exists(path):
        _write_private(path, os.urandom(16).hex())
    with open(path) as f:
        return f.read().encode()


def secrets_inputs(step, ctx):
    try:
        vals = _secret_values(step)
    except StepError:
        return {"missing": True}
    return {"hmac": hmac.new(_salt(ctx), json.dumps(vals).encode(), hashlib.sha256).hexdigest()}


def _secret_paths(names):
    home = os.path.expanduser("~")
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    out = {"all": os.path.join(config_home, "gpuops", "secrets.env")}
    if "HF_TOKEN" in names or "HUGGING_FACE_HUB_TOKEN" in names:
        out["hf"] = os.path.join(os.environ.get("HF_HOME") or os.path.join(home, ".cache", "huggingface"), "token")
    if "WANDB_API_KEY" in names:
        out["netrc"] = os.path.join(home, ".netrc")
    return out


def secrets_valid(step, ctx, record):
    return all(os.path.exists(p) for p in _secret_paths(step.get("env", [])).values())


def _shq(v):
    return "'" + v.replace("'", "'\"'\"'") + "'"


def step_secrets(step, ctx):
    vals = _secret_values(step)
    names = [n for n, _ in vals]
    for n in names:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", n):
            raise StepError("secret name %r is not a valid variable name" % n)
    paths = _secret_paths(names)
    d = dict(vals)
    _write_private(paths["all"], "".join("export %s=%s\n" % (n, _shq(v)) for n, v in vals))
    if "hf" in paths:
        _write_private(paths["hf"], d.get("HF_TOKEN") or d.get("HUGGING_FACE_HUB_TOKEN"))
    if "netrc" in paths:
        old = ""
        if os.path.exists(paths["netrc"]):
            with open(paths["netrc"]) as f:
                old = f.read()
        _write_private(paths["netrc"], netrc_with(old, WANDB_HOST, "user", d["WANDB_API_KEY"]))
    return {"names": names, "written": sorted(paths.values())}


WANDB_HOST = "api.wandb.ai"


def _netrc_tokens(text):
    """(token, start, end) of every token of a .netrc text, as netrc(5) and Python's ``netrc`` read it.

    Whitespace-separated, ``"..."`` quoted with backslash escapes, ``#`` starting a comment to the
    end of the line; a ``macdef NAME`` body (up to the next empty line) is one token whose text is
    the body."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        start = i
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i = min(i + 1, n)
        else:
            while i < n and not text[i].isspace():
                i += 1
        out.append((text[start:i], start, i))
        if out[-1][0] == "macdef":
            while i < n and text[i] in " \t":
                i += 1
            while i < n and not text[i].isspace():  # the macro's name
                i += 1
            out.append((text[start:i], start, i))
            j = text.find("\n\n", i)
            body_end = n if j < 0 else j + 2
            out.append((text[i:body_end], i, body_end))
            i = body_end
    return out


def netrc_with(text, host, login, password):
    """``text`` (a .netrc) with the entry of ``machine host`` replaced by one holding ``login`` and ``password``.

    Every other entry, comment, macro and byte stays as it was. The new entry goes before a
    ``default`` entry (which must stay last), else at the end. Raises StepError for a value a .netrc
    cannot hold unquoted (whitespace, quotes, #)."""
    for v in (host, login, password):
        if not v or re.search(r'[\s"#\\]', v):
            raise StepError("a .netrc value must be one word without quotes or #; the WANDB_API_KEY is not")
    toks = _netrc_tokens(text)
    keywords = ("machine", "default", "macdef")
    cut = None
    for k, (tok, start, _end) in enumerate(toks):
        if tok == "machine" and k + 1 < len(toks) and toks[k + 1][0] == host:
            nxt = next((t[1] for t in toks[k + 2 :] if t[0] in keywords), len(text))
            cut = (start, nxt)
            break
    if cut is not None:
        text = text[: cut[0]] + text[cut[1] :]
        toks = _netrc_tokens(text)
    entry = "machine %s\n  login %s\n  password %s\n" % (host, login, password)
    default = next((t[1] for t in toks if t[0] == "default"), None)
    if default is not None:
        return text[:default] + entry + text[default:]
    if text and not text.endswith("\n"):
        text += "\n"
    return text + entry


# ---------------------------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------------------------

CHUNK = 16 << 20


def _weights_dest(step, ctx):
    if step.get("dest"):
        return step["dest"]
    base = ctx.get("cache_dir") or os.path.join(os.path.expanduser("~"), ".cache", "gpuops")
    return os.path.join(base, "weights", re.sub(r"[^A-Za-z0-9._-]+", "_", step.get("name") or "weights"))


def weights_inputs(step, ctx):
    src = step.get("source", "")
    if src.startswith("file://"):
        return {"source": _file_sig(src[len("file://") :], content_limit=0)}
    return {}


def _files_under(path):
    if os.path.isfile(path):
        return [path]
    out = []
    for dp, dn, fns in os.walk(path):
        dn[:] = [d for d in dn if d != ".cache"]
        out += [os.path.join(dp, f) for f in sorted(fns)]
    return out


def weights_valid(step, ctx, record):
    for path, size in record.get("outputs", []):
        try:
            if os.path.getsize(path) != size:
                return False
        except OSError:
            return False
    return bool(record.get("outputs"))


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


RANGE_MIN, RANGE_MAX = 1 << 20, 64 << 20  # bytes per ranged GET: about four per worker per file, within these
DEFAULT_WORKERS = 8  # parallel HTTP ranges (``workers``); one TCP stream rarely fills a fast link
RANGE_TRIES = 5  # attempts per range (a dropped connection resumes inside the range)
READ_BLOCK = 1 << 20


class _Part:
    """One file being fetched into ``<path>.gpuops-part`` by ranges, resumable across runs.

    The ranges already written are listed in ``<path>.gpuops-part.json`` (with the size and the ETag
    they belong to), and the sha256 of the contiguous prefix is computed as it grows."""

    def __init__(self, url, path, size, etag, want_sha256):
        self.url, self.path, self.size, self.etag, self.want = url, path, size, etag, want_sha256
        self.part, self.side = path + ".gpuops-part", path + ".gpuops-part.json"
        self.lock = threading.Lock()
        self.done = {}  # start -> end (inclusive) of written ranges
        self.hashed, self.hashing, self.sha = 0, False, hashlib.sha256()
        self.fresh = 0  # bytes received by this run
        try:
            with open(self.side) as f:
                mark = json.load(f)
            if mark.get("size") == size and mark.get("etag") == etag and os.path.getsize(self.part) == size:
                self.done = dict((int(a), int(b)) for a, b in mark.get("done", []))
        except (OSError, ValueError, TypeError, AttributeError):
            self.done = {}
        if not self.done:
            d = os.path.dirname(self.part)
            if d:
                os.makedirs(d, exist_ok=True)
            with open(self.part, "wb") as f:
                f.truncate(size)
        self.fd = os.open(self.part, os.O_RDWR)

    def ranges(self, workers):
        per = max(RANGE_MIN, min(RANGE_MAX, self.size // max(1, workers * 4) or 1))
        return [(a, min(a + per, self.size) - 1) for a in range(0, self.size, per) if a not in self.done]

    def wrote(self, start, end):
        """A range is on disk: record it and hash the prefix that is now contiguous."""
        with self.lock:
            self.done[start] = end
            tmp = self.side + ".tmp.%d" % threading.get_ident()
            with open(tmp, "w") as f:
                json.dump({"size": self.size, "etag": self.etag, "done": sorted(self.done.items())}, f)
            os.replace(tmp, self.side)
        self.advance()

    def advance(self):
        """Hash the written bytes that now follow the hashed prefix (one thread at a time)."""
        with self.lock:
            if self.hashing:
                return
            self.hashing = True
        while True:
            with self.lock:
                upto = self.hashed
                while upto in self.done:
                    upto = self.done[upto] + 1
                if upto == self.hashed:
                    self.hashing = False
                    return
                at = self.hashed
            while at < upto:  # pread outside the lock: the bytes of finished ranges do not change
                block = os.pread(self.fd, min(CHUNK, upto - at), at)
                if not block:
                    raise StepError("%s shrank while it was written" % self.part)
                self.sha.update(block)
                at += len(block)
            with self.lock:
                self.hashed = upto

    def finish(self):
        """Check every byte arrived and the sha256 (when known), then move the file into place.

        Returns the file's sha256 (hex)."""
        self.advance()  # ranges an earlier run wrote, when this one had none left to fetch
        os.close(self.fd)
        if self.hashed != self.size:
            raise StepError("download of %s is incomplete (%d of %d bytes)" % (self.url, self.hashed, self.size))
        got = self.sha.hexdigest()
        if self.want and got != self.want.lower():
            for p in (self.part, self.side):
                try:
                    os.remove(p)
                except OSError:
                    pass
            raise StepError("sha256 mismatch for %s: expected %s, got %s" % (self.path, self.want, got))
        os.replace(self.part, self.path)
        try:
            os.remove(self.side)
        except OSError:
            pass
        return got


def _open_url(url, headers, timeout):
    import urllib.request

    req = urllib.request.Request(url, headers=dict(headers or {}, **{"User-Agent": "gpuops-bootstrap"}))
    return urllib.request.urlopen(req, timeout=timeout)


def _probe(url, headers, timeout):
    """Probe ``url`` with one ``Range: bytes=0-0`` GET (a HEAD would turn into a GET on a redirect).

    (final URL after redirects, size or None, ranges served, ETag or None) from one ``Range:
    bytes=0-0`` GET (a HEAD would turn into a GET on a redirect)."""
    h = dict(headers or {}, Range="bytes=0-0")
    with _open_url(url, h, timeout) as r:
        r.read(1)
        etag = (r.headers.get("X-Linked-Etag") or r.headers.get("ETag") or "").replace("W/", "").strip('"') or None
        if r.status == 206:
            m = re.match(r"bytes 0-0/(\d+)$", r.headers.get("Content-Range") or "")
            if m:
                return r.geturl(), int(m.group(1)), True, etag
        size = r.headers.get("Content-Length")
        return r.geturl(), int(size) if size and size.isdigit() else None, False, etag


class _Conn:
    """A worker's keep-alive connection to one host (urllib opens a new one per request)."""

    def __init__(self, timeout):
        self.timeout, self.key, self.conn = timeout, None, None

    def get(self, url, headers):
        import http.client
        from urllib.parse import urlsplit

        u = urlsplit(url)
        key = (u.scheme, u.netloc)
        if self.conn is None or self.key != key:
            self.close()
            cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
            self.conn, self.key = cls(u.netloc, timeout=self.timeout), key
        path = u.path + ("?" + u.query if u.query else "")
        self.conn.request("GET", path, headers=dict(headers, **{"User-Agent": "gpuops-bootstrap"}))
        return self.conn.getresponse()

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = None


class _Refused(StepError):
    """The server answered a range with a 4xx: asking again will not help."""


def _fetch_range(conn, part, start, end, headers):
    """GET bytes start..end (inclusive) of ``part.url`` into the part file, checked and retried.

    GET bytes start..end (inclusive) of ``part.url`` into the part file, checking the answer is 206
    with exactly that Content-Range and length; a cut connection retries from the last byte written
    (RANGE_TRIES attempts, backing off)."""
    at, last = start, None
    for attempt in range(RANGE_TRIES):
        if STOP.is_set():
            raise StepError("stopped")
        try:
            r = conn.get(part.url, dict(headers, Range="bytes=%d-%d" % (at, end)))
            want = "bytes %d-%d/%d" % (at, end, part.size)
            if r.status != 206 or (r.getheader("Content-Range") or "") != want:
                body = r.read(200)
                conn.close()
                raise (_Refused if 400 <= r.status < 500 else StepError)(
                    "range %d-%d of %s: answer %d %s, not 206 %s%s"
                    % (
                        at,
                        end,
                        part.url,
                        r.status,
                        r.getheader("Content-Range") or "",
                        want,
                        (": " + body.decode("utf-8", "replace").strip()[:100]) if r.status >= 400 else "",
                    )
                )
            while at <= end:
                if STOP.is_set():
                    conn.close()
                    raise StepError("stopped")
                block = r.read(min(READ_BLOCK, end + 1 - at))
                if not block:
                    break
                os.pwrite(part.fd, block, at)
                at += len(block)
                with part.lock:
                    part.fresh += len(block)
            if at > end:
                if r.read(1):
                    conn.close()
                    raise StepError("range %d-%d of %s: more bytes than asked for" % (start, end, part.url))
                part.wrote(start, end)
                return
            conn.close()
            last = "connection closed at byte %d of %d-%d" % (at, start, end)
        except _Refused:
            raise
        except StepError as e:
            if STOP.is_set():
                raise
            last = str(e)
        except Exception as e:  # OSError, http.client.HTTPException (IncompleteRead, RemoteDisconnected, ...)
            conn.close()
            last = "%s: %s" % (type(e).__name__, e)
        time.sleep(min(8.0, 0.25 * 2**attempt))
    raise StepError("range %d-%d of %s failed %d times: %s" % (start, end, part.url, RANGE_TRIES, last))


def ranged_download(files, workers=DEFAULT_WORKERS, headers=None, timeout=60.0):
    """Fetch ``files`` by parallel HTTP ranges, resuming, each file checked and moved into place whole.

    Fetch ``files`` ([{"url", "path", "size" (bytes, optional), "etag", "sha256" (optional)}]) by
    parallel HTTP ranges: ``workers`` threads, each on its own keep-alive connection, share one
    queue of ranges over every file (the big file's ranges are spread over all of them). Each range
    is checked (206, its exact Content-Range, its length); each file's sha256 is computed as its
    prefix completes and compared when given; a file moves to ``path`` only when whole. An
    interrupted run resumes the ranges it has not written. A server that serves no ranges gets one
    plain GET for that file. Returns {"bytes": total size, "fetched": bytes received now, "sha256":
    {path: hex}}. Raises StepError naming the file and range that failed."""
    headers = dict(headers or {})
    parts, queue, plain = [], [], []
    for f in files:
        url, size, ranges, etag = f["url"], f.get("size"), True, f.get("etag")
        if size is None or not f.get("final"):
            try:
                url, size, ranges, petag = _probe(url, headers, timeout)
            except OSError as e:
                raise StepError("download of %s failed: %s" % (f["url"], e)) from e
            etag = etag or petag
        if not ranges or size is None or size == 0:
            plain.append(dict(f, url=url))
            continue
        part = _Part(url, f["path"], size, etag, f.get("sha256"))
        parts.append(part)
        queue += [(part, a, b) for a, b in part.ranges(workers)]
    errors: list[BaseException] = []
    qlock = threading.Lock()

    def work():
        conn = _Conn(timeout)
        try:
            while not errors:
                with qlock:
                    if not queue:
                        return
                    part, a, b = queue.pop(0)
                try:
                    _fetch_range(conn, part, a, b, headers)
                except Exception as e:
                    errors.append(e)
                    return
        finally:
            conn.close()

    threads = [threading.Thread(target=work, name="range %d" % i, daemon=True) for i in range(min(workers, len(queue)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for part in parts:
            try:
                os.close(part.fd)
            except OSError:
                pass
        first = errors[0]
        raise (
            first
            if isinstance(first, StepError)
            else StepError("download failed: %s: %s" % (type(first).__name__, first))
        )
    out: dict[str, Any] = {"bytes": 0, "fetched": 0, "sha256": {}}
    for part in parts:
        out["sha256"][part.path] = part.finish()
        out["bytes"] += part.size
        out["fetched"] += part.fresh
    for f in plain:
        out["sha256"][f["path"]], n = _plain_download(f, headers, timeout)
        out["bytes"] += n
        out["fetched"] += n
    return out


def _plain_download(f, headers, timeout):
    """One GET of the whole file (a server without ranges); (sha256 hex, bytes)."""
    part = f["path"] + ".part"
    d = os.path.dirname(part)
    if d:
        os.makedirs(d, exist_ok=True)
    h, n = hashlib.sha256(), 0
    try:
        with _open_url(f["url"], headers, timeout) as r, open(part, "wb") as out:
            while True:
                if STOP.is_set():
                    raise StepError("stopped")
                block = r.read(CHUNK)
                if not block:
                    break
                h.update(block)
                out.write(block)
                n += len(block)
    except OSError as e:  # URLError and HTTPError are OSErrors
        raise StepError("download of %s failed: %s" % (f["url"], e)) from e
    got = h.hexdigest()
    if f.get("sha256") and got != f["sha256"].lower():
        os.remove(part)
        raise StepError("sha256 mismatch for %s: expected %s, got %s" % (f["path"], f["sha256"], got))
    os.replace(part, f["path"])
    return got, n


def _download(url, path, step):
    """An https:// weights file by parallel ranges (``workers``); returns ranged_download's answer."""
    timeout = min(float(step.get("timeout", DEFAULT_TIMEOUT)), 120.0)
    return ranged_download(
        [{"url": url, "path": path, "sha256": step.get("sha256")}],
        workers=int(step.get("workers", DEFAULT_WORKERS)),
        timeout=timeout,
    )


# The download runs in the box's python that has huggingface_hub (the deps venv, else this one):
# arguments arrive as JSON on stdin, the result is the last stdout line, exit 3 names the failure.
_HF_SCRIPT = r"""
import json, sys
a = json.loads(sys.stdin.read())
import importlib.util, os
if importlib.util.find_spec("hf_transfer"):  # Rust parallel ranges, when the image has it
    os.environ.setdefault("HF_HUB_ENABLE_HF_TRANSFER", "1")
try:
    from huggingface_hub import snapshot_download
    from huggingface_hub import errors as E
except ImportError as e:
    print(json.dumps({"error": "no_hub", "message": str(e)})); sys.exit(3)
kw = dict(repo_id=a["repo"], revision=a["revision"], allow_patterns=a["allow_patterns"] or None, max_workers=a["workers"])
kw.update({"local_dir": a["dest"]} if a["dest"] else {"cache_dir": a["cache_dir"]})
try:
    path = snapshot_download(**kw)
except E.GatedRepoError as e:
    print(json.dumps({"error": "gated", "message": str(e).splitlines()[0]})); sys.exit(3)
except E.RevisionNotFoundError as e:
    print(json.dumps({"error": "revision", "message": str(e).splitlines()[0]})); sys.exit(3)
except E.RepositoryNotFoundError as e:
    print(json.dumps({"error": "repo", "message": str(e).splitlines()[0]})); sys.exit(3)
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e).splitlines()[0] if str(e) else ""})); sys.exit(3)
print(json.dumps({"path": path}))
"""
HF_MARKER = ".gpuops-complete.json"  # in a snapshot directory: the pinned revision is all there


class StepSkipped(Exception):
    """Raised by a step that finds its outputs already in place; the argument is the detail."""


def _hf_home(ctx):
    """Where the Hugging Face cache lives.

    ``<cache_dir>/huggingface`` (the volume when one is mounted), else $HF_HOME, else
    ~/.cache/huggingface."""
    if ctx.get("cache_dir"):
        return os.path.join(ctx["cache_dir"], "huggingface")
    return os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")


def _snapshot_files(path):
    out = []
    for f in _files_under(path):
        if os.path.basename(f) == HF_MARKER:
            continue
        out.append([os.path.relpath(f, path), os.path.getsize(f)])
    return out


def _hf_cached(snapshot, patterns):
    """The marker's file list when ``snapshot`` holds the last complete download, else None.

    The marker's file list when ``snapshot`` holds every file of the last complete download with the
    same allow-patterns, else None."""
    try:
        with open(os.path.join(snapshot, HF_MARKER)) as f:
            mark = json.load(f)
    except (OSError, ValueError):
        return None
    if mark.get("allow_patterns") != patterns:
        return None
    for rel, size in mark.get("files", []):
        try:
            if os.path.getsize(os.path.join(snapshot, rel)) != size:
                return None
        except OSError:
            return None
    return mark.get("files")


def _drop_stale_incomplete(cache_dir, repo, older_than_s):
    """Remove ``*.incomplete`` blobs of ``repo`` untouched for ``older_than_s`` seconds.

    What a killed download left on the volume. huggingface_hub 2.4.0 writes each download to a
    process-unique temporary name (file_download.py ``_download_to_tmp_and_move``, PR 4228), so a
    new process restarts that file rather than resuming it; a fresh one may be another box's
    download in progress on a shared volume and is kept. Returns the bytes freed."""
    blobs = os.path.join(cache_dir, "models--" + repo.replace("/", "--"), "blobs")
    freed = 0
    try:
        names = os.listdir(blobs)
    except OSError:
        return 0
    now = time.time()
    for n in names:
        p = os.path.join(blobs, n)
        try:
            st = os.stat(p)
            if n.endswith(".incomplete") and now - st.st_mtime >= older_than_s:
                os.remove(p)
                freed += st.st_size
        except OSError:
            continue
    return freed


def _hf_weights(step, ctx):
    """``hf://org/name@revision``.

    snapshot_download into the HF cache (resumable: an interrupted file continues from its
    ``.incomplete`` blob), or skip when the cache holds the pinned revision."""
    repo, _, rev = step["source"][len("hf://") :].partition("@")
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$", repo):
        raise StepError("hf source %r is not hf://org/name[@revision]" % step["source"])
    patterns = list(step.get("allow_patterns") or [])
    pinned = bool(SHA.match(rev))
    home = _hf_home(ctx)
    cache_dir = os.path.join(home, "hub")
    dest = step.get("dest") or ""
    snapshot = dest or os.path.join(cache_dir, "models--" + repo.replace("/", "--"), "snapshots", rev)
    if pinned:
        files = _hf_cached(snapshot, patterns)
        if files is not None:
            raise StepSkipped(
                {
                    "path": snapshot,
                    "files": len(files),
                    "bytes": sum(sz for _, sz in files),
                    "revision": rev,
                    "cache": "hit",
                    "downloaded_bytes": 0,
                }
            )
    stale = _drop_stale_incomplete(cache_dir, repo, float(step.get("stale_incomplete_s", 600)))
    py = step.get("python") or sys.executable
    if not os.path.isabs(py) and os.sep in py:
        py = os.path.abspath(py)
    how = step.get("downloader", "auto")
    if how not in ("auto", "hub", "ranged"):
        raise StepError("downloader must be auto, hub or ranged, not %r" % how)
    # auto: the hub's own client when ``py`` has it now (hf_transfer or hf_xet when installed there),
    # else the standard library's ranges -- also when ``py`` is the venv a deps step beside this one
    # is still building (its huggingface_hub may be half-installed).
    if how == "auto":
        how = "hub" if py not in ctx.get("building", ()) and _has_module(py, "huggingface_hub") else "ranged"
    t0 = time.time()
    fetched = None
    try:
        if how == "ranged":
            path, fetched = _hf_ranged(step, ctx, repo, rev, patterns, cache_dir, dest, home)
        else:
            path = _hf_hub_client(
                step,
                py,
                home,
                {
                    "repo": repo,
                    "revision": rev or None,
                    "allow_patterns": patterns,
                    "cache_dir": cache_dir,
                    "dest": dest,
                    "workers": int(step.get("workers", DEFAULT_WORKERS)),
                },
            )
    except _HfError as e:
        err = e.args[0]
        if err == "no_hub":
            raise StepError("huggingface_hub is not installed in %s; add it to [bootstrap] packages" % py) from None
        if err == "gated":
            raise StepError(
                "%s is gated: add HF_TOKEN to [bootstrap] secrets (a token whose account accepted the model's "
                "license on huggingface.co)%s" % (repo, "" if os.environ.get("HF_TOKEN") else "; no HF_TOKEN was given")
            ) from None
        if err == "revision":
            raise StepError(
                "revision %r of %s is not on the hub: fix the @revision in [bootstrap] weights (a commit sha pins it)"
                % (rev, repo)
            ) from None
        raise StepError("%s is not on the hub (or is private: add HF_TOKEN to [bootstrap] secrets)" % repo) from None
    secs = time.time() - t0
    files = _snapshot_files(path)
    resolved = os.path.basename(os.path.normpath(path)) if not dest else rev
    _write_private(
        os.path.join(path, HF_MARKER),
        json.dumps({"repo": repo, "revision": resolved, "allow_patterns": patterns, "files": files, "at": time.time()}),
    )
    total = sum(sz for _, sz in files)
    detail = {
        "path": path,
        "files": len(files),
        "bytes": total,
        "seconds": round(secs, 3),
        "revision": resolved,
        "cache": "miss",
        "mb_s": round((total if fetched is None else fetched) / 1e6 / secs, 2) if secs > 0 else None,
        "downloader": how,
    }
    if fetched is not None:
        detail["downloaded_bytes"] = fetched
    if stale:
        detail["stale_incomplete_bytes_removed"] = stale
    if not pinned:
        detail["warning"] = "revision not pinned: use hf://%s@%s so a warm cache is used without asking the hub" % (
            repo,
            resolved,
        )
    return detail


def _has_module(py, name):
    """Whether interpreter ``py`` can import ``name`` (found, not imported); False when ``py`` is missing."""
    try:
        return (
            subprocess.run(
                [py, "-c", "import importlib.util as u, sys; sys.exit(0 if u.find_spec(%r) else 3)" % name],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _hf_hub_client(step, py, home, args):
    """Run snapshot_download in ``py`` (the _HF_SCRIPT protocol); returns the snapshot path.

    snapshot_download in ``py`` (the _HF_SCRIPT protocol; in the runner's process group, so whatever
    ends the runner's group ends it; a failing step beside it kills it by pid); returns the snapshot
    path. Raises _HfError or StepError."""
    env = dict(os.environ, HF_HOME=home, HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1")
    timeout = float(step.get("timeout", DEFAULT_TIMEOUT))
    try:
        proc = subprocess.Popen(
            [py, "-c", _HF_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
    except OSError as e:
        raise StepError("cannot run %s for the hf download: %s" % (py, e)) from e
    PROCS.add(proc.pid)
    try:
        out, err = proc.communicate(json.dumps(args).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise StepError(
            "hf download of %s ran past %s s (run again: it resumes)"
            % (args["repo"], step.get("timeout", DEFAULT_TIMEOUT))
        ) from None
    finally:
        PROCS.discard(proc.pid)
    for line in err.decode("utf-8", "replace").splitlines()[-20:]:
        _log(line)
    lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.startswith("{")]
    try:
        ans = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise StepError("hf download of %s failed (exit %d) with no answer" % (args["repo"], proc.returncode)) from None
    why = ans.get("error")
    if why in ("no_hub", "gated", "revision", "repo"):
        raise _HfError(why)
    if why:
        raise StepError(
            "hf download of %s failed: %s: %s (run again: it resumes)" % (args["repo"], why, ans.get("message", ""))
        )
    return ans["path"]


def _hf_token(home):
    for n in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(n):
            return os.environ[n]
    for path in (os.path.join(home, "token"), os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "token")):
        try:
            with open(path) as f:
                tok = f.read().strip()
            if tok:
                return tok
        except OSError:
            continue
    return None


def _hf_match(path, patterns):
    """huggingface_hub's allow_patterns rule (utils/_paths.py filter_repo_objects).

    fnmatch, a pattern ending in ``/`` matching everything under it; no patterns: every file."""
    import fnmatch

    if not patterns:
        return True
    return any(fnmatch.fnmatch(path, p + "*" if p.endswith("/") else p) for p in patterns)


def _hf_ranged(step, ctx, repo, rev, patterns, cache_dir, dest, home):
    """``hf://`` with the standard library.

    The revision's file list from the hub API (``/api/models/{repo}/revision/{rev}?blobs=true``:
    sizes, LFS sha256, blob ids), then every file by parallel ranges (ranged_download), laid out as
    huggingface_hub's cache lays it out (``blobs/<etag>``, ``snapshots/<commit>/<path>`` -> the
    blob, ``refs/<rev>``), so the job's own huggingface_hub finds it offline; with ``dest``, plain
    files under it. Returns (snapshot path, bytes received now)."""
    from urllib.error import HTTPError
    from urllib.parse import quote

    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    token = _hf_token(home)
    headers = {"Authorization": "Bearer " + token} if token else {}
    if token:
        SECRETS.add(token)
    timeout = min(float(step.get("timeout", DEFAULT_TIMEOUT)), 120.0)
    url = "%s/api/models/%s/revision/%s?blobs=true" % (endpoint, repo, quote(rev or "main", safe=""))
    try:
        with _open_url(url, headers, timeout) as r:
            info = json.loads(r.read().decode("utf-8"))
    except HTTPError as e:
        code = e.headers.get("X-Error-Code") or ""
        if code == "GatedRepo" or (e.code == 403 and token):
            raise _HfError("gated") from e
        if code == "RevisionNotFound":
            raise _HfError("revision") from e
        if e.code in (401, 404):
            raise _HfError("repo") from e
        raise StepError("hf file list of %s failed: HTTP %d" % (repo, e.code)) from e
    except (OSError, ValueError) as e:
        raise StepError("hf file list of %s failed: %s (run again: it resumes)" % (repo, e)) from e
    commit = info.get("sha") or ""
    if not SHA.match(commit):
        raise StepError("the hub gave no commit for %s@%s" % (repo, rev or "main"))
    wanted = [sib for sib in info.get("siblings") or [] if _hf_match(sib.get("rfilename", ""), patterns)]
    model = os.path.join(cache_dir, "models--" + repo.replace("/", "--"))
    snapshot = dest or os.path.join(model, "snapshots", commit)
    files, links = [], []
    for sib in wanted:
        rel = sib["rfilename"]
        if rel.startswith("/") or ".." in rel.split("/"):
            raise StepError("the hub listed a file outside the repo: %r" % rel)
        lfs = sib.get("lfs") or {}
        etag = lfs.get("sha256") or sib.get("blobId")
        if not etag or not re.match(r"^[0-9a-f]{40,64}$", etag):
            raise StepError("the hub gave no blob id for %s in %s" % (rel, repo))
        target = os.path.join(snapshot, rel) if dest else os.path.join(model, "blobs", etag)
        if not dest:
            links.append((rel, etag))
        size = lfs.get("size", sib.get("size"))
        try:
            if size is not None and os.path.getsize(target) == size:
                continue  # already in the cache (another revision shares the blob)
        except OSError:
            pass
        files.append(
            {
                "url": "%s/%s/resolve/%s/%s" % (endpoint, repo, commit, quote(rel)),
                "path": target,
                "sha256": lfs.get("sha256"),
                "etag": etag,
            }
        )
    got = ranged_download(files, workers=int(step.get("workers", DEFAULT_WORKERS)), headers=headers, timeout=timeout)
    for rel, etag in links:
        link = os.path.join(snapshot, rel)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        rel_blob = os.path.relpath(os.path.join(model, "blobs", etag), os.path.dirname(link))
        if os.path.islink(link) and os.readlink(link) == rel_blob:
            continue
        tmp = link + ".gpuops-link"
        if os.path.lexists(tmp):
            os.remove(tmp)
        os.symlink(rel_blob, tmp)
        os.replace(tmp, link)
    if not dest and (rev or "main") != commit:
        ref = os.path.join(model, "refs", rev or "main")
        os.makedirs(os.path.dirname(ref), exist_ok=True)
        with open(ref, "w") as f:
            f.write(commit)
    return snapshot, got["fetched"]


class _HfError(Exception):
    """The hub said no: ``gated``, ``revision`` or ``repo`` (worded by _hf_weights)."""


def step_weights(step, ctx):
    src = step.get("source") or ""
    if src.startswith("hf://"):
        detail = _hf_weights(step, ctx)
        ctx["outputs"] = [[os.path.join(detail["path"], rel), size] for rel, size in _snapshot_files(detail["path"])]
        return detail
    dest = _weights_dest(step, ctx)
    os.makedirs(dest, exist_ok=True)
    fetched = None
    t0 = time.time()
    if src.startswith(("https://", "http://")):
        name = step.get("filename") or os.path.basename(src.split("?", 1)[0]) or "download"
        target = os.path.join(dest, name)
        got = _download(src, target, step)
        fetched = got["fetched"]
    elif src.startswith("file://"):
        path = src[len("file://") :]
        if not os.path.exists(path):
            raise StepError("source %s not found" % path)
        if os.path.isdir(path):
            target = dest
            shutil.copytree(path, dest, dirs_exist_ok=True)
        else:
            target = os.path.join(dest, step.get("filename") or os.path.basename(path))
            shutil.copyfile(path, target + ".part")
            os.replace(target + ".part", target)
    else:
        raise StepError("weights source must start with hf://, https:// or file://, not %r" % src)
    if step.get("sha256") and not src.startswith(("https://", "http://")):  # a download checked its own
        if not os.path.isfile(target):
            raise StepError("sha256 applies to a single-file source")
        got = _sha256(target)
        if got != step["sha256"].lower():
            os.remove(target)
            raise StepError("sha256 mismatch for %s: expected %s, got %s" % (target, step["sha256"], got))
    target = os.path.abspath(target)
    files = _files_under(target)
    total = sum(os.path.getsize(f) for f in files)
    detail = {"path": target, "files": len(files), "bytes": total}
    if fetched is not None:
        secs = time.time() - t0
        detail.update(
            downloaded_bytes=fetched,
            seconds=round(secs, 3),
            mb_s=round(fetched / 1e6 / secs, 2) if secs > 0 else None,
            workers=int(step.get("workers", DEFAULT_WORKERS)),
        )
    if step.get("warm", True):
        t0 = time.time()
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                while fh.read(CHUNK):
                    pass
        secs = time.time() - t0
        detail["warm_read_gb_s"] = round(total / 1e9 / secs, 2) if secs > 0 else None
    ctx["outputs"] = [[f, os.path.getsize(f)] for f in files]
    return detail


# ---------------------------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------------------------


def verify_inputs(step, ctx):
    import importlib.util

    return {"torch": importlib.util.find_spec("torch") is not None}  # torch installed later: measure then


def step_verify(step, ctx):
    try:
        import torch
    except ImportError:
        return {"measured": False, "why": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"measured": False, "why": "torch sees no CUDA device"}
    dev = torch.device("cuda")
    n = int(step.get("bandwidth_bytes", 1 << 30)) // 4
    a = torch.empty(n, dtype=torch.float32, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    iters = 20
    start.record()
    for _ in range(iters):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    secs = start.elapsed_time(end) / 1e3
    bw = 2 * n * 4 * iters / secs / 1e9  # read + write, GB/s
    del a, b
    m = int(step.get("matmul_n", 8192))
    x = torch.randn(m, m, dtype=torch.bfloat16, device=dev)
    y = torch.randn(m, m, dtype=torch.bfloat16, device=dev)
    for _ in range(3):
        x @ y
    torch.cuda.synchronize()
    iters = 20
    start.record()
    for _ in range(iters):
        x @ y
    end.record()
    torch.cuda.synchronize()
    tflops = 2 * m**3 * iters / (start.elapsed_time(end) / 1e3) / 1e12
    detail = {
        "measured": True,
        "device": torch.cuda.get_device_name(0),
        "bandwidth_gb_s": round(bw, 1),
        "bf16_tflops": round(tflops, 1),
    }
    expect = step.get("expect") or {}
    threshold = float(step.get("threshold", 0.7))
    flags = []
    for key, got in (("bandwidth_gb_s", bw), ("bf16_tflops", tflops)):
        if expect.get(key):
            ratio = got / float(expect[key])
            detail[key + "_ratio"] = round(ratio, 3)
            if ratio < threshold:
                flags.append("%s %.1f is %.0f%% of nominal %s" % (key, got, 100 * ratio, expect[key]))
    detail["flags"] = flags
    if flags:
        _log("verify: below %.0f%% of nominal: %s" % (100 * threshold, "; ".join(flags)))
        if step.get("strict"):
            raise StepError("card underperforms: " + "; ".join(flags))
    return detail


# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------


def run_inputs(step, ctx):
    return {"inputs": [[p, _file_sig(p)] for p in step.get("inputs", [])]}


def step_run(step, ctx):
    if not step.get("command"):
        raise StepError("run needs command")
    env = dict((str(k), str(v)) for k, v in (step.get("env") or {}).items())
    _sh(step["command"], step, cwd=step.get("cwd"), env=env, shell=True)
    return ""


# kind -> (run, inputs, outputs-still-valid)
KINDS = {
    "system": (step_system, None, None),
    "deps": (step_deps, deps_inputs, deps_valid),
    "code": (step_code, code_inputs, code_valid),
    "secrets": (step_secrets, secrets_inputs, secrets_valid),
    "weights": (step_weights, weights_inputs, weights_valid),
    "verify": (step_verify, verify_inputs, None),
    "run": (step_run, run_inputs, None),
}
ALWAYS = {"system"}  # depends on the moment, not on inputs


def _fingerprint(step, inputs):
    return hashlib.sha256(json.dumps([step, inputs], sort_keys=True).encode()).hexdigest()


def _state_path(state_dir, name):
    return os.path.join(state_dir, "%s.json" % hashlib.sha1(name.encode()).hexdigest()[:16])


def _read_state(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _collect_secrets(config):
    for step in config.get("steps", []):
        if step.get("kind") == "secrets":
            for n in step.get("env", []):
                v = os.environ.get(n)
                if v and len(v) >= 4:
                    SECRETS.add(v)


# What may run at once (data, so a new kind joins by a line here): steps of a CONCURRENT kind run
# alongside the CONCURRENT steps next to them in the config (deps, code and weights share nothing:
# the weights step downloads with its own client when the deps venv is not built yet); every other
# step waits for all the steps before it, and all the steps after it wait for it. Of an EXCLUSIVE
# kind, one runs at a time (two deps steps share an installer and maybe a venv). A step's own
# ``after`` (names) adds waits, its ``concurrent`` (true/false) overrides its kind's default.
CONCURRENT = {"deps", "code", "weights"}
EXCLUSIVE = {"deps"}


def _waits(steps, names):
    """For each step, the names of the earlier steps it waits for (see CONCURRENT)."""
    out = []
    for i, step in enumerate(steps):
        conc = step.get("concurrent", step.get("kind") in CONCURRENT)
        w = []
        for j in range(i):
            other = steps[j]
            oconc = other.get("concurrent", other.get("kind") in CONCURRENT)
            same = step.get("kind") == other.get("kind") and step.get("kind") in EXCLUSIVE
            if not (conc and oconc) or same:
                w.append(names[j])
        after = step.get("after") or []
        w += [a for a in (after if isinstance(after, list) else [after]) if a not in w]
        out.append(w)
    return out


def _run_step(step, name, state_dir, ctx):
    """Run one step (or skip it).

    Returns its line ``{"step", "status", "seconds", "detail"}`` with status done, skipped, failed,
    or stopped (ended because another step failed)."""
    kind = step.get("kind")
    t0 = time.time()
    path = _state_path(state_dir, name)
    fn, inputs_fn, valid_fn = KINDS.get(kind, (None, None, None))
    ctx = dict(ctx, outputs=None, step_name=name)
    try:
        if fn is None:
            raise StepError("unknown step kind %r (known: %s)" % (kind, ", ".join(sorted(KINDS))))
        always = kind in ALWAYS or step.get("always")
        fp = _fingerprint(step, inputs_fn(step, ctx) if inputs_fn else None)
        prev = None if always else _read_state(path)
        if prev and prev.get("fingerprint") == fp and (valid_fn is None or valid_fn(step, ctx, prev)):
            return {
                "step": name,
                "status": "skipped",
                "seconds": round(time.time() - t0, 3),
                "detail": "unchanged since %s" % prev.get("at", "?"),
            }
        if os.path.exists(path):
            os.remove(path)  # a step that starts and fails must not look done next time
        detail = fn(step, ctx)
    except StepSkipped as sk:  # the step found its outputs in place (a warm cache on a volume)
        return {"step": name, "status": "skipped", "seconds": round(time.time() - t0, 3), "detail": sk.args[0]}
    except Exception as e:  # any failure of a step stops the run, naming the step
        secs = round(time.time() - t0, 3)
        if STOP.is_set():
            return {"step": name, "status": "stopped", "seconds": secs, "detail": "stopped: another step failed"}
        msg = str(e) if isinstance(e, StepError) else "%s: %s" % (type(e).__name__, e)
        return {"step": name, "status": "failed", "seconds": secs, "detail": msg}
    secs = round(time.time() - t0, 3)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(
            {
                "fingerprint": fp,
                "detail": detail,
                "outputs": ctx.get("outputs") or [],
                "seconds": secs,
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            f,
        )
    os.replace(tmp, path)
    return {"step": name, "status": "done", "seconds": secs, "detail": detail}


STOP_GRACE_S = 30.0  # how long the running steps get to end after a failure (their processes are killed at once)


def run(config, state_dir):
    """Run ``config``'s steps, independent ones at once (CONCURRENT).

    Returns the exit status (0 ok, 1 a step failed, 2 bad config). A failed step stops the run: the
    steps running beside it are ended (their process groups killed, in-process downloads stopped
    between blocks) and reported ``stopped``, no later step starts, and the summary names the failed
    step."""
    os.makedirs(state_dir, exist_ok=True)
    _collect_secrets(config)
    STOP.clear()
    total0 = time.time()
    steps = config.get("steps", [])
    names = [s.get("name") or s.get("kind") for s in steps]
    dup = sorted(set(n for n in names if names.count(n) > 1))
    unknown = sorted(set(a for s in steps for a in (s.get("after") or []) if a not in names)) if not dup else []
    if dup or unknown or any(not n for n in names):
        why = (
            "every step needs a unique name (repeated: %s)" % ", ".join(map(str, dup))
            if not unknown
            else "after names no step: %s" % ", ".join(map(str, unknown))
        )
        _emit({"step": "config", "status": "failed", "seconds": 0.0, "detail": why})
        _emit({"total_seconds": 0.0, "slowest": None, "failed": "config"})
        return 2
    waits = dict(zip(names, _waits(steps, names)))
    ctx = {
        "state_dir": state_dir,
        "cache_dir": config.get("cache_dir") or "",
        "building": set(_target_python(s) for s in steps if s.get("kind") == "deps"),
    }
    by_name = dict(zip(names, steps))
    status = {}  # name -> final line
    running = {}  # name -> thread
    cond = threading.Condition()
    failed = None

    def worker(name):
        line = _run_step(by_name[name], name, state_dir, ctx)
        with cond:
            status[name] = line
            if by_name[name].get("kind") == "deps" and line["status"] in ("done", "skipped"):
                ctx["building"].discard(_target_python(by_name[name]))
            cond.notify_all()

    with cond:
        while True:
            for name in names:
                if name in status or name in running or failed:
                    continue
                if all(w in status and status[w]["status"] in ("done", "skipped") for w in waits[name]):
                    t = threading.Thread(target=worker, args=(name,), name="step " + name, daemon=True)
                    running[name] = t
                    t.start()
            for name in [n for n in running if n in status]:
                line = status[name]
                running.pop(name).join()
                _emit(line)
                if line["status"] == "failed" and failed is None:
                    failed = name
                    sys.stderr.write("bootstrap: step %s failed: %s\n" % (name, scrub(str(line["detail"]))))
                    STOP.set()
                    _kill_children()
            if not running and (failed or all(n in status for n in names)):
                break
            if not running:  # nothing can start: the ``after`` names wait in a circle
                left = [n for n in names if n not in status]
                _emit(
                    {
                        "step": "config",
                        "status": "failed",
                        "seconds": 0.0,
                        "detail": "after waits in a circle: %s" % ", ".join(left),
                    }
                )
                _emit({"total_seconds": round(time.time() - total0, 3), "slowest": None, "failed": "config"})
                return 2
            if failed:
                deadline = time.time() + STOP_GRACE_S
                while any(n not in status for n in running) and time.time() < deadline:
                    _kill_children()
                    cond.wait(0.2)
                for name in [n for n in running if n not in status]:  # a step that would not end: reported, left behind
                    _emit(
                        {
                            "step": name,
                            "status": "stopped",
                            "seconds": round(time.time() - total0, 3),
                            "detail": "stopped: did not end within %.0f s of another step's failure" % STOP_GRACE_S,
                        }
                    )
                    running.pop(name)
                continue
            cond.wait(1.0)
    done = [st for st in status.values() if st["status"] == "done"]
    slowest = max(done, key=lambda st: st["seconds"])["step"] if done else None
    summary = {"total_seconds": round(time.time() - total0, 3), "slowest": slowest}
    if failed:
        summary["failed"] = failed
        stopped = sorted(n for n, st in status.items() if st["status"] == "stopped")
        summary["stopped"] = stopped
        summary["not_started"] = [n for n in names if n not in status and n not in stopped]
    _emit(summary)
    return 1 if failed else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--state-dir", default=os.path.expanduser("~/.gpuops-bootstrap"))
    a = p.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_term)
    try:
        with open(a.config) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write("bootstrap: cannot read %s: %s\n" % (a.config, e))
        return 2
    return run(config, a.state_dir)


if __name__ == "__main__":
    sys.exit(main())
