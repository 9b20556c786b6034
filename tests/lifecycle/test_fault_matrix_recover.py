"""The fault matrix for runs (`up --spot --recover`), on the emulated Vast with a real sshd:
"preempted at each stage" (the box taken back while `up` is held at that stage's fault point:
the rental is booked preempted, destroyed, and the next rental finishes the job) and "Ctrl-C while
re-renting" (between two rentals, and during the next rental's create: no box left, the run
closed ``interrupted``). `up` runs in this process's main thread (its signal handlers need it);
a helper thread acts when `up` reports it reached the point (``GPUOPS_TEST_PAUSE_AT``)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger.store import Ledger
from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401  (fixtures)
from tests.lifecycle.test_spot_recover import JOB, STAGE_TIMEOUT_S, _expected_digest, _settings, rig  # noqa: F401  (fixture)
from tests.lifecycle.upproc import box_processes
from tests.support.emulators import vast_provider  # noqa: F401  (fixture)

STEPS = 3


def _kill_box(sshd, label: str) -> None:
    for pid in box_processes(sshd.home / "gpuops" / label):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Held:
    """Waits (in a thread) for `up` to reach the pause point, then calls ``act()`` and lets it go."""

    def __init__(self, pause: Path, act):
        self.pause, self.act = pause, act
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        reached = Path(str(self.pause) + ".reached")
        try:
            deadline = time.monotonic() + STAGE_TIMEOUT_S
            while not reached.exists():
                assert time.monotonic() < deadline, f"`up` never reached {self.pause.name}"
                time.sleep(0.02)
            self.act()
        except BaseException as e:  # noqa: BLE001  reported by the test
            self.error = e
        finally:
            if self.pause.exists():
                self.pause.unlink()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.pause.exists():
            self.pause.unlink()
        self.thread.join(10)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["create", "ready", "arm", "bootstrap", "job", "collect", "teardown"])
def test_preempted_at_each_stage(rig, sshd, gpuops_home, vast_provider, tmp_path, monkeypatch, stage):
    emu = rig
    monkeypatch.setenv("STEPS", str(STEPS))
    monkeypatch.setenv("STEP_SECONDS", "0.2")
    pause = tmp_path / "pause"
    pause.write_text("")
    monkeypatch.setenv("GPUOPS_TEST_PAUSE_AT", stage)
    monkeypatch.setenv("GPUOPS_TEST_PAUSE_FILE", str(pause))
    taken: list = []

    def take_back() -> None:
        (inst,) = emu.live()
        emu.market.preempt(inst.id)
        taken.append(inst)
        _kill_box(sshd, inst.label)
        os.environ["GPUOPS_TEST_PAUSE_AT"] = "never"  # the next rental runs through

    settings = _settings()
    req = UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=2)
    with Held(pause, take_back) as held:
        summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert held.error is None, held.error
    assert emu.live() == []  # 0 billing after every attempt
    rows = Ledger(settings.ledger_url()).run_rentals(summ["run"]["id"])
    assert summ["end_reason"] == "job_end", summ
    assert all(r.status == "closed" for r in rows)
    assert rows[0].instance_id == taken[0].id
    if stage == "teardown":  # the job had finished and come home: nothing is re-run
        assert len(rows) == 1 and rows[0].end_reason in ("preempted", "job_end")
        return
    assert [r.end_reason for r in rows] == ["preempted", "job_end"]
    result = json.loads((gpuops_home / "results" / rows[1].id / "result.json").read_text())
    assert (result["steps"], result["digest"]) == (STEPS, _expected_digest(STEPS))
    for r in rows:  # each rental billed what the provider billed, within a cent
        assert abs(r.cost_usd - emu.market.instances[r.instance_id].billed_usd) <= 0.01


@pytest.mark.parametrize("where", ["recover", "create"])
def test_ctrl_c_while_re_renting_leaves_no_box_and_closes_the_run_interrupted(
    rig, sshd, gpuops_home, vast_provider, tmp_path, monkeypatch, where
):
    emu = rig
    monkeypatch.setenv("STEPS", "30")
    first, second = tmp_path / "pause1", tmp_path / "pause2"
    first.write_text("")
    second.write_text("")
    monkeypatch.setenv("GPUOPS_TEST_PAUSE_AT", "job")
    monkeypatch.setenv("GPUOPS_TEST_PAUSE_FILE", str(first))

    def take_back_then_hold_the_next_point() -> None:
        (inst,) = emu.live()
        emu.market.preempt(inst.id)
        _kill_box(sshd, inst.label)
        os.environ["GPUOPS_TEST_PAUSE_AT"] = where  # between the rentals, or inside the next rental's create
        os.environ["GPUOPS_TEST_PAUSE_FILE"] = str(second)

    def ctrl_c() -> None:
        os.kill(os.getpid(), signal.SIGINT)

    settings = _settings()
    req = UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=3)
    with Held(first, take_back_then_hold_the_next_point) as h1, Held(second, ctrl_c) as h2:
        summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert h1.error is None and h2.error is None, (h1.error, h2.error)
    assert summ.get("interrupted") is True and summ["end_reason"] == "interrupted", summ
    assert emu.live() == []  # no box left
    led = Ledger(settings.ledger_url())
    run = led.get_run(summ["run"]["id"])
    assert (run.status, run.end_reason) == ("closed", "interrupted")
    rows = led.run_rentals(run.id)
    assert rows[0].end_reason == "preempted"
    if where == "recover":
        assert len(rows) == 1 and "re-renting" in run.detail
    else:  # the second rental's instance existed at the signal: destroyed and booked interrupted
        assert [r.end_reason for r in rows] == ["preempted", "interrupted"] and rows[1].instance_id is not None
    assert all(r.status == "closed" for r in rows)


def test_a_create_that_made_no_box_re_rents_only_when_asked(
    rig, sshd, gpuops_home, vast_provider, tmp_path, monkeypatch
):
    emu = rig
    monkeypatch.setenv("STEPS", "1")
    emu.faults.vanish_on_create = True  # every offer is taken between the search and the create
    pause = tmp_path / "pause"
    pause.write_text("")
    monkeypatch.setenv("GPUOPS_TEST_PAUSE_AT", "recover")
    monkeypatch.setenv("GPUOPS_TEST_PAUSE_FILE", str(pause))

    def market_calms_down() -> None:
        emu.faults.vanish_on_create = False

    settings = _settings()
    asked = UpRequest(
        job=JOB,
        provider="vast",
        card="rtx-4090",
        spot=True,
        spot_explicit=True,
        recover=2,
        recover_on=("preempted", "provision_failed"),
    )
    with Held(pause, market_calms_down) as held:
        summ = run_up(asked, settings, Reporter(), provider=vast_provider)
    assert held.error is None, held.error
    assert summ["end_reason"] == "job_end" and [r["end_reason"] for r in summ["rentals"]] == [
        "provision_failed",
        "job_end",
    ], summ
    assert summ["rentals"][0]["cost_usd"] == 0.0 and emu.live() == []

    emu.faults.vanish_on_create = True  # the default recover_on is preempted only: a failed create ends the run
    summ = run_up(
        UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=2),
        settings,
        Reporter(),
        provider=vast_provider,
    )
    assert summ["end_reason"] == "provision_failed" and len(summ["rentals"]) == 1, summ


def test_a_job_that_fails_on_its_own_never_re_rents(rig, sshd, gpuops_home, vast_provider, tmp_path):
    emu = rig
    job = tmp_path / "fails.sh"
    job.write_text('echo "$GPUOPS_ATTEMPT of run $GPUOPS_RUN"\nexit 3\n')
    settings = _settings()
    req = UpRequest(
        job=job,
        provider="vast",
        card="rtx-4090",
        spot=True,
        spot_explicit=True,
        recover=3,
        recover_on=("preempted", "provision_failed", "bootstrap_failed"),
    )
    summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert summ["end_reason"] == "job_failed" and summ["exit_code"] == 3 and len(summ["rentals"]) == 1, summ
    assert emu.live() == []
    log = Path(Ledger(settings.ledger_url()).run_rentals(summ["run"]["id"])[0].log_path).read_text()
    assert f"1 of run {summ['run']['id']}" in log
