"""What `gpuops up` adds to a job, on the local provider (no network, stand-in nvidia-smi).

1. wall time of ``gpuops up --job sleep5.sh`` (the job file holds ``sleep 5``) beside
   ``sh -c 'sleep 5'``, the floor: the overhead is the difference, the ratio their quotient;
2. the job's end (the wrapper's ``exit_code`` file: when ``sleep`` returned) to the ledger row
   closed (the ``closed`` event, written in the close's transaction);
3. where the rest goes: process start to the intent row (time outside the booked window:
   start-up and imports before the row is written), the intent row to the job's start, the row
   closed to the process gone.

Runs alternate (floor, up, floor, up, ...) after one untimed warm-up of each, so a load that
changes during the run weighs on both. Every run uses compiled bytecode (a private
PYTHONPYCACHEPREFIX, filled by the warm-up), as after a normal install. Targets:
``up`` <= 6.5 s wall (overhead <= 1.5 s over the floor), job end to row closed <= 0.5 s.
``--baseline DIR`` times another checkout in the same runs, alternating with this one (e.g. the
figures before a change); ``--repo DIR`` times another checkout alone.
Never a pass/fail test: it prints figures.

    PYTHONPATH=. python bench/bench_up.py [--runs 5] [--job-seconds 5] [--baseline DIR] [--repo DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchenv import local_env  # noqa: E402  the environment of every run


def floor_once(seconds: float) -> float:
    """Wall seconds of ``sh -c 'sleep N'``."""
    t0 = time.perf_counter()
    subprocess.run(["sh", "-c", f"sleep {seconds:g}"], check=True, timeout=seconds + 60)
    return time.perf_counter() - t0


def up_once(env: dict, job: Path, timeout_s: float) -> dict:
    """Time one ``gpuops up --job JOB`` and read back its moments.

    The summary table and stage lines go to pipes, not a terminal. Returns its wall seconds and the
    spans between the moments read from its box and its row (epoch s, this machine's clock)."""
    t_start = time.time()
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "gpuops", "up", "--job", str(job)],
        env=env,
        cwd=env["PYTHONPATH"],  # -m: the cwd comes first
        capture_output=True,
        timeout=timeout_s,
    )
    wall = time.perf_counter() - t0
    t_gone = time.time()
    if r.returncode != 0:
        raise RuntimeError(f"gpuops up exited {r.returncode}: {r.stderr.decode(errors='replace')[-2000:]}")
    db = sqlite3.connect(env["GPUOPS_LEDGER_URL"][len("sqlite:///") :])
    try:
        sid = db.execute("SELECT id FROM sessions ORDER BY created_at DESC LIMIT 1").fetchone()[0]
    finally:
        db.close()
    code = (
        (Path(env["GPUOPS_DATA_DIR"]) / "boxes" / f"gpuops-{sid}" / ".gpuops" / "run" / "exit_code").read_text().split()
    )
    job_start, job_end = float(code[1]), float(code[2])
    db = sqlite3.connect(env["GPUOPS_LEDGER_URL"][len("sqlite:///") :])
    try:
        intent_at = db.execute("SELECT created_at FROM sessions WHERE id = ?", (sid,)).fetchone()[0]
        closed_at = db.execute(
            "SELECT MAX(at) FROM events WHERE session_id = ? AND kind = 'closed'", (sid,)
        ).fetchone()[0]
    finally:
        db.close()
    return {
        "wall_s": wall,
        "start_to_intent_s": intent_at - t_start,
        "intent_to_job_s": job_start - intent_at,
        "job_s": job_end - job_start,
        "job_end_to_closed_s": closed_at - job_end,
        "closed_to_gone_s": t_gone - closed_at,
    }


def _figures(ups: list[dict], floor: float) -> dict:
    med = {k: statistics.median(u[k] for u in ups) for k in ups[0]}
    return {
        "up_s": round(med["wall_s"], 3),
        "ratio": round(med["wall_s"] / floor, 3),
        "overhead_s": round(med["wall_s"] - floor, 3),
        "overhead_max_s": round(max(u["wall_s"] for u in ups) - floor, 3),
        "job_end_to_closed_max_s": round(max(u["job_end_to_closed_s"] for u in ups), 3),
        **{k: round(v, 3) for k, v in med.items() if k != "wall_s"},
    }


def _print(name: str, f: dict, seconds: float) -> None:
    print(f"  {name}")
    print(
        f"    gpuops up --job            {f['up_s']:7.3f} s   x{f['ratio']:.3f} the floor; overhead {f['overhead_s']:.3f} s "
        f"(max {f['overhead_max_s']:.3f} s)   target <= {seconds + 1.5:g} s wall, overhead <= 1.5 s"
    )
    print(
        f"    job end -> row closed      {f['job_end_to_closed_s']:7.3f} s   (max {f['job_end_to_closed_max_s']:.3f} s)   target <= 0.5 s"
    )
    print(f"    start -> intent row        {f['start_to_intent_s']:7.3f} s   (outside the booked window)")
    print(f"    intent row -> job start    {f['intent_to_job_s']:7.3f} s   (create, ready, arm, bootstrap, job start)")
    print(f"    job itself                 {f['job_s']:7.3f} s")
    print(f"    row closed -> process gone {f['closed_to_gone_s']:7.3f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each (after one warm-up of each)")
    ap.add_argument("--job-seconds", type=float, default=5.0, help="what the job sleeps (s)")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose gpuops is timed")
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout timed in the same runs, alternating (e.g. a worktree of main)",
    )
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    a = ap.parse_args()
    repos = [a.repo.resolve()] + ([a.baseline.resolve()] if a.baseline is not None else [])
    with tempfile.TemporaryDirectory(prefix="gpuops-bench-up-") as d:
        tmp = Path(d)
        envs = []
        for i, repo in enumerate(repos):
            (tmp / str(i)).mkdir()
            envs.append(local_env(tmp / str(i), repo))
        job = tmp / "sleep.sh"
        job.write_text(f"sleep {a.job_seconds:g}\n")
        timeout = a.job_seconds + 300
        floor_once(a.job_seconds)
        for env in envs:
            up_once(env, job, timeout)  # warm-up: bytecode compiled, settings snapshot written
        floors: list[float] = []
        ups: list[list[dict]] = [[] for _ in repos]
        for _ in range(a.runs):
            floors.append(floor_once(a.job_seconds))
            for i, env in enumerate(envs):
                ups[i].append(up_once(env, job, timeout))
    floor = statistics.median(floors)
    figs = {str(repo): _figures(u, floor) for repo, u in zip(repos, ups)}
    out = {"runs": a.runs, "load_1min": os.getloadavg()[0], "floor_s": round(floor, 3), "repos": figs}
    if a.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    print(f"up --job 'sleep {a.job_seconds:g}' on local (median of {a.runs}, load {out['load_1min']:.1f} at the end)")
    print(f"  sh -c 'sleep {a.job_seconds:g}'          {floor:7.3f} s   (floor)")
    for repo, f in figs.items():
        _print(repo, f, a.job_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
