"""A team on one ledger: two users (alice, bob), each with their own RunPod and Vast account on the
same emulated providers and their own data dir (local boxes) on this machine, sharing one ledger
on SQLite and on the test PostgreSQL server."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuops.config import Settings, load_settings
from gpuops.providers import get_provider
from gpuops.providers.base import CreateSpec, OfferQuery
from ledger import Ledger
from tests.emulators import RunPodEmulator, VastEmulator
from tests.support.postgres import postgres_server  # noqa: F401  (fixture)

KEYS = {
    "alice": {"runpod": "rp_ALICE_key", "vast": "vast_ALICE_key"},
    "bob": {"runpod": "rp_BOB_key", "vast": "vast_BOB_key"},
}


@dataclass
class User:
    """One teammate: settings (owner name, keys, data dir, the shared ledger URL), the ledger."""

    name: str
    settings: Settings
    ledger: Ledger
    providers: dict = field(default_factory=dict)

    def provider(self, name: str):
        if name not in self.providers:
            self.providers[name] = get_provider(name, self.settings)
        return self.providers[name]

    def rent(self, provider: str, sid: str, card: str = "rtx-4090") -> Any:
        """What `up` does up to `create`: the intent row (owner, account) then create, then the
        row gets the instance. Returns the row."""
        p = self.provider(provider)
        offers = [o for o in p.offers(OfferQuery(cards=(card,), spot=False)) if not o.spot]
        offer = min(offers, key=lambda o: o.usd_per_hour)
        label = f"gpuops-{sid}"
        self.ledger.add_session(
            dict(
                id=sid,
                experiment="team",
                job="job.sh",
                provider=provider,
                card=offer.card,
                gpu_count=1,
                spot=False,
                label=label,
                simulated=offer.simulated,
                status="provisioning",
                created_at=time.time(),
                owner=self.settings.owner(),
                account=p.account,
            )
        )
        inst = p.create(
            offer,
            CreateSpec(
                label=label,
                image="img",
                disk_gb=20,
                ssh_public_key="ssh-ed25519 AAAA test" if provider != "local" else "",
            ),
        )
        self.ledger.update(
            sid,
            instance_id=inst.id,
            instance_created_at=inst.created_at or time.time(),
            usd_per_hour=inst.usd_per_hour,
            status="running",
        )
        return self.ledger.get(sid)


@pytest.fixture(params=["sqlite", "postgres"])
def team_ledger_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'team-ledger.db'}"
    return request.getfixturevalue("postgres_server").new_database()


@pytest.fixture
def markets():
    """RunPod and Vast emulators, each with alice's account (acct-1) and bob's (acct-2)."""
    rp = RunPodEmulator(api_key=KEYS["alice"]["runpod"], balance_usd=500.0).start()
    vast = VastEmulator(api_key=KEYS["alice"]["vast"], balance_usd=500.0).start()
    rp.add_account(KEYS["bob"]["runpod"], 100.0)
    vast.add_account(KEYS["bob"]["vast"], 100.0)
    try:
        yield {"runpod": rp, "vast": vast}
    finally:
        rp.stop()
        vast.stop()


@pytest.fixture
def team(gpuops_home, tmp_path, monkeypatch, markets, team_ledger_url, fake_smi_team):
    """``make(teardown=None) -> {"alice": User, "bob": User}`` on the shared ledger; the users'
    local boxes are destroyed after the test."""
    for var in ("RUNPOD_API_KEY", "VAST_API_KEY", "RUNPOD_API_BASE_URL", "VAST_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no provider key files of the machine's user
    made: list[User] = []

    def make(teardown: dict | None = None) -> dict[str, User]:
        users = {}
        for name in ("alice", "bob"):
            settings = load_settings(
                overrides={
                    "user": {"name": name},
                    "data_dir": str(tmp_path / f"data-{name}"),
                    "ledger": {"url": team_ledger_url},
                    "teardown": {"kill_grace_seconds": 1.0, **(teardown or {})},
                    "providers": {
                        "local": {"price_per_hour": 2.0},
                        "runpod": {"api_key": KEYS[name]["runpod"], "url": markets["runpod"].url},
                        "vast": {"api_key": KEYS[name]["vast"], "url": markets["vast"].url},
                    },
                }
            )
            users[name] = User(name, settings, Ledger(team_ledger_url))
            made.append(users[name])
        return users

    yield make
    for u in made:
        for name, p in u.providers.items():
            if name == "local":
                for inst in p.list():
                    p.destroy(inst.id)
        u.ledger.engine.dispose()


@pytest.fixture
def fake_smi_team(tmp_path, monkeypatch):
    """nvidia-smi answering 'no GPU' quickly: local boxes read as unknown, never idle."""
    import os
    import stat

    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    p = bindir / "nvidia-smi"
    p.write_text("#!/bin/sh\nexit 9\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir


def snapshot(led: Ledger, sid: str) -> tuple:
    """What must not change on someone else's row: status, end, reason, cost, events."""
    r = led.get(sid)
    return (
        r.status,
        r.ended_at,
        r.end_reason,
        r.cost_usd,
        r.billed_seconds,
        [(e.kind, e.detail) for e in led.events(sid)],
    )


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]
