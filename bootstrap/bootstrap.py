"""Bootstrap a box: ``python3 bootstrap.py --config bootstrap.json [--state-dir DIR]``.

Runs the config's steps in order and prints one JSON line per step,
``{"step", "status": "done"|"skipped"|"failed", "seconds", "detail"}``, then
``{"total_seconds", "slowest"}``. A step whose inputs are unchanged since its last success is
skipped; a failed step stops the run (exit 1, naming it). Stdlib only, python3 >= 3.8.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time


def _emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def step_system(step, state):
    """GPU name, driver, memory (nvidia-smi when present), disk free in GB."""
    info = {"disk_free_gb": round(shutil.disk_usage(os.getcwd()).free / 1e9, 1)}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=20,
            )
            info["gpus"] = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired) as e:
            info["gpus_error"] = str(e)
    else:
        info["gpus"] = []
    return info


def step_run(step, state):
    """Any shell command (``command``); its output goes to stderr so stdout stays JSON lines."""
    rc = subprocess.call(step["command"], shell=True, stdout=sys.stderr, stderr=sys.stderr)
    if rc != 0:
        raise RuntimeError("command exited %d" % rc)
    return ""


KINDS = {"system": step_system, "run": step_run}
# Steps whose result depends on the moment, not on inputs: never skipped.
ALWAYS = {"system"}


def _fingerprint(step):
    return hashlib.sha256(json.dumps(step, sort_keys=True).encode()).hexdigest()


def run(config, state_dir):
    os.makedirs(state_dir, exist_ok=True)
    total0 = time.time()
    slowest, slowest_s = None, -1.0
    for step in config.get("steps", []):
        name, kind = step.get("name") or step.get("kind"), step.get("kind")
        t0 = time.time()
        marker = os.path.join(state_dir, "%s.ok" % hashlib.sha1(name.encode()).hexdigest()[:16])
        fp = _fingerprint(step)
        if kind not in ALWAYS and os.path.exists(marker) and open(marker).read() == fp:
            _emit({"step": name, "status": "skipped", "seconds": round(time.time() - t0, 3), "detail": ""})
            continue
        fn = KINDS.get(kind)
        try:
            if fn is None:
                raise RuntimeError("unknown step kind %r" % kind)
            detail = fn(step, state_dir)
        except Exception as e:  # a step failing for any reason stops the run with its name
            secs = round(time.time() - t0, 3)
            _emit({"step": name, "status": "failed", "seconds": secs, "detail": str(e)})
            _emit({"total_seconds": round(time.time() - total0, 3), "slowest": name, "failed": name})
            return 1
        secs = round(time.time() - t0, 3)
        with open(marker, "w") as f:
            f.write(fp)
        _emit({"step": name, "status": "done", "seconds": secs, "detail": detail})
        if secs > slowest_s:
            slowest, slowest_s = name, secs
    _emit({"total_seconds": round(time.time() - total0, 3), "slowest": slowest})
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--state-dir", default=os.path.expanduser("~/.gpuops-bootstrap"))
    a = p.parse_args(argv)
    with open(a.config) as f:
        config = json.load(f)
    return run(config, a.state_dir)


if __name__ == "__main__":
    sys.exit(main())
