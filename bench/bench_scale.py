"""Benchmark: every command costs what it shows, not what the ledger has seen.

    .venv/bin/python bench/bench_scale.py [--sessions 1000000] [--month-sessions 100000]
        [--pg-sessions 1000000] [--runs 5] [--no-postgres]
        [--only startup,up,ps,cap,reports,history,small,postgres,csv]

Every figure is ours beside its floor measured in the same loop: the commands take turns run by
run (floor, ours, floor, ours ...; after one warm-up round), so a neighbour's load on a shared
machine falls on both alike. Each line gives the medians, their ratio with its target, the
machine's 1-minute load average over those runs, peak RSS and CPU seconds (user + system, every
process the command waited for). The floor is what a user would run instead: the database's own
shell (``sqlite3``, ``psql``) running the statement the report runs, ``sqlite3 -csv``, ``sqlite3``
filling ``sessions``, a peer CLI's ``--help``; or the same command on an empty ledger.

- ``startup``: ``ps``, ``watchdog --once`` on an empty ledger vs ``gpuops --help`` (<= 2x);
- ``up``, ``ps``: ``up --job exit0.sh`` (local provider), ``ps``, ``watchdog --once``,
  ``reconcile`` on a ledger of ``--sessions`` closed sessions vs an empty ledger (<= 1.2x);
- ``cap``: ``up`` and ``watchdog --once`` with a monthly cap over ``--month-sessions`` sessions
  this month vs no cap (<= 1.2x; the watchdog's memory beside it);
- ``reports``: ``ledger month`` (this month) and ``ledger experiments`` (all time) on
  ``--month-sessions`` sessions, as a table and as ``--json``, each beside ``sqlite3`` running the
  statement the report runs for its groups (``ledger.aggregate.statement``; no target: a Python
  CLI's start-up is most of the gap), and the table beside the JSON (<= 1.2x: a table costs what
  its data costs), and ``ledger month --by day --json`` beside ``ledger month --json`` (<= 1.5x: the
  days are one more statement over the same rows);
- ``history``: the same on a ledger that also holds the ``--sessions`` history;
- ``small``: ``ledger month`` on 8,000 sessions vs ``gpuops --help`` (<= 2x);
- ``postgres``: ``ledger month`` on PostgreSQL with ``--pg-sessions`` this month vs ``psql``
  running the same statement (<= 1.5x: statement-bound), and with ``--month-sessions`` vs
  ``vastai --help``, the fastest peer CLI (<= 1x: start-up-bound);
- ``csv``: ``ledger export`` of the big ledger vs ``sqlite3 -csv`` (<= 1.5x, <= 100 MiB a process),
  ``ledger import`` of that export vs ``sqlite3`` putting the same rows into ``sessions`` (the
  schema's floor: its indexes dropped and built after; <= 2x, <= 100 MiB) and vs ``sqlite3
  .import`` into a plain table (no target).

Ledgers are built with SQL executemany (not the CLI) and cached under the temp dir
(``gpuops-bench-cache``), keyed by size, month and schema; PostgreSQL (the test suite's throwaway
server, ``tests/support/postgres.py``) is filled from them by ``sqlite3 -csv | psql COPY``. Never a
pass/fail test.
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if "--repo" in sys.argv:  # time another checkout (e.g. main, for before/after figures)
    REPO = Path(sys.argv[sys.argv.index("--repo") + 1]).resolve()
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import Timing, run_once  # noqa: E402

from ledger.aggregate import EXPERIMENT_KEYS, MONTH_KEYS  # noqa: E402

CACHE = Path(tempfile.gettempdir()) / "gpuops-bench-cache"
GROUPS = ("startup", "up", "ps", "cap", "reports", "history", "small", "postgres", "csv")
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


def pg_load(pg, url: str, source: Path) -> None:
    """Migrate the PostgreSQL database at ``url`` and fill its ``sessions`` with the rows of the SQLite ledger ``source``.

    The two shells a user would use: ``sqlite3 -csv`` writes the rows, ``psql``'s ``COPY ... FROM
    STDIN (CSV)`` reads them (SQLite's 0/1 are PostgreSQL booleans; an empty field is NULL, ""
    an empty string), then ``ANALYZE``."""
    import subprocess

    from ledger.engine import open_engine

    open_engine(url).dispose()
    t0 = time.perf_counter()
    cols = ", ".join(COLUMNS)
    dump = subprocess.Popen(["sqlite3", "-csv", str(source), f"SELECT {cols} FROM sessions"], stdout=subprocess.PIPE)
    subprocess.run(
        psql(pg, url) + ["-c", f"COPY sessions ({cols}) FROM STDIN (FORMAT csv)", "-c", "ANALYZE sessions"],
        stdin=dump.stdout,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    if dump.stdout:
        dump.stdout.close()
    if dump.wait():
        raise RuntimeError(f"sqlite3 -csv {source} failed")
    print(f"  loaded {source.name} into PostgreSQL in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def psql(pg, url: str) -> list[str]:
    """``psql`` on the database of SQLAlchemy ``url``: no psqlrc, quiet, unaligned tuples only."""
    return [str(pg.bindir / "psql"), "-X", "-q", "-A", "-t", url.replace("postgresql+psycopg://", "postgresql://")]


def same_statement(lo: float | None, hi: float | None, keys: tuple, conclusion: bool) -> tuple[str, dict]:
    """The statement a report runs for its groups (``ledger.aggregate.statement``, the timed checkout's) and its parameters.

    The floor of ``ledger month`` (the month's keys over [lo, hi)) and of ``ledger experiments``
    (its keys and the latest conclusion's time, all time: lo = hi = None)."""
    from ledger.aggregate import params, statement

    return statement(lo, hi, keys, conclusion), params(lo, hi)


def sqlite3_argv(db: Path, sql: str, args: dict) -> list[str]:
    """``sqlite3`` running ``sql`` on ``db`` with named parameters ``args`` (``.parameter set``)."""
    argv = ["sqlite3"]
    for k, v in args.items():
        argv += ["-cmd", f".parameter set :{k} {v!r}"]
    return argv + [str(db), sql]


def psql_argv(pg, url: str, sql: str, args: dict, work: Path, name: str) -> list[str]:
    """``psql`` running ``sql`` on ``url`` with ``args`` as psql variables (quoted literals, typed by their column).

    The statement goes in a file (``-f``): psql interpolates ``:'name'`` only in what it reads."""
    for k in args:
        sql = sql.replace(f":{k}", f":'{k}'")
    path = work / f"{name}.sql"
    path.write_text(sql + ";\n")
    argv = psql(pg, url)
    for k, v in args.items():
        argv[1:1] = ["-v", f"{k}={v!r}"]
    return argv + ["-f", str(path)]


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
    """The groups of figures, each measured in rounds and printed as one table at the end."""

    def __init__(self, a: argparse.Namespace, work: Path):
        self.a, self.work = a, work
        self.results: list[tuple[str, Timing, str, Timing, float | None, tuple[float, float], str]] = []
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
        self.heavy_runs = max(3, a.runs // 2)  # a run of a minute's work (up, export, import): fewer rounds

    def env_for(self, url: str, **extra: str) -> dict:
        return dict(self.env, GPUOPS_LEDGER_URL=url, **extra)

    def rounds(
        self,
        cmds: list[tuple[str, list[str], dict]],
        runs: int | None = None,
        warmup: int = 1,
        before: Callable[[str], None] | None = None,
    ) -> tuple[dict[str, Timing], tuple[float, float]]:
        """Each command of ``cmds`` ((label, argv, env)) once per round, in turn, ``warmup`` + ``runs`` rounds.

        The floor and ours take turns run by run, so a neighbour's load on a shared machine falls on
        both alike. Returns each label's ``Timing`` (median of the timed rounds) and the machine's
        1-minute load average (lowest, highest) over them. ``before(label)``: called before each
        run (a fresh ledger for an import). Each command's stdout goes to its own file in the work
        folder."""
        runs = runs or self.a.runs
        walls: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _, _ in cmds}
        loads = []
        for i in range(warmup + runs):
            if i >= warmup:
                loads.append(os.getloadavg()[0])
            for label, argv, env in cmds:
                if before:
                    before(label)
                with open(self.work / f"out-{label.replace(' ', '-')}.txt", "wb") as out:
                    got = run_once(argv, env, out, subprocess.DEVNULL, str(self.work))
                if i >= warmup:
                    walls[label].append(got)
        timings = {
            label: Timing(
                statistics.median(w for w, _, _ in xs),
                min(w for w, _, _ in xs),
                max(r for _, r, _ in xs),
                len(xs),
                statistics.median(c for _, _, c in xs),
            )
            for label, xs in walls.items()
        }
        return timings, (min(loads), max(loads))

    def add(
        self,
        what: str,
        ours: Timing,
        floor_label: str,
        floor: Timing,
        target: float | None,
        load: tuple[float, float],
        note: str = "",
    ) -> None:
        """One figure: ours beside its floor (``target`` None: shown, no goal)."""
        self.results.append((what, ours, floor_label, floor, target, load, note))
        ratio = ours.median_s / floor.median_s
        goal = f"target x{target:g}" if target else "no target"
        print(
            f"  {what}: {ours.median_s:.3f} s vs {floor_label} {floor.median_s:.3f} s = x{ratio:.2f} ({goal}) "
            f"load {load[0]:.1f}-{load[1]:.1f} peak {ours.max_rss_mib:.0f} / {floor.max_rss_mib:.0f} MiB {note}",
            file=sys.stderr,
            flush=True,
        )

    def print_table(self) -> None:
        print()
        print(
            f"{'figure':62s} {'ours':>8s} {'floor':>8s} {'ratio':>6s} {'goal':>5s}      {'load':>9s} {'peak MiB':>9s} "
            f"{'CPU s':>11s} {'CPU':>5s}  floor"
        )
        for what, ours, fl, floor, target, load, note in self.results:
            ratio = ours.median_s / floor.median_s
            flag = "" if target is None else (" ok" if ratio <= target else " OVER")
            goal = f"{target:4.2g}x" if target else "    -"
            cpu = f"{ours.cpu_s / floor.cpu_s:4.2f}x" if floor.cpu_s > 0 else "    -"
            print(
                f"{what:62s} {ours.median_s:7.3f}s {floor.median_s:7.3f}s {ratio:5.2f}x {goal}{flag:5s} "
                f"{load[0]:4.1f}-{load[1]:<4.1f} {ours.max_rss_mib:4.0f}/{floor.max_rss_mib:<4.0f} "
                f"{ours.cpu_s:5.2f}/{floor.cpu_s:<5.2f} {cpu}  {fl}{' ' + note if note else ''}"
            )
        print(
            "ratio: median of ours / median of the floor, the two taking turns run by run (the goal is on it);"
            f" load: the 1-minute load average over those runs ({os.cpu_count()} CPUs); CPU s: user + system"
            " seconds, ours/floor, and their ratio (on a loaded machine the steadier figure)"
        )

    # -- groups ---------------------------------------------------------------------------------
    def startup(self, empty: Path) -> None:
        env = self.env_for(f"sqlite:///{empty}")
        t, load = self.rounds(
            [
                ("help", self.gpuops + ["--help"], env),
                ("ps", self.gpuops + ["ps"], env),
                ("watchdog", self.gpuops + ["watchdog", "--once"], env),
            ]
        )
        self.add("ps (small ledger) vs --help", t["ps"], "gpuops --help", t["help"], 2.0, load)
        self.add("watchdog --once (small ledger) vs --help", t["watchdog"], "gpuops --help", t["help"], 2.0, load)

    def scale(self, empty: Path, big: Path, which: set[str]) -> None:
        n = self.a.sessions
        cmds = []
        if "up" in which:
            cmds.append((["up", "--job", str(self.job), "--provider", "local"], self.heavy_runs))
        if "ps" in which:
            cmds += [(["ps"], None), (["watchdog", "--once"], None), (["reconcile"], None)]
        for cmd, runs in cmds:
            t, load = self.rounds(
                [
                    ("empty", self.gpuops + cmd, self.env_for(f"sqlite:///{empty}")),
                    ("big", self.gpuops + cmd, self.env_for(f"sqlite:///{big}")),
                ],
                runs,
            )
            what = f"{cmd[0]}{' --once' if '--once' in cmd else ''} on {n:,} sessions vs empty"
            self.add(what, t["big"], "same, empty ledger", t["empty"], 1.2, load)

    def cap(self, month: Path) -> None:
        url = f"sqlite:///{month}"
        capped = self.env_for(url, GPUOPS_TEARDOWN_MONTHLY_CAP_USD="1000000000")
        for cmd, what in (
            (["up", "--job", str(self.job), "--provider", "local"], "up"),
            (["watchdog", "--once"], "watchdog --once"),
        ):
            t, load = self.rounds(
                [("no cap", self.gpuops + cmd, self.env_for(url)), ("cap", self.gpuops + cmd, capped)], self.heavy_runs
            )
            note = (
                f"(memory flat: {t['cap'].max_rss_mib:.0f} vs {t['no cap'].max_rss_mib:.0f} MiB)"
                if "watch" in what
                else ""
            )
            self.add(
                f"{what}, monthly cap, {self.a.month_sessions:,} this month",
                t["cap"],
                "same, no cap",
                t["no cap"],
                1.2,
                load,
                note,
            )

    def report_rounds(
        self, what: str, ours: list[str], env: dict, floor_label: str, floor: list[str], target: float | None
    ) -> None:
        """A report as a table and as ``--json`` beside its floor, the three taking turns.

        Three figures: each beside the floor (``target``), and the table beside the JSON (<= 1.2x:
        a table costs what its data costs)."""
        t, load = self.rounds([("floor", floor, self.env), ("json", ours + ["--json"], env), ("table", ours, env)])
        self.add(f"{what} --json", t["json"], floor_label, t["floor"], target, load)
        self.add(f"{what} (table)", t["table"], floor_label, t["floor"], target, load)
        self.add(f"{what} table vs --json", t["table"], "the same report as --json", t["json"], 1.2, load)

    def reports(self, db: Path, start: float, end: float, what: str) -> None:
        """``ledger month`` (this month) and ``ledger experiments`` (all time) on the SQLite ledger ``db``.

        Each beside ``sqlite3`` running the statement the report runs for its groups (no target: a
        Python CLI's start-up is most of the gap to a C shell's whole query; the table vs the JSON
        is the target)."""
        month = time.strftime("%Y-%m", time.gmtime(start))
        env = self.env_for(f"sqlite:///{db}")
        sql, args = same_statement(start, end, MONTH_KEYS, False)
        self.report_rounds(
            f"ledger month, {what}",
            self.gpuops + ["ledger", "month", month, "--tz", "UTC"],
            env,
            "sqlite3, same statement",
            sqlite3_argv(db, sql, args),
            None,
        )
        # the days (--by day, the dashboard's): one more statement over the month's rows
        cmd = self.gpuops + ["ledger", "month", month, "--tz", "UTC", "--json"]
        t, load = self.rounds([("month", cmd, env), ("days", cmd + ["--by", "day"], env)])
        self.add(f"ledger month --by day, {what} --json", t["days"], "ledger month --json", t["month"], 1.5, load)
        sql, args = same_statement(None, None, EXPERIMENT_KEYS, True)
        self.report_rounds(
            f"ledger experiments, {what}",
            self.gpuops + ["ledger", "experiments"],
            env,
            "sqlite3, same statement",
            sqlite3_argv(db, sql, args),
            None,
        )

    def small_month(self, small: Path, start: float) -> None:
        month = time.strftime("%Y-%m", time.gmtime(start))
        env = self.env_for(f"sqlite:///{small}")
        t, load = self.rounds(
            [
                ("help", self.gpuops + ["--help"], env),
                ("month", self.gpuops + ["ledger", "month", month, "--tz", "UTC"], env),
            ]
        )
        self.add(
            f"ledger month, {self.a.small_month:,} rows vs --help", t["month"], "gpuops --help", t["help"], 2.0, load
        )

    def postgres(self, pg, big_url: str, small_url: str, start: float, end: float) -> None:
        """``ledger month`` on PostgreSQL: statement-bound at ``--pg-sessions`` this month, start-up-bound at ``--month-sessions``.

        The first beside ``psql`` running the same statement (<= 1.5x), the second beside the
        fastest peer CLI's ``--help`` (``vastai --help``, <= 1.0x)."""
        month = time.strftime("%Y-%m", time.gmtime(start))
        sql, args = same_statement(start, end, MONTH_KEYS, False)
        cmd = self.gpuops + ["ledger", "month", month, "--tz", "UTC"]
        floor = psql_argv(pg, big_url, sql, args, self.work, "month-big")
        self.report_rounds(
            f"ledger month, {self.a.pg_sessions:,} (PostgreSQL)",
            cmd,
            self.env_for(big_url),
            "psql, same statement",
            floor,
            1.5,
        )
        vastai = shutil.which("vastai", path=str(Path(sys.executable).parent)) or shutil.which("vastai")
        env = self.env_for(small_url)
        t, load = self.rounds(
            [
                ("vastai", [str(vastai), "--help"], self.env),
                ("month", cmd, env),
                ("psql", psql_argv(pg, small_url, sql, args, self.work, "month-small"), self.env),
            ]
        )
        what = f"ledger month, {self.a.month_sessions:,} (PostgreSQL)"
        self.add(what, t["month"], "vastai --help", t["vastai"], 1.0, load)
        self.add(what, t["month"], "psql, same statement", t["psql"], None, load)

    def csv(self, big: Path) -> None:
        n = self.a.sessions
        sql = (
            "SELECT created_at, experiment, provider, card, gpu_count, usd_per_hour, billed_seconds / 3600.0, cost_usd, "
            "tokens, conclusion, simulated, id FROM sessions WHERE status = 'closed' ORDER BY created_at, id"
        )
        env = self.env_for(f"sqlite:///{big}")
        t, load = self.rounds(
            [
                ("floor", ["sqlite3", "-csv", str(big), sql], self.env),
                ("ours", self.gpuops + ["ledger", "export"], env),
            ],
            self.heavy_runs,
        )
        # The export runs two processes (ledger/csvio.py write_export_forked); sqlite3 -csv one.
        self.add(
            f"ledger export, {n:,} rows",
            t["ours"],
            "sqlite3 -csv",
            t["floor"],
            1.5,
            load,
            "(peak <= 100 MiB per process)",
        )
        out = self.work / "export.csv"
        shutil.copyfile(self.work / "out-ours.txt", out)
        target = self.work / "import.db"

        def fresh(_label: str) -> None:
            for sfx in ("", "-wal", "-shm"):
                Path(str(target) + sfx).unlink(missing_ok=True)
            new_ledger(target)

        # The physical floor: sqlite3's own CSV reader into a plain table of the file's columns, in
        # the same fresh ledger file (no parsing, no checks, no indexes).
        dot_import = ["sqlite3", str(target), "-cmd", ".mode csv", f".import --skip 1 {out} imported_csv"]
        # The schema's floor: sqlite3 itself puts the same rows into ``sessions`` (its indexes dropped
        # and built after, as the import does), converting with SQL and checking nothing.
        into_sessions = self.work / "into_sessions.sql"
        into_sessions.write_text(IMPORT_SCHEMA_FLOOR.format(csv=out))
        t, load = self.rounds(
            [
                ("into sessions", ["sqlite3", str(target), f".read {into_sessions}"], self.env),
                (
                    "ours",
                    self.gpuops + ["ledger", "import", str(out), "--tz", "UTC"],
                    self.env_for(f"sqlite:///{target}"),
                ),
                ("dot import", dot_import, self.env),
            ],
            self.heavy_runs,
            warmup=0,
            before=fresh,
        )
        what = f"ledger import, {n:,} rows"
        self.add(
            what,
            t["ours"],
            "sqlite3 into sessions",
            t["into sessions"],
            2.0,
            load,
            "(the schema's own floor, its indexes; peak <= 100 MiB)",
        )
        self.add(what, t["ours"], "sqlite3 .import", t["dot import"], None, load, "(a plain table: no indexes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sessions", type=int, default=1_000_000, help="sessions in the big ledger (100000 for a quicker run)"
    )
    ap.add_argument("--month-sessions", type=int, default=100_000, help="sessions this month (cap, month, experiments)")
    ap.add_argument(
        "--pg-sessions", type=int, default=1_000_000, help="sessions this month on PostgreSQL (statement-bound)"
    )
    ap.add_argument("--small-month", type=int, default=8_000)
    ap.add_argument(
        "--runs", type=int, default=5, help="timed rounds per figure (up, export, import: half, at least 3)"
    )
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--only", default=",".join(GROUPS), help=f"some of {','.join(GROUPS)}")
    ap.add_argument("--repo", help="the gpuops checkout to time (default: this one)")
    a = ap.parse_args()
    which = set(a.only.split(","))
    if which - set(GROUPS):
        ap.error(f"--only: unknown {', '.join(sorted(which - set(GROUPS)))} (groups: {', '.join(GROUPS)})")
    if a.no_postgres:
        which.discard("postgres")
    now = time.time()
    start = month_start(now)
    end_of_month = month_start(start + 32 * 86400)
    this_month = max(start + 60.0, now - 60.0)
    history = (start - a.sessions * 90.0, start - 3600.0)  # the big ledger: before this month, 90 s apart
    work = Path(tempfile.mkdtemp(prefix="gpuops-bench-"))
    b = Bench(a, work)
    try:
        empty = work / "empty.db"
        new_ledger(empty)
        if "startup" in which:
            b.startup(empty)
        if which & {"up", "ps", "csv"}:
            big = sqlite_ledger("big", a.sessions, *history)
            if which & {"up", "ps"}:
                b.scale(empty, big, which)
            if "csv" in which:
                b.csv(big)
        if which & {"cap", "reports", "history"}:
            month = sqlite_ledger("month", a.month_sessions, start, this_month)
            if "cap" in which:
                b.cap(month)
            if "reports" in which:
                b.reports(month, start, end_of_month, f"{a.month_sessions:,} (SQLite)")
            if "history" in which:
                big = sqlite_ledger("big", a.sessions, *history)
                what = f"{a.sessions:,} + {a.month_sessions:,} (SQLite)"
                b.reports(history_ledger(big, month), start, end_of_month, what)
        if "small" in which:
            b.small_month(sqlite_ledger("small", a.small_month, start, this_month), start)
        if "postgres" in which:
            from tests.support.postgres import PostgresServer

            pg = PostgresServer().start()
            try:
                big_url, small_url = pg.new_database(), pg.new_database()
                pg_load(pg, big_url, sqlite_ledger("month", a.pg_sessions, start, this_month))
                pg_load(pg, small_url, sqlite_ledger("month", a.month_sessions, start, this_month))
                b.postgres(pg, big_url, small_url, start, end_of_month)
            finally:
                pg.stop()
    finally:
        b.print_table()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
