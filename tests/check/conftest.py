"""Fixtures for `gpuops check`: the emulated providers with a box key the on-box agent may destroy
with, a real sshd as every box (with the stand-in nvidia-smi), and the short windows the layers
are proven with (settings a user could set too)."""

from __future__ import annotations

import pytest

from gpuops.emulators.box_key import BOX_KEY, BoxKeyRunPod, BoxKeyVast
from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401  (the box fixtures)

# The narrow key every test box holds in its (stand-in) PID 1 environment. The real ones are per
# box (tests/teardown/scoped.py); here three boxes share one sshd and one environment file, so the
# emulators accept this one key for the destroy (or stop) of any instance (gpuops/emulators/box_key.py).
EMULATORS = {"runpod": BoxKeyRunPod, "vast": BoxKeyVast}


@pytest.fixture
def check_env(gpuops_home, cli_env, tmp_path):
    """make(name, sshd=None) -> (emulator, env): the emulator started with every instance's
    SSH at the test sshd and running from its create (no emulated boot), and the environment of a
    `gpuops check` subprocess pointed at it, with the windows shortened: job 10 s, job-end grace
    2 s (the check reads the agent's status before the box goes), idle window 10 s, TTL 18 s,
    samples every 0.5 s.

    The job and the idle window are the time the check has to see each `up` alive with its agent
    armed and its job started, and SIGKILL it: one round of the check's watch visits every layer
    (ledger reads, a provider ``get``, an SSH status read), which on a loaded machine takes
    seconds, so with a 1 s job `up` ended the job_end layer by itself first. 10 s holds several
    such rounds (on a lightly loaded 2-core machine the kill comes within 1 s of the job's start).
    The TTL layer's 18 s sets the check's length: it must hold create, ready, arm, bootstrap and
    the kill, about 1.5 s on a lightly loaded 2-core machine and at most 6-7 s seen with three
    tests like these pinned to one core (2.5x margin), and it ends after the job layer's box goes
    (its job + the grace + a sample after the job's start).
    No boot: `up` asks the provider for the SSH endpoint every 3 s (``READY_POLL_S``), so an
    emulated 0.3 s boot cost a whole 3 s poll inside the TTL."""
    started = []

    def make(name: str, sshd=None):
        emu = EMULATORS[name]().start()
        started.append(emu)
        emu.faults.boot_s = 0.0  # running at `up`'s first ask: no 3 s ready poll inside the TTL
        if sshd is not None:
            emu.market.ssh_endpoint = (sshd.host, sshd.port)
        environ = tmp_path / "pid1-environ"
        var = {"runpod": "RUNPOD_API_KEY", "vast": "CONTAINER_API_KEY"}[name]
        environ.write_bytes(f"{var}={BOX_KEY}".encode() + b"\0")
        env = dict(cli_env)
        for k in ("RUNPOD_API_KEY", "RUNPOD_API_BASE_URL", "VAST_API_KEY", "VAST_URL"):
            env.pop(k, None)
        if name == "runpod":
            env.update(RUNPOD_API_KEY=emu.market.api_key, RUNPOD_API_BASE_URL=emu.url)
        else:
            env.update(VAST_API_KEY=emu.market.api_key, VAST_URL=emu.url)
        env.update(
            GPUOPS_AGENT_ENVIRON_FILE=str(environ),
            GPUOPS_AGENT_SSH_USERS="nobody-here",
            GPUOPS_TEARDOWN_SAMPLE_SECONDS="0.5",
            GPUOPS_TEARDOWN_JOB_END_GRACE_SECONDS="2",
            GPUOPS_CHECK_JOB_SECONDS="10",
            GPUOPS_CHECK_IDLE_MINUTES=f"{10 / 60:.4f}",
            GPUOPS_CHECK_TTL_MINUTES="0.3",
            GPUOPS_CHECK_SLACK_SECONDS="30",
            GPUOPS_CHECK_MAX_MINUTES="5",
            GPUOPS_CHECK_MAX_USD="0.5",
            GPUOPS_CHECK_POLL_SECONDS="0.2",
            GPUOPS_UP_READY_TIMEOUT_SECONDS="120",
        )
        return emu, env

    yield make
    for emu in started:
        emu.stop()
