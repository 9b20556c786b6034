"""`up --workdir`: what goes up (git's own listing, .gitignore and --workdir-exclude honoured, a symlink
out of the tree not followed), sha256-verified on the box, and a second upload sending only what changed."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from gpuops.agent.agentctl import RUNNER_DIR
from gpuops.errors import BadInput
from gpuops.rental import workdir

REPO = Path(__file__).resolve().parents[2]


def tree(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    (d / "src").mkdir(parents=True)
    (d / "src" / "train.py").write_text("print('train')\n")
    (d / "README.md").write_text("readme\n")
    (d / "big.ckpt").write_bytes(b"\0" * 1000)  # ignored by .gitignore
    (d / "cache").mkdir()
    (d / "cache" / "x.bin").write_bytes(b"x")  # excluded by --workdir-exclude
    (d / ".gitignore").write_text("*.ckpt\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the box\n")
    os.symlink(outside, d / "link-out")
    os.symlink("README.md", d / "link-in")
    subprocess.run(["git", "init", "-q", str(d)], check=True)
    subprocess.run(["git", "-C", str(d), "add", "src/train.py"], check=True)  # one tracked, the rest untracked
    return d


def test_scan_lists_what_git_would_and_does_not_follow_a_symlink_out(tmp_path):
    t = workdir.scan(tree(tmp_path), excludes=("cache",))
    assert t.listed_by == "git"
    assert [f.path for f in t.files] == [".gitignore", "README.md", "link-in", "src/train.py"]
    assert t.skipped == ["link-out (symlink out of the tree, not followed)"]
    got = {f.path: f.sha256 for f in t.files}
    assert got["link-in"] == hashlib.sha256(b"readme\n").hexdigest()  # the file it points to, inside the tree


@pytest.mark.e2e  # it starts git (the scan asks `git rev-parse` whether DIR is a work tree)
def test_scan_without_git_walks_everything_but_dot_git_and_refuses_over_the_cap(tmp_path):
    d = tmp_path / "plain"
    (d / ".git").mkdir(parents=True)
    (d / ".git" / "HEAD").write_text("x")
    (d / "a.txt").write_bytes(b"a" * 600)
    t = workdir.scan(d)
    assert (t.listed_by, [f.path for f in t.files], t.bytes) == ("walk", ["a.txt"], 600)
    with pytest.raises(BadInput, match="workdir_max_mb"):
        workdir.scan(d, max_bytes=500)


def test_upload_verifies_by_sha256_and_a_second_one_sends_only_the_changed_file(tmp_path, sshd, make_box):
    box = make_box(sshd)
    box.put(REPO / "onbox", RUNNER_DIR)  # what arm ships: manifest.py lists the box's copy
    d = tree(tmp_path)
    first = workdir.upload(box, workdir.scan(d, excludes=("cache",)))
    assert (first.files, first.sent, first.unchanged) == (4, 4, 0)
    on_box = Path(box.root) / workdir.WORKDIR
    assert (on_box / "src" / "train.py").read_text() == "print('train')\n"
    assert not (on_box / "link-out").exists() and not (on_box / "big.ckpt").exists() and not (on_box / "cache").exists()
    (d / "src" / "train.py").write_text("print('train v2')\n")
    lines: list[str] = []
    second = workdir.upload(box, workdir.scan(d, excludes=("cache",)), on_progress=lines.append)
    assert (second.sent, second.unchanged, second.sent_bytes) == (1, 3, len("print('train v2')\n"))
    assert lines[0] == "workdir: 1 of 4 file(s) to send, 0.0 MiB (3 unchanged)"
    assert (on_box / "src" / "train.py").read_text() == "print('train v2')\n"


def test_up_workdir_reaches_the_job_beside_the_bootstrap_and_is_booked_as_a_step(cli_env, gpuops_home, tmp_path):
    import json

    from gpuops.config import load_settings
    from ledger import Ledger
    from tests.conftest import gpuops_cmd

    d = tree(tmp_path)
    job = tmp_path / "job.sh"
    job.write_text('cd "$GPUOPS_WORKDIR" && cat src/train.py && ls -A | tr "\\n" " "\n')
    p = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--workdir", str(d), "--workdir-exclude", "cache", "--json"),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    summ = json.loads(p.stdout[p.stdout.index("{\n") :])
    log = Path(summ["log"]).read_text()
    assert log == "print('train')\n.gitignore README.md link-in src "
    steps = {x.name: x for x in Ledger(load_settings().ledger_url()).steps(summ["session"])}
    assert steps["workdir"].status == "done"


def test_up_refuses_a_workdir_over_the_cap_before_renting(cli_env, gpuops_home, tmp_path):
    from gpuops.config import load_settings
    from ledger import Ledger
    from tests.conftest import gpuops_cmd

    d = tmp_path / "w"
    d.mkdir()
    (d / "a.bin").write_bytes(b"a" * 2 * 2**20)
    (tmp_path / "infra.toml").write_text("[job]\nworkdir_max_mb = 1\n")
    job = tmp_path / "job.sh"
    job.write_text("true\n")
    p = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--workdir", str(d)),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert p.returncode == 2
    assert p.stderr.startswith(f"error: --workdir {d} holds more than 1 MiB ([job] workdir_max_mb)")
    assert Ledger(load_settings().ledger_url()).open_sessions() == []
