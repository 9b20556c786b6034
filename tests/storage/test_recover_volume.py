"""A run with a Vast volume: the job keeps its checkpoint in GPUOPS_RESUME_DIR on the volume
(<volume>/gpuops/runs/<run>), so the next rental -- on the volume's machine, warm from the volume's
caches -- resumes from it without anything copied home. The box is taken back once the
checkpoint on the volume reaches the step the test waits for."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import gpuops.rental.launcher as launcher
from gpuops.config import load_settings
from gpuops.providers import volume_refs as volumes
from gpuops.providers.vast import volumes as vast_volumes
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger import Ledger
from tests.lifecycle.test_spot_recover import JOB, STAGE_TIMEOUT_S, _expected_digest
from tests.lifecycle.upproc import box_processes


def test_a_run_resumes_from_its_checkpoint_on_the_volume(
    gpuops_home, sshd, vast_vol_emulator, vast_vol_provider, tmp_path, monkeypatch
):
    from gpuops.box.ssh import ensure_ssh_key

    emu = vast_vol_emulator
    mount = tmp_path / "vast-volume"
    mount.mkdir()
    monkeypatch.setattr(vast_volumes, "VAST_MOUNT", str(mount))
    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    monkeypatch.setattr(launcher, "TAKEN_BACK_POLL_S", 0.2)
    monkeypatch.setenv("STEPS", "6")
    monkeypatch.setenv("STEP_SECONDS", "0.5")
    emu.market.ssh_endpoint = (sshd.host, sshd.port)
    emu.market.faults.boot_s = 0.0
    vol = volumes.service(vast_vol_provider).create("ckpt", 40, "machine:10010")  # offer 1001's machine
    emu.add_offer(1009, "RTX 4090", 1, 24564, 0.31, 0.19, 0.99, "Sweden, SE")["machine_id"] = (
        10010  # a second ask on that machine
    )
    s = load_settings(
        None,
        {
            "teardown": {"kill_grace_seconds": 0.5, "idle_minutes": "off"},
            "bootstrap": {"verify": False},
            "job": {"env": ["STEPS", "STEP_SECONDS"]},
        },
    )
    sshd.authorize(ensure_ssh_key(s.data_path())[1])
    taken: list = []

    def take_back_at_step_2() -> None:
        deadline = time.monotonic() + STAGE_TIMEOUT_S
        while not taken and time.monotonic() < deadline:
            for ck in mount.glob("gpuops/runs/*/checkpoint.json"):
                try:
                    step = json.loads(ck.read_text())["step"]
                except (OSError, ValueError, KeyError):
                    continue
                if step >= 2:
                    (inst,) = emu.live()
                    emu.market.preempt(inst.id)
                    for pid in box_processes(sshd.home / "gpuops" / inst.label):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    taken.append((inst.id, step))
            time.sleep(0.05)

    t = threading.Thread(target=take_back_at_step_2, daemon=True)
    t.start()
    summ = run_up(
        UpRequest(
            job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, volume=f"vast:{vol.id}", recover=2
        ),
        s,
        Reporter(),
        provider=vast_vol_provider,
    )
    t.join(10)
    assert taken, "the checkpoint never reached step 2 on the volume"
    assert summ["end_reason"] == "job_end" and [r["end_reason"] for r in summ["rentals"]] == ["preempted", "job_end"], (
        summ
    )
    assert emu.live() == []
    rows = Ledger(s.ledger_url()).run_rentals(summ["run"]["id"])
    assert {emu.market.instances[r.instance_id].offer["machine_id"] for r in rows} == {
        10010
    }  # both on the volume's machine
    ckpt = json.loads((mount / "gpuops" / "runs" / summ["run"]["id"] / "checkpoint.json").read_text())
    assert (ckpt["step"], ckpt["digest"], ckpt["attempts"]) == (6, _expected_digest(6), [1, 2])
    log2 = open(rows[1].log_path).read()
    assert "resumed at step" in log2 and "(attempt 2)" in log2
    assert not any(
        e.kind == "resume" for e in Ledger(s.ledger_url()).events(rows[1].id)
    )  # nothing was put on the box: the volume had it
    assert [v.id for v in volumes.service(vast_vol_provider).list()] == [vol.id]
