"""A PostgreSQL ledger failing under the psycopg read path (no SQLAlchemy) is one line, like SQLAlchemy's."""

from __future__ import annotations

import psycopg

from gpuops.cli.app import _ledger_failure
from ledger.reads import _Psycopg


class _DeadServer:
    def execute(self, *_a, **_k):
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command\nmore detail")


def test_a_server_that_dies_mid_report_is_one_line_exit_1():
    # Seen in review: the reports' psycopg path (ledger/reads.py _Psycopg) raised psycopg's own
    # errors, which _ledger_failure did not know: a traceback instead of the ledger's one line.
    try:
        _Psycopg(_DeadServer(), "").query("SELECT 1 WHERE :lo < :hi", {"lo": 0, "hi": 1})
    except psycopg.Error as e:
        out = _ledger_failure(e)
    assert out is not None
    line, code = out
    assert code == 1 and "\n" not in line
    assert line.startswith("error: the ledger database failed: terminating connection due to administrator command (")


def test_a_postgres_server_that_never_answers_fails_within_the_connect_timeout(monkeypatch):
    # Every wait has a deadline: libpq waited for a silent server as long as the OS let a TCP
    # connect hang (about two minutes) before the ledger said anything.
    import socket
    import time

    import pytest
    import sqlalchemy as sa

    from ledger import engine

    monkeypatch.setattr(engine, "PG_CONNECT_TIMEOUT_S", 2)  # libpq's smallest (1 reads as 2)
    with socket.socket() as silent:  # accepts TCP connections (the kernel's backlog), never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(sa.exc.OperationalError):
            engine.open_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/ledger")
        assert time.monotonic() - t0 < 30
