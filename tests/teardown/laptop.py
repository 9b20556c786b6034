"""Stand-in for a `gpuops up` process on the local provider, for stop/kill tests:
``python -m tests.teardown.laptop --sid SID --teardown JSON --job CMD [--bootstrap-seconds N]
[--pause-after STAGE]``. Prints ``STAGE <name>`` after each stage (flushed); with ``--pause-after``
it stops there and sleeps, so the test can SIGKILL it at that point. Stages: intent, create (the
instance exists, its row does not know yet), commit, arm, bootstrap, job, wait (job exited),
destroy (destroyed, row still open), closed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tests.teardown.rig import Rig


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sid", required=True)
    p.add_argument("--teardown", default="{}")
    p.add_argument("--up", default="{}")
    p.add_argument("--job", default="sleep 1")
    p.add_argument("--bootstrap-seconds", type=float, default=0.2)
    p.add_argument("--pause-after", default="")
    a = p.parse_args()
    rig = Rig(json.loads(a.teardown), up=json.loads(a.up))
    rig.sid, rig.label = a.sid, "gpuops-" + a.sid

    def stage(name: str) -> None:
        print("STAGE", name, flush=True)
        if a.pause_after == name:
            print("PAUSED", flush=True)
            while True:
                time.sleep(3600)

    rig.intent()
    stage("intent")
    rig.create(commit=False)
    stage("create")
    rig.ledger.update(rig.sid, instance_id=rig.inst.id, instance_created_at=rig.inst.created_at,
                      usd_per_hour=rig.inst.usd_per_hour, status="running")
    stage("commit")
    rig.arm()
    stage("arm")
    rc = rig.bootstrap(a.bootstrap_seconds, wait=True)
    stage("bootstrap")
    if rc != 0:
        return 1
    rig.job(a.job)
    stage("job")
    marker = Path(rig.box.root, ".gpuops", "run", "exit_marker")
    while not marker.exists():
        time.sleep(0.05)
    stage("wait")
    rig.ledger.request_end(rig.sid, "job_end", by="up")  # what lifecycle.end_rental writes before a destroy
    rig.provider.destroy(rig.inst.id)
    stage("destroy")
    rig.ledger.close(rig.sid, rig.provider.destroyed_at(rig.inst.id), "job_end")
    stage("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
