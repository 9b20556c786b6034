"""`up --workdir`: what goes up (git's own listing, .gitignore and --workdir-exclude honoured, a symlink
inside the tree carried as a symlink, one out of it not followed, special files named as skipped),
sha256-verified on the box, a second upload sending only what changed and removing what the tree
no longer has, inside the workdir only."""

from __future__ import annotations

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
    os.symlink(d / "src", d / "link-dir")  # an absolute link to a folder inside the tree
    os.mkfifo(d / "pipe")
    subprocess.run(["git", "init", "-q", str(d)], check=True)
    subprocess.run(["git", "-C", str(d), "add", "src/train.py"], check=True)  # one tracked, the rest untracked
    return d


def test_scan_lists_what_git_would_carries_links_inside_and_names_what_it_skips(tmp_path):
    t = workdir.scan(tree(tmp_path), excludes=("cache",))
    assert t.listed_by == "git"
    assert [f.path for f in t.files] == [".gitignore", "README.md", "src/train.py"]
    assert [(x.path, x.target) for x in t.links] == [("link-dir", "src"), ("link-in", "README.md")]
    assert t.skipped == ["link-out (symlink out of the tree, not followed)", "pipe (FIFO, not sent)"]
    assert t.bytes == len("*.ckpt\n") + len("readme\n") + len("print('train')\n")


def test_the_skipped_line_up_prints_has_the_count_and_the_first_paths():
    t = workdir.WorkTree(root=Path("."), skipped=[f"f{i} (FIFO, not sent)" for i in range(5)])
    assert workdir.skipped_line(t) == (
        "--workdir: 5 skipped: f0 (FIFO, not sent), f1 (FIFO, not sent), f2 (FIFO, not sent) and 2 more"
    )
    assert workdir.skipped_line(workdir.WorkTree(root=Path("."))) is None


@pytest.mark.e2e  # it starts git (the scan asks `git rev-parse` whether DIR is a work tree)
def test_scan_without_git_walks_everything_but_dot_git_and_refuses_over_the_cap(tmp_path):
    d = tmp_path / "plain"
    (d / ".git").mkdir(parents=True)
    (d / ".git" / "HEAD").write_text("x")
    (d / "a.txt").write_bytes(b"a" * 600)
    os.mkfifo(d / "pipe")
    os.symlink(d, d / "here")  # a link to DIR itself: inside the tree
    t = workdir.scan(d)
    assert (t.listed_by, [f.path for f in t.files], t.bytes) == ("walk", ["a.txt"], 600)
    assert ([(x.path, x.target) for x in t.links], t.skipped) == ([("here", ".")], ["pipe (FIFO, not sent)"])
    with pytest.raises(BadInput, match="workdir_max_mb"):
        workdir.scan(d, max_bytes=500)


def test_upload_verifies_by_sha256_and_a_second_one_sends_only_the_changed_file(tmp_path, sshd, make_box):
    box = make_box(sshd)
    box.put(REPO / "onbox", RUNNER_DIR)  # what arm ships: manifest.py lists the box's copy
    d = tree(tmp_path)
    first = workdir.upload(box, workdir.scan(d, excludes=("cache",)))
    assert (first.files, first.sent, first.unchanged, first.links, first.removed) == (3, 3, 0, 2, 0)
    on_box = Path(box.root) / workdir.WORKDIR
    assert (on_box / "src" / "train.py").read_text() == "print('train')\n"
    assert os.readlink(on_box / "link-in") == "README.md" and os.readlink(on_box / "link-dir") == "src"
    assert (on_box / "link-dir" / "train.py").read_text() == "print('train')\n"  # resolves on the box
    for absent in ("link-out", "big.ckpt", "cache", "pipe"):
        assert not os.path.lexists(on_box / absent), absent
    (d / "src" / "train.py").write_text("print('train v2')\n")
    lines: list[str] = []
    second = workdir.upload(box, workdir.scan(d, excludes=("cache",)), on_progress=lines.append)
    assert (second.sent, second.unchanged, second.sent_bytes) == (1, 2, len("print('train v2')\n"))
    assert lines[0] == "workdir: 1 of 3 file(s) to send, 0.0 MiB (2 unchanged)"
    assert (on_box / "src" / "train.py").read_text() == "print('train v2')\n"


def test_a_warm_box_loses_what_the_tree_lost_and_nothing_outside_its_workdir(tmp_path, sshd, make_box):
    box = make_box(sshd)
    box.put(REPO / "onbox", RUNNER_DIR)
    d = tree(tmp_path)
    (d / "old").mkdir()
    (d / "old" / "gone.txt").write_text("deleted later\n")
    workdir.upload(box, workdir.scan(d, excludes=("cache",)))
    on_box = Path(box.root) / workdir.WORKDIR
    assert (on_box / "old" / "gone.txt").exists()
    # What the job (or anyone on the box) left there: a file, a FIFO, a link to a folder outside
    # the workdir holding a file that must survive, a file where the tree now has a link.
    keep = tmp_path / "outside-the-workdir"
    keep.mkdir()
    (keep / "precious.txt").write_text("never removed\n")
    os.symlink(keep, on_box / "escape")
    (on_box / "scratch.log").write_text("job output\n")
    os.mkfifo(on_box / "box-pipe")
    (d / "old" / "gone.txt").unlink()
    (d / "old").rmdir()
    (d / "README.md").unlink()
    (d / "link-in").unlink()
    os.symlink("src/train.py", d / "link-in")  # the same name, another target
    lines: list[str] = []
    again = workdir.upload(box, workdir.scan(d, excludes=("cache",)), on_progress=lines.append)
    assert again.removed == 6  # old/gone.txt, old, README.md, escape, scratch.log, box-pipe (link-in is remade)
    assert lines[0].startswith("workdir: removed 6 entries the tree no longer has: ")
    assert sorted(p.name for p in on_box.iterdir()) == [".gitignore", "link-dir", "link-in", "src"]
    assert os.readlink(on_box / "link-in") == "src/train.py"
    assert (keep / "precious.txt").read_text() == "never removed\n"  # the link was removed, not followed


def test_syncdir_refuses_a_plan_naming_a_path_out_of_its_folder_and_a_workdir_that_is_a_link(tmp_path):
    import json
    import sys

    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "x").write_text("x")
    plan = tmp_path / "plan.json"
    for bad in (["../x"], ["/etc/passwd"], ["a//b"], ["a/./b"]):
        plan.write_text(json.dumps({"files": bad, "links": {}}))
        p = subprocess.run(
            [sys.executable, str(REPO / "onbox" / "syncdir.py"), str(target), str(plan)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert p.returncode == 2 and "not plain" in p.stderr, bad
    os.symlink(target, tmp_path / "wd")  # the box's workdir swapped for a link: nothing done where it points
    plan.write_text(json.dumps({"files": [], "links": {}}))
    p = subprocess.run(
        [sys.executable, str(REPO / "onbox" / "syncdir.py"), str(tmp_path / "wd"), str(plan)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and "not a folder" in p.stderr
    assert (target / "x").read_text() == "x"


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
    said = "warning: --workdir: 2 skipped: link-out (symlink out of the tree, not followed), pipe (FIFO, not sent)\n"
    assert said in p.stderr and p.stderr.index(said) < p.stderr.index(" intent session ")  # before renting
    summ = json.loads(p.stdout[p.stdout.index("{\n") :])
    log = Path(summ["log"]).read_text()
    assert log == "print('train')\n.gitignore README.md link-dir link-in src "
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
