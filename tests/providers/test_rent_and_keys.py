"""Renting the next offer when one is gone; where keys come from; the registry; lazy imports."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from gpuops.config import load_settings
from gpuops.planning.offers import rank
from gpuops.providers import REGISTRY, configured, get_provider
from gpuops.providers.base import CreateSpec, OfferQuery, ProviderError, ProviderErrorKind
from gpuops.providers.keys import resolve_key, resolve_url
from gpuops.providers.rent import rent_first
from tests.conftest import REPO

IMAGE = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-devel"


def test_rent_skips_offers_that_vanished(vast_provider, vast_emulator):
    ranked = rank(vast_provider.offers(OfferQuery(cards=("rtx-4090",), spot=False)))
    assert [o.offer_id for o in ranked] == ["1002", "1001"]
    vast_emulator.take_offer(1002)
    attempts = []
    res = rent_first(
        vast_provider,
        ranked,
        CreateSpec(label="gpuops-r1", image=IMAGE),
        on_attempt=lambda o: attempts.append(o.offer_id),
    )
    assert res.offer.offer_id == "1001" and res.skipped == [(ranked[0], "offer_gone")] and attempts == ["1002", "1001"]
    assert [i.id for i in vast_emulator.live()] == [res.instance.id]
    vast_provider.destroy(res.instance.id)


def test_rent_gives_up_after_max_offers(vast_provider, vast_emulator):
    ranked = rank(vast_provider.offers(OfferQuery(cards=("rtx-4090",), spot=False)))
    vast_emulator.faults.vanish_on_create = True
    with pytest.raises(ProviderError) as e:
        rent_first(vast_provider, ranked, CreateSpec(label="gpuops-r2", image=IMAGE), max_offers=2)
    assert e.value.kind == ProviderErrorKind.NO_CAPACITY and "2 vast offers" in e.value.message
    assert vast_emulator.live() == [] and vast_provider.balance().usd == pytest.approx(100.0, abs=1e-6)


def test_rent_stops_on_a_bid_too_low_and_leaves_nothing(vast_provider, vast_emulator):
    ranked = rank(vast_provider.offers(OfferQuery(cards=("rtx-4090",), spot=True)), spot=True)
    with pytest.raises(ProviderError) as e:
        rent_first(vast_provider, ranked, CreateSpec(label="gpuops-r3", image=IMAGE, bid_usd_per_hour=0.01))
    assert e.value.kind == ProviderErrorKind.BID_TOO_LOW and vast_emulator.live() == []


def test_key_order(tmp_path):
    home = tmp_path / "home"
    (home / ".runpod").mkdir(parents=True)
    (home / ".runpod" / "config.toml").write_text('[default]\napi_key = "rp_FROMFILE"\n')
    (home / ".config" / "vastai").mkdir(parents=True)
    (home / ".config" / "vastai" / "vast_api_key").write_text("vast_FROMFILE\n")
    env = {"HOME": str(home)}
    assert resolve_key(REGISTRY["runpod"].keys, env=env).key == "rp_FROMFILE"
    assert resolve_key(REGISTRY["vast"].keys, env=env).source.endswith("vastai/vast_api_key")
    assert resolve_key(REGISTRY["vast"].keys, "vast_CFG", env=env).key == "vast_CFG"
    env["VAST_API_KEY"] = "vast_ENV"
    assert resolve_key(REGISTRY["vast"].keys, "vast_CFG", env=env).key == "vast_ENV"
    assert resolve_key(REGISTRY["runpod"].keys, env={"HOME": str(tmp_path / "nobody")}) is None
    assert "rp_FROMFILE" not in repr(resolve_key(REGISTRY["runpod"].keys, env=env))


def test_key_in_readable_infra_toml_warns(tmp_path, caplog):
    cfg = tmp_path / "infra.toml"
    cfg.write_text('[providers.vast]\napi_key = "vast_INFILE"\nurl = "http://127.0.0.1:1/"\n')
    os.chmod(cfg, 0o644)
    caplog.set_level(logging.WARNING, logger="gpuops.providers")
    s = load_settings(str(cfg), env={})
    cred = resolve_key(REGISTRY["vast"].keys, s.providers.vast.api_key, s.source, env={"HOME": str(tmp_path)})
    assert cred.key == "vast_INFILE" and "[providers.vast] api_key" in cred.source
    assert "chmod 600" in caplog.text and "vast_INFILE" not in caplog.text
    assert resolve_url(REGISTRY["vast"].keys, s.providers.vast.url, env={}) == "http://127.0.0.1:1"
    caplog.clear()
    cfg2 = tmp_path / "private.toml"
    cfg2.write_text('[providers.vast]\napi_key = "vast_INFILE"\n')
    os.chmod(cfg2, 0o600)
    s2 = load_settings(str(cfg2), env={})
    resolve_key(REGISTRY["vast"].keys, s2.providers.vast.api_key, s2.source, env={})
    assert "chmod" not in caplog.text


def test_urls_from_variables_and_settings():
    assert resolve_url(REGISTRY["runpod"].keys, env={}) == "https://api.runpod.io"
    assert (
        resolve_url(REGISTRY["runpod"].keys, env={"RUNPOD_API_BASE_URL": "http://127.0.0.1:5/"}) == "http://127.0.0.1:5"
    )
    assert resolve_url(REGISTRY["vast"].keys, "http://a:1", env={"VAST_URL": "http://b:2"}) == "http://a:1"
    assert resolve_url(REGISTRY["runpod"].keys, "https://api.runpod.io/graphql", env={}) == "https://api.runpod.io"
    assert (
        resolve_url(REGISTRY["runpod"].keys, env={"RUNPOD_API_BASE_URL": "https://api.runpod.io/v2/"})
        == "https://api.runpod.io"
    )  # the host


def test_registry_builds_sdk_providers_from_the_environment(gpuops_home, emulator_env):
    s = load_settings()
    assert configured(s) == ["runpod", "vast"]
    rp, va = get_provider("runpod", s), get_provider("vast", s)
    assert rp.url == emulator_env["runpod"].url and va.url == emulator_env["vast"].url
    assert rp.balance().usd == pytest.approx(100.0, abs=1e-6) and va.balance().usd == pytest.approx(100.0, abs=1e-6)


def test_cli_side_imports_no_sdk():
    code = (
        "import sys, gpuops.providers, gpuops.providers.runpod.compute, gpuops.providers.vast.compute, gpuops.providers.wait, gpuops.providers.rent, gpuops.rental.offers\n"
        "import importlib.util\n"
        "mods = ['gpuops.cli.app'] if importlib.util.find_spec('gpuops.cli.app') else []\n"
        "[__import__(m) for m in mods]\n"
        "bad = [m for m in ('runpod', 'vastai', 'requests', 'graphql') if m in sys.modules]\n"
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
