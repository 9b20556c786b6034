"""A local-provider session driven stage by stage, as `up` drives it (used by the tests and by
``laptop.py``, the stand-in for a `gpuops up` process that tests stop and kill).

Each stage calls what `up` (gpuops.rental.launcher) calls: the provider's create, ``agentctl.arm``, the
production bootstrap (``bootstrap_config.build_bootstrap_plan`` + ``run_bootstrap_plan``, with ``[bootstrap] commands``)
and ``jobio.start_job``; only the order and the pauses between stages are the test's."""

from __future__ import annotations

import secrets
import shlex
import threading
import time

from gpuops.agent import jobio
from gpuops.agent.agentctl import agent_config, arm, read_status
from gpuops.agent.bootstrap_config import build_bootstrap_plan, run_bootstrap_plan
from gpuops.config import load_settings
from gpuops.providers import get_provider
from gpuops.providers.base import CreateSpec, InstanceStatus, OfferQuery
from ledger.store import Ledger

# How much later than its due time a loaded machine may let a process act (a wake-up, a kill, a
# file write): the upper bound of every "it happened at its due time" check. Measured at load 8 on
# 2 cores, `up`'s intent stage alone took 19 s, so no sub-second window holds there; the lower
# bound (never before its due time) stays exact, and each fault a test injects holds for much
# longer than this when the rule under test is broken.
LOADED_SLACK_S = 5.0
# How long a stage of `up` or of the rig may take on a loaded machine before a wait for it fails.
STAGE_TIMEOUT_S = 120.0


def gate(path) -> str:
    """A bash command that runs until the file ``path`` exists, then exits 0 (exit 7 after 300 s):
    a job or bootstrap step whose end the test decides, instead of a ``sleep`` that races it."""
    return f"for i in $(seq 6000); do [ -e {shlex.quote(str(path))} ] && exit 0; sleep 0.05; done; exit 7"


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
        self.overrides = {
            "teardown": teardown,
            "providers": {"local": {"price_per_hour": price}},
            "up": dict({"ready_timeout_seconds": 1.0}, **(up or {})),
        }
        self.settings = load_settings(overrides=self.overrides)
        self._threads: list[threading.Thread] = []
        self.ledger = Ledger(self.settings.ledger_url())
        self.provider = get_provider("local", self.settings)
        self.sid = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
        self.label = "gpuops-" + self.sid
        self.inst = None
        self.box = None

    def intent(self, spot: bool = False) -> None:
        offer = self.provider.offers(OfferQuery())[0]
        self.offer = offer
        self.ledger.add_session(
            dict(
                id=self.sid,
                experiment="t",
                job="job.sh",
                provider="local",
                card=offer.card,
                gpu_count=1,
                spot=spot,
                label=self.label,
                offer_id=offer.offer_id,
                usd_per_hour=offer.usd_per_hour,
                simulated=offer.simulated,
                status="provisioning",
                created_at=time.time(),
                owner=self.settings.owner(),
                account=self.provider.account,
            )
        )

    def create(self, commit: bool = True) -> None:
        self.inst = self.provider.create(self.offer, CreateSpec(label=self.label))
        if commit:
            self.ledger.update(
                self.sid,
                instance_id=self.inst.id,
                instance_created_at=self.inst.created_at,
                usd_per_hour=self.inst.usd_per_hour,
                status="running",
            )
            self.ledger.event(self.sid, "created", self.inst.id)
        self.box = self.provider.box(self.inst)

    def arm(self, **extra) -> None:
        cfg = agent_config(
            session_id=self.sid,
            provider="local",
            instance_id=self.inst.id,
            root=self.box.root,
            teardown=self.settings.teardown,
            started_at=self.inst.created_at,
            usd_per_hour=self.inst.usd_per_hour,
            settings=self.settings,
            extra=extra,
        )
        arm(self.box, cfg)
        self.ledger.event(self.sid, "armed", "")

    def bootstrap(self, seconds: float | str, wait: bool = False) -> int | None:
        """Run the production bootstrap (as `up` does: ``build_bootstrap_plan`` + ``run_bootstrap_plan``) with one
        ``[bootstrap] commands`` step that sleeps ``seconds`` (a number) or runs that command (a
        string, e.g. ``gate(path)``). ``wait``: return its exit status; else it runs in a thread
        and the test goes on while it runs."""
        step = seconds if isinstance(seconds, str) else f"sleep {seconds}"
        settings = load_settings(overrides=dict(self.overrides, bootstrap={"commands": [step]}))
        plan = build_bootstrap_plan(settings)
        if wait:
            return run_bootstrap_plan(self.box, plan).rc

        def run() -> None:
            try:
                run_bootstrap_plan(self.box, plan)
            except Exception:  # the box was destroyed under it: what the test is about
                pass

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self._threads.append(t)
        return None

    def job(self, command: str) -> None:
        """Start ``command`` (bash) under the job wrapper, detached, as `up` does (jobio.start_job)."""
        jobio.start_job(self.box, command)

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
        for t in self._threads:  # a bootstrap in flight ends with its box
            t.join(10)
