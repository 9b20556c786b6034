"""Every query path of `up`, `ps`, `watchdog` and `reconcile` is answered from an index:
the database's own query planner says so, on SQLite and on PostgreSQL (where the planner is told
to avoid sequential scans, since a test-sized table is cheaper to scan than to search)."""

from __future__ import annotations

import sqlalchemy as sa

from ledger import Ledger
from ledger.reads import OPEN_SESSIONS_WHERE

OPEN_SESSIONS_SQL = f"SELECT * FROM sessions WHERE {OPEN_SESSIONS_WHERE} ORDER BY created_at, id"  # Reads.open_sessions

# Sessions overlapping [start, end): the month-range predicate of the reports and the monthly cap.
MONTH_RANGE_SQL = (
    "SELECT id, cost_usd FROM sessions WHERE created_at < :end AND (ended_at IS NULL OR ended_at >= :start)"
)
# The reports' form (ledger.reads, ledger.limits): unary plus keeps SQLite from walking created_at,
# so the OR's two arms are lookups on ended_at's index.
MONTH_RANGE_PLUS_SQL = (
    "SELECT id, cost_usd FROM sessions WHERE +created_at < :end AND (ended_at >= :start OR ended_at IS NULL)"
)
# The same rows in the form SQLite searches from ``ended_at`` (the current month costs what it holds).
MONTH_RANGE_UNION_SQL = (
    "SELECT id, cost_usd FROM sessions WHERE ended_at >= :start AND created_at < :end "
    "UNION ALL SELECT id, cost_usd FROM sessions WHERE ended_at IS NULL AND created_at < :end"
)


def _fill(led: Ledger, n: int = 400) -> None:
    rows = [
        dict(
            id=f"s{i:05d}",
            experiment="e",
            job="",
            provider="local",
            card="rtx-4090",
            gpu_count=1,
            spot=False,
            label="",
            simulated=False,
            status="closed",
            created_at=1.0e9 + i * 60.0,
            ended_at=1.0e9 + i * 60.0 + 30.0,
            tokens=0,
            conclusion="",
            note="",
            log_path="",
            results_path="",
            source="gpuops",
        )
        for i in range(n)
    ]
    rows[-1].update(status="running", ended_at=None)
    with led.engine.begin() as conn:
        conn.execute(sa.text("SELECT 1"))
        from ledger.models import sessions

        conn.execute(sessions.insert(), rows)


def _plan(led: Ledger, sql: str, params: dict) -> str:
    with led.engine.begin() as conn:
        if led.engine.dialect.name == "sqlite":
            return "\n".join(str(r[-1]) for r in conn.execute(sa.text("EXPLAIN QUERY PLAN " + sql), params))
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        return "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + sql), params))


def test_open_sessions_and_month_range_use_an_index(ledger_url):
    led = Ledger(ledger_url)
    try:
        _fill(led)
        args = {"start": 1.0e9 + 300 * 60.0, "end": 1.0e9 + 400 * 60.0}
        open_plan = _plan(led, OPEN_SESSIONS_SQL, {})
        month_plan = _plan(led, MONTH_RANGE_SQL, args)
        if led.engine.dialect.name == "sqlite":
            assert "ix_sessions_open" in open_plan, open_plan
            union_plan = _plan(led, MONTH_RANGE_UNION_SQL, args)
            plus_plan = _plan(led, MONTH_RANGE_PLUS_SQL, args)
            assert "ended" in plus_plan, plus_plan
            for plan in (month_plan, union_plan, plus_plan):  # every access to sessions is an index search
                steps = [ln for ln in plan.splitlines() if "sessions" in ln]
                assert steps and all(ln.startswith("SEARCH sessions USING") and "INDEX" in ln for ln in steps), plan
        else:
            assert "ix_sessions_open" in open_plan and "Seq Scan" not in open_plan, open_plan
            assert "Index" in month_plan and "Seq Scan" not in month_plan, month_plan
            plus_plan = _plan(led, MONTH_RANGE_PLUS_SQL, args)
            assert "Index" in plus_plan and "Seq Scan" not in plus_plan, plus_plan
        assert [r.id for r in led.open_sessions()] == ["s00399"]
        with led.engine.connect() as conn:
            got = sorted(r.id for r in conn.execute(sa.text(MONTH_RANGE_SQL), args))
            assert got == sorted(r.id for r in conn.execute(sa.text(MONTH_RANGE_UNION_SQL), args))
            assert got == sorted(r.id for r in conn.execute(sa.text(MONTH_RANGE_PLUS_SQL), args))
        assert got == [f"s{i:05d}" for i in range(300, 400)]
    finally:
        led.engine.dispose()


def test_open_sessions_load_no_orm(tmp_path):
    """`ps` reads its open rows with SQLAlchemy Core alone (neither the ORM nor the write tables
    load), and the rows hold what was written (same keys and values, bools as bool)."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    led = Ledger(url)

    led.add_session(
        dict(
            id="a1",
            experiment="e",
            job="j",
            provider="local",
            card="rtx-4090",
            gpu_count=1,
            spot=True,
            label="gpuops-a1",
            simulated=False,
            status="provisioning",
            created_at=5.0,
        )
    )
    want = dict(led.get("a1")._mapping)
    led.engine.dispose()
    code = (
        "import sys\nfrom ledger import Ledger\n"
        f"rows = Ledger({url!r}).open_sessions()\n"
        "assert not {'sqlalchemy.orm', 'ledger.models'} & set(sys.modules), 'ORM or tables loaded'\n"
        "print(repr(dict(rows[0]._mapping)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == want  # noqa: S307  (our own repr of a dict of plain values)


def test_find_by_prefix_is_a_key_range(ledger_url):
    led = Ledger(ledger_url)
    try:
        _fill(led, 30)
        assert [r.id for r in led.find("s0001")] == [f"s{i:05d}" for i in range(10, 20)]
        assert [r.id for r in led.find("s00029")] == ["s00029"]
        assert led.find("t") == [] and len(led.find("")) == 30
        assert led.find("s%") == [] and led.find("s_0") == []  # no LIKE wildcards

        for sid in ("20261129-1632-3f9a", "20261129-1700-aaaa", "202611291"):
            led.add_session(
                dict(
                    id=sid,
                    experiment="e",
                    job="",
                    provider="local",
                    card="c",
                    gpu_count=1,
                    spot=False,
                    label="",
                    simulated=False,
                    status="closed",
                    created_at=1.0,
                )
            )
        assert [r.id for r in led.find("20261129-")] == ["20261129-1632-3f9a", "20261129-1700-aaaa"]
        assert [r.id for r in led.find("20261129-16")] == ["20261129-1632-3f9a"]
    finally:
        led.engine.dispose()


def _hot_queries() -> list[tuple[str, str, dict, str]]:
    """(what, SQL, parameters, the indexes its sessions access must use) of the hot paths that read
    the indexes m011 made partial or dropped: the planner's own words, on either database."""
    from ledger.aggregate import EXPERIMENT_KEYS, day_statement, params, statement
    from ledger.sync import _tables

    _sessions = _tables()[0]

    lo, hi = 1.0e9 + 300 * 60.0, 1.0e9 + 400 * 60.0
    # The month and experiments reports (one statement each): closed rows by the period's search on
    # the books index, open rows from their partial index.
    month = [
        ("ledger month", statement(lo, hi), params(lo, hi), "ix_sessions_books ix_sessions_open"),
        (
            "ledger experiments",
            statement(lo, hi, EXPERIMENT_KEYS, conclusion=True),
            params(lo, hi),
            "ix_sessions_books ix_sessions_open",
        ),
        (  # its days: the same searches, the rows across a day's edge joined with the table of days
            "ledger month --by day",
            day_statement(4),
            params(lo, hi) | {f"e{i}": lo + (hi - lo) * i / 4 for i in range(5)},
            "ix_sessions_books ix_sessions_open",
        ),
    ]
    ids = sa.select(_sessions.c.provider, _sessions.c.instance_id).where(
        _sessions.c.instance_id.in_(["i00201", "i00202"])
    )
    by_instance = str(ids.compile(compile_kwargs={"literal_binds": True}))  # ledger.sync.known_instances
    return [
        ("ps: open rows", OPEN_SESSIONS_SQL, {}, "ix_sessions_open"),
        ("ledger sync: rows of instances", by_instance, {}, "ix_sessions_instance_id"),
        (
            "a run's rentals",
            "SELECT id FROM sessions WHERE run_id = :r ORDER BY attempt, created_at",
            {"r": "run-1"},
            "ix_sessions_run_id",
        ),
        ("month range", MONTH_RANGE_PLUS_SQL, {"start": lo, "end": hi}, "ix_sessions_books"),
        *month,
    ]


def test_hot_queries_keep_an_index_with_partial_indexes(ledger_url):
    """m011: the indexes on instance_id, owner, account and run_id hold only rows with a value, and
    ended_at's own index went for the books index it prefixes; every hot query still searches one."""
    led = Ledger(ledger_url)
    try:
        _fill(led)
        with led.engine.begin() as conn:  # half the rows rented (an instance, an owner), a few in runs
            conn.execute(
                sa.text(
                    "UPDATE sessions SET instance_id = 'i' || substr(id, 2), owner = 'ann', account = 'runpod:a'"
                    " WHERE id >= 's00200'"
                )
            )
            conn.execute(sa.text("UPDATE sessions SET run_id = 'run-1' WHERE id >= 's00390'"))
            if led.engine.dialect.name == "sqlite":  # no statistics, as a real ledger has none
                defs = {
                    r[0]: r[1]
                    for r in conn.exec_driver_sql(
                        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions'"
                    )
                }
            else:
                conn.exec_driver_sql("ANALYZE sessions")  # as autovacuum does
                defs = {
                    r[0]: r[1]
                    for r in conn.exec_driver_sql(
                        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'sessions'"
                    )
                }
        assert "ix_sessions_ended_at" not in defs and defs["ix_sessions_books"]
        for name in ("ix_sessions_instance_id", "ix_sessions_owner", "ix_sessions_account", "ix_sessions_run_id"):
            assert defs[name].replace("(", "").replace(")", "").endswith(f"WHERE {name[12:]} IS NOT NULL"), defs[name]
        sqlite = led.engine.dialect.name == "sqlite"
        for what, sql, args, index in _hot_queries():
            plan = _plan(led, sql, args)
            if sqlite:
                # every access to sessions is an index search (or a walk of the open rows' partial index)
                steps = [ln for ln in plan.splitlines() if " sessions " in f"{ln} "]
                assert steps and all(
                    (ln.startswith("SEARCH sessions USING") and "INDEX" in ln)
                    or ln.startswith("SCAN sessions USING INDEX ix_sessions_open")
                    for ln in steps
                ), (what, plan)
            else:
                assert "Seq Scan" not in plan, (what, plan)
            assert all(name in plan for name in index.split()), (what, plan)
        with led.engine.connect() as conn:  # and the partial indexes answer with every row
            hot = {what: (sql, args) for what, sql, args, _ in _hot_queries()}
            assert sorted(conn.execute(sa.text(hot["ledger sync: rows of instances"][0])).all()) == [
                ("local", "i00201"),
                ("local", "i00202"),
            ]
            assert [r[0] for r in conn.execute(sa.text(hot["a run's rentals"][0]), hot["a run's rentals"][1])] == [
                f"s{i:05d}" for i in range(390, 400)
            ]
    finally:
        led.engine.dispose()
