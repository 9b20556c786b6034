"""A `gpuops up` process on the local provider that tests stop and kill at a chosen point: the real
`up` (``gpuops.rental.launcher.run_up``), with a reporter that prints ``STAGE <name>`` (flushed) as each
point passes and, with ``--pause-after NAME``, stops there (sleeps) so the test can SIGKILL it.

``python -m tests.teardown.laptop --sid SID --teardown JSON [--up JSON] --job CMD
[--bootstrap-seconds N] [--pause-after STAGE]``

Points: intent (the row exists, nothing created), create (the instance exists, its row does not
know yet: inside the provider's create), commit (the row knows the instance, no agent yet), arm
(agent up, bootstrap not started), bootstrap (done), job (the job runs: its first output line),
wait (the job exited; teardown not started), destroy (destroyed, the row still open: inside the
provider's destroy), closed (`up` returned). The bootstrap is ``[bootstrap] commands = ["sleep
N"]``; the session id is ``--sid`` (so the test knows the label before `up` starts)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sid", required=True)
    p.add_argument("--teardown", default="{}")
    p.add_argument("--up", default="{}")
    p.add_argument("--job", default="sleep 1")
    p.add_argument("--bootstrap-seconds", type=float, default=0.2)
    p.add_argument("--pause-after", default="")
    a = p.parse_args()

    from gpuops.config import load_settings
    from gpuops.providers import get_provider
    from gpuops.rental import launcher

    def stage(name: str) -> None:
        print("STAGE", name, flush=True)
        if a.pause_after == name:
            print("PAUSED", flush=True)
            while True:
                time.sleep(3600)

    # reporter.stage(X) is called as stage X starts, i.e. once the previous point has passed
    passed = {"create": "intent", "ready": "commit", "bootstrap": "arm", "job": "bootstrap", "teardown": "wait"}

    class Points(launcher.Reporter):
        job_seen = False

        def stage(self, name, detail=""):
            if name in passed:
                stage(passed[name])

        def job_line(self, text):
            if not self.job_seen:
                self.job_seen = True
                stage("job")

    settings = load_settings(
        overrides={
            "teardown": json.loads(a.teardown),
            "providers": {"local": {"price_per_hour": 2.0}},
            "up": dict({"ready_timeout_seconds": 1.0}, **json.loads(a.up)),
            "bootstrap": {"commands": [f"sleep {a.bootstrap_seconds}"]},
        }
    )
    base = get_provider("local", settings)

    class PausingLocal(type(base)):  # the local provider, with the two points inside its calls
        def create(self, *args, **kw):
            inst = super().create(*args, **kw)
            stage("create")
            return inst

        def destroy(self, *args, **kw):
            super().destroy(*args, **kw)
            stage("destroy")

    provider = PausingLocal.__new__(PausingLocal)
    provider.__dict__.update(base.__dict__)
    launcher.new_session_id = lambda now=None: a.sid
    job = settings.data_path() / f"laptop-job-{a.sid}.sh"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(f"echo laptop: job started\n{a.job}\n")
    summary = launcher.run_up(
        launcher.UpRequest(job=Path(job), experiment="t", spot=False), settings, Points(), provider=provider
    )
    stage("closed")
    return 0 if summary.get("exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
