"""A Ctrl-C whose exception Python dropped still ends `up`.

The signal handler raises wherever the main thread is; raised inside a ``__del__`` or a weakref
callback (SQLAlchemy's, under load) the KeyboardInterrupt is printed and dropped, and every later
signal is ignored (teardown must not be cut). `up` raises the noted signal on its next poll."""

from __future__ import annotations

import signal
import sys
import time

from gpuops.config import load_settings
from gpuops.rental.launcher import Reporter, UpRequest, run_up


class _Drop:
    def __del__(self):
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # as if Ctrl-C came while this ran


class _DroppingReporter(Reporter):
    def job_line(self, line: str) -> None:
        if line == "drop-here":
            _Drop()  # the handler's KeyboardInterrupt is raised in __del__, and dropped


def test_a_ctrl_c_dropped_in_a_del_still_ends_the_job(gpuops_home, fake_smi, tmp_path, monkeypatch):
    from ledger.store import Ledger

    dropped: list = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    fake_smi.util(70)
    settings = load_settings(None, {"teardown": {"kill_grace_seconds": 0.5, "idle_minutes": "off"}})
    job = tmp_path / "job.sh"
    job.write_text("echo drop-here\nsleep 120\n")
    t0 = time.monotonic()
    summ = run_up(UpRequest(job=job), settings, _DroppingReporter())
    took = time.monotonic() - t0
    assert dropped == [KeyboardInterrupt]  # Python dropped the handler's exception
    assert summ.get("interrupted"), summ
    row = Ledger(settings.ledger_url()).get(summ["session"])
    assert (row.status, row.end_reason) == ("closed", "interrupted")
    assert took < 100, f"the job ran on after the Ctrl-C ({took:.0f} s)"  # its sleep is 120 s
