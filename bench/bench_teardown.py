"""Teardown benchmark on the local provider (no network, stand-in nvidia-smi).

1. seconds billed after the job exits, laptop alive: a real `gpuops up` whose job sleeps 1 s;
   billed after exit = the box's confirmed destroy time - the job's exit time (jobwrap's
   ``exit_code``), and the ledger's booked end - exit (per-second billing rounds up); once on the
   local provider, once on the Vast.ai emulator with the box a real sshd (SSH log polling, the
   destroy call over HTTP);
2. the same with the laptop gone: `gpuops up` is SIGKILLed while the job runs, the on-box agent
   destroys after ``job_end_grace_seconds``; reported as grace + overhead;
3. idle destroy: the stand-in GPU drops from 90 % to 0 % at t0 (the job keeps running); the
   delay between the idle window's end (t0 + window) and the agent's destroy call, against the
   sample interval.

Targets: <= 5 s billed after job exit with the laptop alive; idle destroy within one
sample interval of the window. Usage: ``PYTHONPATH=. python bench/bench_teardown.py [--runs 3]
[--json]``. Never a pass/fail test: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchenv import local_env  # noqa: E402

SMI = """#!/bin/sh
d="$(dirname "$0")"
cat "$d/smi.out" 2>/dev/null
exit 0
"""


def setup(tmp: Path) -> dict:
    """``benchenv.local_env`` with the stand-in nvidia-smi this bench scripts (``set_util``) and an SSH user of its own."""
    env = local_env(tmp, REPO, smi=SMI)
    set_util(tmp / "bin", 90)
    env["GPUOPS_AGENT_SSH_USERS"] = "gpuops-bench-" + secrets.token_hex(3)
    return env


def set_util(bindir: Path, pct: float) -> None:
    tmp = bindir / "smi.out.tmp"
    tmp.write_text(f"0, {pct:g}, 40000, 81920\n")
    os.replace(tmp, bindir / "smi.out")


def _boxes(env: dict) -> Path:
    return Path(env["GPUOPS_DATA_DIR"]) / "boxes"


def _wait(pred, timeout: float):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise TimeoutError("benchmark step did not finish in time")


def after_exit(env: dict, tmp: Path, laptop_alive: bool, grace: float) -> dict:
    """One `up` run; seconds from the job's exit to the confirmed destroy (and to the booked end)."""
    job = tmp / "job.sh"
    job.write_text("sleep 1\n")
    e = dict(
        env,
        GPUOPS_TEARDOWN_SAMPLE_SECONDS="1",
        GPUOPS_TEARDOWN_JOB_END_GRACE_SECONDS=str(grace),
        GPUOPS_TEARDOWN_IDLE_MINUTES="off",
    )
    before = set(_boxes(env).glob("gpuops-*")) if _boxes(env).exists() else set()
    p = subprocess.Popen(
        [sys.executable, "-m", "gpuops", "up", "--job", str(job), "--json"],
        env=e,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    box = _wait(
        lambda: next(iter(set(_boxes(env).glob("gpuops-*")) - before), None) if _boxes(env).exists() else None, 60
    )
    if laptop_alive:
        p.wait(timeout=120)
    else:
        _wait(lambda: (box / ".gpuops" / "run" / "job.pid").exists(), 60)
        p.kill()  # the laptop is gone while the job runs
        p.wait()
    _wait(lambda: (box / "destroyed.json").exists(), 120)
    job_end = float((box / ".gpuops" / "run" / "exit_code").read_text().split()[2])
    destroyed = json.loads((box / "destroyed.json").read_text())
    out = {"after_exit_s": round(destroyed["destroyed_at"] - job_end, 3), "by": destroyed.get("by", "laptop")}
    if laptop_alive:
        from ledger.store import Ledger

        row = Ledger(env["GPUOPS_LEDGER_URL"]).get(box.name[len("gpuops-") :])
        out["booked_after_exit_s"] = round(row.instance_created_at + row.billed_seconds - job_end, 3)
    return out


def after_exit_ssh(env: dict, tmp: Path, runs: int) -> list[float]:
    """`gpuops up --provider vast` against the Vast.ai emulator, the box a real sshd on 127.0.0.1.

    Seconds from the job's exit (on the box) to the emulator's destroy (billing stops), laptop
    alive."""
    from gpuops.box.ssh import ensure_ssh_key
    from gpuops.emulators import nvidia_smi as fake_nvidia_smi
    from gpuops.emulators.sshd import SshServer
    from tests.emulators import VastEmulator

    smi = tmp / "ssh-smi"
    fake_nvidia_smi.install(smi)
    sshd = SshServer(tmp / "sshd", extra_path=[smi])
    sshd.authorize(ensure_ssh_key(Path(env["GPUOPS_DATA_DIR"]))[1])
    sshd.start()
    out = []
    try:
        job = tmp / "job.sh"
        job.write_text("sleep 1\n")
        for _ in range(runs):
            emu = VastEmulator().start()  # a fresh market each run: a rented offer leaves the market
            emu.market.ssh_endpoint = (sshd.host, sshd.port)
            e = dict(env, VAST_API_KEY=emu.market.api_key, VAST_URL=emu.url, GPUOPS_TEARDOWN_SAMPLE_SECONDS="1")
            try:
                r = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "gpuops",
                        "up",
                        "--job",
                        str(job),
                        "--provider",
                        "vast",
                        "--card",
                        "rtx-4090",
                        "--json",
                    ],
                    env=e,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    timeout=300,
                )
                if r.returncode != 0:
                    raise RuntimeError(r.stderr[-2000:])
                inst = max(emu.market.instances.values(), key=lambda i: int(i.id))
            finally:
                emu.stop()
            code = (sshd.home / "gpuops" / inst.label / ".gpuops" / "run" / "exit_code").read_text().split()
            out.append(round(inst.ended_t - float(code[2]), 3))
    finally:
        sshd.stop()
        sshd.end_box_processes()
    return out


def idle_delay(env: dict, window_s: float, sample_s: float) -> dict:
    """Agent on a local box whose job holds the GPU; the GPU goes to 0 % at t0."""
    os.environ.update(env)
    from tests.teardown.rig import Rig

    bindir = Path(env["PATH"].split(os.pathsep)[0])
    set_util(bindir, 90)
    r = Rig({"sample_seconds": sample_s, "idle_minutes": window_s / 60.0, "job_end_grace_seconds": 30}, price=2.0)
    r.intent()
    r.create()
    r.arm()
    r.job("sleep 600")
    _wait(r.status, 30)
    time.sleep(1.0 + random.uniform(0, sample_s))  # a random phase against the sample grid
    t0 = time.time()
    set_util(bindir, 0)
    _wait(r.gone, window_s + 10 * sample_s + 30)
    st = r.status()
    if not st.get("destroy"):
        raise RuntimeError(
            "box gone without an agent destroy: %s %s"
            % (
                (Path(r.box.root) / "destroyed.json").read_text(),
                (Path(r.box.root) / ".gpuops" / "agent.log").read_text()[-2000:],
            )
        )
    return {
        "window_s": window_s,
        "sample_s": sample_s,
        "destroy_call_after_window_end_s": round(st["destroy"]["requested_at"] - (t0 + window_s), 3),
        "destroyed_after_window_end_s": round(r.destroyed_at() - (t0 + window_s), 3),
        "reason": st["destroy"]["reason"],
    }


def summarize(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 3), "max": round(max(xs), 3), "min": round(min(xs), 3), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--grace", type=float, default=2.0, help="job_end_grace_seconds for the laptop-gone runs")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="gpuops-bench-") as d:
        tmp = Path(d)
        env = setup(tmp)
        alive = [after_exit(env, tmp, True, grace=30.0) for _ in range(a.runs)]
        gone = [after_exit(env, tmp, False, grace=a.grace) for _ in range(a.runs)]
        res["laptop_alive"] = {
            "after_exit_s": summarize([x["after_exit_s"] for x in alive]),
            "booked_after_exit_s": summarize([x["booked_after_exit_s"] for x in alive]),
            "destroyed_by": sorted({x["by"] for x in alive}),
            "target_s": 5.0,
        }
        ssh = after_exit_ssh(env, tmp, a.runs)
        res["laptop_alive_ssh_vast_emulator"] = {"after_exit_s": summarize(ssh), "target_s": 5.0}
        res["laptop_gone"] = {
            "grace_s": a.grace,
            "after_exit_s": summarize([x["after_exit_s"] for x in gone]),
            "overhead_over_grace_s": summarize([x["after_exit_s"] - a.grace for x in gone]),
            "destroyed_by": sorted({x["by"] for x in gone}),
        }
        idle = []
        for window, sample in ((3.0, 0.5), (3.0, 1.0), (5.0, 2.0), (4.5, 2.0)):
            for _ in range(a.runs):
                idle.append(idle_delay(env, window, sample))
        res["idle"] = []
        for window, sample in sorted({(x["window_s"], x["sample_s"]) for x in idle}):
            xs = [x for x in idle if (x["window_s"], x["sample_s"]) == (window, sample)]
            res["idle"].append(
                {
                    "window_s": window,
                    "sample_s": sample,
                    "reasons": sorted({x["reason"] for x in xs}),
                    "destroy_call_after_window_end_s": summarize([x["destroy_call_after_window_end_s"] for x in xs]),
                    "destroyed_after_window_end_s": summarize([x["destroyed_after_window_end_s"] for x in xs]),
                    "target_s": sample,
                }
            )
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    la, lg = res["laptop_alive"], res["laptop_gone"]
    print(
        f"billed after job exit, laptop alive: median {la['after_exit_s']['median']:.3f} s, max {la['after_exit_s']['max']:.3f} s "
        f"(booked, per-second rounding: max {la['booked_after_exit_s']['max']:.3f} s; target <= 5 s; n={la['after_exit_s']['n']})"
    )
    ls = res["laptop_alive_ssh_vast_emulator"]["after_exit_s"]
    print(
        f"billed after job exit, laptop alive, SSH box + emulated Vast: median {ls['median']:.3f} s, max {ls['max']:.3f} s "
        f"(target <= 5 s; n={ls['n']})"
    )
    print(
        f"billed after job exit, laptop gone (agent, grace {lg['grace_s']:g} s): median {lg['after_exit_s']['median']:.3f} s, "
        f"max {lg['after_exit_s']['max']:.3f} s = grace + {lg['overhead_over_grace_s']['max']:.3f} s at most"
    )
    for row in res["idle"]:
        c = row["destroy_call_after_window_end_s"]
        dd = row["destroyed_after_window_end_s"]
        print(
            f"idle window {row['window_s']:g} s, sample {row['sample_s']:g} s: destroy call {c['median']:.3f} s after the window "
            f"(max {c['max']:.3f} s; target <= {row['sample_s']:g} s); box gone {dd['max']:.3f} s after at most"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
