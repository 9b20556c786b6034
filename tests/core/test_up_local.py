"""`gpuops up` on the local provider: the state machine end to end, in process and as a CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpuops.config import load_settings
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger import Ledger
from tests.conftest import REPO, gpuops_cmd


def write_job(tmp_path: Path, body: str, name: str = "job.sh") -> Path:
    p = tmp_path / name
    p.write_text("#!/usr/bin/env bash\n" + body + "\n")
    return p


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


class StopAt(Reporter):
    """Raises KeyboardInterrupt when `up` enters ``stage`` (Ctrl-C at that moment)."""

    def __init__(self, stage: str):
        self.target = stage
        self.seen: list[str] = []

    def stage(self, name, detail=""):
        self.seen.append(name)
        if name == self.target:
            raise KeyboardInterrupt


def settings(**teardown):
    return load_settings(None, {"teardown": {"kill_grace_seconds": 1, **teardown}})


def test_success_books_a_closed_row_with_tokens(gpuops_home, tmp_path):
    job = write_job(
        tmp_path,
        'echo hello; echo \'{"tokens": 1500}\' >> "$GPUOPS_METRICS"; echo \'{"tokens": 500}\' >> "$GPUOPS_METRICS"; echo "s=$GPUOPS_SESSION e=$GPUOPS_EXPERIMENT"',
    )
    lines: list[str] = []

    class R(Reporter):
        def job_line(self, text):
            lines.append(text)

    summ = run_up(UpRequest(job=job, card="a100-80gb-sxm", experiment="exp1"), settings(), R())
    assert summ["end_reason"] == "job_end" and summ["exit_code"] == 0
    assert summ["tokens"] == 2000
    assert summ["simulated"] is True and summ["usd_per_hour"] == 1.49
    assert summ["cost_usd"] == pytest.approx(summ["seconds"] / 3600 * 1.49, abs=1e-6)
    assert summ["usd_per_mtoken"] == pytest.approx(
        summ["cost_usd"] / 2000 * 1e6, abs=3e-4
    )  # cost_usd rounded to 1e-6 USD, x 500
    assert "hello" in lines and f"s={summ['session']} e=exp1" in lines
    row = Ledger(load_settings().ledger_url()).get(summ["session"])
    assert row.status == "closed" and row.instance_id == f"gpuops-{summ['session']}"
    kinds = [e.kind for e in Ledger(load_settings().ledger_url()).events(summ["session"])]
    assert kinds[:2] == ["intent", "create"] and "created" in kinds and "ready" in kinds
    assert kinds.index("created") < kinds.index("bootstrapped") < kinds.index("job_exited") < kinds.index("destroyed")
    assert kinds[-1] == "closed"
    assert "hello" in Path(summ["log"]).read_text()


def test_a_job_line_longer_than_64_kib_of_multibyte_characters_is_shown_without_cuts(gpuops_home, tmp_path):
    # Seen: a line of "€" longer than one read of the log (1 MiB) came to the terminal with U+FFFD at
    # each 64 KiB cut (bytes cut inside a character, then decoded).
    N = 400_000  # 1.2 MB
    job = write_job(tmp_path, f'python3 -c \'print("\\u20ac" * {N}); print("done")\'')
    lines: list[str] = []

    class R(Reporter):
        def job_line(self, text):
            lines.append(text)

    summ = run_up(UpRequest(job=job), settings(), R())
    assert summ["end_reason"] == "job_end", summ
    assert "\ufffd" not in "".join(lines)
    assert "".join(lines[:-1]) == "\u20ac" * N and lines[-1] == "done"
    assert Path(summ["log"]).read_text(encoding="utf-8") == "\u20ac" * N + "\ndone\n"  # the log: the bytes as written


def test_failing_job_closes_row_as_job_failed(gpuops_home, tmp_path):
    job = write_job(tmp_path, "echo about to fail; exit 3")
    summ = run_up(UpRequest(job=job, card="rtx-4090"), settings(), Reporter())
    assert summ["end_reason"] == "job_failed" and summ["exit_code"] == 3 and summ["status"] == "closed"


def test_killed_job_child_still_closes_row(gpuops_home, tmp_path):
    job = write_job(tmp_path, "kill -9 $$")
    summ = run_up(UpRequest(job=job), settings(), Reporter())
    assert summ["end_reason"] == "job_failed" and summ["exit_code"] == 137 and summ["status"] == "closed"


@pytest.mark.parametrize("stage", ["create", "ready", "arm", "bootstrap", "job"])
def test_ctrl_c_in_each_stage_tears_down_and_closes_interrupted(gpuops_home, tmp_path, stage):
    job = write_job(tmp_path, "sleep 30")
    summ = run_up(UpRequest(job=job), settings(), StopAt(stage))
    assert summ["interrupted"] is True
    assert summ["end_reason"] == "interrupted" and summ["status"] == "closed"
    led = Ledger(load_settings().ledger_url())
    row = led.get(summ["session"])
    if stage == "create":  # Ctrl-C before the create call: nothing rented, nothing billed
        assert row.instance_id is None and row.cost_usd == 0
    else:
        assert row.instance_id is not None
        assert "destroyed" in [e.kind for e in led.events(row.id)]
    assert led.open_sessions() == []


def test_ctrl_c_in_plan_books_nothing(gpuops_home, tmp_path):
    job = write_job(tmp_path, "true")
    with pytest.raises(KeyboardInterrupt):
        run_up(UpRequest(job=job), settings(), StopAt("plan"))
    assert not (gpuops_home / "ledger.db").exists() or Ledger(load_settings().ledger_url()).open_sessions() == []


def test_dry_run_rents_nothing_and_books_nothing(gpuops_home, tmp_path, cli_env):
    job = write_job(tmp_path, "true")
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--card", "h100", "--max-hours", "2", "--dry-run", "--json"),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    # `h100` is the family (PCIe and SXM); the cheapest at catalog reference prices is the PCIe card.
    assert plan["card"] == "h100-pcie" and plan["provider"] == "local"
    assert plan["projected_cost_usd"] == pytest.approx(2 * plan["usd_per_hour"], abs=1e-6)
    assert plan["teardown"]["max_hours"] == 2
    assert not (gpuops_home / "boxes").exists()
    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    assert led.rows_between(0, 2e10) == []


def _wait_for(path_glob: str, root: Path, timeout: float = 30.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hits = list(root.glob(path_glob))
        if hits:
            return hits[0]
        time.sleep(0.05)
    raise AssertionError(f"{path_glob} never appeared under {root}")


def test_cli_sigint_twice_during_job_still_tears_down_a_job_that_ignores_sigterm(gpuops_home, tmp_path, cli_env):
    job = write_job(tmp_path, "trap '' TERM; echo started; while true; do sleep 0.1; done")
    # The job ignores SIGTERM: teardown holds the kill grace (3 s) before its SIGKILL, the window the
    # second Ctrl-C must land in.
    env = dict(cli_env, GPUOPS_TEARDOWN_KILL_GRACE_SECONDS="3")
    proc = subprocess.Popen(
        gpuops_cmd("up", "--job", str(job), "--json"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pidfile = _wait_for("boxes/*/.gpuops/run/job.pid", gpuops_home)
    deadline = time.monotonic() + 10
    while not pidfile.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    job_pid = int(pidfile.read_text())
    proc.send_signal(signal.SIGINT)
    # Wait until `up` has handled the first Ctrl-C (it books the interrupted stage, then tears
    # down): only then is the second one a Ctrl-C during teardown.
    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    (row,) = led.rows_between(0, 2e10)

    def interruption_booked() -> bool:
        return any(e.kind == "stage_failed" and "interrupted" in str(e.detail) for e in led.events(row.id))

    deadline = time.monotonic() + 30
    while not interruption_booked():
        assert time.monotonic() < deadline and proc.poll() is None, "up never booked the first Ctrl-C"
        time.sleep(0.05)
    assert pid_alive(job_pid), "teardown ended the job before the second Ctrl-C: the case was not exercised"
    proc.send_signal(signal.SIGINT)  # a second Ctrl-C must not skip teardown
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    summ = json.loads(out)
    assert summ["end_reason"] == "interrupted" and summ["status"] == "closed"
    assert not pid_alive(job_pid), "the job survived teardown"


def test_cli_end_to_end_then_month_report(gpuops_home, tmp_path, cli_env):
    env = dict(cli_env, WEIGHTS_MB="8", TOKENS="20", COPY_MB="8", GPUOPS_JOB_ENV="WEIGHTS_MB,TOKENS,COPY_MB")
    out = subprocess.run(
        gpuops_cmd(
            "up", "--card", "a100", "--job", str(REPO / "examples" / "bench.sh"), "--json", "--experiment", "bench"
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    summ = json.loads(out.stdout)
    assert set(summ) >= {
        "session",
        "provider",
        "card",
        "usd_per_hour",
        "seconds",
        "cost_usd",
        "simulated",
        "tokens",
        "usd_per_mtoken",
        "end_reason",
        "exit_code",
        "log",
    }
    assert summ["tokens"] == 20 and summ["card"].startswith("a100")
    month = time.strftime("%Y-%m")
    rep = json.loads(
        subprocess.run(
            gpuops_cmd("ledger", "month", "--json"), env=env, capture_output=True, text=True, timeout=60
        ).stdout
    )
    assert rep["month"] == month and rep["sessions"] == 1 and rep["tokens"] == 20
    assert rep["total_usd"] == 0 and rep["simulated_usd"] == pytest.approx(summ["cost_usd"], abs=1e-6)
    assert rep["by_experiment"][0]["name"] == "bench"
    show = json.loads(
        subprocess.run(
            gpuops_cmd("ledger", "show", summ["session"][:17], "--json"),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    assert show["status"] == "closed" and show["steps"][0]["name"] == "system" and show["events"][0]["kind"] == "intent"
    note = subprocess.run(
        gpuops_cmd("ledger", "note", summ["session"], "bandwidth as expected"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert note.returncode == 0
    ps = json.loads(
        subprocess.run(gpuops_cmd("ps", "--json"), env=env, capture_output=True, text=True, timeout=60).stdout
    )
    assert ps == []


def test_down_closes_an_open_session_as_manual(gpuops_home, tmp_path, cli_env):
    job = write_job(tmp_path, "sleep 60")
    proc = subprocess.Popen(
        gpuops_cmd("up", "--job", str(job), "--json"),
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for("boxes/*/.gpuops/run/job.pid", gpuops_home)
    ps = json.loads(
        subprocess.run(gpuops_cmd("ps", "--json"), env=cli_env, capture_output=True, text=True, timeout=60).stdout
    )
    assert len(ps) == 1 and ps[0]["status"] == "running"
    down = subprocess.run(
        gpuops_cmd("down", "--all", "--json"), env=cli_env, capture_output=True, text=True, timeout=60
    )
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)[0]["end_reason"] == "manual"
    out, _ = proc.communicate(timeout=60)
    assert json.loads(out)["end_reason"] == "manual"  # the first close wins; `up` does not rewrite it
    again = subprocess.run(
        gpuops_cmd("down", ps[0]["session"], "--json"), env=cli_env, capture_output=True, text=True, timeout=60
    )
    assert json.loads(again.stdout)[0]["destroyed"] is False


def test_job_wrapper_killed_is_booked_failed_not_waited_on_until_ttl(gpuops_home, tmp_path, monkeypatch):
    # Seen: `kill -9 $PPID` from an uncontained job left `up` waiting for an exit marker until the TTL;
    # a contained job cannot see its wrapper, so the test kills it from outside (as an OOM killer would).
    import gpuops.rental.launcher as launcher

    monkeypatch.setattr(launcher, "WRAPPER_STALE_S", 3.0)
    job = write_job(tmp_path, "echo before; sleep 20; echo after")

    def kill_the_wrapper() -> None:  # from outside: a contained job cannot see its wrapper
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for f in gpuops_home.glob("boxes/*/.gpuops/run/job.pid"):
                if f.read_text().strip():  # the wrapper's child; the wrapper is its parent
                    stat = Path(f"/proc/{int(f.read_text())}/stat").read_text()
                    os.kill(int(stat.rsplit(")", 1)[1].split()[1]), signal.SIGKILL)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_wrapper, daemon=True)
    killer.start()
    t0 = time.monotonic()
    summ = run_up(UpRequest(job=job, max_hours=1.0), settings(), Reporter())
    killer.join(timeout=5)
    assert time.monotonic() - t0 < 30
    assert summ["end_reason"] == "job_failed" and summ["status"] == "closed" and summ["exit_code"] is None
    kinds = [e.kind for e in Ledger(load_settings().ledger_url()).events(summ["session"])]
    assert "wrapper_lost" in kinds and kinds.index("wrapper_lost") < kinds.index("destroyed")


def test_unexpected_error_still_tears_down_and_books_error(gpuops_home, tmp_path):
    def broken_open_box(provider, instance, deadline, settings):
        raise RuntimeError("disk on fire")

    job = write_job(tmp_path, "true")
    summ = run_up(UpRequest(job=job), settings(), Reporter(), open_box=broken_open_box)
    assert summ["end_reason"] == "error" and summ["status"] == "closed"
    assert "RuntimeError: disk on fire" in summ["error"]
    led = Ledger(load_settings().ledger_url())
    kinds = [e.kind for e in led.events(summ["session"])]
    assert "error" in kinds and "destroyed" in kinds and led.open_sessions() == []
    assert "Traceback" in Path(summ["log"]).read_text()


def test_missing_provider_key_is_bad_input_before_anything_is_booked(gpuops_home, tmp_path, cli_env):
    job = write_job(tmp_path, "true")
    env = {k: v for k, v in cli_env.items() if k not in ("RUNPOD_API_KEY", "VAST_API_KEY")}
    env["HOME"] = str(tmp_path)  # no ~/.runpod or vastai key file
    out = subprocess.run(
        gpuops_cmd("up", "--provider", "vast", "--job", str(job)), env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "VAST_API_KEY" in out.stderr
    assert not (gpuops_home / "ledger.db").exists() or Ledger(load_settings().ledger_url()).rows_between(0, 2e10) == []
