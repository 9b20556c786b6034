"""Benchmark onbox/bootstrap.py (not a test; prints numbers, never fails on them).

    .venv/bin/python bench/bench_bootstrap.py [--packages 40] [--kb 200] [--repeat 3]

Measures, each as the median of ``--repeat`` runs, wall seconds of the whole ``python3
bootstrap.py`` process:

1. First run of a ``deps`` step from a local wheelhouse (``--packages`` synthetic pure-Python
   wheels of ``--kb`` KiB each, in a dependency chain), cold installer cache, with pip and with
   uv: (a) the step as configured (creates the venv: ``python -m venv`` for pip, ``uv venv``
   for uv), (b) install only, into a venv made beforehand. Ratio pip/uv.
2. Re-run with nothing changed of a full config (system with a stand-in nvidia-smi, secrets,
   deps, code from a local git repo, weights from file://, three run steps).
3. Runner overhead per step, on the runner's own clock (its ``total_seconds``): N ``run`` steps
   of ``true`` vs. N direct ``subprocess.run("true", shell=True)`` calls; and N skipped steps.
   Plus the runner's start-up (python3 + an empty config), measured from outside.
4. Over real SSH (OpenSSH on 127.0.0.1, so no network latency): connect (TCP + key exchange +
   auth + pin), one ``true``, and ``run_bootstrap_plan`` (ship runner + config, run) with nothing changed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuops.emulators import nvidia_smi as fake_nvidia_smi  # noqa: E402
from tests.support.servers import make_repo  # noqa: E402
from tests.support.wheels import make_wheel  # noqa: E402

RUNNER = REPO / "onbox" / "bootstrap.py"
PY = sys.executable
UV = shutil.which("uv") or str(Path(PY).parent / "uv")


def run_runner(config: dict, work: Path, env: dict) -> tuple[float, list[dict]]:
    cfg = work / "bootstrap.json"
    cfg.write_text(json.dumps(config))
    t0 = time.perf_counter()
    p = subprocess.run(
        [PY, str(RUNNER), "--config", str(cfg), "--state-dir", str(work / "state")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"bootstrap failed: {p.stdout}\n{p.stderr[-2000:]}")
    return secs, [json.loads(x) for x in p.stdout.splitlines()]


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def ssh_numbers(base: Path, repeat: int) -> dict:
    from gpuops.agent.bootstrap_config import build_bootstrap_plan, run_bootstrap_plan
    from gpuops.box.ssh import HostKeyPins, SSHBox, ensure_ssh_key
    from gpuops.config import settings_from
    from gpuops.emulators.sshd import SshServer

    server = SshServer(base / "sshd", extra_path=[base / "bin"])
    key, pub = ensure_ssh_key(base / "data")
    server.authorize(pub)
    server.start()
    try:
        connects, runs, reruns = [], [], []
        settings = settings_from({"bootstrap": {"commands": ["true"], "verify": False}})
        plan = build_bootstrap_plan(settings, environ={})
        for i in range(repeat):
            t0 = time.perf_counter()
            box = SSHBox(
                server.host,
                server.port,
                server.user,
                key_path=key,
                pins=HostKeyPins(base / "data" / "known_hosts"),
                pin_name="bench/1",
                root="gpuops/bench",
            ).connect(time.monotonic() + 10)
            connects.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            box.run("true", timeout=10)
            runs.append(time.perf_counter() - t0)
            if i == 0:
                run_bootstrap_plan(box, plan)
            t0 = time.perf_counter()
            res = run_bootstrap_plan(box, plan)
            reruns.append(time.perf_counter() - t0)
            assert res.rc == 0
            box.close()
    finally:
        server.stop()
        server.end_box_processes()
    return {
        "ssh_connect_s": round(median(connects), 3),
        "ssh_run_true_s": round(median(runs), 3),
        "ssh_ship_and_rerun_unchanged_s": round(median(reruns), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", type=int, default=40)
    ap.add_argument("--kb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gpuops-bench-"))
    smi = base / "bin"
    fake_nvidia_smi.install(smi)
    env = {
        "PATH": f"{smi}:{Path(PY).parent}:/usr/bin:/bin",
        "HOME": str(base / "home"),
        "HF_TOKEN": "hf_bench_token_123456",
        "LANG": "C.UTF-8",
    }
    wh = base / "wheelhouse"
    names = [f"gpuops_bench_{i:03d}" for i in range(a.packages)]
    for i, n in enumerate(names):
        make_wheel(wh, n, "1.0", requires=[names[i + 1]] if i + 1 < len(names) else [], payload_bytes=a.kb * 1024)
    out: dict = {"packages": a.packages, "kb_per_package": a.kb, "python": sys.version.split()[0]}

    # 1. first run from the wheelhouse, cold cache
    for installer in ("pip", "uv"):
        full, only = [], []
        for r in range(a.repeat):
            work = base / f"{installer}-full-{r}"
            work.mkdir()
            step = {
                "name": "deps",
                "kind": "deps",
                "installer": installer,
                "packages": [names[0]],
                "wheelhouse": str(wh),
                "venv": "venv",
                "cache_dir": str(work / "cache"),
            }
            full.append(run_runner({"steps": [step]}, work, env)[0])
            work2 = base / f"{installer}-only-{r}"
            work2.mkdir()
            subprocess.run([PY, "-m", "venv", str(work2 / "venv")], check=True)
            step = dict(step, venv="", python=str(work2 / "venv" / "bin" / "python"), cache_dir=str(work2 / "cache"))
            step.pop("venv")
            only.append(run_runner({"steps": [step]}, work2, env)[0])
        out[f"first_run_{installer}_with_venv_s"] = round(median(full), 3)
        out[f"first_run_{installer}_install_only_s"] = round(median(only), 3)
    out["pip_over_uv_with_venv"] = round(out["first_run_pip_with_venv_s"] / out["first_run_uv_with_venv_s"], 1)
    out["pip_over_uv_install_only"] = round(out["first_run_pip_install_only_s"] / out["first_run_uv_install_only_s"], 1)

    # 2. re-run with nothing changed
    work = base / "rerun"
    work.mkdir()
    repo = base / "repo"
    make_repo(repo, {"train.py": "print(1)\n"})
    wfile = base / "weights.bin"
    wfile.write_bytes(os.urandom(64 << 20))
    cfg = {
        "steps": [
            {"name": "system", "kind": "system"},
            {"name": "secrets", "kind": "secrets", "env": ["HF_TOKEN"]},
            {
                "name": "deps",
                "kind": "deps",
                "installer": "uv",
                "packages": [names[0]],
                "wheelhouse": str(wh),
                "venv": "venv",
            },
            {"name": "code", "kind": "code", "repo": str(repo), "ref": "main"},
            {"name": "weights", "kind": "weights", "source": f"file://{wfile}", "dest": "weights"},
            {"name": "verify", "kind": "verify"},
            {"name": "a", "kind": "run", "command": "true"},
            {"name": "b", "kind": "run", "command": "true"},
            {"name": "c", "kind": "run", "command": "true"},
        ]
    }
    first, lines = run_runner(cfg, work, env)
    out["full_config_first_run_s"] = round(first, 3)
    out["full_config_first_run_slowest"] = lines[-1]["slowest"]
    warm = [run_runner(cfg, work, env) for _ in range(max(5, a.repeat))]
    reruns = [w[0] for w in warm]
    out["rerun_unchanged_s"] = round(median(reruns), 3)
    out["rerun_unchanged_max_s"] = round(max(reruns), 3)
    # Where a warm re-run's time goes: each step's seconds on the runner's clock (median), the
    # runner's own total (its summary line), and the rest of the process's wall (interpreter start-up).
    per_step: dict[str, list[float]] = {}
    for _, lines in warm:
        for line in lines:
            if "step" in line and line.get("status") in ("done", "skipped"):
                per_step.setdefault(line["step"], []).append(float(line.get("seconds") or 0.0))
    out["rerun_step_s"] = {k: round(median(v), 3) for k, v in per_step.items()}
    out["rerun_slowest_step"] = max(out["rerun_step_s"], key=out["rerun_step_s"].get)
    runner_total = median([float(lines[-1].get("total_seconds") or 0.0) for _, lines in warm])
    out["rerun_runner_total_s"] = round(runner_total, 3)
    out["rerun_outside_runner_s"] = round(median(reruns) - runner_total, 3)
    out["load_1min"] = round(os.getloadavg()[0], 2)
    out["runner_start_empty_config_s"] = round(median([run_runner({"steps": []}, work, env)[0] for _ in range(5)]), 3)

    # 3. per-step overhead
    n = a.steps
    work = base / "overhead"
    work.mkdir()
    steps = [{"name": f"s{i}", "kind": "run", "command": "true", "always": True} for i in range(n)]
    # the runner's own clock (its summary line), so interpreter start-up is not counted
    through = median([run_runner({"steps": steps}, work, env)[1][-1]["total_seconds"] for _ in range(a.repeat)])
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run("true", shell=True, check=True)
    direct = time.perf_counter() - t0
    out["per_step_overhead_ms"] = round((through - direct) / n * 1000, 2)
    out["direct_true_ms"] = round(direct / n * 1000, 2)
    skipped_steps = [{"name": f"k{i}", "kind": "run", "command": "true"} for i in range(n)]
    run_runner({"steps": skipped_steps}, work, env)
    skipped = median([run_runner({"steps": skipped_steps}, work, env)[1][-1]["total_seconds"] for _ in range(a.repeat)])
    out["per_skipped_step_ms"] = round(skipped / n * 1000, 3)

    # 4. the same over real SSH (an sshd on 127.0.0.1): connect, one command, ship + unchanged re-run
    out.update(ssh_numbers(base, a.repeat))

    shutil.rmtree(base, ignore_errors=True)
    width = max(len(k) for k in out)
    for k, v in out.items():
        print(f"{k:<{width}}  {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
