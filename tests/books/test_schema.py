"""The schema is the models' (stated once); a ledger of the schema before that opens in this code with nothing lost."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ledger.migrations import applied

OLD_ROW = {
    "id": "20260101-0900-aaaa",
    "experiment": "legacy",
    "job": "bench.sh",
    "provider": "vast",
    "card": "rtx-4090",
    "gpu_count": 1,
    "spot": True,
    "label": "gpuops-20260101-0900-aaaa",
    "instance_id": "777",
    "offer_id": "o1",
    "usd_per_hour": 0.35,
    "bid_usd_per_hour": 0.3,
    "simulated": False,
    "status": "closed",
    "created_at": 1793865600.25,
    "instance_created_at": 1793865630.0,
    "ready_at": 1793865700.0,
    "ended_at": 1793869230.0,
    "end_reason": "job_end",
    "exit_code": 0,
    "billed_seconds": 3600.0,
    "cost_usd": 0.35,
    "tokens": 4_200_000,
    "job_seconds": 3000.0,
    "conclusion": "old books",
    "note": "n",
    "log_path": "/logs/a.log",
    "results_path": "/out/a",
}


# The schema of a ledger made by gpuops before its schema was stated once (migrations m001_initial ..
# m012_drop_source_index applied), as SQLite holds it (``sqlite_master``): written here, not made by
# the code under test.
TWELVE_STEP_SQLITE = """
CREATE TABLE schema_migrations (
    name VARCHAR NOT NULL,
    applied_at FLOAT NOT NULL,
    PRIMARY KEY (name)
);
CREATE TABLE sessions (
    id VARCHAR NOT NULL,
    experiment VARCHAR NOT NULL,
    job VARCHAR NOT NULL,
    provider VARCHAR NOT NULL,
    card VARCHAR NOT NULL,
    gpu_count INTEGER NOT NULL,
    spot BOOLEAN NOT NULL,
    label VARCHAR NOT NULL,
    instance_id VARCHAR,
    offer_id VARCHAR,
    usd_per_hour FLOAT,
    bid_usd_per_hour FLOAT,
    simulated BOOLEAN NOT NULL,
    status VARCHAR NOT NULL,
    created_at FLOAT NOT NULL,
    instance_created_at FLOAT,
    ready_at FLOAT,
    ended_at FLOAT,
    end_reason VARCHAR,
    exit_code INTEGER,
    billed_seconds FLOAT,
    cost_usd FLOAT,
    tokens BIGINT NOT NULL,
    job_seconds FLOAT,
    conclusion VARCHAR NOT NULL,
    note VARCHAR NOT NULL,
    log_path VARCHAR NOT NULL,
    results_path VARCHAR NOT NULL, billing_increment_seconds FLOAT, last_heartbeat_at FLOAT, end_source VARCHAR, source VARCHAR DEFAULT 'gpuops' NOT NULL, max_hours FLOAT, ready_timeout_seconds FLOAT, idle_minutes FLOAT, estimated_usd FLOAT, charged_usd FLOAT, cost_source VARCHAR, owner VARCHAR, account VARCHAR, run_id VARCHAR, attempt INTEGER, max_session_usd FLOAT,
    PRIMARY KEY (id)
);
CREATE INDEX ix_sessions_created_at ON sessions (created_at);
CREATE INDEX ix_sessions_experiment ON sessions (experiment);
CREATE TABLE bootstrap_steps (
    id INTEGER NOT NULL,
    session_id VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    seconds FLOAT NOT NULL,
    detail VARCHAR NOT NULL,
    PRIMARY KEY (id),
    FOREIGN KEY(session_id) REFERENCES sessions (id)
);
CREATE INDEX ix_bootstrap_steps_session_id ON bootstrap_steps (session_id);
CREATE TABLE events (
    id INTEGER NOT NULL,
    session_id VARCHAR NOT NULL,
    at FLOAT NOT NULL,
    kind VARCHAR NOT NULL,
    detail VARCHAR NOT NULL,
    PRIMARY KEY (id),
    FOREIGN KEY(session_id) REFERENCES sessions (id)
);
CREATE INDEX ix_events_session_id ON events (session_id);
CREATE TABLE session_leases (
    session_id VARCHAR NOT NULL,
    owner VARCHAR NOT NULL,
    expires_at FLOAT NOT NULL,
    PRIMARY KEY (session_id)
);
CREATE TABLE refusals (
    id INTEGER NOT NULL,
    scope VARCHAR NOT NULL,
    reason VARCHAR NOT NULL,
    detail VARCHAR NOT NULL,
    set_at FLOAT NOT NULL,
    lifted_at FLOAT, account VARCHAR,
    PRIMARY KEY (id)
);
CREATE INDEX ix_refusals_scope ON refusals (scope);
CREATE TABLE cost_lines (
    id INTEGER NOT NULL,
    session_id VARCHAR,
    provider VARCHAR NOT NULL,
    instance_id VARCHAR,
    kind VARCHAR NOT NULL,
    start_at FLOAT NOT NULL,
    end_at FLOAT NOT NULL,
    usd FLOAT NOT NULL,
    simulated BOOLEAN NOT NULL,
    source VARCHAR NOT NULL,
    description VARCHAR NOT NULL,
    booked_at FLOAT NOT NULL,
    line_key VARCHAR NOT NULL,
    PRIMARY KEY (id),
    UNIQUE (line_key)
);
CREATE INDEX ix_cost_lines_session_id ON cost_lines (session_id);
CREATE INDEX ix_cost_lines_end_at ON cost_lines (end_at);
CREATE INDEX ix_sessions_open ON sessions (created_at) WHERE status <> 'closed';
CREATE INDEX ix_refusals_active ON refusals (scope, reason) WHERE lifted_at IS NULL;
CREATE INDEX ix_sessions_books ON sessions (ended_at, created_at, status, simulated, instance_created_at, instance_id, cost_usd, owner, experiment, card, gpu_count, provider, cost_source, billed_seconds, tokens, job_seconds, usd_per_hour, conclusion);
CREATE TABLE watchdog_passes (
    id INTEGER NOT NULL,
    host VARCHAR NOT NULL,
    owner VARCHAR NOT NULL,
    at FLOAT NOT NULL,
    seconds FLOAT NOT NULL,
    interval_seconds FLOAT NOT NULL,
    checked INTEGER NOT NULL,
    ended INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    actions INTEGER NOT NULL,
    PRIMARY KEY (id)
);
CREATE INDEX ix_watchdog_passes_host ON watchdog_passes (host, id);
CREATE TABLE runs (
    id VARCHAR NOT NULL,
    experiment VARCHAR NOT NULL,
    job VARCHAR NOT NULL,
    provider VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    created_at FLOAT NOT NULL,
    ended_at FLOAT,
    end_reason VARCHAR,
    detail VARCHAR NOT NULL,
    recover INTEGER NOT NULL,
    recover_on VARCHAR NOT NULL,
    attempts INTEGER NOT NULL,
    max_hours FLOAT,
    max_usd FLOAT,
    note VARCHAR NOT NULL,
    owner VARCHAR,
    account VARCHAR,
    PRIMARY KEY (id)
);
CREATE INDEX ix_runs_owner ON runs (owner);
CREATE INDEX ix_runs_created_at ON runs (created_at);
CREATE INDEX ix_sessions_instance_id ON sessions (instance_id) WHERE instance_id IS NOT NULL;
CREATE INDEX ix_sessions_owner ON sessions (owner) WHERE owner IS NOT NULL;
CREATE INDEX ix_sessions_account ON sessions (account) WHERE account IS NOT NULL;
CREATE INDEX ix_sessions_run_id ON sessions (run_id) WHERE run_id IS NOT NULL;
"""
TWELVE_STEPS = (
    "m001_initial m002_cost_truth m003_leases_refusals m004_session_limits m005_books m006_query_indexes "
    "m007_ownership m008_books_index m009_watchdog_passes m010_runs m011_partial_indexes m012_drop_source_index"
).split()


def test_a_ledger_of_the_twelve_step_schema_opens_and_takes_writes(tmp_path):
    """An SQLite ledger file of the schema before it was stated once opens in this code: nothing
    rewritten, its rows read as they were, the month counts them, and it takes new writes."""
    import sqlite3

    from gpuops.accounting import ledger_service as cmds
    from ledger import Ledger

    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(TWELVE_STEP_SQLITE)
    con.executemany("INSERT INTO schema_migrations (name, applied_at) VALUES (?, 0)", [(n,) for n in TWELVE_STEPS])
    cols = ", ".join(OLD_ROW)
    con.execute(f"INSERT INTO sessions ({cols}) VALUES ({', '.join('?' * len(OLD_ROW))})", tuple(OLD_ROW.values()))
    con.execute(
        "INSERT INTO events (session_id, at, kind, detail) VALUES (?, 1793865600.25, 'intent', '')", (OLD_ROW["id"],)
    )
    con.execute(
        "INSERT INTO bootstrap_steps (session_id, name, status, seconds, detail) VALUES (?, 'pip', 'done', 41.5, '')",
        (OLD_ROW["id"],),
    )
    con.commit()
    before = sorted(con.execute("SELECT type, name, sql FROM sqlite_master WHERE name <> 'schema_migrations'"))
    con.close()

    url = f"sqlite:///{path}"
    led = Ledger(url)
    try:
        with led.engine.connect() as conn:
            # m001_models recorded, not run; m002_sweeps run (the sweep queue, runs.sweep_id)
            assert sorted(applied(conn)) == sorted(TWELVE_STEPS + ["m001_models", "m002_sweeps"])
        row = led.get(OLD_ROW["id"])
        for k, v in OLD_ROW.items():
            assert getattr(row, k) == v, k
        assert (row.source, row.end_source, row.run_id) == ("gpuops", None, None)  # the old column default
        assert [s.seconds for s in led.steps(row.id)] == [41.5]
        assert [e.kind for e in led.events(row.id)] == ["intent"]
        rep = cmds.month(led, "2026-11", "UTC")
        assert (rep["total_usd"], rep["sessions"], rep["usd_per_mtoken"]) == (0.35, 1, round(0.35 / 4.2, 6))
        led.note(row.id, "reopened in the new schema")  # and the old row takes new writes
        led.add_session({"id": "new-1", "created_at": 1793900000.0, "spot": True})
        led.event("new-1", "create", {"offer": "o2"})
        led.add_steps("new-1", [{"step": "pip", "status": "done", "seconds": 1.0}])
        assert led.get(row.id).conclusion == "reopened in the new schema" and led.get("new-1").spot is True
        assert [r.id for r in led.open_sessions()] == ["new-1"]
    finally:
        led.engine.dispose()
    con = sqlite3.connect(path)
    after = sorted(con.execute("SELECT type, name, sql FROM sqlite_master WHERE name <> 'schema_migrations'"))
    run_cols = [r[1] for r in con.execute("PRAGMA table_info(runs)")]
    con.close()
    swept = ("sweep", "ix_sweep", "ix_runs_sweep_id", "sqlite_autoindex_sweep")
    assert {n for _, n, _ in after if n.startswith(swept)} >= {"sweeps", "sweep_jobs", "sweep_blobs"}
    assert run_cols[-1] == "sweep_id"  # m002_sweeps's one column on an old table
    kept = [(t, n, q) for t, n, q in after if not n.startswith(swept) and n != "runs"]
    assert kept == [r for r in before if r[1] != "runs"]  # its tables and indexes as they were


def test_a_twelve_step_ledger_stopped_part_way_is_refused_in_one_line(tmp_path):
    import sqlite3

    from ledger import Ledger
    from ledger.migrations import LedgerTooOld

    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(TWELVE_STEP_SQLITE)
    con.executemany("INSERT INTO schema_migrations (name, applied_at) VALUES (?, 0)", [(n,) for n in TWELVE_STEPS[:7]])
    con.commit()
    con.close()
    with pytest.raises(LedgerTooOld, match="stopped before m008_books_index") as e:
        Ledger(f"sqlite:///{path}")
    assert "open it once with the gpuops that made it" in e.value.fix


def test_a_new_ledger_has_the_twelve_step_schema(tmp_path):
    """A ledger made from the models has the tables, columns and indexes of the twelve steps' (SQLite),
    once the later migrations (m002_sweeps) ran on those."""
    import sqlite3

    from ledger import Ledger

    Ledger(f"sqlite:///{tmp_path / 'new.db'}").engine.dispose()
    old = sqlite3.connect(tmp_path / "old.db")
    old.executescript(TWELVE_STEP_SQLITE)
    old.executemany("INSERT INTO schema_migrations (name, applied_at) VALUES (?, 0)", [(n,) for n in TWELVE_STEPS])
    old.commit()
    Ledger(f"sqlite:///{tmp_path / 'old.db'}").engine.dispose()
    new = sqlite3.connect(tmp_path / "new.db")

    def shape(con):
        tables = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        cols = {t: sorted((r[1], r[2], r[3], r[4]) for r in con.execute(f"PRAGMA table_info({t})")) for t in tables}
        idx = {
            n: (t, [r[2] for r in con.execute(f"PRAGMA index_info({n})")], " ".join((sql or "").split(" WHERE ")[1:]))
            for n, t, sql in con.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index'")
            if not n.startswith("sqlite_autoindex")
        }
        return cols, idx

    assert shape(new) == shape(old)


def test_the_migrated_tables_are_the_models(ledger_url):
    """A migrated ledger's tables have the models' columns (what ``ledger.reads`` reads whole), and
    `ledger show` shows each."""
    from ledger import Ledger
    from ledger.models import metadata
    from ledger.reports import SESSION_FIELDS

    led = Ledger(ledger_url)
    try:
        for name, table in metadata.tables.items():
            assert set(led.reads.columns(name)) == set(table.c.keys()), name
        assert set(led.reads.columns("sessions")) == set(SESSION_FIELDS)
    finally:
        led.engine.dispose()


def test_report_path_does_not_import_the_orm():
    import subprocess
    import sys

    code = (
        "import sys, gpuops.accounting.ledger_service, gpuops.render.ledger, ledger.reads, ledger.reports, ledger.csvio, ledger.billing; "
        "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy.orm') or m == 'ledger.models'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_write_imports_no_orm(tmp_path):
    """A rental's writes (a session, its run, a close) are Core statements: SQLAlchemy's ORM never loads."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'l.db'}"
    code = (
        "import sys\nfrom ledger import Ledger\n"
        f"led = Ledger({url!r})\n"
        "led.add_run({'id': 'run-1', 'created_at': 1.0})\n"
        "led.add_session({'id': 's1', 'created_at': 1.0, 'run_id': 'run-1'})\n"
        "led.close('s1', 2.0, 'job_end')\n"
        "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy.orm')), led.get('s1').status)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "closed"]


def test_the_models_indexes_are_the_migrations(ledger_url):
    """Every index a model states is in a migrated ledger: same columns, same partial predicate
    (m011's ``WHERE col IS NOT NULL``), on SQLite and PostgreSQL."""
    from ledger import Ledger
    from ledger.models import sessions

    def where(clause) -> str:  # PostgreSQL reflects "(run_id IS NOT NULL)", "((status)::text <> 'closed'::text)"
        return "" if clause is None else str(clause).replace("(", "").replace(")", "").replace("::text", "").lower()

    led = Ledger(ledger_url)
    dialect = led.engine.dialect.name
    try:
        with led.engine.connect() as conn:
            have = {
                i["name"]: (i["column_names"], where(i.get("dialect_options", {}).get(f"{dialect}_where")))
                for i in sa.inspect(conn).get_indexes("sessions")
            }
        stated = {
            i.name: ([c.name for c in i.columns], where(i.dialect_options[dialect]["where"])) for i in sessions.indexes
        }
        assert stated["ix_sessions_run_id"] == (["run_id"], "run_id is not null")
        assert {n: have.get(n) for n in stated} == stated
        assert "ix_sessions_ended_at" not in have  # ix_sessions_books leads with ended_at (m011)
    finally:
        led.engine.dispose()
