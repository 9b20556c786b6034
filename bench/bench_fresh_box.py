"""A fresh box end to end on this machine, cold and warm, against the seeds' five minutes (not a test).

    .venv/bin/python bench/bench_fresh_box.py [--weights-mb 256] [--rate-mbps 1000] [--packages 40] [--kb 200]
                                              [--model llama-3-8b]

Plays what `up` runs on a new box, with the real runner (bootstrap/bootstrap.py) in its own
process: ``system`` (a stand-in nvidia-smi), ``deps`` (uv into a new venv from a local wheelhouse
of ``--packages`` wheels of ``--kb`` KiB built by tests/support/wheels.py), ``code`` (git clone of
a local repository), ``weights`` (huggingface_hub's snapshot_download from the stand-in hub on
127.0.0.1, its file bodies paced to ``--rate-mbps`` megabits per second = 10^6 bit/s, a model of
``--weights-mb`` MB), ``verify`` (torch when present; else it reports none). Each step's seconds and
the total are printed for:

- cold: a new box and an empty volume (every cache empty: uv's, the HF cache);
- warm: a new box (new session dir, new venv, no runner state) on the same volume: uv installs from
  its cache, the weights step skips (the pinned revision is complete in the cache).

Then the weights step is projected to ``--model``'s real size at the same rate (the download time
scales with bytes; the other steps do not), against the Day 21 target of 300 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support import fake_nvidia_smi  # noqa: E402
from tests.support.hub_faults import FaultyHub  # noqa: E402
from tests.support.servers import make_repo  # noqa: E402
from tests.support.wheels import make_wheel  # noqa: E402

RUNNER = REPO / "bootstrap" / "bootstrap.py"
PY = sys.executable
TARGET_S = 300.0  # seeds, Day 21: boot to running GPU code in at most five minutes


def box(name: str, base: Path, volume: Path, config: dict, env: dict) -> tuple[float, list[dict]]:
    """Run the runner in a new session dir on ``volume``; (wall seconds, step lines)."""
    work = base / name
    work.mkdir()
    cfg = work / "bootstrap.json"
    cfg.write_text(json.dumps(dict(config, cache_dir=str(volume / ".cache/gpuops"))))
    t0 = time.perf_counter()
    p = subprocess.run([PY, str(RUNNER), "--config", str(cfg), "--state-dir", str(work / ".gpuops/bootstrap-state")], cwd=work, env=env,
                       capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"bootstrap failed on {name}: {p.stdout}\n{p.stderr[-2000:]}")
    return secs, [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights-mb", type=int, default=256, help="model size served by the stand-in hub, MB (10^6 B)")
    ap.add_argument("--rate-mbps", type=float, default=1000.0, help="download rate cap, megabits/s (10^6 bit/s)")
    ap.add_argument("--packages", type=int, default=40)
    ap.add_argument("--kb", type=int, default=200)
    ap.add_argument("--model", default="llama-3-8b", help="built-in model whose real size the weights step is projected to")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gpuops-fresh-box-"))
    try:
        run(a, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(a, base: Path) -> None:
    smi = base / "bin"
    fake_nvidia_smi.install(smi)
    wh = base / "wheelhouse"
    names = [f"gpuops_bench_{i:03d}" for i in range(a.packages)]
    for i, n in enumerate(names):
        make_wheel(wh, n, "1.0", requires=[names[i + 1]] if i + 1 < len(names) else [], payload_bytes=a.kb * 1024)
    repo = base / "repo"
    make_repo(repo, {"train.py": "print('train')\n", "README.md": "bench\n"})
    weights = os.urandom(a.weights_mb * 10**6)
    with FaultyHub(rate_bytes_s=a.rate_mbps * 1e6 / 8) as hub:
        sha = hub.add_repo("gpuops-bench/model", {"config.json": {"model_type": "llama"}, "model.safetensors": weights,
                                                   "tokenizer.json": {"v": 1}})
        env = {"PATH": f"{smi}:{Path(PY).parent}:/usr/bin:/bin", "HOME": str(base / "home"), "LANG": "C.UTF-8",
               "HF_ENDPOINT": hub.endpoint}
        steps = [
            {"name": "system", "kind": "system"},
            {"name": "deps", "kind": "deps", "installer": "uv", "packages": [names[0]], "wheelhouse": str(wh), "venv": "venv"},
            {"name": "code", "kind": "code", "repo": str(repo), "dest": "code"},
            {"name": "weights", "kind": "weights", "source": f"hf://gpuops-bench/model@{sha}", "allow_patterns": ["*.json", "*.safetensors"],
             "python": PY},  # the bench venv has huggingface_hub; a real box gets it from deps
            {"name": "verify", "kind": "verify"},
        ]
        volume = base / "volume"
        cold_s, cold = box("cold-box", base, volume, {"steps": steps}, env)
        warm_s, warm = box("warm-box", base, volume, {"steps": steps}, env)

    def secs(lines, name):
        return next((ln["seconds"], ln["status"]) for ln in lines if ln.get("step") == name)

    print(f"fresh box, {a.packages} wheels x {a.kb} KiB, weights {a.weights_mb} MB at {a.rate_mbps:g} Mbit/s "
          f"(stand-in hub on 127.0.0.1; runner wall time includes python start-up)")
    print(f"{'step':<10}{'cold s':>10}{'':>10}{'warm s':>10}")
    for st in steps:
        (c, cs), (w, ws) = secs(cold, st["name"]), secs(warm, st["name"])
        print(f"{st['name']:<10}{c:>10.2f}{cs:>10}{w:>10.2f} {ws}")
    print(f"{'total':<10}{cold_s:>10.2f}{'':>10}{warm_s:>10.2f}")
    print(f"vs the 5-minute target ({TARGET_S:.0f} s): cold {cold_s / TARGET_S:.1%}, warm {warm_s / TARGET_S:.1%} of it")
    wd = next(ln["detail"] for ln in cold if ln.get("step") == "weights")
    from gpuops.planning import sizing as planner
    from gpuops.planning.models import load_model

    src = load_model(a.model)
    real = int(src.weights_total_size or planner.plan(src).weights_bytes)
    rate = a.rate_mbps * 1e6 / 8  # bytes/s, the stated cap
    eff = wd["bytes"] / wd["seconds"]  # bytes/s as measured here (start-up, hashing, the stand-in hub's own speed)
    other = cold_s - secs(cold, "weights")[0]
    print(f"weights step: {wd['bytes'] / 1e6:.0f} MB in {wd['seconds']:.2f} s = {eff * 8 / 1e6:.0f} Mbit/s effective "
          f"(cap {a.rate_mbps:g} Mbit/s; the rest is python + huggingface_hub start-up, hashing and the stand-in hub's own speed)")
    for label, r in ((f"at the {a.rate_mbps:g} Mbit/s cap", rate), (f"at the {eff * 8 / 1e6:.0f} Mbit/s measured here", eff)):
        proj = real / r
        print(f"projected {a.model} ({real / 1e9:.1f} GB) {label}: weights {proj:.0f} s, cold box ~{other + proj:.0f} s "
              f"= {(other + proj) / TARGET_S:.2f}x the 5-minute target")
    print(f"warm box (weights and uv cache on the volume): {warm_s:.1f} s = {warm_s / TARGET_S:.3f}x the target")

if __name__ == "__main__":
    main()
