"""A PostgreSQL ledger failing under the psycopg read path (no SQLAlchemy) is one line, like SQLAlchemy's."""

from __future__ import annotations

import psycopg

from gpuops.cli import _ledger_failure
from ledger.reads import pg_query


class _DeadServer:
    def execute(self, *_a, **_k):
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command\nmore detail")


def test_a_server_that_dies_mid_report_is_one_line_exit_1():
    # Seen in review: the reports' psycopg path (ledger/reads.py pg_query) raised psycopg's own
    # errors, which _ledger_failure did not know: a traceback instead of the ledger's one line.
    try:
        pg_query(_DeadServer())("SELECT 1 WHERE :lo < :hi", {"lo": 0, "hi": 1})
    except psycopg.Error as e:
        out = _ledger_failure(e)
    assert out is not None
    line, code = out
    assert code == 1 and "\n" not in line
    assert line.startswith("error: the ledger database failed: terminating connection due to administrator command (")
