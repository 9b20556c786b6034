"""What `gpuops sweep` adds, on the local provider and a real PostgreSQL (tests/support/postgres.py).

1. Executor overhead per job: ``gpuops sweep FILE`` of N jobs (K = 1, each the same
   ``sleep S`` job) beside N x ``gpuops up --job`` of that job, alternating run by run after one
   untimed warm-up of each; per job = sweep wall / N against up wall (what the sweep's enqueue, the
   dry-run checks of every job before anything is rented, the claim and the child add).
2. Claim time with 1,000 queued jobs on PostgreSQL: ``ledger.sweeps.claim`` (the sweep row locked,
   its held jobs counted, ``FOR UPDATE SKIP LOCKED`` over the queue, the claim written) beside a
   bare ``SELECT ... FOR UPDATE SKIP LOCKED`` claim (select and update, one transaction) run by
   ``psql`` over one connection, M claims each, alternating rounds; the queue reset between rounds.

The machine's load (1-minute average) is printed beside each figure. Targets: overhead per job
<= 1.5 s (the dry-run plan of a job plus a second interpreter's start-up); a claim <= 10 ms (four
round trips: BEGIN, the sweep's row locked with its held jobs counted, one UPDATE ... WHERE id =
(SELECT ... FOR UPDATE SKIP LOCKED) RETURNING, COMMIT), printed beside the bare claim's time.
Never a pass/fail test: it prints figures.

    PYTHONPATH=. python bench/bench_sweep.py [--runs 3] [--jobs 3] [--job-seconds 2] [--claims 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.benchenv import local_env  # noqa: E402  the same environment as `up`'s own bench


def _load() -> float:
    return os.getloadavg()[0]


def overhead(tmp: Path, runs: int, jobs: int, job_s: float) -> dict:
    env = local_env(tmp, REPO)
    env.update({"GPUOPS_TEARDOWN_IDLE_MINUTES": "off", "GPUOPS_TEARDOWN_KILL_GRACE_SECONDS": "0.5"})
    job = tmp / "job.sh"
    job.write_text(f"#!/usr/bin/env bash\nsleep {job_s:g}\n")
    sweep = tmp / "sweep.toml"
    seeds = ", ".join(f'"{i}"' for i in range(jobs))
    sweep.write_text(
        f'run = "job.sh"\nmax_parallel = 1\n[limits]\nmax_hours = 0.5\n[matrix]\nenv = {{ SEED = [{seeds}] }}\n'
    )
    up_cmd = [sys.executable, "-m", "gpuops", "up", "--job", str(job), "--max-hours", "0.5"]
    sweep_cmd = [sys.executable, "-m", "gpuops", "sweep", str(sweep)]

    def wall(cmd: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
        return time.perf_counter() - t0

    wall(up_cmd), wall(sweep_cmd)  # warm-up: bytecode compiled, the ledger made
    ups, sweeps, loads = [], [], []
    for _ in range(runs):
        ups.append(sum(wall(up_cmd) for _ in range(jobs)) / jobs)
        sweeps.append(wall(sweep_cmd) / jobs)
        loads.append(_load())
    up_s, sweep_s = statistics.median(ups), statistics.median(sweeps)
    return {
        "jobs": jobs,
        "up_s_per_job": round(up_s, 3),
        "sweep_s_per_job": round(sweep_s, 3),
        "overhead_s_per_job": round(sweep_s - up_s, 3),
        "ratio": round(sweep_s / up_s, 3),
        "load": round(statistics.median(loads), 2),
    }


def claims(n_jobs: int, m: int, rounds: int) -> dict:
    from ledger import Ledger, sweeps as queue
    from tests.support.postgres import PostgresServer

    server = PostgresServer().start()
    try:
        url = server.new_database()
        led = Ledger(url)
        queue.enqueue(
            led.engine,
            {"id": "sweep-bench", "name": "b", "status": "open", "created_at": time.time(), "max_parallel": n_jobs},
            [{"seq": i, "name": f"j{i}", "worst_usd": 1.0, "worst_hours": 1.0} for i in range(n_jobs)],
            [],
        )
        dbname = url.rsplit("/", 1)[1]
        psql = str(server.bindir / "psql")
        bare = (
            "BEGIN;\n"
            "UPDATE sweep_jobs SET state = 'claimed', claim_owner = 'psql', claim_expires_at = 9e9 WHERE id = ("
            "SELECT id FROM sweep_jobs WHERE sweep_id = 'sweep-bench' AND state = 'queued' ORDER BY seq LIMIT 1 "
            "FOR UPDATE SKIP LOCKED);\nCOMMIT;\n"
        ) * m
        script = Path(tempfile.mkstemp(suffix=".sql")[1])
        script.write_text(bare)
        reset = "UPDATE sweep_jobs SET state = 'queued', claim_owner = NULL, claim_expires_at = NULL, claims = 0"

        def ours() -> float:
            t0 = time.perf_counter()
            for _ in range(m):
                assert queue.claim(led.engine, "bench", 60, "sweep-bench") is not None
            return (time.perf_counter() - t0) / m

        def theirs() -> float:
            cmd = [psql, "-q", "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres", "-d", dbname]
            t0 = time.perf_counter()
            subprocess.run([*cmd, "-f", str(script)], check=True, capture_output=True, timeout=600)
            total = time.perf_counter() - t0
            t0 = time.perf_counter()
            subprocess.run([*cmd, "-c", "SELECT 1"], check=True, capture_output=True, timeout=60)
            return (total - (time.perf_counter() - t0)) / m  # less psql's own start and connect

        import sqlalchemy as sa

        def do_reset() -> None:
            with led.engine.begin() as c:
                c.execute(sa.text(reset))

        ours_s, bare_s, loads = [], [], []
        for _ in range(rounds):
            do_reset()
            ours_s.append(ours())
            do_reset()
            bare_s.append(theirs())
            loads.append(_load())
        led.engine.dispose()
        script.unlink()
    finally:
        server.stop()
    o, b = statistics.median(ours_s), statistics.median(bare_s)
    return {
        "queued": n_jobs,
        "claims_per_round": m,
        "ours_ms": round(o * 1000, 3),
        "bare_psql_ms": round(b * 1000, 3),
        "ratio": round(o / b, 2),
        "load": round(statistics.median(loads), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--job-seconds", type=float, default=2.0)
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--claims", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out: dict = {}
    if not a.skip_overhead:
        with tempfile.TemporaryDirectory() as tmp:
            out["overhead"] = overhead(Path(tmp), a.runs, a.jobs, a.job_seconds)
    out["claim"] = claims(a.queued, a.claims, a.rounds)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    if "overhead" in out:
        o = out["overhead"]
        print(
            f"executor overhead: sweep {o['sweep_s_per_job']:.2f} s/job vs up {o['up_s_per_job']:.2f} s/job "
            f"({o['jobs']} jobs, K=1): +{o['overhead_s_per_job']:.2f} s/job, ratio {o['ratio']:.2f} "
            f"(target <= +1.5 s) [load {o['load']}]"
        )
    c = out["claim"]
    print(
        f"claim with {c['queued']:,} queued on PostgreSQL: ours {c['ours_ms']:.2f} ms vs bare psql SKIP LOCKED "
        f"{c['bare_psql_ms']:.2f} ms, ratio {c['ratio']:.2f} (target: ours <= 10 ms) [load {c['load']}]"
    )


if __name__ == "__main__":
    main()
