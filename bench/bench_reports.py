"""Benchmark: the books' reports beside their floor, one SQL statement run by the database's shell.

The floor gives the same numbers as one statement run by ``sqlite3`` or ``psql``, in the same run.

    .venv/bin/python bench/bench_reports.py [--sessions 100000,1000000] [--pg-sessions 100000]
                                            [--runs 5] [--no-postgres] [--repo DIR]

- ``ledger experiments`` on its default range (all time), as a table and as ``--json``, on SQLite
  ledgers of ``--sessions`` closed sessions, vs ``sqlite3`` running the same attribution as one
  statement (``bench_scale.attributed_sql``, the window open on both sides): target <= 1.5x;
- ``ledger month`` (table and ``--json``) on PostgreSQL with ``--pg-sessions`` sessions this month
  vs ``psql`` running the month's statement: target <= 1.5x.

Ledgers come from ``bench_scale`` (SQLite files cached under the temp dir; PostgreSQL: the test
suite's throwaway server, loaded by COPY). Never a pass/fail test.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale  # noqa: E402  (handles --repo: the checkout timed)
from bench_scale import attributed_sql, month_start, pg_load, sqlite_ledger  # noqa: E402
from timing import measure  # noqa: E402

TARGET = 1.5
EXPERIMENTS = ("experiment, simulated", True)
MONTH = ("experiment, card, gpu_count, provider, simulated", False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="100000,1000000", help="SQLite ledger sizes, comma-separated")
    ap.add_argument("--pg-sessions", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--repo", help="the gpuops checkout to time (default: this one)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpuops-bench-reports-"))
    b = bench_scale.Bench(argparse.Namespace(runs=a.runs), work)
    out = str(work / "out.txt")
    rows: list[tuple[str, float, float]] = []

    def pair(what: str, ours_argv: list[str], env: dict, floor_argv: list[str]) -> None:
        # ours and the floor take turns, one run each (after a warm-up of each), so a neighbour's
        # load on a shared machine falls on both alike
        fl, us = [], []
        for i in range(a.runs + 1):
            f = measure(floor_argv, b.env, 1, warmup=0, stdout_path=out, cwd=str(work)).median_s
            o = measure(ours_argv, env, 1, warmup=0, stdout_path=out, cwd=str(work)).median_s
            if i:
                fl.append(f)
                us.append(o)
        ours, floor = statistics.median(us), statistics.median(fl)
        rows.append((what, ours, floor))
        print(f"  {what}: {ours:.3f} s vs {floor:.3f} s = x{ours / floor:.2f}", file=sys.stderr, flush=True)

    start = month_start(time.time())
    try:
        for n in (int(x) for x in a.sessions.split(",") if x):
            db = sqlite_ledger("big", n, start - n * 90.0, start - 3600.0)
            sql = attributed_sql(*EXPERIMENTS)
            floor = ["sqlite3", "-cmd", ".parameter set :lo -1e300", "-cmd", ".parameter set :hi 1e300", str(db), sql]
            env = b.env_for(f"sqlite:///{db}")
            pair(f"ledger experiments, all time, {n:,} (SQLite)", b.gpuops + ["ledger", "experiments"], env, floor)
            pair(
                f"ledger experiments --json, all time, {n:,} (SQLite)",
                b.gpuops + ["ledger", "experiments", "--json"],
                env,
                floor,
            )
        if not a.no_postgres:
            from tests.support.postgres import PostgresServer

            pg = PostgresServer().start()
            try:
                url = pg.new_database()
                now = time.time()
                pg_load(url, a.pg_sessions, start, max(start + 60.0, now - 60.0))
                lo, hi = start, month_start(start + 32 * 86400)
                month = time.strftime("%Y-%m", time.gmtime(start))
                sql_file = work / "month.sql"  # a file, not -c: psql interpolates :lo and :hi in what it reads
                sql_file.write_text(attributed_sql(*MONTH) + ";\n")
                psql = [
                    str(pg.bindir / "psql"),
                    "-X",
                    "-q",
                    "-A",
                    "-t",
                    "-v",
                    f"lo={lo}",
                    "-v",
                    f"hi={hi}",
                    url.replace("postgresql+psycopg://", "postgresql://"),
                    "-f",
                    str(sql_file),
                ]
                env = b.env_for(url)
                cmd = b.gpuops + ["ledger", "month", month, "--tz", "UTC"]
                pair(f"ledger month, {a.pg_sessions:,} this month (PostgreSQL)", cmd, env, psql)
                pair(f"ledger month --json, {a.pg_sessions:,} this month (PostgreSQL)", cmd + ["--json"], env, psql)
            finally:
                pg.stop()
    finally:
        print()
        print(f"{'report':58s} {'ours':>8s} {'floor':>8s} {'ratio':>7s} {'goal':>5s}")
        for what, ours, floor in rows:
            r = ours / floor
            print(f"{what:58s} {ours:7.3f}s {floor:7.3f}s {r:6.2f}x {TARGET:4.2g}x {'ok' if r <= TARGET else 'OVER'}")
        print("floor: the same attribution as one SQL statement, run by the database's shell (sqlite3 / psql)")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
