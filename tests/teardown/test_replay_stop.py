"""Ctrl-C while `up` shows the rest of a job's output after the destroy (issue 42).

The box is destroyed and booked by then: the signal stops the showing at once (within the line
being shown), one warning says where the kept log is, and the kept copy on disk stays whole.
"""

from __future__ import annotations

import signal
from types import SimpleNamespace

from gpuops.rental.launcher import JobOutput, _show_rest

LINES = 200_000
STOP_AT = 1_000


class Recorder:
    """A reporter that keeps what it was given."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.warnings: list[str] = []

    def job_line(self, text: str) -> None:
        self.lines.append(text)
        if len(self.lines) == STOP_AT:
            signal.raise_signal(signal.SIGINT)

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def _run(tmp_path, complete: bool):
    body = b"".join(b"%09d line of the job\n" % i for i in range(LINES))
    log = tmp_path / "s1.log"
    log.write_bytes(body)
    rep = Recorder()
    s = SimpleNamespace(
        log_view=JobOutput(rep.job_line, shown=0),
        exit_code=0,
        log_path=log,
        log_complete=complete,
        id="s1",
    )
    before = signal.getsignal(signal.SIGINT)
    _show_rest(s, rep)  # type: ignore[arg-type]
    assert signal.getsignal(signal.SIGINT) is before  # the run's own handling is back
    return rep, log, body


def test_ctrl_c_stops_the_replay_at_once_and_the_kept_log_stays_whole(tmp_path):
    rep, log, body = _run(tmp_path, complete=True)
    assert STOP_AT <= len(rep.lines) <= STOP_AT + 1  # stopped within the line being shown
    assert rep.lines[:3] == ["000000000 line of the job", "000000001 line of the job", "000000002 line of the job"]
    assert len(rep.warnings) == 1
    assert "kept complete" in rep.warnings[0] and str(log) in rep.warnings[0] and "gpuops logs s1" in rep.warnings[0]
    assert log.read_bytes() == body


def test_an_incomplete_copy_is_not_called_complete(tmp_path):
    rep, _, _ = _run(tmp_path, complete=False)
    assert len(rep.warnings) == 1 and "complete at" not in rep.warnings[0]


def test_without_a_signal_every_line_is_shown(tmp_path):
    log = tmp_path / "s2.log"
    log.write_bytes(b"a\nb\nlast without newline")
    shown: list[str] = []
    s = SimpleNamespace(
        log_view=JobOutput(shown.append, shown=2), exit_code=0, log_path=log, log_complete=True, id="s2"
    )
    _show_rest(s)  # type: ignore[arg-type]
    assert shown == ["b", "last without newline"]
