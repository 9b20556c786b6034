"""The local provider's teardown must leave nothing of the job running on this machine."""

from __future__ import annotations

import os
import subprocess
import time

from tests.conftest import gpuops_cmd
from tests.lifecycle.upproc import tag, tagged


def test_a_child_that_left_the_process_group_is_ended_at_teardown(gpuops_home, cli_env, tmp_path):
    # Seen: a job that started `setsid sleep 300 &` and exited left the sleep running after
    # "teardown job_end"; on a rented box destroy takes everything, on `local` it must too.
    pidfile = tmp_path / "child.pid"
    name = tag()  # followed by name: in its own PID namespace the job's $$ is not this machine's pid
    job = tmp_path / "forks.sh"
    job.write_text(
        f"setsid bash -c 'echo $$ > {pidfile}; exec -a {name} sleep 300' &\n"
        f"for i in $(seq 50); do [ -s {pidfile} ] && break; sleep 0.1; done\necho forked\n"
    )
    env = dict(cli_env, GPUOPS_TEARDOWN_KILL_GRACE_SECONDS="1")
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--json"), env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert pidfile.read_text().strip()  # it did start
    try:
        deadline = time.monotonic() + 5
        while tagged(name) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not tagged(name), "the setsid child of the job survived teardown"
    finally:
        for pid in tagged(name):
            os.kill(pid, 9)
