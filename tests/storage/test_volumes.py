"""Volumes through the real SDKs against the emulators: list/create/delete with size, region and
monthly cost; `up --volume` rents only offers that can mount it, mounts it, points the bootstrap
cache at it, and teardown never deletes it."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpuops.errors import BadInput
from gpuops.providers import volume_refs as volumes
from gpuops.providers.base import CreateSpec, OfferQuery
from gpuops.providers.provider_errors import ProviderError
from gpuops.providers.runpod import volumes as runpod_volumes
from gpuops.providers.volumes import spec_fields
from tests.conftest import cli_in_process, gpuops_cmd


def test_runpod_volume_list_create_delete(runpod_vol_emulator, runpod_vol_provider):
    svc = volumes.service(runpod_vol_provider)
    assert svc.list() == []
    vol = svc.create("weights-eu", 120, "EU-RO-1")
    assert (vol.provider, vol.name, vol.size_gb, vol.region, vol.mount_path) == (
        "runpod",
        "weights-eu",
        120.0,
        "EU-RO-1",
        "/workspace",
    )
    assert vol.usd_per_month == pytest.approx(120 * 0.07, abs=1e-6)
    post = [
        r for r in runpod_vol_emulator.market.requests if r["path"] == "/v2/network-volumes" and r["method"] == "POST"
    ]
    assert post[0]["body"] == {"name": "weights-eu", "size": 120, "dataCenter": "EU-RO-1"}
    assert post[0]["auth"] == "Bearer rp_TESTKEY"
    listed = svc.list()  # GET /v2/network-volumes
    assert [(v.id, v.size_gb, v.region) for v in listed] == [(vol.id, 120.0, "EU-RO-1")]
    assert {(r["method"], r["path"].split("/vol")[0]) for r in runpod_vol_emulator.market.requests} == {
        ("POST", "/v2/network-volumes"),
        ("GET", "/v2/network-volumes"),
    }
    with pytest.raises(BadInput, match="10-4096 GB"):
        svc.create("tiny", 5, "EU-RO-1")  # under the spec's minimum: refused before any call
    svc.delete(vol.id)
    svc.delete(vol.id)  # idempotent
    assert svc.list() == []


def test_runpod_price_past_one_terabyte():
    assert runpod_volumes.runpod_usd_per_month(1500) == pytest.approx(1000 * 0.07 + 500 * 0.05, abs=1e-6)


def test_vast_volume_list_create_delete(vast_vol_emulator, vast_vol_provider):
    svc = volumes.service(vast_vol_provider)
    vol = svc.create("cache-se", 80, "SE")
    # The cheapest offer in Sweden is the one on offer 1001's machine.
    assert (vol.provider, vol.name, vol.size_gb, vol.kind, vol.machine_id) == (
        "vast",
        "cache-se",
        80.0,
        "local",
        "10010",
    )
    assert vol.usd_per_month == pytest.approx(80 * vast_vol_emulator.volume_offers[10001]["storage_cost"], abs=1e-6)
    put = [r for r in vast_vol_emulator.market.requests if r["path"] == "/api/v0/volumes/" and r["method"] == "PUT"]
    assert put[0]["body"] == {"size": 80, "id": 10001, "name": "cache-se"}
    assert [v.id for v in svc.list()] == [vol.id]
    svc.delete(vol.id)
    svc.delete(vol.id)  # idempotent
    assert svc.list() == []


def test_bad_volume_input_is_one_line_before_any_call(runpod_vol_emulator, runpod_vol_provider):
    svc = volumes.service(runpod_vol_provider)
    for call in (
        lambda: svc.create("x y", 10, "EU-RO-1"),
        lambda: svc.create("ok", 0, "EU-RO-1"),
        lambda: svc.create("ok", 10, "Europe"),
        lambda: volumes.parse_ref("weights"),
        lambda: volumes.parse_ref("gcp:abc"),
        lambda: volumes.parse_ref('runpod:a"b'),
    ):
        with pytest.raises(BadInput):
            call()
    assert runpod_vol_emulator.market.requests == []


def test_runpod_offers_narrowed_to_secure_and_pod_mounts_the_volume(runpod_vol_emulator, runpod_vol_provider):
    vol = volumes.service(runpod_vol_provider).create("w", 50, "US-KS-2")
    offers = runpod_vol_provider.offers(OfferQuery(cards=("rtx-4090",)))
    assert {o.offer_id.split(":")[0] for o in offers} == {"secure", "community"}
    ok = volumes.mountable(runpod_vol_provider, vol, offers)
    assert ok and all(o.offer_id.startswith("secure:") and o.region == "US-KS-2" for o in ok)
    inst = runpod_vol_provider.create(
        ok[0], CreateSpec(label="gpuops-t1", image="runpod/base:0.0.0", **spec_fields(vol))
    )
    req = runpod_vol_emulator.market.find(inst.id).request
    assert (req["mounts"], req["dataCenterIds"], req["cloud"]) == (
        {"network": [{"volumeId": vol.id, "path": "/workspace"}]},
        ["US-KS-2"],
        "SECURE",
    )
    assert inst.extra["volume_path"] == "/workspace"
    runpod_vol_provider.destroy(inst.id)
    assert [v.id for v in volumes.service(runpod_vol_provider).list()] == [vol.id]  # destroy never deletes it


def test_vast_offers_narrowed_to_the_volume_machine(vast_vol_emulator, vast_vol_provider):
    vol = volumes.service(vast_vol_provider).create("w", 40, "machine:10020")
    offers = vast_vol_provider.offers(OfferQuery(cards=("rtx-4090",), spot=False))
    ok = volumes.mountable(vast_vol_provider, vol, offers)
    assert [o.offer_id for o in ok] == ["1002"]
    inst = vast_vol_provider.create(ok[0], CreateSpec(label="gpuops-t2", image="img:1", **spec_fields(vol)))
    body = vast_vol_emulator.market.find(inst.id).request
    assert body["volume_info"] == {"mount_path": "/gpuops-volume", "create_new": False, "volume_id": int(vol.id)}
    assert inst.extra["volume_path"] == "/gpuops-volume"
    with pytest.raises(ProviderError):  # Vast refuses while an instance uses it
        volumes.service(vast_vol_provider).delete(vol.id)
    vast_vol_provider.destroy(inst.id)
    assert [v.id for v in volumes.service(vast_vol_provider).list()] == [vol.id]
    only_other = [o for o in offers if o.offer_id != "1002"]
    with pytest.raises(BadInput, match="no offer can mount"):
        volumes.mountable(vast_vol_provider, vol, only_other)


def test_resolve_by_name_or_id_and_refusals(runpod_vol_emulator, runpod_vol_provider):
    vol = volumes.service(runpod_vol_provider).create("w", 10, "EU-RO-1")
    assert volumes.resolve(runpod_vol_provider, "runpod:w").id == vol.id
    assert volumes.resolve(runpod_vol_provider, f"runpod:{vol.id}").name == "w"
    with pytest.raises(BadInput, match="no runpod volume"):
        volumes.resolve(runpod_vol_provider, "runpod:nope")
    with pytest.raises(BadInput, match="on vast"):
        volumes.resolve(runpod_vol_provider, "vast:123")


def test_cli_volumes_list_create_delete(vol_env, cli_env, tmp_path):
    (tmp_path / "job.sh").write_text("echo hi\n")
    env = dict(cli_env, **{k: v for k, v in __import__("os").environ.items() if k.startswith(("RUNPOD_", "VAST_"))})
    run = lambda *a: cli_in_process(*a, env=env, whole_env=True)  # noqa: E731  (reads and HTTP only)
    r = run(
        "volumes",
        "create",
        "--provider",
        "runpod",
        "--name",
        "weights-eu",
        "--size-gb",
        "100",
        "--region",
        "EU-RO-1",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    created = json.loads(r.stdout)["volumes"][0]
    assert (created["size_gb"], created["region"], created["usd_per_month"]) == (100.0, "EU-RO-1", 7.0)
    r = run("volumes", "list", "--json")
    assert r.returncode == 0, r.stderr
    assert [(v["provider"], v["name"]) for v in json.loads(r.stdout)["volumes"]] == [("runpod", "weights-eu")]
    r = run("volumes", "list")
    assert "weights-eu" in r.stdout and "7.00" in r.stdout and "USD/month" in r.stdout
    r = run("volumes", "delete", "runpod:weights-eu")
    assert r.returncode == 2 and "--yes" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("volumes", "delete", "runpod:weights-eu", "--yes")
    assert r.returncode == 0 and "deleted" in r.stdout
    r = run("volumes", "create", "--provider", "runpod", "--name", "x", "--size-gb", "10")
    assert r.returncode == 2 and "--region" in r.stderr
    r = run("up", "--job", str(tmp_path / "job.sh"), "--provider", "runpod", "--volume", "runpod:missing", "--dry-run")
    assert r.returncode == 2 and "no runpod volume" in r.stderr
    assert vol_env["runpod"].live() == []


def test_dry_run_names_the_volume_and_the_mountable_offer(vol_env, cli_env, tmp_path):
    import os

    env = dict(cli_env, **{k: v for k, v in os.environ.items() if k.startswith(("RUNPOD_", "VAST_"))})
    vol_env["runpod"].add_volume("weights-ro", 40, "EU-RO-1")
    (tmp_path / "job.sh").write_text("echo hi\n")
    r = subprocess.run(
        gpuops_cmd(
            "up",
            "--job",
            str(tmp_path / "job.sh"),
            "--provider",
            "runpod",
            "--card",
            "rtx-4090",
            "--volume",
            "runpod:weights-ro",
            "--dry-run",
            "--json",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["volume"]["region"] == "EU-RO-1" and out["volume"]["mount_path"] == "/workspace"
    assert out["usd_per_hour"] == 0.69  # the Secure Cloud price: community (0.34) cannot mount a network volume
    r = subprocess.run(
        gpuops_cmd(
            "up",
            "--job",
            str(tmp_path / "job.sh"),
            "--provider",
            "runpod",
            "--card",
            "rtx-4090",
            "--volume",
            "runpod:weights-ro",
            "--dry-run",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "volume: runpod:weights-ro (40 GB, EU-RO-1) mounted at /workspace" in r.stdout
    assert vol_env["runpod"].live() == []


def test_runpod_rest_errors_delete_retried_create_not(runpod_vol_emulator, runpod_vol_provider):
    from gpuops.providers.base import ProviderError, ProviderErrorKind

    svc = volumes.service(runpod_vol_provider)
    runpod_vol_emulator.faults.inject["networkvolumes"] = [502]
    with pytest.raises(ProviderError) as e:
        svc.create("w", 10, "EU-RO-1")  # a create is never retried blindly: it may have happened
    assert e.value.kind == ProviderErrorKind.SERVER and runpod_vol_emulator.network_volumes == {}
    vol = svc.create("w", 10, "EU-RO-1")
    runpod_vol_emulator.faults.inject["networkvolumes"] = [502, 429]
    svc.delete(vol.id)  # idempotent, so retried through the 5xx and the rate limit
    assert runpod_vol_emulator.network_volumes == {}
    bad = runpod_volumes.RunPodVolumes(type(runpod_vol_provider)(None, runpod_vol_provider.url))
    with pytest.raises(ProviderError) as e:
        bad.create("w", 10, "EU-RO-1")
    assert e.value.kind == ProviderErrorKind.AUTH


def test_a_volume_is_booked_as_storage_by_ledger_sync_and_shown_in_ledger_month(vol_env, cli_env):
    """The volume's cost comes from the provider's own billing (books: ``ledger sync --apply``),
    as an account-level storage line that ``ledger month`` counts in its total and storage."""
    import os
    from datetime import datetime, timezone

    env = dict(cli_env, **{k: v for k, v in os.environ.items() if k.startswith(("RUNPOD_", "VAST_"))})
    env.pop("VAST_API_KEY", None)  # this test is about RunPod's billing only
    run = lambda *a: cli_in_process(*a, env=env, whole_env=True)  # noqa: E731  (reads and HTTP only)
    r = run(
        "volumes",
        "create",
        "--provider",
        "runpod",
        "--name",
        "weights",
        "--size-gb",
        "50",
        "--region",
        "EU-RO-1",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    vid = json.loads(r.stdout)["volumes"][0]["id"]
    emu = vol_env["runpod"]
    day = datetime(2026, 11, 10, tzinfo=timezone.utc).timestamp()
    emu.volumes[vid].update({"from": day, "to": day + 86400})  # it billed one whole day of November 2026
    r = run("ledger", "sync", "--month", "2026-11", "--tz", "UTC", "--apply", "--json")
    assert r.returncode == 0, r.stderr
    r = run("ledger", "month", "2026-11", "--tz", "UTC", "--json")
    assert r.returncode == 0, r.stderr
    month = json.loads(r.stdout)
    assert month["storage_usd"] == pytest.approx(50 * 0.07 / 730 * 24, abs=1e-6)
    assert month["total_usd"] == pytest.approx(month["storage_usd"], abs=1e-6)


@pytest.mark.parametrize("labelled", [False, True], ids=["list-has-no-name", "list-carries-our-label"])
def test_vast_volume_is_found_after_create_and_by_name_either_way(vast_vol_emulator, tmp_path, labelled):
    """Vast's spec documents no name in the volume list (create answers ``volume_name``); whether a
    row carries our label is undocumented. Either way `volumes create` names the new volume, and
    ``vast:NAME`` resolves to it -- from the row's label, else from the name booked in the data dir."""
    from gpuops.providers.keys import Credential
    from gpuops.providers.vast.compute import VastProvider
    from tests.support.emulators import FAST_RETRY

    vast_vol_emulator.volume_label_in_list = labelled
    p = VastProvider(
        Credential(vast_vol_emulator.market.api_key, "test"),
        vast_vol_emulator.url,
        retry=FAST_RETRY,
        timeout_s=10,
        data_dir=tmp_path,
    )
    svc = volumes.service(p)
    other = svc.create("other", 20, "SE")
    vol = svc.create("weights", 30, "SE")
    assert (vol.name, vol.size_gb, vol.id) != (other.name, other.size_gb, other.id) and vol.name == "weights"
    put = [r for r in vast_vol_emulator.market.requests if r["method"] == "PUT" and r["path"] == "/api/v0/volumes/"]
    assert len(put) == 2  # one create each, never retried
    fresh = VastProvider(
        Credential(vast_vol_emulator.market.api_key, "test"),
        vast_vol_emulator.url,
        retry=FAST_RETRY,
        timeout_s=10,
        data_dir=tmp_path,
    )  # another process: the book is on disk
    assert volumes.resolve(fresh, "vast:weights").id == vol.id and volumes.resolve(fresh, "vast:other").id == other.id
    assert (tmp_path / "vast-volumes.json").exists()
    svc.delete(vol.id)
    svc.delete(other.id)
    assert svc.list() == [] and json.loads((tmp_path / "vast-volumes.json").read_text()) == {}


def test_cli_volumes_delete_asks_on_a_terminal(vol_env, cli, monkeypatch):
    # Seen: `volumes delete` refused without --yes even at a terminal; it asks there now, and still
    # refuses (exit 2, naming --yes) where nobody can answer (the subprocess test above: a pipe).
    import gpuops.cli.volumes as cli_volumes

    svc = volumes.service(
        __import__("gpuops.providers", fromlist=["get_provider"]).get_provider(
            "runpod", __import__("gpuops.config", fromlist=["load_settings"]).load_settings()
        )
    )
    vol = svc.create("weights-ask", 10, "EU-RO-1")
    monkeypatch.setattr(cli_volumes, "_on_terminal", lambda: True)
    no = cli("volumes", "delete", "runpod:weights-ask", input="n\n")
    assert no.returncode == 1 and "Delete it? [y/N]" in no.stderr and "not deleted" in no.stderr
    assert [v.id for v in svc.list()] == [vol.id]
    yes = cli("volumes", "delete", "runpod:weights-ask", input="y\n")
    assert yes.returncode == 0 and f"deleted runpod volume {vol.id}" in yes.stdout, (
        yes.stderr
    )  # (the runner echoes the answer)
    assert svc.list() == []
