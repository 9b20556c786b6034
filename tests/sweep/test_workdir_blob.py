"""A sweep job's workdir in the queue: packed deterministically from `up --workdir`'s own scan, and unpacked only
after its sha256 and every member are checked (tars here are written by hand, as a ledger writer could)."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from gpuops.errors import BadInput
from gpuops.sweep import workdir_blob
from gpuops.sweep.workdir_blob import WorkdirRefused


def _tar(*members: tuple[str, str, str]) -> bytes:
    """A tar of (name, kind, body-or-target): kind file | symlink | fifo | chardev | dir | hardlink."""
    types = {"file": tarfile.REGTYPE, "symlink": tarfile.SYMTYPE, "fifo": tarfile.FIFOTYPE,
             "chardev": tarfile.CHRTYPE, "dir": tarfile.DIRTYPE, "hardlink": tarfile.LNKTYPE}  # fmt: skip
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, body in members:
            info = tarfile.TarInfo(name)
            info.type = types[kind]
            if kind == "file":
                info.size = len(body.encode())
                t.addfile(info, io.BytesIO(body.encode()))
            else:
                info.linkname = body
                t.addfile(info)
    return buf.getvalue()


def _unpack(data: bytes, dest: Path) -> None:
    dest.mkdir()
    workdir_blob.unpack(data, hashlib.sha256(data).hexdigest(), dest)


def test_bytes_that_do_not_hash_to_their_name_are_refused_before_any_member_is_read(tmp_path):
    data = _tar(("a.txt", "file", "a"))
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / "w").mkdir()
    with pytest.raises(WorkdirRefused) as e:
        workdir_blob.unpack(data[:-1] + b"x", sha, tmp_path / "w")
    assert str(e.value) == (
        f"the sweep's workdir {sha[:12]} in the ledger is refused: its bytes do not hash to its sha256 (changed after "
        "it was queued); nothing was rented (queue the sweep again from its folder (`gpuops sweep FILE --detach`))"
    )
    assert list((tmp_path / "w").iterdir()) == []


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ((("/etc/passwd", "file", "x"),), "member '/etc/passwd' is not a plain relative path"),
        ((("../up.txt", "file", "x"),), "member '../up.txt' is not a plain relative path"),
        ((("a/../../up.txt", "file", "x"),), "member 'a/../../up.txt' is not a plain relative path"),
        ((("null", "chardev", ""),), "member null is a device"),
        ((("pipe", "fifo", ""),), "member pipe is a FIFO"),
        ((("d", "dir", ""),), "member d is a folder"),
        ((("a", "file", "x"), ("b", "hardlink", "a")), "member b is a hard link"),
        ((("out", "symlink", "../outside"),), "symlink out points outside the workdir"),
        ((("abs", "symlink", "/etc"),), "symlink abs points outside the workdir"),
        # each link inside by its own text, the pair out: y -> ., x -> y/y/.. is the workdir's parent
        ((("x", "symlink", "y/y/.."), ("y", "symlink", ".")), "symlink x points outside the workdir"),
        ((("a", "file", "x"), ("a", "file", "y")), "member a is stored twice or under another member"),
        ((("l", "symlink", "."), ("l/f", "file", "x")), "member l/f is stored twice or under another member"),
    ],
)
def test_a_member_a_folder_must_not_hold_is_refused_in_one_line(tmp_path, members, says):
    with pytest.raises(WorkdirRefused) as e:
        _unpack(_tar(*members), tmp_path / "w")
    assert says in str(e.value) and "\n" not in str(e.value) and "nothing was rented" in str(e.value)
    assert not (tmp_path / "up.txt").exists() and not (tmp_path / "outside").exists()


def test_not_a_tar_is_refused(tmp_path):
    with pytest.raises(WorkdirRefused, match="not a tar"):
        _unpack(b"\x00" * 100 + b"hello", tmp_path / "w")


@pytest.mark.e2e  # scan asks git whether the folder is a work tree
def test_a_tree_packs_to_the_same_bytes_every_time_and_unpacks_to_what_up_would_send(tmp_path):
    from gpuops.rental.workdir import scan

    d = tmp_path / "src"
    (d / "sub").mkdir(parents=True)
    (d / "data.txt").write_text("hello from the workdir\n")
    (d / "sub" / "run.sh").write_text("echo run\n")
    (d / "sub" / "run.sh").chmod(0o755)
    (d / "skip.bin").write_text("left out\n")
    os.symlink("sub/run.sh", d / "run-link")
    first = workdir_blob.pack(scan(d, ("*.bin",)), "j")
    os.utime(d / "data.txt", (1, 1))  # a new mtime, same content: the same bytes
    assert workdir_blob.pack(scan(d, ("*.bin",)), "j") == first
    out = tmp_path / "out"
    out.mkdir()
    workdir_blob.unpack(first, hashlib.sha256(first).hexdigest(), out)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["data.txt", "run-link", "sub", "sub/run.sh"]
    assert (out / "data.txt").read_text() == "hello from the workdir\n"
    assert os.readlink(out / "run-link") == "sub/run.sh"
    assert stat.S_IMODE((out / "sub" / "run.sh").stat().st_mode) == 0o755  # as the uploader keeps it


@pytest.mark.e2e  # scan asks git whether the folder is a work tree
def test_a_workdir_over_the_cap_is_refused_before_anything_is_queued(tmp_path, monkeypatch):
    from gpuops.rental.workdir import scan

    d = tmp_path / "src"
    d.mkdir()
    (d / "big.bin").write_bytes(b"x" * 3000)
    monkeypatch.setattr(workdir_blob, "MAX_BYTES", 2048)
    with pytest.raises(BadInput) as e:
        workdir_blob.pack(scan(d), "big")
    assert "sweep job big: its workdir packs to 0.0 MiB, more than the 0.00195312 MiB" in str(e.value)
    assert "workdir_exclude" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.e2e  # the jobs' dry runs start the local provider's containment probe
def test_a_sweep_over_the_cap_is_refused_in_one_line_and_queues_nothing(cli, gpuops_home, tmp_path, monkeypatch):
    import sqlalchemy as sa

    from ledger import Ledger

    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "weights.bin").write_bytes(b"w" * 4096)
    (tmp_path / "job.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    (tmp_path / "s.toml").write_text('run = "job.sh"\nworkdir = "wd"\n[resources]\ncard = "a100"\n')
    monkeypatch.setattr(workdir_blob, "MAX_BYTES", 2048)
    r = cli("sweep", str(tmp_path / "s.toml"), "--detach")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (
        "sweep job job1: its workdir packs to 0.0 MiB, more than the 0.00195312 MiB a sweep stores in the" in r.stderr
    )
    assert "workdir_exclude" in r.stderr
    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    try:
        with led.engine.connect() as c:
            assert [c.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar() for t in ("sweeps", "sweep_blobs")] == [
                0,
                0,
            ]
    finally:
        led.engine.dispose()
