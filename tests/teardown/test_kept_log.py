"""The kept copy of a job's log after `up` is killed: whoever ends the rental fetches the rest from
the box first (``gpuops.teardown.joblog``), or the copy says it is incomplete and where it stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.conftest import gpuops_cmd


def wait(cond, seconds: float, what: str):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")


@pytest.mark.parametrize("ender", ["down", "watchdog"])
def test_after_up_is_killed_the_ender_fetches_the_rest_of_the_log(gpuops_home, cli_env, cli, tmp_path, ender):
    # Seen: after `up` was killed the kept log held 2 of 21 lines and nothing said so.
    go, printed = tmp_path / "go", tmp_path / "printed"
    job = tmp_path / "job.sh"
    job.write_text(
        "#!/usr/bin/env bash\necho line 1; echo line 2\n"
        f"while [ ! -e {go} ]; do sleep 0.05; done\n"
        f"for i in $(seq 3 21); do echo line $i; done; touch {printed}\n"
        + ("sleep 600\n" if ender == "down" else "exit 0\n")
    )
    grace = {"GPUOPS_TEARDOWN_JOB_END_GRACE_SECONDS": "1"}  # the job's end is acted on 1 s after its exit
    up = subprocess.Popen(
        gpuops_cmd("up", "--job", str(job), "--card", "a100"),
        env={**cli_env, **grace},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        logs = gpuops_home / "logs"
        kept = wait(
            lambda: [p for p in logs.glob("*.log") if b"line 2\n" in p.read_bytes()], 90, "the kept log to hold line 2"
        )[0]
        os.killpg(up.pid, signal.SIGKILL)  # `up` and nothing else: the job runs detached on its box
        up.wait(timeout=30)
        go.touch()
        wait(printed.exists, 60, "the job to print all 21 lines")
        sid = kept.stem
        if ender == "down":
            out = cli("down", sid)
            assert out.returncode == 0, out.stderr
        else:  # the job ended: a watchdog ends the rental (or closes the row of the box its agent destroyed)

            def closed():
                out = cli("watchdog", "--once", env=grace)
                assert out.returncode == 0, out.stderr
                return json.loads(cli("ledger", "show", sid, "--json").stdout)["status"] == "closed"

            wait(closed, 60, "a watchdog to end the rental")
        row = json.loads(cli("ledger", "show", sid, "--json").stdout)
        assert row["status"] == "closed" and row["end_reason"] == ("manual" if ender == "down" else "job_end"), row
        shown = cli("logs", sid).stdout
        assert shown.splitlines() == [f"line {i}" for i in range(1, 22)]
        kept_ev = [e for e in row["events"] if e["kind"] == "log_kept"]
        assert len(kept_ev) == 1 and json.loads(kept_ev[0]["detail"])["complete"] is True
    finally:
        go.touch()
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(timeout=30)


def test_a_copy_that_cannot_be_finished_says_where_it_stops(gpuops_home, tmp_path):
    from gpuops.teardown.joblog import INCOMPLETE, keep_log
    from ledger import Ledger
    from onbox.vocabulary import EventKind

    led = Ledger(os.environ["GPUOPS_LEDGER_URL"])
    log = tmp_path / "s1.log"
    log.write_bytes(b"line 1\nline 2\n")
    led.add_session(
        dict(
            id="s1",
            experiment="e",
            job="j.sh",
            provider="local",
            card="a100-80gb-sxm",
            status="running",
            created_at=time.time(),
            log_path=str(log),
        )
    )
    led.event("s1", EventKind.JOB_STARTED)

    def unreachable():
        raise OSError("no route to host")

    done = keep_log(led, led.get("s1"), unreachable, by="watchdog:test")
    assert done is not None and done.pop("seconds") >= 0
    assert done == {"complete": False, "bytes": 14, "fetched": 0, "by": "watchdog:test"}
    text = log.read_text()
    assert text.startswith("line 1\nline 2\n\n" + INCOMPLETE + ": it stops at byte 14 (line 2); ")
    assert "could not be reached before it was destroyed (OSError)" in text
    assert keep_log(led, led.get("s1"), unreachable, by="again") is None  # once: a second ender adds nothing
    assert log.read_text() == text
