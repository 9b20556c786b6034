"""A PostgreSQL ledger that does not answer fails within a deadline, in one line."""

from __future__ import annotations


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
