"""A sweep on the emulated Vast.ai stops renting when the account's balance drops under the balance floor: `up`'s own
check before each rental, read from the provider, with the reason in `sweep status` and the ledger.

Every box is the test sshd. The arithmetic is written here: 36 USD/h x 0.05 h = 1.80 USD each job's worst case; the
account holds 100 USD and the floor is 98.19, so 1.81 USD is the room before anything is billed: the first job fits
(1.80 <= 1.81), and once it has billed more than 0.01 USD (one second at 36 USD/h) the second no longer does. The
sweep's own max_usd (100, against 3 x 1.80 = 5.40 for every job) and the monthly cap (10,000) are far from binding:
only the balance, as the emulator bills it, can stop the sweep."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401  (fixtures)
from tests.conftest import gpuops_cmd
from tests.lifecycle.upproc import up_env
from tests.support.emulators import vast_emulator  # noqa: F401  (fixture)
from tests.sweep.test_sweep_local import _jobs, _rows

PRICE, HOURS, FLOOR, START = 36.0, 0.05, 98.19, 100.0  # USD/h, h, USD, USD (the emulator's opening credit)
CENT = 0.01


def test_the_balance_floor_stops_a_sweep_on_vast_with_the_reason(gpuops_home, cli_env, sshd, vast_emulator, tmp_path):
    from gpuops.box.ssh import ensure_ssh_key

    emu = vast_emulator
    assert emu.market.balance() == START
    emu.market.ssh_endpoint = (sshd.host, sshd.port)
    emu.faults.boot_s = 0.0
    emu.offers.clear()
    for i in range(3):  # a rented offer leaves the market: one per job, all at one price, no storage cost
        emu.add_offer(3001 + i, "RTX 4090", 1, 24564, PRICE, 0.20, 0.99, "Norway, NO", storage_cost=0.0)
    sshd.authorize(ensure_ssh_key(gpuops_home)[1])
    (tmp_path / "job.sh").write_text('#!/usr/bin/env bash\necho "seed $SEED"\nsleep 3\n')
    f = tmp_path / "sweep.toml"
    f.write_text(  # the file says local: --provider vast --on-demand on the command line is laid over every job
        'run = "job.sh"\nexperiment = "floor"\nmax_parallel = 1\nmax_usd = 100\n'
        f'[resources]\nprovider = "local"\ncard = "rtx-4090"\n[limits]\nmax_hours = {HOURS}\n'
        '[matrix]\nenv = { SEED = ["0", "1", "2"] }\n'
    )
    env = up_env(
        cli_env,
        VAST_API_KEY=emu.market.api_key,
        VAST_URL=emu.url,
        GPUOPS_TEARDOWN_BALANCE_FLOOR_USD=str(FLOOR),
        GPUOPS_TEARDOWN_MONTHLY_CAP_USD="10000",
        GPUOPS_UP_READY_TIMEOUT_SECONDS="120",
    )
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--provider", "vast", "--on-demand", "--json"), env=env,
                       capture_output=True, text=True, timeout=400)  # fmt: skip
    assert r.returncode == 1, r.stderr
    sweeps, runs, sessions = _rows()
    rented = list(emu.market.instances.values())
    assert len(rented) == 1, (rented, sessions, r.stdout, r.stderr[-4000:])  # one box rented, then no more
    (inst,) = rented
    billed = inst.billed_usd  # the emulator's own bill of it
    assert billed > START - FLOOR - PRICE * HOURS  # > 0.01 USD: why the second job's worst case no longer fits
    assert len(runs) == 1 and len(sessions) == 1 and emu.live() == []
    (row,) = sessions
    assert (row["provider"], row["usd_per_hour"], row["end_reason"]) == ("vast", PRICE, "job_end")
    assert abs(row["cost_usd"] - billed) <= CENT
    balance = round(START - billed, 6)  # what the emulator answers for the account now, and answered the second job
    assert emu.market.balance() == pytest.approx(balance, abs=1e-6)
    need, room = PRICE * HOURS, balance - FLOOR
    said = (
        f"${PRICE:.4f}/h x {HOURS:g} h = ${need:.2f} does not fit in balance ${balance:.2f} minus floor ${FLOOR:.2f} "
        f"= ${room:.2f}: short by ${need - room:.2f}"
    )
    (sweep,) = sweeps
    assert (sweep["status"], sweep["end_reason"]) == ("closed", "balance_floor")
    assert said in sweep["detail"], sweep["detail"]
    assert [(j["state"], j["end_reason"]) for j in _jobs()] == [
        ("done", "job_end"), ("cancelled", "balance_floor"), ("cancelled", "balance_floor")
    ]  # fmt: skip
    st = subprocess.run(gpuops_cmd("sweep", "status", sweep["id"]), env=env, capture_output=True, text=True,
                        timeout=60)  # fmt: skip
    assert st.returncode == 0, st.stderr
    assert st.stdout.splitlines()[0].startswith(f"sweep {sweep['id']} (sweep, floor): closed, balance_floor: ")
    assert said in st.stdout.splitlines()[0]
    assert json.loads(r.stdout)["end_reason"] == "balance_floor"
