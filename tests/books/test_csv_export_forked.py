"""``ledger export`` on a big SQLite ledger is written by two processes in turns
(``ledger.csvio.write_export_forked``): the same bytes as one process, errors of either raised,
the child always reaped. The thresholds are lowered so a small hostile ledger takes that path."""

from __future__ import annotations

import csv
import io
import os
import random

import pytest

from gpuops.accounting import ledger_service as books
from ledger import csvio
from ledger.reads import LedgerReader

from .test_csv_export_exact import _fill, reference_export


@pytest.fixture
def hostile(tmp_path):
    from ledger import Ledger

    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    led = Ledger(url)
    try:
        _fill(led, random.Random(16), 600)
        yield led, LedgerReader(url)
    finally:
        led.engine.dispose()


def _export_to_file(reader, path, **kw) -> tuple[int, str]:
    with open(path, "w", encoding="utf-8", newline="") as out:
        n = books.export(reader, out, **kw)
    with open(path, encoding="utf-8", newline="") as f:
        return n, f.read()


def _reaped(pid: int) -> bool:
    """Whether the export already waited for its child ``pid`` (asked of that pid alone: a suite
    server the worker started, such as its PostgreSQL, is a child of this process too)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _record_forks(monkeypatch) -> list[int]:
    """The pids ``os.fork`` returns to this process from now on, in order."""
    forked: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return forked


@pytest.mark.parametrize("slices, hold_max, tie_run_max", [(7, 1 << 20, 10_000), (64, 50, 3), (2, 0, 10_000)])
def test_two_processes_write_the_bytes_of_one(hostile, tmp_path, monkeypatch, slices, hold_max, tie_run_max):
    led, reader = hostile
    monkeypatch.setattr(csvio, "_FORK_MIN_ROWS", 0)
    monkeypatch.setattr(csvio, "_FORK_SLICE_ROWS", 1)
    monkeypatch.setattr(csvio, "_FORK_SLICES", slices)
    monkeypatch.setattr(csvio, "_FORK_HOLD_MAX", hold_max)
    monkeypatch.setattr(csvio, "_TIE_RUN_MAX", tie_run_max)
    forked = _record_forks(monkeypatch)
    n, ours = _export_to_file(reader, tmp_path / "out.csv")
    assert len(forked) == 1
    ref = reference_export(led)
    assert ours == ref
    serial = io.StringIO()  # no file descriptor: one process
    assert books.export(reader, serial) == n == len(list(csv.reader(io.StringIO(ref)))) - 1
    assert serial.getvalue() == ref
    assert _reaped(forked[0])


def test_a_month_is_sliced_inside_its_bounds(hostile, tmp_path, monkeypatch):
    led, reader = hostile
    monkeypatch.setattr(csvio, "_FORK_MIN_ROWS", 0)
    monkeypatch.setattr(csvio, "_FORK_SLICE_ROWS", 1)
    monkeypatch.setattr(csvio, "_FORK_SLICES", 5)
    n, ours = _export_to_file(reader, tmp_path / "m.csv", month="2025-11", tz="UTC")
    serial = io.StringIO()
    assert books.export(reader, serial, month="2025-11", tz="UTC") == n
    assert ours == serial.getvalue()
    assert ours.count("\n") >= n + 1


@pytest.mark.parametrize("failing_slice", [0, 1, 2, 3])
def test_an_error_in_either_process_is_raised_and_the_child_reaped(hostile, tmp_path, monkeypatch, failing_slice):
    """Slices 0, 2 are this process's, 1, 3 the child's: the query of the failing one raises."""
    led, reader = hostile
    monkeypatch.setattr(csvio, "_FORK_MIN_ROWS", 0)
    monkeypatch.setattr(csvio, "_FORK_SLICE_ROWS", 1)
    monkeypatch.setattr(csvio, "_FORK_SLICES", 4)
    bounds = next(iter(reader.iter_query(csvio.export_bounds_sql(), {})))
    slices = csvio._fork_slices(bounds[0], bounds[1], None, None, 4)
    bad = slices[failing_slice]

    def failing(sql, params):
        if params.get("start") == bad[0] and params.get("end") == bad[1] and "= :created" not in sql:
            raise ValueError(f"disk gone in slice {failing_slice}")
        return reader.iter_query(sql, params)

    forked = _record_forks(monkeypatch)
    with open(tmp_path / "x.csv", "w", encoding="utf-8", newline="") as out:
        with pytest.raises(ValueError, match=f"disk gone in slice {failing_slice}"):
            csvio.write_export_forked(failing, out)
    assert len(forked) == 1 and _reaped(forked[0])


def test_another_thread_or_no_linux_means_one_process(hostile, tmp_path, monkeypatch):
    # A fork copies only the calling thread: a lock another thread holds (logging, a spinner's
    # stderr) would stay held in the child for ever; and macOS forbids fork without exec for much
    # of its system libraries. Either way the export is written by this process alone.
    import sys
    import threading

    led, reader = hostile
    monkeypatch.setattr(csvio, "_FORK_MIN_ROWS", 0)
    monkeypatch.setattr(csvio, "_FORK_SLICE_ROWS", 1)
    monkeypatch.setattr(os, "fork", lambda: pytest.fail("forked"))
    ref = reference_export(led)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, args=(30,))
    other.start()
    try:
        assert _export_to_file(reader, tmp_path / "t.csv")[1] == ref
    finally:
        stop.set()
        other.join()
    monkeypatch.setattr(sys, "platform", "darwin")
    assert _export_to_file(reader, tmp_path / "d.csv")[1] == ref
