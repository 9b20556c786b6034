"""The on-box agent's own cost at 1 s samples.

CPU seconds per minute, resident memory per process, bytes and write calls per minute, status file
size. Runs the real agent (supervisor + worker) on a local box directory with a stand-in nvidia-smi
(a shell script: its own CPU is the child's, reported apart), an interactive-looking /proc, a
bootstrap that ended and a job running.

Targets: <= 0.1 s CPU per minute (agent processes, children apart; shown as whole clock ticks from
/proc/PID/stat and, finer, as the scheduler's nanosecond count from /proc/PID/schedstat), <= 15 MiB RSS per process,
status writes proportional to what changed (a steady box rewrites a few KB every few seconds, not
140 KB every second). ``--baseline REF`` runs the agent of a git ref (e.g. ``main``) the same way
and prints both side by side (at both loads); "idle GPU" is the GPU at 0 % (the SSH-session
scan of /proc then runs every sample). ``--real-smi`` (on a GPU box): the machine's own nvidia-smi.
Usage: ``python bench/bench_agent.py [--seconds 30] [--baseline main] [--real-smi]``.
Never a pass/fail test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
SMI = '#!/bin/sh\necho "0, %d, 40000, 81920"\n'


def proc_cpu(pid: int) -> tuple[float, float]:
    """(own CPU s, reaped children's CPU s) of ``pid``."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK, (int(f[13]) + int(f[14])) / TICK


def proc_oncpu_s(pid: int) -> float | None:
    """CPU seconds ``pid`` has run, to the nanosecond; None where the kernel lacks the file.

    The scheduler's own count, first field of /proc/PID/schedstat (the agent is single-threaded).
    ``proc_cpu`` counts whole clock ticks (10 ms): over 30 s that is a 0.02 s/min step."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def proc_io(pid: int) -> tuple[int, int]:
    """(bytes written via write calls, write calls) of ``pid``."""
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(io["wchar"]), int(io["syscw"])


def run_agent(bootstrap_dir: Path, seconds: float, label: str, util: int | None = 37) -> dict:
    """Run the agent in ``bootstrap_dir`` for ``seconds`` with the GPU at ``util`` percent.

    37: a job at work, the SSH scan skipped; 0: an idle GPU, /proc scanned every sample;
    ``util=None``: the machine's own nvidia-smi (on a GPU box), no stand-in."""
    tmp = Path(tempfile.mkdtemp(prefix="gpuops-bench-agent-"))
    try:
        root = tmp / "box"
        (root / ".gpuops" / "run").mkdir(parents=True)
        shutil.copytree(bootstrap_dir, root / ".gpuops" / "onbox")
        bindir = tmp / "bin"
        bindir.mkdir()
        if util is not None:
            (bindir / "nvidia-smi").write_text(SMI % util)
            (bindir / "nvidia-smi").chmod(0o755)
        (root / ".gpuops" / "bootstrap.pid").write_text("999999\n")  # a bootstrap that ended long ago
        (root / ".gpuops" / "run" / "job.log").write_text("")  # the job runs
        now = time.time()
        cfg = {
            "session": "bench",
            "provider": "local",
            "instance_id": "bench",
            "root": str(root),
            "run_dir": ".gpuops/run",
            "bootstrap_pidfile": ".gpuops/bootstrap.pid",
            "started_at": now,
            "armed_at": now,
            "max_hours": 10.0,
            "usd_per_hour": 1.0,
            "gpu_source": "nvidia-smi",
            "destroy": {"kind": "local"},
            "teardown": {
                "max_hours": 10.0,
                "idle_minutes": "off",
                "idle_util_percent": 5.0,
                "sample_seconds": 1.0,
                "job_end_grace_seconds": 30.0,
                "kill_grace_seconds": 1.0,
                "max_session_usd": None,
            },
        }
        (root / ".gpuops" / "agent.json").write_text(json.dumps(cfg))
        env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", GPUOPS_LOCAL_BOX=str(root))
        log = open(root / ".gpuops" / "agent.log", "ab")
        sup = subprocess.Popen(
            [sys.executable, ".gpuops/onbox/agent.py", "--config", ".gpuops/agent.json"],
            cwd=root,
            env=env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        status = root / ".gpuops" / "agent-status.json"
        deadline = time.monotonic() + 30
        worker = None
        while time.monotonic() < deadline and worker is None:
            try:
                worker = json.loads(status.read_text())["pid"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        if worker is None:
            raise SystemExit(f"{label}: the agent wrote no status in 30 s; see {root}/.gpuops/agent.log")
        time.sleep(3)  # past start-up (imports, first samples)
        pids = {"supervisor": sup.pid, "worker": worker}
        before = {k: (proc_cpu(p), proc_io(p), proc_oncpu_s(p)) for k, p in pids.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        dt = time.monotonic() - t0
        after = {k: (proc_cpu(p), proc_io(p), proc_oncpu_s(p)) for k, p in pids.items()}
        rss = {k: proc_rss_mib(p) for k, p in pids.items()}
        out = {"label": label, "util": util, "seconds": round(dt, 1), "status_bytes": status.stat().st_size}
        for k in pids:
            (c0, ch0), (w0, n0), ns0 = before[k]
            (c1, ch1), (w1, n1), ns1 = after[k]
            precise = None if ns0 is None or ns1 is None else round((ns1 - ns0) * 60 / dt, 4)
            out[k] = {
                "cpu_s_per_min": round((c1 - c0) * 60 / dt, 3),
                "oncpu_s_per_min": precise,
                "children_cpu_s_per_min": round((ch1 - ch0) * 60 / dt, 3),
                "rss_mib": round(rss[k], 1),
                "bytes_written_per_min": int((w1 - w0) * 60 / dt),
                "write_calls_per_min": int((n1 - n0) * 60 / dt),
            }
        os.killpg(sup.pid, signal.SIGTERM)
        try:
            sup.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
        log.close()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def baseline_dir(ref: str) -> Path:
    """A copy of ``onbox/`` at git ref ``ref`` (or of the directory ``ref`` names)."""
    d = Path(tempfile.mkdtemp(prefix="gpuops-bench-baseline-"))
    if Path(ref).is_dir():
        shutil.copytree(ref, d / "onbox")
        return d / "onbox"
    tar = subprocess.run(["git", "-C", str(REPO), "archive", ref, "onbox"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(d)], input=tar, check=True)
    return d / "onbox"


def show(results: list[dict]) -> None:
    print(
        f"agent at 1 s samples, {results[0]['seconds']:.0f} s measured (targets: <= 0.1 s CPU/min, <= 15 MiB RSS per process)"
    )
    head = f"{'':34}" + "".join(f"{r['label']:>16}" for r in results)
    print(head)
    rows = [("status file, bytes", lambda r: r["status_bytes"])]
    for proc in ("worker", "supervisor"):
        rows += [
            (f"{proc}: CPU s/min (ticks)", lambda r, p=proc: r[p]["cpu_s_per_min"]),
            (f"{proc}: CPU s/min (schedstat)", lambda r, p=proc: r[p]["oncpu_s_per_min"]),
            (f"{proc}: children CPU s/min", lambda r, p=proc: r[p]["children_cpu_s_per_min"]),
            (f"{proc}: RSS MiB", lambda r, p=proc: r[p]["rss_mib"]),
            (f"{proc}: bytes written/min", lambda r, p=proc: r[p]["bytes_written_per_min"]),
            (f"{proc}: write calls/min", lambda r, p=proc: r[p]["write_calls_per_min"]),
        ]
    rows += [
        (
            "agent total CPU s/min (schedstat)",
            lambda r: (
                None
                if r["worker"]["oncpu_s_per_min"] is None
                else round(r["worker"]["oncpu_s_per_min"] + r["supervisor"]["oncpu_s_per_min"], 4)
            ),
        )
    ]
    for name, get in rows:
        print(f"{name:34}" + "".join(f"{get(r):>16}" for r in results))
    for base in results:  # each baseline against this checkout's run of the same GPU load
        other = next(
            (
                r
                for r in results
                if r["util"] == base["util"] and r["label"] != base["label"] and r["label"] in CHECKOUT_LABELS
            ),
            None,
        )
        if base["label"] in CHECKOUT_LABELS or other is None:
            continue
        for k in ("cpu_s_per_min", "oncpu_s_per_min", "bytes_written_per_min"):
            if base["worker"][k] and other["worker"][k] is not None:
                print(f"{other['label']}: worker {k} {other['worker'][k] / base['worker'][k]:.2f} x {base['label']}")


CHECKOUT_LABELS = ("this checkout", "idle GPU", "real nvidia-smi")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument(
        "--baseline", default="", help="git ref (or directory) whose onbox/agent.py to run the same way (e.g. main)"
    )
    p.add_argument(
        "--real-smi", action="store_true", help="on a GPU box: the machine's nvidia-smi, no stand-in (one run each)"
    )
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    loads = [(None, "real nvidia-smi")] if a.real_smi else [(37, "this checkout"), (0, "idle GPU")]
    results = []
    if a.baseline:
        d = baseline_dir(a.baseline)
        try:
            for util, label in loads:
                results.append(run_agent(d, a.seconds, a.baseline if util == 37 else f"{a.baseline}, {label}", util))
        finally:
            shutil.rmtree(d.parent, ignore_errors=True)
    for util, label in loads:
        results.append(run_agent(REPO / "onbox", a.seconds, label, util))
    if a.json:
        print(json.dumps(results))
    else:
        show(results)


if __name__ == "__main__":
    main()
