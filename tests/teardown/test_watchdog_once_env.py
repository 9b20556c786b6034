"""`watchdog --once` in a process of its own judges an open session by the settings it loads there:
the TTL from the environment destroys it."""

from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import gpuops_cmd
from tests.teardown.conftest import wait_for


def test_watchdog_once_applies_the_ttl_from_the_environment(gpuops_home, cli_env, rig):
    ttl_hours = 1 / 3600
    r = rig({"max_hours": ttl_hours}, up={"ready_timeout_seconds": 100})
    r.intent()
    r.create()  # no agent: only the watchdog's TTL can end it
    env = dict(
        os.environ,
        PYTHONPATH=cli_env["PYTHONPATH"],
        GPUOPS_TEARDOWN_MAX_HOURS=str(ttl_hours),
        GPUOPS_UP_READY_TIMEOUT_SECONDS="100",
        GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR="2.0",
    )
    ps = subprocess.run(gpuops_cmd("ps", "--json"), env=env, capture_output=True, text=True, timeout=60)
    assert ps.returncode == 0, ps.stderr
    assert [s["session"] for s in json.loads(ps.stdout)] == [r.sid]
    kinds: list[str] = []

    def tick() -> bool:  # the TTL is one second from create: tick until it has passed
        out = subprocess.run(
            gpuops_cmd("watchdog", "--once", "--json"), env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        kinds.extend(json.loads(line)["kind"] for line in out.stdout.splitlines())
        return "destroyed" in kinds

    wait_for(tick, 30, step=0.2)
    row = r.ledger.get(r.sid)
    assert row.status == "closed" and row.end_reason == "ttl" and r.gone()
