"""Laptop-side faults at the real boundary, on the local provider: a real `gpuops up` subprocess,
real signals, a terminal that hangs up (pty), a reader that goes away (pipe), fds closed at start,
`| head -3`, and `gpuops down` from another terminal. Output never decides a rental's fate."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from tests.conftest import gpuops_cmd
from tests.lifecycle.upproc import (
    TOKENS_JOB,
    UpProc,
    has_event,
    ledger,
    no_box_processes,
    only_row,
    up_env,
    wait_closed,
)
from tests.teardown.conftest import wait_for


def _metrics_written(gpuops_home):
    row = only_row()
    if row is None:
        return False
    m = gpuops_home / "boxes" / row.label / ".gpuops" / "metrics.jsonl"
    return m.exists() and m.stat().st_size > 0


@pytest.mark.parametrize("output", ["pty", "pipe", "closed"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_output_gone_then_signal_still_tears_down_and_books_tokens(
    gpuops_home, cli_env, fake_smi, tmp_path, output, sig
):
    fake_smi.util(70)
    up = UpProc(tmp_path, up_env(cli_env), TOKENS_JOB, output=output)
    try:
        wait_for(has_event("job_started"), 60)
        wait_for(lambda: _metrics_written(gpuops_home), 20)
        up.close_output()
        up.signal(sig)
        rc = up.wait(60)
    finally:
        up.cleanup()
    row = wait_closed(5)
    assert (row.end_reason, row.tokens, rc) == ("interrupted", 1000, 130)
    assert row.end_source == "provider" and row.ended_at is not None
    box = gpuops_home / "boxes" / row.label
    assert row.ended_at == pytest.approx(
        json.loads((box / "destroyed.json").read_text())["destroyed_at"], abs=1e-6
    )  # the record itself
    no_box_processes(box)


@pytest.mark.parametrize("redirect", ["", "2>&1"])
def test_broken_pipe_never_decides_the_rental(gpuops_home, cli_env, fake_smi, tmp_path, redirect):
    fake_smi.util(70)
    job = tmp_path / "job.sh"
    job.write_text(
        'echo \'{"tokens": 7}\' >> "$GPUOPS_METRICS"\nfor i in $(seq 1 60); do echo "line $i"; sleep 0.02; done\n'
    )
    cmd = " ".join(gpuops_cmd("up", "--job", str(job))) + f" {redirect} | head -3"
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], env=up_env(cli_env), capture_output=True, text=True, timeout=120
    )
    row = wait_closed(5)
    assert (row.end_reason, row.exit_code, row.tokens) == ("job_end", 0, 7), out.stderr
    assert out.returncode == 0, out.stderr  # `up` exits as its row says, pipe or no pipe
    assert len(out.stdout.splitlines()) == 3
    no_box_processes(gpuops_home / "boxes" / row.label)


def test_down_from_another_terminal_is_reported_as_manual(gpuops_home, cli_env, fake_smi, tmp_path):
    fake_smi.util(70)
    env = up_env(cli_env)
    up = UpProc(tmp_path, env, TOKENS_JOB)
    try:
        wait_for(has_event("job_started"), 60)
        sid = only_row().id
        down = subprocess.run(gpuops_cmd("down", sid), env=env, capture_output=True, text=True, timeout=60)
        assert down.returncode == 0, down.stderr
        out, err = up.p.communicate(timeout=60)
    finally:
        up.cleanup()
    row = wait_closed(5)
    assert row.end_reason == "manual"
    err = err.decode()
    assert "teardown manual" in " ".join(err.split()) and "job_failed" not in err, err
    assert up.p.returncode == 3  # onbox.vocabulary.EXIT_STATUS: taken down from elsewhere
    kinds = [e.kind for e in ledger().events(sid)]
    assert kinds.count("closed") == 1 and kinds.count("end_requested") == 1
    no_box_processes(gpuops_home / "boxes" / row.label)


def test_a_hang_up_ignored_by_nohup_keeps_the_run_going(gpuops_home, cli_env, fake_smi, tmp_path):
    """`nohup gpuops up` asked for SIGHUP to be ignored: the run goes on to its job's end."""
    fake_smi.util(70)
    gate = tmp_path / "gate"
    job = tmp_path / "job.sh"
    job.write_text(f'while [ ! -e "{gate}" ]; do sleep 0.05; done\necho done\n')
    argv = ["bash", "-c", 'trap "" HUP; exec "$@"', "up", *gpuops_cmd("up", "--job", str(job))]
    up = subprocess.Popen(
        argv,
        env=up_env(cli_env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_for(has_event("job_started"), 60)
        up.send_signal(signal.SIGHUP)  # `up` itself (bash exec'd it): as a closing terminal would
        gate.touch()
        out, err = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate(timeout=30)
    row = wait_closed(5)
    assert up.returncode == 0, err.decode()
    assert row.end_reason == "job_end" and row.exit_code == 0
    no_box_processes(gpuops_home / "boxes" / row.label)
