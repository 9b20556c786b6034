"""A local-provider session driven stage by stage, as `up` drives it (used by the tests and by
``laptop.py``, the stand-in for a `gpuops up` process that tests stop and kill)."""

from __future__ import annotations

import json
import secrets
import shlex
import time
from pathlib import Path

from gpuops.agentctl import agent_config, arm, bootstrap_command, read_status
from gpuops.config import load_settings
from gpuops.providers import get_provider
from gpuops.providers.base import CreateSpec, InstanceStatus, OfferQuery
from ledger.models import Session
from ledger.store import Ledger


def wait_for(pred, timeout: float, step: float = 0.05):
    """Poll ``pred`` until truthy; returns its value or raises AssertionError after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(step)


class Rig:
    """One local-provider session driven stage by stage, as `up` drives it."""

    def __init__(self, teardown: dict, price: float | None = 2.0, up: dict | None = None):
        self.settings = load_settings(overrides={
            "teardown": teardown,
            "providers": {"local": {"price_per_hour": price}},
            "up": dict({"ready_timeout_seconds": 1.0}, **(up or {})),
        })
        self.ledger = Ledger(self.settings.ledger_url())
        self.provider = get_provider("local", self.settings)
        self.sid = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
        self.label = "gpuops-" + self.sid
        self.inst = None
        self.box = None

    def intent(self, spot: bool = False) -> None:
        offer = self.provider.offers(OfferQuery())[0]
        self.offer = offer
        self.ledger.add_session(Session(
            id=self.sid, experiment="t", job="job.sh", provider="local", card=offer.card, gpu_count=1, spot=spot,
            label=self.label, offer_id=offer.offer_id, usd_per_hour=offer.usd_per_hour, simulated=offer.simulated,
            status="provisioning", created_at=time.time(), owner=self.settings.owner(), account=self.provider.account,
        ))

    def create(self, commit: bool = True) -> None:
        self.inst = self.provider.create(self.offer, CreateSpec(label=self.label))
        if commit:
            self.ledger.update(self.sid, instance_id=self.inst.id, instance_created_at=self.inst.created_at,
                               usd_per_hour=self.inst.usd_per_hour, status="running")
            self.ledger.event(self.sid, "created", self.inst.id)
        self.box = self.provider.box(self.inst)

    def arm(self, **extra) -> None:
        cfg = agent_config(session_id=self.sid, provider="local", instance_id=self.inst.id, root=self.box.root,
                           teardown=self.settings.teardown, started_at=self.inst.created_at,
                           usd_per_hour=self.inst.usd_per_hour, settings=self.settings, extra=extra)
        arm(self.box, cfg)
        self.ledger.event(self.sid, "armed", "")

    def bootstrap(self, seconds: float) -> None:
        """Start (detached) a bootstrap whose one step sleeps ``seconds``."""
        (Path(self.box.root) / "bootstrap.json").write_text(json.dumps(
            {"steps": [{"name": "deps", "kind": "run", "command": f"sleep {seconds}"}]}))
        self.box.run_detached(bootstrap_command("bootstrap.json"))

    def job(self, command: str) -> None:
        self.box.run_detached(f"exec python3 .gpuops/bootstrap/jobwrap.py --dir .gpuops/run -- bash -c {shlex.quote(command)}")

    def status(self) -> dict | None:
        return read_status(self.box)

    def gone(self) -> bool:
        """The box is destroyed and, if its agent did it, the agent has booked the result."""
        i = self.provider.get(self.inst.id)
        if i is None or i.status != InstanceStatus.GONE:
            return False
        d = (self.status() or {}).get("destroy")
        return d is None or d.get("done_at") is not None

    def destroyed_at(self) -> float | None:
        return self.provider.destroyed_at(self.inst.id)

    def cleanup(self) -> None:
        if self.inst is not None:
            self.provider.destroy(self.inst.id)
