"""`up` with a volume, end to end: the emulated RunPod (real SDK) places the pod in the volume's
datacenter on Secure Cloud, the box (a real sshd) gets its caches and the job's HF_HOME on the
volume, results are kept there and copied home, and the teardown leaves the volume alone."""

from __future__ import annotations

import json

import gpuops.rental.launcher as launcher
from gpuops.config import load_settings
from gpuops.providers import volume_refs as volumes
from gpuops.providers.runpod import volumes as runpod_volumes
from gpuops.providers.vast import volumes as vast_volumes
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger import Ledger


def test_up_mounts_the_volume_and_never_deletes_it(
    gpuops_home, sshd, runpod_vol_emulator, runpod_vol_provider, tmp_path, monkeypatch
):
    from gpuops.box.ssh import ensure_ssh_key

    mount = tmp_path / "workspace"  # where the pod sees its network volume (RunPod: /workspace)
    mount.mkdir()
    monkeypatch.setattr(runpod_volumes, "RUNPOD_MOUNT", str(mount))
    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    runpod_vol_emulator.market.ssh_endpoint = (sshd.host, sshd.port)
    vol = volumes.service(runpod_vol_provider).create("weights-ks", 50, "US-KS-2")
    s = load_settings(
        None,
        {
            "teardown": {"kill_grace_seconds": 1},
            "storage": {"volume": "runpod:weights-ks"},
            "bootstrap": {"verify": False},
        },
    )
    sshd.authorize(ensure_ssh_key(s.data_path())[1])
    job = tmp_path / "job.sh"
    job.write_text('mkdir -p out && echo "$HF_HOME" > out/hf_home.txt && echo done\n')
    summ = run_up(
        UpRequest(job=job, provider="runpod", card="rtx-4090", volume=s.storage.volume),
        s,
        Reporter(),
        provider=runpod_vol_provider,
    )
    assert summ["end_reason"] == "job_end", summ
    pod = [i for i in runpod_vol_emulator.market.instances.values()][0]
    assert (pod.request["mounts"], pod.request["dataCenterIds"], pod.request["cloud"]) == (
        {"network": [{"volumeId": vol.id, "path": str(mount)}]},
        ["US-KS-2"],
        "SECURE",
    )
    assert pod.state == "destroyed"
    cache = f"{mount}/.cache/gpuops"
    boot = [e.detail for e in Ledger(s.ledger_url()).events(summ["session"]) if e.kind == "bootstrapped"]
    assert json.loads(boot[0])["cache_dir"] == cache if isinstance(boot[0], str) else boot[0]["cache_dir"] == cache
    home = summ["results"]
    assert open(f"{home}/hf_home.txt").read().strip() == f"{cache}/huggingface"
    kept = mount / "gpuops/results" / summ["session"] / "hf_home.txt"
    assert kept.read_text().strip() == f"{cache}/huggingface"  # a verified copy stays on the volume
    assert summ["results_copy"]["ok"] and summ["results_copy"]["kept"] == str(
        mount / "gpuops/results" / summ["session"]
    )
    assert [v.id for v in volumes.service(runpod_vol_provider).list()] == [vol.id]  # teardown never deletes it
    kinds = [e.kind for e in Ledger(s.ledger_url()).events(summ["session"])]
    assert "destroyed" in kinds and "results_copied" in kinds and "volume" in kinds


def test_up_on_vast_rents_the_volume_machine(
    gpuops_home, sshd, vast_vol_emulator, vast_vol_provider, tmp_path, monkeypatch
):
    from gpuops.box.ssh import ensure_ssh_key

    mount = tmp_path / "vast-volume"
    mount.mkdir()
    monkeypatch.setattr(vast_volumes, "VAST_MOUNT", str(mount))
    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    vast_vol_emulator.market.ssh_endpoint = (sshd.host, sshd.port)
    vol = volumes.service(vast_vol_provider).create(
        "cache", 40, "machine:10010"
    )  # offer 1001's machine, not the cheapest (1002 bids 0.15)
    s = load_settings(None, {"teardown": {"kill_grace_seconds": 1}, "bootstrap": {"verify": False}})
    sshd.authorize(ensure_ssh_key(s.data_path())[1])
    job = tmp_path / "job.sh"
    job.write_text('mkdir -p out && echo "$UV_CACHE_DIR" > out/uv.txt\n')
    summ = run_up(
        UpRequest(job=job, provider="vast", card="rtx-4090", spot=True, volume=f"vast:{vol.id}"),
        s,
        Reporter(),
        provider=vast_vol_provider,
    )
    assert summ["end_reason"] == "job_end", summ
    inst = list(vast_vol_emulator.market.instances.values())[0]
    assert inst.offer["id"] == 1001 and inst.request["volume_info"]["volume_id"] == int(vol.id)
    assert open(f"{summ['results']}/uv.txt").read().strip() == f"{mount}/.cache/gpuops/pip/uv"
    assert [v.id for v in volumes.service(vast_vol_provider).list()] == [vol.id]
