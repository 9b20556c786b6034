"""Secrets stay secret on the local provider: jobs get an allow-listed environment, the
bootstrap's secrets step edits the BOX's ~/.netrc with a parser (every other entry kept) and never
the user's real ~/.netrc or ~/.cache/huggingface/token; the ledger, logs and boxes are the user's
alone (0600 / 0700)."""

from __future__ import annotations

import netrc
import os
import stat
from pathlib import Path

from gpuops.config import load_settings
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from ledger import Ledger
from onbox.bootstrap import netrc_with, step_secrets

# A ~/.netrc the old regex broke: it removed github.com (and everything after) along with wandb.
USER_NETRC = (
    "machine api.wandb.ai\n  login user\n  password OLD_WANDB\nmachine github.com\n  login me\n  password ghp_KEEPME\n"
    "macdef init\ncd /tmp\n\ndefault login anonymous password me@example.org\n"
)


def hosts(text: str, tmp_path: Path) -> dict:
    p = tmp_path / "parsed.netrc"
    p.write_text(text)
    return netrc.netrc(str(p)).hosts


def test_netrc_edit_touches_only_the_wandb_entry(tmp_path):
    out = netrc_with(USER_NETRC, "api.wandb.ai", "user", "NEW_WANDB")
    h = hosts(out, tmp_path)
    assert h["github.com"] == ("me", "", "ghp_KEEPME") and h["api.wandb.ai"] == ("user", "", "NEW_WANDB")
    assert h["default"] == ("anonymous", "", "me@example.org") and out.rstrip().endswith(
        "me@example.org"
    )  # default stays last
    assert "OLD_WANDB" not in out and "macdef init\ncd /tmp\n\n" in out
    assert netrc_with(out, "api.wandb.ai", "user", "NEW_WANDB") == out  # idempotent


def test_secrets_step_writes_the_netrc_0600_and_keeps_other_machines(tmp_path, monkeypatch):
    home = tmp_path / "boxhome"
    home.mkdir()
    (home / ".netrc").write_text(USER_NETRC)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "wandb_NEWKEY")
    step_secrets({"env": ["WANDB_API_KEY"]}, {"state_dir": str(tmp_path / "state")})
    assert hosts((home / ".netrc").read_text(), tmp_path)["github.com"] == ("me", "", "ghp_KEEPME")
    env_file = home / ".config" / "gpuops" / "secrets.env"
    assert stat.S_IMODE((home / ".netrc").stat().st_mode) == stat.S_IMODE(env_file.stat().st_mode) == 0o600


def _run_local(tmp_path, monkeypatch, job_body: str, **over):
    job = tmp_path / "job.sh"
    job.write_text(job_body)
    settings = load_settings(
        None,
        {
            "teardown": {"kill_grace_seconds": 1},
            "providers": {"local": {"price_per_hour": 1.0}},
            "bootstrap": {"verify": False, **over.get("bootstrap", {})},
            "job": over.get("job", {}),
        },
    )
    summ = run_up(UpRequest(job=job, card="a100", provider="local"), settings, Reporter())
    return settings, summ


def test_local_job_gets_an_allow_listed_environment(gpuops_home, tmp_path, monkeypatch):
    secrets = {
        "RUNPOD_API_KEY": "rp_LEAK_" + os.urandom(4).hex(),
        "VAST_API_KEY": "vast_LEAK_" + os.urandom(4).hex(),
        "GPUOPS_PROVIDERS_RUNPOD_API_KEY": "rp_LEAK2_" + os.urandom(4).hex(),
        "HF_TOKEN": "hf_LEAK_" + os.urandom(4).hex(),
        "AWS_SECRET_ACCESS_KEY": "aws_LEAK_" + os.urandom(4).hex(),
    }
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MY_KNOB", "knob-value")
    monkeypatch.setenv("NOT_ASKED_FOR", "should-not-pass")
    settings, summ = _run_local(tmp_path, monkeypatch, "env | sort\n", job={"env": ["MY_KNOB"]})
    log = Path(summ["log"]).read_text()
    assert summ["end_reason"] == "job_end", log
    for v in secrets.values():
        assert v not in log
    box_home = str(settings.data_path() / "boxes" / f"gpuops-{summ['session']}")
    assert f"HOME={box_home}\n" in log and "MY_KNOB=knob-value" in log and "NOT_ASKED_FOR" not in log
    assert f"GPUOPS_SESSION={summ['session']}" in log and "PATH=" in log


def test_secrets_step_on_local_never_touches_the_users_real_files(gpuops_home, tmp_path, monkeypatch):
    real = tmp_path / "realhome"
    (real / ".cache" / "huggingface").mkdir(parents=True)
    (real / ".netrc").write_text(USER_NETRC)
    (real / ".cache" / "huggingface" / "token").write_text("hf_USERS_OWN")
    monkeypatch.setenv("HOME", str(real))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "wandb_FOR_THE_BOX")
    monkeypatch.setenv("HF_TOKEN", "hf_FOR_THE_BOX")
    settings, summ = _run_local(
        tmp_path,
        monkeypatch,
        'test -s ~/.netrc && test -s "$HF_HOME/token"\n',
        bootstrap={"secrets": ["WANDB_API_KEY", "HF_TOKEN"]},
    )
    assert summ["end_reason"] == "job_end", Path(summ["log"]).read_text()
    assert (real / ".netrc").read_text() == USER_NETRC
    assert (real / ".cache" / "huggingface" / "token").read_text() == "hf_USERS_OWN"
    box = settings.data_path() / "boxes" / f"gpuops-{summ['session']}"
    assert hosts((box / ".netrc").read_text(), tmp_path)["api.wandb.ai"] == ("user", "", "wandb_FOR_THE_BOX")
    assert (box / ".cache" / "huggingface" / "token").read_text() == "hf_FOR_THE_BOX"


def test_data_dir_boxes_ledger_and_logs_are_private(gpuops_home, tmp_path, monkeypatch):
    old = os.umask(0o022)  # a usual umask: what gpuops creates must still be private
    try:
        settings, summ = _run_local(tmp_path, monkeypatch, "echo hi\n")
    finally:
        os.umask(old)
    data = settings.data_path()

    def mode(p):
        return stat.S_IMODE(p.stat().st_mode)

    assert mode(data) == 0o700 and mode(data / "boxes") == 0o700 and mode(data / "logs") == 0o700
    assert mode(data / "boxes" / f"gpuops-{summ['session']}") == 0o700
    assert mode(Path(summ["log"])) == 0o600
    for suffix in ("", "-wal", "-shm"):
        p = data / f"ledger.db{suffix}"
        if p.exists() or suffix == "":
            assert mode(p) == 0o600, p
    Ledger(settings.ledger_url()).get(summ["session"])
