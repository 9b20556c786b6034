"""`gpuops up` with a [bootstrap] section: on the local provider (CLI), and on a provider whose
instances are reached over real SSH, including a connection dropped mid-job."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import gpuops.rental.launcher as launcher
from gpuops.config import load_settings
from gpuops.emulators.sshd import TcpProxy
from gpuops.providers.base import Balance, Instance, InstanceStatus, Offer, Provider, SshEndpoint
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger import Ledger
from tests.conftest import gpuops_cmd

SECRET = "hf_upSecret_0a1b2c3d4e5f"


def test_up_local_runs_the_bootstrap_records_steps_and_logs_shows_the_log(cli_env, gpuops_home, tmp_path):
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"\x02" * 2048)
    (tmp_path / "infra.toml").write_text(
        "[bootstrap]\n"
        f'weights = ["file://{weights}"]\n'
        'secrets = ["HF_TOKEN"]\n'
        'commands = ["test -s \\"$HF_HOME/token\\"", "echo bootstrap-says-hi"]\n'
        "[job]\n"
        'results = "out/"\n'
    )
    job = tmp_path / "job.sh"
    job.write_text("mkdir -p out && echo 42 > out/answer.txt && echo job-line\n")
    env = dict(cli_env, HF_TOKEN=SECRET, HF_HOME=str(tmp_path / "hf-home"))
    p = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--card", "rtx-4090", "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert SECRET not in p.stdout + p.stderr
    summ = json.loads(p.stdout[p.stdout.index("{\n") :]) if "{\n" in p.stdout else json.loads(p.stdout.splitlines()[-1])
    assert summ["end_reason"] == "job_end"
    assert Path(summ["results"], "answer.txt").read_text() == "42\n"
    steps = Ledger(load_settings().ledger_url()).steps(summ["session"])
    assert [(x.name, x.status) for x in steps] == [
        ("system", "done"),
        ("secrets", "done"),
        ("weights:w.bin", "done"),
        ("verify", "done"),
        ("command 1", "done"),
        ("command 2", "done"),
    ]
    assert summ["slowest_step"] in {x.name for x in steps}
    logs = subprocess.run(gpuops_cmd("logs", summ["session"][:15]), env=env, capture_output=True, text=True, timeout=60)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == "job-line\n"


def test_up_refuses_a_missing_secret_before_renting(cli_env, gpuops_home, tmp_path):
    (tmp_path / "infra.toml").write_text('[bootstrap]\nsecrets = ["GPUOPS_TEST_UNSET_TOKEN"]\n')
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    p = subprocess.run(
        gpuops_cmd("up", "--job", str(job)), env=cli_env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert p.returncode == 2
    assert p.stderr.startswith("error: secret GPUOPS_TEST_UNSET_TOKEN is not set")
    assert Ledger(load_settings().ledger_url()).open_sessions() == []


class SshProvider(Provider):
    """A provider whose boxes are the test's sshd: the endpoint appears on the second poll,
    as RunPod publishes ports only after the image is pulled."""

    name = "emulated"

    def __init__(self, host: str, port: int, user: str):
        self.endpoint = SshEndpoint(host, port, user)
        self.polls = 0
        self.destroyed: list[str] = []
        self.public_keys: list[str] = []

    def offers(self, query):
        return [
            Offer(
                provider="emulated",
                offer_id="e-1",
                card="h100-sxm",
                gpu_count=1,
                vram_bytes=80 * 2**30,
                usd_per_hour=2.0,
                spot=False,
            )
        ]

    def create(self, offer, spec):
        self.public_keys.append(spec.ssh_public_key)
        self.label = spec.label
        return Instance(
            id="pod-1", label=spec.label, status=InstanceStatus.PROVISIONING, usd_per_hour=2.0, created_at=time.time()
        )

    def get(self, instance_id):
        if instance_id in self.destroyed:
            return None  # a destroy is booked only once the provider reads the instance back gone
        self.polls += 1
        ssh = self.endpoint if self.polls >= 2 else None
        # the label it was created with: a destroy checks it (a provider answering another label is refused)
        return Instance(id=instance_id, label=self.label, status=InstanceStatus.RUNNING, usd_per_hour=2.0, ssh=ssh)

    def list(self, label_prefix="gpuops-"):
        return []

    def destroy(self, instance_id):
        self.destroyed.append(instance_id)

    def balance(self):
        return Balance(usd=None)


def test_up_over_real_ssh_survives_a_dropped_connection_mid_job(gpuops_home, sshd, tmp_path, monkeypatch, client_key):
    from gpuops.box.ssh import ensure_ssh_key

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    s = load_settings(None, {"teardown": {"kill_grace_seconds": 1}, "bootstrap": {"commands": ["echo ready"]}})
    # the box accepts gpuops' own key from this data dir (what the provider would install at create)
    sshd.authorize(ensure_ssh_key(s.data_path())[1])
    proxy = TcpProxy(sshd.port)
    prov = SshProvider(sshd.host, proxy.port, sshd.user)
    job = tmp_path / "job.sh"
    job.write_text("for i in 1 2 3 4 5 6 7 8; do echo tick-$i; sleep 0.25; done; mkdir -p out; echo done > out/r.txt\n")
    lines: list[str] = []

    class R(Reporter):
        def job_line(self, text):
            lines.append(text)
            if text == "tick-2":
                proxy.cut()  # the laptop's Wi-Fi drops while the job runs

    try:
        summ = run_up(UpRequest(job=job, provider="emulated"), s, R(), provider=prov)
    finally:
        proxy.close()
    assert summ["end_reason"] == "job_end" and summ["exit_code"] == 0, summ
    assert [x for x in lines if x.startswith("tick-")] == [f"tick-{i}" for i in range(1, 9)]
    assert proxy.accepted >= 2  # it reconnected
    assert prov.polls >= 2 and prov.destroyed == ["pod-1"]
    assert prov.public_keys == [ensure_ssh_key(s.data_path())[1]]
    assert Path(summ["results"], "r.txt").read_text() == "done\n"
    steps = Ledger(s.ledger_url()).steps(summ["session"])
    assert [(x.name, x.status) for x in steps] == [("system", "done"), ("verify", "done"), ("command 1", "done")]
    system = json.loads(steps[0].detail)
    assert system["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"  # the stand-in nvidia-smi on the box


def test_up_over_real_ssh_uploads_the_workdir_beside_the_bootstrap_and_ssh_reaches_the_box(
    gpuops_home, sshd, tmp_path, monkeypatch
):
    """--workdir over a second connection while bootstrap.py's steps run; the ready event books where
    the box answers, and `gpuops ssh -- CMD` (the system client) reaches it while the job runs."""
    from gpuops.box.ssh import ensure_ssh_key
    from gpuops.rental import access

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    s = load_settings(None, {"bootstrap": {"commands": ["sleep 0.5"]}})
    sshd.authorize(ensure_ssh_key(s.data_path())[1])
    prov = SshProvider(sshd.host, sshd.port, sshd.user)
    work = tmp_path / "project"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "data.txt").write_text("uploaded\n")
    gate = tmp_path / "job-may-end"
    job = tmp_path / "job.sh"
    job.write_text(
        f'cat "$GPUOPS_WORKDIR/pkg/data.txt"; for i in $(seq 300); do test -e {gate} && exit 0; sleep 0.1; done; exit 9\n'
    )
    got: list[tuple[int, str]] = []

    class R(Reporter):
        def job_line(self, text):
            if text == "uploaded":  # the job read the upload; reach its box the way a user would
                ledger = Ledger(s.ledger_url())
                (row,) = ledger.open_sessions()

                def run(argv, timeout_s):
                    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
                    got.append((p.returncode, p.stdout))
                    return p.returncode

                access.ssh(s, ledger, row.id, ["cat", "workdir/pkg/data.txt"], [], provider=prov, run=run)
                gate.touch()

    summ = run_up(UpRequest(job=job, provider="emulated", workdir=str(work)), s, R(), provider=prov)
    assert summ["end_reason"] == "job_end", summ
    assert got == [(0, "uploaded\n")]
    steps = {x.name: x for x in Ledger(s.ledger_url()).steps(summ["session"])}
    assert steps["workdir"].status == "done" and steps["command 1"].status == "done"


def test_up_over_real_ssh_gives_the_job_its_arguments_byte_for_byte_at_the_bound(
    gpuops_home, sshd, tmp_path, monkeypatch
):
    """The largest line request.build admits (MAX_JOB_LINE_BYTES, filled with single quotes, the
    dearest byte to quote) starts over SSH, where the line is quoted three times on its way, and the
    job receives every argument as given."""
    from gpuops.box.ssh import ensure_ssh_key
    from gpuops.rental.launcher import MAX_JOB_LINE_BYTES, job_line_bytes
    from gpuops.rental.request import UpArgs, build

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    s = load_settings(None, {"teardown": {"kill_grace_seconds": 1}, "job": {"results": "out/"}})
    sshd.authorize(ensure_ssh_key(s.data_path())[1])
    prov = SshProvider(sshd.host, sshd.port, sshd.user)
    job = tmp_path / "argv.py"
    job.write_text(
        "import json, os, sys\nos.makedirs('out', exist_ok=True)\njson.dump(sys.argv[1:], open('out/argv.json', 'w'))\n"
    )
    tricky = ["$(touch PWNED)", ";", "a b", "it's", 'say "hi"', "x\ny", "*", "$HOME", "", "--lr"]
    n = 1
    while job_line_bytes(job.name, [*tricky, "'" * (n + 1)]) <= MAX_JOB_LINE_BYTES:
        n += 1
    args = (*tricky, "'" * n)
    assert MAX_JOB_LINE_BYTES - 60 < job_line_bytes(job.name, args) <= MAX_JOB_LINE_BYTES
    req, _ = build(UpArgs(job=str(job), job_args=args))  # admitted by the one check
    summ = run_up(UpRequest(job=job, provider="emulated", job_args=req.job_args), s, Reporter(), provider=prov)
    assert summ["end_reason"] == "job_end" and summ["exit_code"] == 0, summ
    got = json.loads(Path(summ["results"], "argv.json").read_text())
    assert got[:10] == ["$(touch PWNED)", ";", "a b", "it's", 'say "hi"', "x\ny", "*", "$HOME", "", "--lr"]
    assert got[10] == "'" * n and len(got) == 11 and n > 1000
    assert not list(Path(sshd.home).rglob("PWNED"))
