"""The job's environment reaches the job and nothing else: on the local provider and on the emulated
RunPod over the real sshd, the values are in the job, and no file gpuops or the box wrote (logs,
the ledger, the kept job log, the spool, the sshd's log) and no process's command line holds one."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import gpuops.rental.launcher as launcher
from gpuops.config import load_settings
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger import Ledger
from tests.support.emulators import runpod_emulator, runpod_provider  # noqa: F401

SECRET = "s3cr3t-val-9"  # passed as `--env SECRETX` (this shell's value)
FROM_FILE = "f1le-val-77"  # [job] env = ["FROMFILE=..."]

# The job prints digests, never the values: a value in any file afterwards came from gpuops.
JOB = r"""#!/usr/bin/env bash
python3 - <<'PY'
import glob, hashlib, os
for name in ("SECRETX", "FROMFILE", "TOKENS"):
    v = os.environ.get(name)
    print(name, "unset" if v is None else hashlib.sha256(v.encode()).hexdigest())
hits = 0
for p in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        with open(p, "rb") as f:
            cmd = f.read()
    except OSError:
        continue
    hits += any(os.environ[n].encode() in cmd for n in ("SECRETX", "FROMFILE") if n in os.environ)
print("cmdline-hits", hits)
PY
"""


def sha(v: str) -> str:
    return hashlib.sha256(v.encode()).hexdigest()


class Lines(Reporter):
    def __init__(self):
        self.lines: list[str] = []

    def job_line(self, text):
        self.lines.append(text)


def holding(root: Path, *values: str) -> list[str]:
    """Every file under ``root`` whose bytes hold one of ``values``."""
    out = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                data = p.read_bytes()
            except OSError:
                continue
            if any(v.encode() in data for v in values):
                out.append(str(p))
    return out


def _up(tmp_path, monkeypatch, **kw) -> tuple[dict, list[str], object]:
    monkeypatch.setenv("SECRETX", SECRET)
    cfg = tmp_path / "infra.toml"
    cfg.write_text(f'[job]\nenv = ["FROMFILE={FROM_FILE}", "TOKENS=7"]\n[teardown]\nkill_grace_seconds = 1\n')
    s = load_settings(str(cfg))
    job = tmp_path / "job.sh"
    job.write_text(JOB)
    rep = Lines()
    summ = run_up(UpRequest(job=job, env=("SECRETX", "TOKENS=50"), **kw), s, rep)
    return summ, rep.lines, s


def _check(summ, lines, s, tmp_path):
    assert summ["end_reason"] == "job_end" and summ["exit_code"] == 0, summ
    assert f"SECRETX {sha(SECRET)}" in lines and f"FROMFILE {sha(FROM_FILE)}" in lines
    assert f"TOKENS {sha('50')}" in lines  # the flag wins over [job] env by name
    assert "cmdline-hits 0" in lines
    row = Ledger(s.ledger_url()).get(summ["session"])
    assert row.status == "closed"
    # every log, the ledger file (and its -wal), the kept job log, the spool, the box's own files
    assert Path(summ["log"]).is_file()
    assert holding(tmp_path, SECRET, FROM_FILE) == [str(tmp_path / "infra.toml")]  # the user's own file only


@pytest.mark.e2e
def test_env_reaches_a_local_job_and_nothing_else(gpuops_home, tmp_path, monkeypatch):
    summ, lines, s = _up(tmp_path, monkeypatch, card="t4")
    _check(summ, lines, s, tmp_path)


@pytest.mark.e2e
def test_env_reaches_a_job_over_ssh_and_nothing_else(
    gpuops_home,
    sshd,
    tmp_path,
    monkeypatch,
    runpod_emulator,
    runpod_provider,  # noqa: F811
):
    from gpuops.box.ssh import ensure_ssh_key

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    runpod_emulator.market.ssh_endpoint = (sshd.host, sshd.port)
    sshd.authorize(ensure_ssh_key(load_settings().data_path())[1])
    monkeypatch.setenv("SECRETX", SECRET)
    cfg = tmp_path / "infra.toml"
    cfg.write_text(f'[job]\nenv = ["FROMFILE={FROM_FILE}", "TOKENS=7"]\n[teardown]\nkill_grace_seconds = 1\n')
    s = load_settings(str(cfg))
    job = tmp_path / "job.sh"
    job.write_text(JOB)
    rep = Lines()
    req = UpRequest(job=job, provider="runpod", card="rtx-4090", env=("SECRETX", "TOKENS=50"))
    summ = run_up(req, s, rep, provider=runpod_provider)
    _check(summ, rep.lines, s, tmp_path)
    assert sshd.log.is_file()  # the sshd's VERBOSE log was among the files searched
    assert runpod_emulator.live() == []
