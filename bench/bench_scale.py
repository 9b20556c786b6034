"""Benchmark: every command costs what it shows, not what the ledger has seen.

    .venv/bin/python bench/bench_scale.py [--sessions 1000000] [--month-sessions 100000] [--runs 5]
                                          [--no-postgres] [--only up,ps,cap,reports,history,csv,startup]

Prints one table, each figure beside its floor measured in the same run, as a ratio with its
target:

- ``up --job exit0.sh`` (local provider), ``ps``, ``watchdog --once``, ``reconcile`` on a ledger of
  ``--sessions`` closed sessions vs the same on an empty ledger (target <= 1.2x);
- ``up`` with a monthly cap and ``--month-sessions`` sessions this month vs no cap (<= 1.2x), and
  ``watchdog --once``'s peak memory with the cap;
- ``ledger month`` / ``ledger experiments --json`` over ``--month-sessions`` rows vs the same
  aggregation as one SQL statement on the same database, on SQLite and PostgreSQL (<= 1.5x), and
  ``ledger month`` over 8,000 rows vs ``gpuops --help`` (<= 2x); the same two reports on a ledger
  holding the ``--sessions`` history too ("history": the plain floors walk every row there);
- ``ledger export`` / ``ledger import`` of the big ledger vs ``sqlite3 -csv`` / csv + executemany
  (<= 1.5x, peak RSS <= 100 MiB), and the import vs ``sqlite3 .import`` into a plain table (<= 2x)
  and vs ``sqlite3`` putting the same rows into ``sessions`` (the schema's floor: its indexes built
  after), with the CPU seconds of each (run with ``--sessions 100000`` for the smaller size);
- ``ps`` and ``watchdog --once`` on an empty ledger vs ``gpuops --help`` (<= 2x).

Ledgers are built with SQL executemany (not the CLI) and cached under the temp dir
(``gpuops-bench-cache``), keyed by size and schema. Never a pass/fail test.
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if "--repo" in sys.argv:  # time another checkout (e.g. main, for before/after figures)
    REPO = Path(sys.argv[sys.argv.index("--repo") + 1]).resolve()
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import Timing, measure  # noqa: E402

CACHE = Path(tempfile.gettempdir()) / "gpuops-bench-cache"
CARDS = [("rtx-4090", 0.35), ("a100-80gb", 1.89), ("h100-sxm", 2.99), ("l40s", 0.86), ("a100-40gb", 1.29)]
PROVIDERS = ["runpod", "vast"]
# The columns the bench writes (every other column has a default).
COLUMNS = (
    "id",
    "experiment",
    "job",
    "provider",
    "card",
    "gpu_count",
    "spot",
    "label",
    "instance_id",
    "offer_id",
    "usd_per_hour",
    "bid_usd_per_hour",
    "simulated",
    "status",
    "created_at",
    "instance_created_at",
    "ready_at",
    "ended_at",
    "end_reason",
    "exit_code",
    "billed_seconds",
    "cost_usd",
    "tokens",
    "job_seconds",
    "conclusion",
    "note",
    "log_path",
    "results_path",
    "billing_increment_seconds",
    "last_heartbeat_at",
    "end_source",
    "source",
)


def month_start(now: float) -> float:
    t = time.gmtime(now)
    return float(calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)))


def session_rows(n: int, first: float, last: float, tag: str):
    """``n`` closed sessions created evenly over [first, last) epoch s, each ended before ``last``."""
    step = (last - first) / max(n, 1)
    for i in range(n):
        card, price = CARDS[i % len(CARDS)]
        gpus = (1, 1, 2, 4, 8)[i % 5]
        created = first + i * step
        secs = float(60 + (i * 7919) % 3600)
        secs = min(secs, max(1.0, last - created - 1.0))
        usd = round(price * gpus * secs / 3600.0, 6)
        yield (
            f"{tag}-{i:07d}",
            f"exp-{i % 200:03d}",
            "job.sh",
            PROVIDERS[i % 2],
            card,
            gpus,
            False,
            f"gpuops-{tag}-{i:07d}",
            f"i{i}",
            None,
            price * gpus,
            None,
            False,
            "closed",
            created,
            created + 5.0,
            created + 30.0,
            created + 5.0 + secs,
            "job_end",
            0,
            secs,
            usd,
            (i * 104729) % 10**8,
            secs - 40.0 if secs > 40 else None,
            "ok" if i % 3 else "",
            "",
            "",
            "",
            None,
            None,
            "destroy",
            "gpuops",
        )


def schema_tag() -> str:
    try:
        from ledger.migrations import MIGRATION_NAMES
    except ImportError:  # a checkout from before the names moved there (--repo)
        from ledger.schema_version import MIGRATION_NAMES

    return hashlib.sha256(",".join(MIGRATION_NAMES).encode()).hexdigest()[:10]


def new_ledger(path: Path) -> None:
    """A migrated, empty SQLite ledger at ``path``."""
    from ledger.engine import open_engine

    open_engine(f"sqlite:///{path}").dispose()


def sqlite_ledger(kind: str, n: int, first: float, last: float) -> Path:
    """A cached SQLite ledger of ``n`` sessions over [first, last) (built once per size and schema)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    day = time.strftime("%Y%m", time.gmtime(last))
    path = CACHE / f"{kind}-{n}-{day}-{schema_tag()}.db"  # the month: "this month" moves
    if path.exists():
        return path
    tmp = path.with_suffix(".building")
    for p in (tmp, Path(str(tmp) + "-wal"), Path(str(tmp) + "-shm")):
        p.unlink(missing_ok=True)
    new_ledger(tmp)
    t0 = time.perf_counter()
    con = sqlite3.connect(tmp)
    with con:
        con.executemany(
            f"INSERT INTO sessions ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            session_rows(n, first, last, kind),
        )
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    tmp.rename(path)
    print(f"  built {path.name}: {n:,} sessions in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def history_ledger(big: Path, month: Path) -> Path:
    """The big ledger's history and the month's sessions in one file (cached beside them)."""
    path = big.with_name(f"history-{big.stem}+{month.stem}.db")
    if path.exists():
        return path
    tmp = path.with_suffix(".building")
    for p in (tmp, Path(str(tmp) + "-wal"), Path(str(tmp) + "-shm")):
        p.unlink(missing_ok=True)
    shutil.copyfile(big, tmp)
    con = sqlite3.connect(tmp)
    with con:
        con.execute("ATTACH DATABASE ? AS m", (str(month),))
        con.execute(f"INSERT INTO sessions ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} FROM m.sessions")
    con.execute("DETACH DATABASE m")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    tmp.rename(path)
    return path


def pg_load(url: str, n: int, first: float, last: float) -> None:
    """Migrate the PostgreSQL database at ``url`` and COPY ``n`` sessions into it."""
    import psycopg

    from ledger.engine import open_engine

    open_engine(url).dispose()
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as con:
        with con.cursor() as cur:
            with cur.copy(f"COPY sessions ({', '.join(COLUMNS)}) FROM STDIN") as cp:
                for r in session_rows(n, first, last, "pg"):
                    cp.write_row(r)
            cur.execute("ANALYZE sessions")


MONTH_SQL = """SELECT 'experiment', experiment, count(*), sum(cost_usd), sum(billed_seconds * gpu_count) / 3600.0, sum(tokens)
  FROM sessions WHERE created_at < {p} AND (ended_at IS NULL OR ended_at >= {p}) GROUP BY experiment
UNION ALL SELECT 'card', card, count(*), sum(cost_usd), sum(billed_seconds * gpu_count) / 3600.0, sum(tokens)
  FROM sessions WHERE created_at < {p} AND (ended_at IS NULL OR ended_at >= {p}) GROUP BY card
UNION ALL SELECT 'provider', provider, count(*), sum(cost_usd), sum(billed_seconds * gpu_count) / 3600.0, sum(tokens)
  FROM sessions WHERE created_at < {p} AND (ended_at IS NULL OR ended_at >= {p}) GROUP BY provider"""
EXPERIMENTS_SQL = """SELECT experiment, count(*), sum(cost_usd), sum(billed_seconds * gpu_count) / 3600.0, sum(tokens), max(created_at)
  FROM sessions WHERE created_at < {p} AND (ended_at IS NULL OR ended_at >= {p}) GROUP BY experiment ORDER BY experiment"""


def attributed_sql(keys: str, conclusion: bool) -> str:
    """The second floor: the numbers of ``ledger month``/``experiments`` as ONE plain SQL statement.

    Attributed by time (each row's share of [:lo, :hi), ``ledger.attribution``). The first floor
    (MONTH_SQL, EXPERIMENTS_SQL) sums whole rows, which cannot give the books' figures for a rental
    across the period's edge."""
    from ledger.attribution import SQL_TOUCHES, share_sql  # the timed checkout's rule (--repo: an older one too)

    # a closed row wholly inside the period: share exactly 1 (ledger.attribution.SQL_INSIDE)
    inside = "(instance_created_at >= :lo AND ended_at < :hi AND ended_at >= instance_created_at)"

    def part(x: str) -> str:
        return f"(CASE WHEN {inside} THEN {x} ELSE {x} * {share_sql('1.0')} END)"

    job = (
        "(CASE WHEN job_seconds IS NULL OR usd_per_hour IS NULL OR usd_per_hour = 0 THEN COALESCE(cost_usd, 0.0)"
        " WHEN job_seconds * usd_per_hour / 3600.0 < COALESCE(cost_usd, 0.0) THEN job_seconds * usd_per_hour / 3600.0"
        " ELSE COALESCE(cost_usd, 0.0) END)"
    )
    gh = "(COALESCE(billed_seconds, 0.0) * (CASE WHEN gpu_count > 1 THEN gpu_count ELSE 1 END) / 3600.0)"
    closed = "status = 'closed'"
    return (
        f"SELECT {keys}, COUNT(*), SUM(CASE WHEN status <> 'closed' THEN 1 ELSE 0 END),"
        f" SUM(CASE WHEN {closed} AND cost_source = 'charged' THEN 1 ELSE 0 END),"
        f" SUM(CASE WHEN {closed} THEN {part('COALESCE(cost_usd, 0.0)')} ELSE 0.0 END),"
        f" SUM(CASE WHEN {closed} THEN {part(gh)} ELSE 0.0 END), SUM(CASE WHEN {closed} THEN {part('COALESCE(tokens, 0) * 1.0')} ELSE 0.0 END),"
        f" SUM(CASE WHEN {closed} AND tokens > 0 THEN {part(job)} ELSE 0.0 END)"
        + (", MAX(CASE WHEN conclusion <> '' THEN created_at END)" if conclusion else "")
        + f" FROM sessions WHERE +created_at < :hi AND (ended_at >= :lo OR ended_at IS NULL) AND {SQL_TOUCHES}"
        f" GROUP BY simulated, {keys.replace(', simulated', '')}"
    )


SQL_RUNNER = r"""
import sys, json
url, sql, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if url.startswith("sqlite"):
    import sqlite3
    con = sqlite3.connect(url[len("sqlite:///"):])
else:
    import psycopg
    con = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    if isinstance(args, dict):  # named parameters: :name in SQLite's style, %(name)s in psycopg's
        for k in args:
            sql = sql.replace(":" + k, "%(" + k + ")s")
rows = con.execute(sql, args).fetchall()
print(len(rows))
"""

IMPORT_FLOOR = r"""
import csv, sqlite3, sys
from datetime import datetime
db, path, cols = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
con = sqlite3.connect(db, isolation_level=None)
con.execute("BEGIN IMMEDIATE")
def rows():
    with open(path, newline="") as f:
        r = csv.reader(f)
        next(r)
        for c in r:
            t = datetime.fromisoformat(c[0]).timestamp()
            s = float(c[6]) * 3600.0
            yield (c[11], c[1], "", c[2], c[3], int(c[4]), False, "", None, None, float(c[5]), None, c[10] == "true",
                   "closed", t, t, None, t + s, "imported", None, s, float(c[7]), int(c[8]), None, c[9], "", "", "",
                   None, None, "import", "import")
con.executemany(f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows())
con.execute("COMMIT")
"""

# ``sqlite3`` putting the export's rows into ``sessions`` as ``ledger import`` books them (same
# columns, converted by SQL, nothing checked), the secondary indexes dropped and built after.
IMPORT_SCHEMA_FLOOR = """
.mode list
BEGIN IMMEDIATE;
CREATE TEMP TABLE dropped AS SELECT name, sql FROM sqlite_master
 WHERE type = 'index' AND tbl_name = 'sessions' AND sql IS NOT NULL;
.once {csv}.drop.sql
SELECT 'DROP INDEX "' || name || '";' FROM dropped;
.read {csv}.drop.sql
CREATE TEMP TABLE c (d, e, p, k, g, u, h, o, t, n, s, i);
.mode csv
.import --skip 1 {csv} c
INSERT INTO sessions (id, experiment, provider, card, gpu_count, usd_per_hour, simulated, created_at, instance_created_at,
  ended_at, billed_seconds, cost_usd, tokens, conclusion, job, spot, label, status, end_reason, note, log_path,
  results_path, end_source, source)
 SELECT i, e, p, k, CAST(g AS INTEGER), CAST(u AS REAL), s = 'true', unixepoch(d), unixepoch(d),
  unixepoch(d) + round(h * 3600.0, 3), round(h * 3600.0, 3), CAST(o AS REAL), CAST(t AS INTEGER), n,
  '', 0, '', 'closed', 'imported', '', '', '', 'import', 'import' FROM c;
.mode list
.once {csv}.create.sql
SELECT sql || ';' FROM dropped;
.read {csv}.create.sql
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
"""


class Bench:
    def __init__(self, a: argparse.Namespace, work: Path):
        self.a, self.work = a, work
        self.results: list[tuple[str, str, Timing | None, str, Timing | None, float, str]] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_") and k != "PYTHONDONTWRITEBYTECODE"}
        env.update(
            PYTHONPATH=str(REPO),
            PYTHONPYCACHEPREFIX=str(CACHE / "pycache"),
            HOME=str(work),
            XDG_CONFIG_HOME=str(work / "cfg"),
            GPUOPS_DATA_DIR=str(work / "data"),
        )
        self.env = env
        self.gpuops = [sys.executable, "-m", "gpuops"]
        job = work / "exit0.sh"
        job.write_text("#!/usr/bin/env bash\nexit 0\n")
        job.chmod(0o755)
        self.job = job

    def env_for(self, url: str, **extra: str) -> dict:
        return dict(self.env, GPUOPS_LEDGER_URL=url, **extra)

    def time(self, argv: list[str], env: dict, runs: int | None = None, **kw) -> Timing:
        return measure(argv, env, runs or self.a.runs, cwd=str(self.work), **kw)

    def add(
        self, what: str, ours_label: str, ours: Timing, floor_label: str, floor: Timing, target: float, note: str = ""
    ) -> None:
        self.results.append((what, ours_label, ours, floor_label, floor, target, note))
        ratio = ours.median_s / floor.median_s
        print(
            f"  {what}: {ours.median_s:.3f} s vs {floor.median_s:.3f} s = x{ratio:.2f} (target x{target:g}) "
            f"peak {ours.max_rss_mib:.0f} / {floor.max_rss_mib:.0f} MiB {note}",
            file=sys.stderr,
            flush=True,
        )

    def print_table(self) -> None:
        print()
        print(f"{'target':44s} {'ours':>9s} {'floor':>9s} {'ratio':>7s} {'goal':>6s}  {'peak MiB':>14s}  floor")
        for what, _ol, ours, fl, floor, target, note in self.results:
            ratio = ours.median_s / floor.median_s
            flag = "ok" if ratio <= target else "OVER"
            print(
                f"{what:44s} {ours.median_s:8.3f}s {floor.median_s:8.3f}s {ratio:6.2f}x {target:5.2g}x  "
                f"{ours.max_rss_mib:6.0f}/{floor.max_rss_mib:<6.0f}  {fl} {flag}{' ' + note if note else ''}"
            )

    # -- groups ---------------------------------------------------------------------------------
    def startup(self, empty: Path) -> None:
        env = self.env_for(f"sqlite:///{empty}")
        help_ = self.time(self.gpuops + ["--help"], env)
        self.help = help_
        for cmd in (["ps"], ["watchdog", "--once"]):
            self.add(
                f"{' '.join(cmd)} (small ledger) vs --help",
                " ".join(cmd),
                self.time(self.gpuops + cmd, env),
                "gpuops --help",
                help_,
                2.0,
            )

    def scale(self, empty: Path, big: Path, which: set[str]) -> None:
        n = self.a.sessions
        cmds = []
        if "up" in which:
            cmds.append((["up", "--job", str(self.job), "--provider", "local"], max(3, self.a.runs // 2)))
        if "ps" in which:
            cmds += [(["ps"], None), (["watchdog", "--once"], None), (["reconcile"], None)]
        for cmd, runs in cmds:
            floor = self.time(self.gpuops + cmd, self.env_for(f"sqlite:///{empty}"), runs)
            ours = self.time(self.gpuops + cmd, self.env_for(f"sqlite:///{big}"), runs)
            self.add(
                f"{cmd[0]}{' --once' if '--once' in cmd else ''} on {n:,} sessions vs empty",
                "",
                ours,
                "same, empty ledger",
                floor,
                1.2,
            )

    def cap(self, month: Path) -> None:
        url = f"sqlite:///{month}"
        up = self.gpuops + ["up", "--job", str(self.job), "--provider", "local"]
        runs = max(3, self.a.runs // 2)
        floor = self.time(up, self.env_for(url), runs)
        ours = self.time(up, self.env_for(url, GPUOPS_TEARDOWN_MONTHLY_CAP_USD="1000000000"), runs)
        self.add(f"up, monthly cap, {self.a.month_sessions:,} this month", "", ours, "same, no cap", floor, 1.2)
        wd = self.gpuops + ["watchdog", "--once"]
        floor = self.time(wd, self.env_for(url), runs)
        ours = self.time(wd, self.env_for(url, GPUOPS_TEARDOWN_MONTHLY_CAP_USD="1000000000"), runs)
        self.add(
            f"watchdog --once, cap, {self.a.month_sessions:,} this month",
            "",
            ours,
            "same, no cap",
            floor,
            1.2,
            f"(memory flat: {ours.max_rss_mib:.0f} vs {floor.max_rss_mib:.0f} MiB)",
        )

    def reports(self, url: str, backend: str, start: float, end: float) -> None:
        month = time.strftime("%Y-%m", time.gmtime(start))
        day = time.strftime("%Y-%m-%d", time.gmtime(start))
        p = "?" if backend == "sqlite" else "%s"
        runner = [sys.executable, "-c", SQL_RUNNER, url]
        m_args = f"[{end}, {start}, {end}, {start}, {end}, {start}]"
        floor = self.time(runner + [MONTH_SQL.format(p=p), m_args], self.env)
        ours = self.time(self.gpuops + ["ledger", "month", month, "--tz", "UTC", "--json"], self.env_for(url))
        self.add(f"ledger month, {self.a.month_sessions:,} rows ({backend})", "", ours, "one SQL statement", floor, 1.5)
        floor2 = self.time(
            runner
            + [
                attributed_sql("experiment, card, gpu_count, provider, simulated", False),
                f'{{"lo": {start}, "hi": {end}}}',
            ],
            self.env,
        )
        self.add(
            f"ledger month, {self.a.month_sessions:,} rows ({backend})",
            "",
            ours,
            "same numbers, one SQL statement",
            floor2,
            1.5,
            "(attributed by time)",
        )
        floor = self.time(runner + [EXPERIMENTS_SQL.format(p=p), f"[{end}, {start}]"], self.env)
        ours = self.time(
            self.gpuops + ["ledger", "experiments", "--since", day, "--tz", "UTC", "--json"], self.env_for(url)
        )
        self.add(
            f"ledger experiments, {self.a.month_sessions:,} rows ({backend})", "", ours, "one SQL statement", floor, 1.5
        )
        floor2 = self.time(
            runner + [attributed_sql("experiment, simulated", True), f'{{"lo": {start}, "hi": 1e300}}'], self.env
        )
        self.add(
            f"ledger experiments, {self.a.month_sessions:,} rows ({backend})",
            "",
            ours,
            "same numbers, one SQL statement",
            floor2,
            1.5,
            "(attributed by time)",
        )

    def history(self, path: Path, start: float, end: float) -> None:
        """The month's reports on a ledger that also holds the history (``--sessions`` before this month).

        The plain floors walk every row of the ledger, ours only the month's."""
        month = time.strftime("%Y-%m", time.gmtime(start))
        day = time.strftime("%Y-%m-%d", time.gmtime(start))
        url = f"sqlite:///{path}"
        runner = [sys.executable, "-c", SQL_RUNNER, url]
        what = f"{self.a.sessions:,} + {self.a.month_sessions:,} this month"
        floor = self.time(
            runner + [MONTH_SQL.format(p="?"), f"[{end}, {start}, {end}, {start}, {end}, {start}]"], self.env
        )
        ours = self.time(self.gpuops + ["ledger", "month", month, "--tz", "UTC", "--json"], self.env_for(url))
        self.add(f"ledger month, {what}", "", ours, "one SQL statement", floor, 1.5)
        floor = self.time(runner + [EXPERIMENTS_SQL.format(p="?"), f"[{end}, {start}]"], self.env)
        ours = self.time(
            self.gpuops + ["ledger", "experiments", "--since", day, "--tz", "UTC", "--json"], self.env_for(url)
        )
        self.add(f"ledger experiments, {what}", "", ours, "one SQL statement", floor, 1.5)

    def small_month(self, small: Path, start: float) -> None:
        month = time.strftime("%Y-%m", time.gmtime(start))
        env = self.env_for(f"sqlite:///{small}")
        help_ = getattr(self, "help", None) or self.time(self.gpuops + ["--help"], env)
        ours = self.time(self.gpuops + ["ledger", "month", month, "--tz", "UTC"], env)
        self.add(f"ledger month, {self.a.small_month:,} rows vs --help", "", ours, "gpuops --help", help_, 2.0)

    def cpu_seconds(self, argv: list[str], env: dict, stdout_path: Path) -> float:
        """User + system CPU seconds of one run of ``argv`` and every process it waited for."""
        import resource
        import subprocess

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(stdout_path, "wb") as f:
            subprocess.run(argv, env=env, stdout=f, check=True, cwd=str(self.work))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def csv(self, big: Path) -> None:
        n = self.a.sessions
        out = self.work / "export.csv"
        runs = max(1, min(3, self.a.runs // 2))
        ours = self.time(
            self.gpuops + ["ledger", "export"], self.env_for(f"sqlite:///{big}"), runs, stdout_path=str(out)
        )
        sql = (
            "SELECT created_at, experiment, provider, card, gpu_count, usd_per_hour, billed_seconds / 3600.0, cost_usd, "
            "tokens, conclusion, simulated, id FROM sessions WHERE status = 'closed' ORDER BY created_at, id"
        )
        floor = self.time(["sqlite3", "-csv", str(big), sql], self.env, runs, stdout_path=str(self.work / "floor.csv"))
        # The export runs two processes (ledger/csvio.py write_export_forked); sqlite3 -csv one: their
        # CPU seconds (user + sys, one more run each) are printed beside the wall-clock ratio.
        cpu_ours = self.cpu_seconds(self.gpuops + ["ledger", "export"], self.env_for(f"sqlite:///{big}"), out)
        cpu_floor = self.cpu_seconds(["sqlite3", "-csv", str(big), sql], self.env, self.work / "floor.csv")
        self.add(
            f"ledger export, {n:,} rows",
            "",
            ours,
            "sqlite3 -csv",
            floor,
            1.5,
            f"(peak <= 100 MiB per process; CPU {cpu_ours:.2f} s vs {cpu_floor:.2f} s)",
        )
        target = self.work / "import.db"

        def fresh() -> None:
            for sfx in ("", "-wal", "-shm"):
                Path(str(target) + sfx).unlink(missing_ok=True)
            new_ledger(target)

        walls_o, walls_f, walls_s, walls_t = [], [], [], []
        cpu_o = cpu_s = cpu_t = 0.0
        # The physical floor: sqlite3's own CSV reader into a plain table of the file's columns, in
        # the same fresh ledger file (no parsing, no checks, no indexes).
        dot_import = ["sqlite3", str(target), "-cmd", ".mode csv", f".import --skip 1 {out} imported_csv"]
        # The schema's floor: sqlite3 itself puts the same rows into ``sessions`` (its indexes dropped
        # and built after, as the import does), converting with SQL and checking nothing.
        into_sessions = self.work / "into_sessions.sql"
        into_sessions.write_text(IMPORT_SCHEMA_FLOOR.format(csv=out))
        schema_floor = ["sqlite3", str(target), f".read {into_sessions}"]
        ours_argv = self.gpuops + ["ledger", "import", str(out), "--tz", "UTC"]
        for _ in range(runs):
            fresh()
            walls_o.append(measure(ours_argv, self.env_for(f"sqlite:///{target}"), 1, warmup=0, cwd=str(self.work)))
            fresh()
            walls_f.append(
                measure(
                    [sys.executable, "-c", IMPORT_FLOOR, str(target), str(out), ",".join(COLUMNS)],
                    self.env,
                    1,
                    warmup=0,
                    cwd=str(self.work),
                )
            )
            fresh()
            walls_s.append(measure(dot_import, self.env, 1, warmup=0, cwd=str(self.work)))
            fresh()
            walls_t.append(measure(schema_floor, self.env, 1, warmup=0, cwd=str(self.work)))
        # CPU seconds (user + sys, one more run each): on a busy machine the wall clock is the load's.
        fresh()
        cpu_o = self.cpu_seconds(ours_argv, self.env_for(f"sqlite:///{target}"), self.work / "import.out")
        fresh()
        cpu_s = self.cpu_seconds(dot_import, self.env, self.work / "import.out")
        fresh()
        cpu_t = self.cpu_seconds(schema_floor, self.env, self.work / "import.out")

        def merged(ts: list[Timing]) -> Timing:
            xs = sorted(t.median_s for t in ts)
            return Timing(xs[len(xs) // 2], xs[0], max(t.max_rss_mib for t in ts), len(ts))

        self.add(
            f"ledger import, {n:,} rows",
            "",
            merged(walls_o),
            "csv + executemany",
            merged(walls_f),
            1.5,
            "(peak <= 100 MiB)",
        )
        self.add(
            f"ledger import, {n:,} rows",
            "",
            merged(walls_o),
            "sqlite3 .import",
            merged(walls_s),
            2.0,
            f"(peak <= 100 MiB; CPU {cpu_o:.2f} s vs {cpu_s:.2f} s)",
        )
        self.add(
            f"ledger import, {n:,} rows",
            "",
            merged(walls_o),
            "sqlite3 into sessions",
            merged(walls_t),
            2.0,
            f"(the schema's own floor, its indexes; CPU {cpu_o:.2f} s vs {cpu_t:.2f} s)",
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sessions", type=int, default=1_000_000, help="sessions in the big ledger (100000 for a quicker run)"
    )
    ap.add_argument("--month-sessions", type=int, default=100_000, help="sessions this month (cap, month, experiments)")
    ap.add_argument("--small-month", type=int, default=8_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--only", default="startup,up,ps,cap,reports,history,csv")
    ap.add_argument("--repo", help="the gpuops checkout to time (default: this one)")
    a = ap.parse_args()
    which = set(a.only.split(","))
    now = time.time()
    start = month_start(now)
    end_of_month = month_start(start + 32 * 86400)
    work = Path(tempfile.mkdtemp(prefix="gpuops-bench-"))
    b = Bench(a, work)
    try:
        empty = work / "empty.db"
        new_ledger(empty)
        if "startup" in which:
            b.startup(empty)
        if which & {"up", "ps", "csv"}:
            # the big ledger: history before this month, 90 s apart
            big = sqlite_ledger("big", a.sessions, start - a.sessions * 90.0, start - 3600.0)
            if which & {"up", "ps"}:
                b.scale(empty, big, which)
            if "csv" in which:
                b.csv(big)
        if which & {"cap", "reports", "history"}:
            month = sqlite_ledger("month", a.month_sessions, start, max(start + 60.0, now - 60.0))
            if "history" in which:
                big = sqlite_ledger("big", a.sessions, start - a.sessions * 90.0, start - 3600.0)
                b.history(history_ledger(big, month), start, end_of_month)
            if "cap" in which:
                b.cap(month)
            if "reports" in which:
                b.reports(f"sqlite:///{month}", "sqlite", start, end_of_month)
                small = sqlite_ledger("small", a.small_month, start, max(start + 60.0, now - 60.0))
                b.small_month(small, start)
                if not a.no_postgres:
                    from tests.support.postgres import PostgresServer

                    pg = PostgresServer().start()
                    try:
                        url = pg.new_database()
                        pg_load(url, a.month_sessions, start, max(start + 60.0, now - 60.0))
                        b.reports(url, "postgresql", start, end_of_month)
                    finally:
                        pg.stop()
    finally:
        b.print_table()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
