"""A ledger written by the first schema opens in the newest code with nothing lost."""

from __future__ import annotations

import sqlalchemy as sa

from ledger.migrations import MIGRATIONS, applied, migrate

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


def test_first_schema_opens_in_newest_code(ledger_url):
    engine = sa.create_engine(ledger_url)
    with engine.begin() as conn:
        assert migrate(conn, upto="m001_initial") == ["m001_initial"]
        md = sa.MetaData()
        md.reflect(conn)
        assert "source" not in md.tables["sessions"].c  # really the first schema
        conn.execute(md.tables["sessions"].insert(), [OLD_ROW])
        conn.execute(
            md.tables["events"].insert(),
            [{"session_id": OLD_ROW["id"], "at": 1793865600.25, "kind": "intent", "detail": ""}],
        )
        conn.execute(
            md.tables["bootstrap_steps"].insert(),
            [{"session_id": OLD_ROW["id"], "name": "pip", "status": "done", "seconds": 41.5, "detail": ""}],
        )
    engine.dispose()

    from gpuops.accounting import ledger_service as cmds
    from ledger import Ledger

    led = Ledger(ledger_url)
    try:
        with led.engine.connect() as conn:
            assert applied(conn) == [name for name, _ in MIGRATIONS]
        row = led.get(OLD_ROW["id"])
        for k, v in OLD_ROW.items():
            assert getattr(row, k) == v, k
        assert (row.source, row.end_source, row.billing_increment_seconds, row.last_heartbeat_at) == (
            "gpuops",
            None,
            None,
            None,
        )
        assert [s.seconds for s in led.steps(row.id)] == [41.5]
        assert [e.kind for e in led.events(row.id)] == ["intent"]
        rep = cmds.month(led, "2026-11", "UTC")
        assert (rep["total_usd"], rep["sessions"], rep["usd_per_mtoken"], rep["usd_per_mtoken_job"]) == (
            0.35,
            1,
            0.083333,
            round(3000 * 0.35 / 3600 / 4.2, 6),
        )
        # and the old row takes new writes
        led.note(row.id, "reopened in the new schema")
        assert led.get(row.id).conclusion == "reopened in the new schema"
    finally:
        led.engine.dispose()
    again = Ledger(ledger_url)  # opening twice applies nothing twice
    with again.engine.connect() as conn:
        assert applied(conn) == [name for name, _ in MIGRATIONS]
    again.engine.dispose()


def test_the_migrated_tables_are_the_models(ledger_url):
    """The schema is stated twice, in the migrations and the models: the tables the migrations
    make have the models' columns (what ``ledger.reads`` reads whole), and `ledger show` shows each."""
    from ledger import Ledger
    from ledger.models import SQLModel
    from ledger.reports import SESSION_FIELDS

    led = Ledger(ledger_url)
    try:
        for name, table in SQLModel.metadata.tables.items():
            assert set(led.reads.columns(name)) == set(table.c.keys()), name
        assert set(led.reads.columns("sessions")) == set(SESSION_FIELDS)
    finally:
        led.engine.dispose()


def test_report_path_does_not_import_the_orm():
    import subprocess
    import sys

    code = (
        "import sys, gpuops.accounting.ledger_service, gpuops.render.ledger, ledger.reads, ledger.reports, ledger.csvio, ledger.billing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlmodel' or m == 'ledger.models'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_migration_names_load_without_sqlalchemy():
    """The read path checks a ledger is current with ``MIGRATION_NAMES`` before it reads with
    ``sqlite3``: importing them costs no SQLAlchemy."""
    import subprocess
    import sys

    code = "import sys\nfrom ledger.migrations import MIGRATION_NAMES\nassert 'sqlalchemy' not in sys.modules\nprint(','.join(MIGRATION_NAMES))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split(",") == [name for name, _ in MIGRATIONS]


def test_fast_sqlite_reads_equal_sqlalchemy_reads(tmp_path):
    from ledger import Ledger
    from ledger.reads import LedgerReader, engine_reads
    from tests.books.conftest import build_books

    url = f"sqlite:///{tmp_path / 'l.db'}"
    led = Ledger(url)
    build_books(led)
    reader = LedgerReader(url)
    assert reader.driver == "sqlite3" and reader._engine is None  # the stdlib path, no engine opened
    for cols in (None, ("id", "simulated", "cost_usd", "created_at")):
        fast = reader.rows_between(1793491200.0, 1796083200.0, cols)
        core = engine_reads(led.engine).rows_between(1793491200.0, 1796083200.0, cols)
        assert [tuple(r) for r in fast] == [tuple(r) for r in core]
        assert all(type(r.simulated) is bool for r in fast)
    assert [r.id for r in reader.rows_between()] == ["s7", "s1", "s2", "s5", "s3", "s4", "s6"]
    led.engine.dispose()


def test_reader_migrates_an_old_sqlite_ledger(tmp_path):
    from ledger.reads import LedgerReader

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        migrate(conn, upto="m001_initial")
        conn.execute(sa.table("sessions", *[sa.column(k) for k in OLD_ROW]).insert(), [OLD_ROW])
    engine.dispose()
    reader = LedgerReader(url)
    assert reader.driver == "sqlalchemy"  # needed a migration: went through SQLAlchemy
    rows = reader.rows_between()
    assert [(r.id, r.cost_usd, r.source, r.spot) for r in rows] == [(OLD_ROW["id"], 0.35, "gpuops", True)]
    assert LedgerReader(url).driver == "sqlite3"  # current now


def test_the_models_indexes_are_the_migrations(ledger_url):
    """Every index a model states is in a migrated ledger: same columns, same partial predicate
    (m011's ``WHERE col IS NOT NULL``), on SQLite and PostgreSQL."""
    from ledger import Ledger
    from ledger.models import Session

    def where(clause) -> str:  # PostgreSQL reflects "(run_id IS NOT NULL)"
        return "" if clause is None else str(clause).replace("(", "").replace(")", "").lower()

    led = Ledger(ledger_url)
    dialect = led.engine.dialect.name
    try:
        with led.engine.connect() as conn:
            have = {
                i["name"]: (i["column_names"], where(i.get("dialect_options", {}).get(f"{dialect}_where")))
                for i in sa.inspect(conn).get_indexes("sessions")
            }
        stated = {
            i.name: ([c.name for c in i.columns], where(i.dialect_options[dialect]["where"]))
            for i in Session.__table__.indexes
        }
        assert stated["ix_sessions_run_id"] == (["run_id"], "run_id is not null")
        assert {n: have.get(n) for n in stated} == stated
        assert "ix_sessions_ended_at" not in have  # ix_sessions_books leads with ended_at (m011)
    finally:
        led.engine.dispose()
