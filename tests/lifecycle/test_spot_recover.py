"""Spot that finishes the job: `up --spot --recover N` against the Vast emulator's preemption, with
a real sshd as every rental's box.

The job is ``examples/checkpoint.py`` (a checkpoint every second). A watcher thread takes the box
back -- every process of that box and its SSH sessions frozen, then the market's own state
("outbid": stopped, disk still billing; "host_gone": offline), then the frozen killed, as a box
taken back answers nothing and takes its processes with it -- once the
rental's checkpoint has come home with the step the test waits for: never after a fixed sleep.
Afterwards: 0 instances billing, each rental booked with its reason, the run's cost the sum of
the provider's billing of its rentals within a cent, the job's result intact, and a run that runs
out of attempts or money ends with the reason it ran out of."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from gpuops.config import load_settings
from gpuops.providers.base import OfferQuery
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger.store import Ledger
from onbox.jobwrap import descendants
from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401  (fixtures)
from tests.lifecycle.upproc import box_processes
from tests.support.emulators import vast_provider  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "examples" / "checkpoint.py"
STAGE_TIMEOUT_S = 120.0  # a state the watcher waits for, sized for a loaded machine
CENT = 0.01
TEARDOWN = {"kill_grace_seconds": 0.5, "idle_minutes": "off", "sample_seconds": 0.3, "job_end_grace_seconds": 30}
STEPS = 10


def _expected_digest(steps: int) -> str:
    d = hashlib.sha256(b"gpuops").hexdigest()
    for i in range(1, steps + 1):
        d = hashlib.sha256(f"{d}:{i}".encode()).hexdigest()
    return d


def _settings(**teardown):
    return load_settings(
        None,
        {
            "teardown": {**TEARDOWN, **teardown},
            "job": {"checkpoint_sync_seconds": 0.3, "env": ["STEPS", "STEP_SECONDS"]},
        },
    )


@pytest.fixture
def rig(gpuops_home, sshd, vast_emulator, monkeypatch):
    """The emulator's instances answer on the test sshd; more RTX 4090 spot offers than rentals
    (a rented offer is gone from the market); fast polls."""
    import gpuops.rental.launcher as launcher
    from gpuops.box.ssh import ensure_ssh_key

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    monkeypatch.setattr(launcher, "TAKEN_BACK_POLL_S", 0.2)
    monkeypatch.setenv("STEPS", str(STEPS))
    monkeypatch.setenv("STEP_SECONDS", "1.0")
    emu = vast_emulator
    emu.market.ssh_endpoint = (sshd.host, sshd.port)
    emu.faults.boot_s = 0.0
    for i in range(5):  # every offer at one price: a run's next rental is never ended by a dearer offer
        emu.add_offer(1101 + i, "RTX 4090", 1, 24564, 0.40, 0.20, 0.99, "Norway, NO")
    sshd.authorize(ensure_ssh_key(gpuops_home)[1])
    return emu


def _signal_all(pids: list[int], sig: int) -> list[int]:
    """Send ``sig`` to each of ``pids`` (one already gone is skipped); returns ``pids``."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


class TakeBack:
    """Takes back each running rental in turn once its own checkpoint at home (written by its
    job, attempt n + 1) reaches ``at_step[n]`` (``modes[n]``: outbid or host_gone), killing the
    box's processes and its SSH sessions with it."""

    def __init__(self, emu, sshd, data: Path, at_step: list[int], modes: list[str], then=None):
        self.emu, self.sshd, self.data = emu, sshd, data
        self.at_step, self.modes = at_step, modes
        self.then = then  # called after each take-back (a watchdog's refusal meanwhile)
        self.taken: list[dict] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)

    def _step_home(self, label: str, attempt: int) -> int:
        """The step of the rental's checkpoint at home when that rental's own job wrote it (its
        last attempt is ``attempt``), else -1: the checkpoint carried from the rental before it
        comes home first, and may already be past the step waited for."""
        ck = self.data / "results" / label.removeprefix("gpuops-") / "checkpoint.json"
        try:
            doc = json.loads(ck.read_text())
            return int(doc["step"]) if doc["attempts"][-1] == attempt else -1
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return -1

    def _run(self) -> None:
        try:
            deadline = time.monotonic() + len(self.at_step) * STAGE_TIMEOUT_S
            while len(self.taken) < len(self.at_step) and not self.stop.is_set():
                assert time.monotonic() < deadline, f"the checkpoints the test waits for never came home: {self.taken}"
                n = len(self.taken)
                done = {t["id"] for t in self.taken}
                for inst in self.emu.live():
                    if (
                        inst.id in done
                        or inst.state != "running"
                        or self._step_home(inst.label, n + 1) < self.at_step[n]
                    ):
                        continue
                    # The box stops answering before its billing stops, as a box taken back does: its
                    # processes and its SSH sessions are frozen first, so no read `up` asks after the
                    # take-back is answered (an answered read is a proof of life, booked as such).
                    root = self.sshd.home / "gpuops" / inst.label
                    frozen = _signal_all(box_processes(root) + descendants(self.sshd.proc.pid), signal.SIGSTOP)
                    self.emu.market.preempt(inst.id, self.modes[n])
                    self.taken.append(
                        {
                            "id": inst.id,
                            "label": inst.label,
                            "at": self.emu.market.now(),
                            "mode": self.modes[n],
                            "step_home": self._step_home(inst.label, n + 1),
                        }
                    )
                    _signal_all(frozen + box_processes(root), signal.SIGKILL)  # the box goes, its processes with it
                    if self.then is not None:
                        self.then()
                    break
                time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001  reported by the test
            self.error = e


def test_preempted_twice_the_job_finishes_on_the_third_rental_with_its_result_intact(
    rig, sshd, gpuops_home, vast_provider
):
    emu = rig
    settings = _settings()
    req = UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=2)
    with TakeBack(emu, sshd, gpuops_home, at_step=[3, 6], modes=["outbid", "host_gone"]) as tb:
        summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert tb.error is None, tb.error
    assert summ["end_reason"] == "job_end", summ
    assert [r["end_reason"] for r in summ["rentals"]] == ["preempted", "preempted", "job_end"]
    assert emu.live() == []  # 0 billing: the stopped box (disk still billing) and the offline one destroyed

    led = Ledger(settings.ledger_url())
    run_id = summ["run"]["id"]
    assert run_id.startswith("run-")
    run = led.get_run(run_id)
    assert (run.status, run.end_reason, run.attempts, run.recover) == ("closed", "job_end", 3, 2)
    rows = led.run_rentals(run_id)
    assert [(r.attempt, r.end_reason, r.status, r.spot) for r in rows] == [
        (1, "preempted", "closed", True),
        (2, "preempted", "closed", True),
        (3, "job_end", "closed", True),
    ]
    # --max-hours counts the whole run: each rental got what the earlier ones left
    assert rows[0].max_hours == pytest.approx(4.0, abs=1e-9)
    assert rows[1].max_hours == pytest.approx(4.0 - rows[0].billed_seconds / 3600, abs=1e-6)
    assert rows[2].max_hours == pytest.approx(4.0 - (rows[0].billed_seconds + rows[1].billed_seconds) / 3600, abs=1e-6)

    # the agent on each box was armed with what the run had left, as the row says
    armed = [
        json.loads((sshd.home / "gpuops" / r.label / ".gpuops" / "agent.json").read_text())["teardown"] for r in rows
    ]
    assert [a["max_hours"] for a in armed] == pytest.approx([r.max_hours for r in rows], abs=1e-9)

    # the result is intact: every step once in the chain, resumed across the three rentals
    result = json.loads((gpuops_home / "results" / rows[2].id / "result.json").read_text())
    assert result == {"steps": STEPS, "digest": _expected_digest(STEPS), "attempts": [1, 2, 3]}
    resumed = [json.loads(e.detail) for r in rows[1:] for e in led.events(r.id) if e.kind == "resume"]
    assert [d["from"] for d in resumed] == [rows[0].id, rows[1].id]
    log3 = Path(rows[2].log_path).read_text()
    assert f"resumed at step {tb.taken[1]['step_home']} (attempt 3)" in log3, log3[-2000:]

    # the run's cost is the provider's billing of its three rentals, within a cent
    insts = [emu.market.instances[r.instance_id] for r in rows]
    billed = [i.billed_usd for i in insts]
    for row, usd in zip(rows, billed):
        assert abs(row.cost_usd - usd) <= CENT, (row.id, row.cost_usd, usd)
    assert abs(summ["cost_usd"] - sum(billed)) <= CENT
    assert summ["cost_usd"] == pytest.approx(sum(r.cost_usd for r in rows), abs=1e-6)
    # the host-gone rental billed nothing after the host went
    gone = emu.market.instances[tb.taken[1]["id"]]
    assert max(t1 for _, t1, _, _ in gone.segments) <= tb.taken[1]["at"] + 0.5


def test_a_run_out_of_attempts_ends_attempts_spent(rig, sshd, gpuops_home, vast_provider, cli):
    emu = rig
    settings = _settings()
    req = UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=1,
                    job_args=("--note", "a b"))  # fmt: skip
    with TakeBack(emu, sshd, gpuops_home, at_step=[2, 4], modes=["outbid", "outbid"]) as tb:
        summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert tb.error is None, tb.error
    assert summ["end_reason"] == "attempts_spent", summ
    led = Ledger(settings.ledger_url())
    started = [
        e.detail for r in led.run_rentals(summ["run"]["id"]) for e in led.events(r.id) if e.kind == "job_started"
    ]
    assert started == ['{"args": ["--note", "a b"]}'] * 2  # the re-rental's job started with the same argv
    assert "--recover 1 spent" in summ["run"]["detail"]
    assert [r["end_reason"] for r in summ["rentals"]] == ["preempted", "preempted"]
    assert emu.live() == []
    run = Ledger(settings.ledger_url()).get_run(summ["run"]["id"])
    assert (run.status, run.end_reason, run.attempts) == ("closed", "attempts_spent", 2)

    # the books: `ledger show RUN` lists its rentals and why each ended; `sessions` has the run;
    # `sessions --runs` the run with its rentals' total
    got = cli("ledger", "show", run.id, "--format", "json")
    assert got.returncode == 0, got.stderr
    shown = json.loads(got.stdout)
    assert [(r["attempt"], r["end_reason"]) for r in shown["rentals"]] == [(1, "preempted"), (2, "preempted")]
    assert all("the provider showed it stopped during job" in r["why"] for r in shown["rentals"]), shown["rentals"]
    assert shown["run"]["end_reason"] == "attempts_spent" and shown["cost_usd"] == pytest.approx(
        summ["cost_usd"], abs=1e-6
    )
    table = cli("ledger", "show", run.id, env={"COLUMNS": "200"})
    assert table.returncode == 0 and f"run {run.id}" in table.stdout and "why it ended" in table.stdout, table.stdout
    sess = json.loads(cli("ledger", "sessions", "--format", "json").stdout)["sessions"]
    assert [r["run"] for r in sess] == [run.id, run.id]
    runs = json.loads(cli("ledger", "sessions", "--runs", "--format", "json").stdout)["runs"]
    assert [(r["run"], r["rentals"], r["end_reason"]) for r in runs] == [(run.id, 2, "attempts_spent")]
    assert runs[0]["cost_usd"] == pytest.approx(summ["cost_usd"], abs=1e-6)
    assert cli("ledger", "show", "run-nope").returncode == 2
    assert (
        json.loads(cli("ledger", "show", run.id[:-2], "--format", "json").stdout)["run"]["id"] == run.id
    )  # a unique prefix


def test_a_run_out_of_money_ends_session_cap_before_renting_again(rig, sshd, gpuops_home, vast_provider, monkeypatch):
    import gpuops.rental.runs as runs

    emu = rig
    # The first rental may buy MIN_RENTAL_S + 3 s; once it has billed more than 3 s what is left buys
    # less than a rental needs: the run ends session_cap with attempts to spare.
    monkeypatch.setattr(runs, "MIN_RENTAL_S", 3600.0)
    p = min(
        o.price for o in vast_provider.offers(OfferQuery(cards=("rtx-4090",), gpu_count=1, spot=True))
    )  # what a rental is charged
    settings = _settings(max_session_usd=p * (3600.0 + 3.0) / 3600.0)
    req = UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=3)
    with TakeBack(emu, sshd, gpuops_home, at_step=[3], modes=["outbid"]) as tb:
        summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert tb.error is None, tb.error
    assert summ["end_reason"] == "session_cap", summ
    assert "max_session_usd" in summ["run"]["detail"]
    assert [r["end_reason"] for r in summ["rentals"]] == ["preempted"]
    assert emu.live() == []
    led = Ledger(settings.ledger_url())
    (row,) = led.run_rentals(summ["run"]["id"])
    assert row.max_session_usd == pytest.approx(settings.teardown.max_session_usd, abs=1e-9)
    armed = json.loads((sshd.home / "gpuops" / row.label / ".gpuops" / "agent.json").read_text())["teardown"]
    assert armed["max_session_usd"] == pytest.approx(
        row.max_session_usd, abs=1e-9
    )  # the agent holds the run's money left
    from gpuops.agent.agentctl import session_teardown

    assert session_teardown(None, {"max_hours": 4.0, "max_session_usd": None}, row)["max_session_usd"] == pytest.approx(
        row.max_session_usd, abs=1e-9
    )


def test_the_monthly_cap_is_checked_before_each_new_rental(rig, sshd, gpuops_home, vast_provider):
    from ledger.limits import set_refusal

    emu = rig
    settings = _settings()

    def watchdog_refuses() -> None:  # a watchdog saw the month reach its cap while the first box was being lost
        set_refusal(
            Ledger(settings.ledger_url()), "*", "monthly_cap", "month-to-date $50.00 reached monthly_cap_usd $50.00"
        )

    req = UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=3)
    with TakeBack(emu, sshd, gpuops_home, at_step=[2], modes=["host_gone"], then=watchdog_refuses) as tb:
        summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert tb.error is None, tb.error
    assert summ["end_reason"] == "monthly_cap", summ
    assert "new boxes refused (monthly_cap" in summ["run"]["detail"]
    assert [r["end_reason"] for r in summ["rentals"]] == ["preempted"]
    assert emu.live() == []


QUIET_JOB = """import json, os, time
print("started", flush=True)  # one line, then quiet: only its checkpoints show it works
d = os.environ["GPUOPS_RESUME_DIR"]
p = os.path.join(d, "checkpoint.json")
step = json.load(open(p))["step"] if os.path.exists(p) else 0
while True:
    time.sleep(1.0)
    step += 1
    with open(p + ".tmp", "w") as f:
        json.dump({"step": step, "attempts": [int(os.environ["GPUOPS_ATTEMPT"])]}, f)  # this rental's own
    os.replace(p + ".tmp", p)
"""


def test_a_run_spends_what_its_rentals_cost_by_the_providers_bill(
    rig, sshd, gpuops_home, vast_provider, monkeypatch, tmp_path
):
    """`up --spot --recover 1` with --max-hours for 24 s and a max_session_usd, a quiet job, every
    offer at one price: the first box is taken back; the second rental is handed what the
    provider billed the first one left (hours and USD), and the run's GPU time stays within its
    limit (5 %).

    The second rental runs to the run's limit, so the limit is the test's length: 24 s leaves the
    second rental 18 s after a first one of 6 s (a lightly loaded 2-core machine), and a first
    rental three times as slow (18 s) would still leave more than the ``MIN_RENTAL_S`` (5 s here) it needs."""
    import gpuops.rental.runs as runs

    emu = rig
    monkeypatch.setattr(runs, "MIN_RENTAL_S", 5.0)  # a short run may still re-rent
    job = tmp_path / "quiet.py"
    job.write_text(QUIET_JOB)
    limit_s = 24.0
    charged = min(o.price for o in vast_provider.offers(OfferQuery(cards=("rtx-4090",), gpu_count=1, spot=True)))
    max_usd = 2 * charged * limit_s / 3600.0  # twice what 24 s cost: the hours bind, the money is counted down
    settings = _settings(max_session_usd=max_usd)
    req = UpRequest(
        job=job, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=1, max_hours=limit_s / 3600
    )
    with TakeBack(emu, sshd, gpuops_home, at_step=[4], modes=["outbid"]) as tb:
        summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert tb.error is None, tb.error
    assert [r["end_reason"] for r in summ["rentals"]][0] == "preempted", summ
    assert emu.live() == []
    rows = Ledger(settings.ledger_url()).run_rentals(summ["run"]["id"])
    assert len(rows) == 2, summ
    insts = [emu.market.instances[r.instance_id] for r in rows]
    gpu_s = [i.billed_s("gpu") for i in insts]  # the emulator's bill, in its documented increment
    usd = [i.billed_usd for i in insts]
    for r, i in zip(rows, insts):
        print(
            f"rental {r.attempt}: billed {i.billed_s('gpu'):.2f} s GPU + {i.billed_s('storage'):.2f} s disk "
            f"${i.billed_usd:.6f}; booked {r.billed_seconds:.2f} s ${r.cost_usd:.6f}"
        )
    # each rental booked as billed: within 5 % of the provider's seconds and USD, a 5 s rental too.
    # The taken-back one ends at its last proof of life (Vast records no stop time), so it may be
    # booked under the bill by the time from `up`'s last read of the box to the take-back (1 s on
    # a loaded machine; its reads are 0.2 s apart) and the billed second that crossing began.
    # One ended by our destroy ends when Vast answered it (Vast records no stop time and its answer
    # carries none): its billing stopped before that answer came back, so it may be booked over the
    # bill by one increment, the billed second begun in the answer's trip (tens of ms loaded).
    for r, i in zip(rows, insts):
        billed_s = i.billed_s("gpu")
        under_s = i.increment_s + 1.0 if r.end_reason == "preempted" else 0.0
        over_s = i.increment_s if r.end_source == "destroy" else 0.0
        assert -0.05 * billed_s - over_s <= billed_s - r.billed_seconds <= 0.05 * billed_s + under_s, (
            r.billed_seconds,
            r.end_reason,
            r.end_source,
            i.segments,
        )
        under_usd, over_usd = charged * under_s / 3600.0, charged * over_s / 3600.0
        assert -0.05 * i.billed_usd - over_usd <= i.billed_usd - r.cost_usd <= 0.05 * i.billed_usd + under_usd, (
            r.cost_usd,
            i.billed_usd,
            i.segments,
        )
    # the second rental got what the provider's bill of the first left: within 1 s, 1 s of money
    assert rows[1].max_hours * 3600 == pytest.approx(limit_s - gpu_s[0], abs=1.0), (rows[1].max_hours * 3600, gpu_s)
    assert rows[1].max_session_usd == pytest.approx(max_usd - usd[0], abs=charged / 3600 + 0.05 * usd[0]), (
        rows[1].max_session_usd,
        max_usd,
        usd,
    )
    # and the run as a whole spent what it was allowed: past the limit by at most, per rental, the
    # whole second the provider bills begun (1 s), the kill grace (0.5 s) and one agent sample
    # (0.3 s) before its destroy, plus 2 s for a destroy's answer on a loaded 2-core machine
    over_s = len(rows) * (1.0 + TEARDOWN["kill_grace_seconds"] + TEARDOWN["sample_seconds"]) + 2.0
    assert sum(gpu_s) <= limit_s + over_s, (gpu_s, over_s)
    assert sum(usd) <= max_usd + charged * over_s / 3600.0, (usd, max_usd)


def _host_goes(sshd, root: Path) -> None:
    """The box goes as a reclaimed host does: every SSH connection cut and new ones refused (the sshd
    and its sessions killed), its processes with it."""
    if sshd.proc is not None:
        for pid in descendants(sshd.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    sshd.stop()
    for pid in box_processes(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_box_taken_back_during_the_copy_back_is_rented_again_and_the_job_resumes(
    rig, sshd, gpuops_home, vast_provider, monkeypatch
):
    """The job ended well; while its results are being copied home the market takes the box back
    (the host gone: the copy fails). The result is not home, so the run re-rents (attempts allowing)
    and the job resumes from its last checkpoint; the run and its rentals agree: preempted, then
    job_end, and the result is intact."""
    import threading

    from gpuops.rental import results as copyback

    emu = rig
    settings = _settings()
    real = copyback.fetch_results
    taken: list[str] = []

    def copy_home(box, results, dest, **kw):
        if "keep_to" in kw and not taken:  # the collect stage's copy (the checkpoint copies pass no keep_to)
            (inst,) = [i for i in emu.live() if i.state == "running"]
            emu.market.preempt(inst.id, "outbid")
            taken.append(inst.id)
            _host_goes(sshd, sshd.home / "gpuops" / inst.label)

            def back() -> None:  # the next rental's box answers on the same sshd once this one is destroyed
                deadline = time.monotonic() + STAGE_TIMEOUT_S
                while emu.market.find(inst.id) is not None and time.monotonic() < deadline:
                    time.sleep(0.05)
                sshd.start_later(0)  # a thread alive until stop(): sshd ends with the thread that starts it

            threading.Thread(target=back, daemon=True).start()
        return real(box, results, dest, **kw)

    monkeypatch.setattr(copyback, "fetch_results", copy_home)
    req = UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=1)
    summ = run_up(req, settings, Reporter(), provider=vast_provider)
    assert taken, "the collect stage never copied"
    assert [r["end_reason"] for r in summ["rentals"]] == ["preempted", "job_end"], summ
    assert summ["end_reason"] == "job_end" and emu.live() == []
    led = Ledger(settings.ledger_url())
    rows = led.run_rentals(summ["run"]["id"])
    assert [(r.end_reason, r.status) for r in rows] == [("preempted", "closed"), ("job_end", "closed")]
    assert led.get_run(summ["run"]["id"]).end_reason == "job_end"
    result = json.loads((gpuops_home / "results" / rows[1].id / "result.json").read_text())
    assert result["steps"] == STEPS and result["digest"] == _expected_digest(STEPS) and result["attempts"] == [1, 2]
