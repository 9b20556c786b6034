"""Copy-back and the box's transport when the box is not to be trusted or lacks SFTP: a real sshd
without an SFTP subsystem (everything over exec), results holding hostile symlinks, a hostile SFTP
server (paramiko, on 127.0.0.1) that names files ``../../escaped.txt`` and ``/abs``, and the cap
on a copy-back's size."""

from __future__ import annotations

import io
import os
import socket
import stat
import threading
import time
from pathlib import Path

import paramiko
import pytest

from gpuops.agent.agentctl import hold_presence, read_status
from gpuops.agent.jobio import follow_log, start_job
from gpuops.box.base import GET_MAX_BYTES, UnsafeCopy
from gpuops.box.ssh import HostKeyPins, SSHBox
from gpuops.emulators.sshd import SshServer

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "we ird $(touch PWNED) 'q' \"d\" ;x`id`&|*.txt"


@pytest.fixture
def sshd_nosftp(tmp_path, smi_bin, client_key):
    s = SshServer(tmp_path / "sshd-nosftp", extra_path=[smi_bin], sftp=False)
    s.authorize(client_key[1])
    s.start()
    yield s
    s.stop()
    s.end_box_processes()


def test_a_box_without_sftp_is_served_over_exec(sshd_nosftp, make_box, tmp_path):
    box = make_box(sshd_nosftp)
    src = tmp_path / "tree"
    (src / "a").mkdir(parents=True)
    (src / "a" / HOSTILE).write_bytes(bytes(range(256)) * 40)
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    box.put(src, "shipped")
    assert box.sftp_missing and "no SFTP subsystem" in box.sftp_missing and "\n" not in box.sftp_missing
    out: list[str] = []
    assert box.run("./shipped/run.sh", timeout=10, on_line=out.append) == 0 and out == ["ran"]
    one = tmp_path / "one.txt"
    one.write_text("payload\n")
    box.put(one, f"sub dir/{HOSTILE}")
    assert box.read_file(f"sub dir/{HOSTILE}") == b"payload\n"
    assert box.read_file(f"shipped/a/{HOSTILE}", offset=10000) == (bytes(range(256)) * 40)[10000:]
    assert box.read_file("missing") is None
    lines: list[str] = []
    assert box.run('echo "$V"', timeout=10, env={"V": HOSTILE}, on_line=lines.append) == 0 and lines == [HOSTILE]
    assert box.get("shipped", tmp_path / "back")
    assert (tmp_path / "back" / "a" / HOSTILE).read_bytes() == (src / "a" / HOSTILE).read_bytes()
    assert box.get("nothing", tmp_path / "none") is False
    # The detached job and the agent protocol work the same way
    box.put(REPO / "onbox", ".gpuops/onbox")
    start_job(box, "echo hello; exit 4")
    got = bytearray()
    _, ended = follow_log(box, got.extend, deadline=time.monotonic() + 20)
    assert ended is not None and ended.code == 4 and bytes(got) == b"hello\n"
    with hold_presence(box, hold_seconds=30):
        assert b'"hold_seconds": 30.0' in box.read_file(".gpuops/laptop-presence")
    assert b'"released": true' in box.read_file(".gpuops/laptop-presence")
    assert read_status(box)["job"]["exit_code"] == 4  # no agent ran: the exit marker speaks
    assert not list(Path(sshd_nosftp.home).rglob("PWNED"))


@pytest.mark.parametrize("sftp", [True, False])
def test_results_with_symlinks_leaving_the_results_dir(tmp_path, smi_bin, client_key, make_box, sftp):
    s = SshServer(tmp_path / "sshd", extra_path=[smi_bin], sftp=sftp)
    s.authorize(client_key[1])
    s.start()
    try:
        box = make_box(s)
        secret = Path(s.home) / "secret.txt"
        secret.write_text("box secret")
        out = Path(box.root) / "out"
        (out / "sub").mkdir(parents=True)
        (out / "a.txt").write_text("A")
        (out / "sub" / "b.txt").write_text("B")
        os.symlink(str(secret), out / "leak.txt")  # absolute, outside
        os.symlink("../../../secret.txt", out / "sub" / "rel-leak.txt")  # relative, outside
        os.symlink("/", out / "root")  # a directory outside
        os.symlink("a.txt", out / "alias.txt")  # inside: copied as the file it names (SFTP)
        dest = tmp_path / "results"
        assert box.get("out", dest)
        files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
        assert "leak.txt" not in files and "sub/rel-leak.txt" not in files and not (dest / "root").exists()
        assert (dest / "a.txt").read_text() == "A" and (dest / "sub" / "b.txt").read_text() == "B"
        assert not any(p.is_symlink() for p in dest.rglob("*"))
        assert sorted(files) == (["a.txt", "alias.txt", "sub/b.txt"] if sftp else ["a.txt", "sub/b.txt"])
        assert any("leak.txt" in x for x in box.skipped)
        assert stat.S_IMODE((dest / "a.txt").stat().st_mode) == 0o600
    finally:
        s.stop()
        s.end_box_processes()


@pytest.mark.parametrize("sftp", [True, False])
def test_copy_back_is_capped(tmp_path, smi_bin, client_key, make_box, sftp):
    s = SshServer(tmp_path / "sshd", extra_path=[smi_bin], sftp=sftp)
    s.authorize(client_key[1])
    s.start()
    try:
        box = make_box(s)
        out = Path(box.root) / "out"
        out.mkdir(parents=True)
        for i in range(3):
            (out / f"part{i}.bin").write_bytes(os.urandom(400_000))
        dest = tmp_path / "results"
        with pytest.raises(UnsafeCopy, match="exceed 1000000 bytes"):
            box.get("out", dest, max_bytes=1_000_000)
        assert sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) <= 1_000_000
        assert GET_MAX_BYTES == 50 * 2**30
    finally:
        s.stop()
        s.end_box_processes()


# -- a hostile SFTP server ---------------------------------------------------------------------------
class _Handle(paramiko.SFTPHandle):
    def __init__(self, data: bytes):
        super().__init__()
        self.readfile = io.BytesIO(data)

    def stat(self):
        return _attr("x", stat.S_IFREG | 0o644, len(self.readfile.getvalue()))


def _attr(name: str, mode: int, size: int = 0) -> paramiko.SFTPAttributes:
    a = paramiko.SFTPAttributes()
    a.filename, a.st_mode, a.st_size = name, mode, size
    a.st_uid = a.st_gid = 0
    a.st_atime = a.st_mtime = int(time.time())
    return a


HOSTILE_NAMES = ["../../escaped.txt", "/tmp/gpuops-abs-escape.txt", "..", ".", "sub/../../x.txt", "ok.txt", "nul\0.txt"]


class HostileSftp(paramiko.SFTPServerInterface):
    """Serves /box/out: a directory listing with path-traversal names, each a 'file' of 6 bytes."""

    def stat(self, path):
        if path.rstrip("/") in ("/box/out", "/box"):
            return _attr(path.rsplit("/", 1)[-1], stat.S_IFDIR | 0o755)
        return _attr(path.rsplit("/", 1)[-1], stat.S_IFREG | 0o644, 6)

    lstat = stat

    def list_folder(self, path):
        return [_attr(n, stat.S_IFREG | 0o644, 6) for n in HOSTILE_NAMES]

    def open(self, path, flags, attr):
        return _Handle(b"pwned\n")


class _Server(paramiko.ServerInterface):
    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_SUCCESSFUL

    def get_allowed_auths(self, username):
        return "publickey"

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):  # `mkdir -p` at connect: say it worked
        threading.Timer(0.05, lambda: (channel.send_exit_status(0), channel.close())).start()
        return True


@pytest.fixture
def hostile_sftp():
    host_key = paramiko.ECDSAKey.generate()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    transports: list[paramiko.Transport] = []

    def serve():
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            t = paramiko.Transport(sock)
            t.add_server_key(host_key)
            t.set_subsystem_handler("sftp", paramiko.SFTPServer, HostileSftp)
            t.start_server(server=_Server())
            transports.append(t)

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()
    for t in transports:
        t.close()


def test_names_from_a_hostile_sftp_server_never_leave_the_results_dir(hostile_sftp, client_key, data_dir, tmp_path):
    box = SSHBox(
        "127.0.0.1",
        hostile_sftp,
        "root",
        key_path=client_key[0],
        pins=HostKeyPins(data_dir / "known_hosts"),
        pin_name="gpuops-h/1",
        root="/box",
    ).connect(time.monotonic() + 10)
    try:
        work = tmp_path / "laptop" / "results" / "s1"
        assert box.get("out", work)
        inside = sorted(p.name for p in work.iterdir())
        assert inside == ["ok.txt"] and (work / "ok.txt").read_bytes() == b"pwned\n"
        assert not (tmp_path / "laptop" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
        assert not Path("/tmp/gpuops-abs-escape.txt").exists()
        assert len(box.skipped) == len(HOSTILE_NAMES) - 3  # ".", ".." are not entries; ok.txt is copied
    finally:
        box.close()


def test_up_on_a_box_without_sftp_whose_nvidia_smi_exits_14(gpuops_home, sshd_nosftp, smi_bin, tmp_path, monkeypatch):
    """The whole session on an image with no SFTP subsystem and a GPU with a corrupted infoROM:
    arm, bootstrap, job, copy-back and teardown all work; the warning is booked, not a failure."""
    import json

    import gpuops.rental.launcher as launcher
    from gpuops.box.ssh import ensure_ssh_key
    from gpuops.config import load_settings
    from gpuops.emulators import nvidia_smi as fake_nvidia_smi
    from gpuops.rental.launcher import Reporter, UpRequest, run_up
    from ledger import Ledger
    from tests.box.test_up_box import SshProvider

    fake_nvidia_smi.set_state(smi_bin, dict(fake_nvidia_smi.DEFAULT_STATE, **fake_nvidia_smi.INFOROM))
    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    s = load_settings(
        None,
        {"teardown": {"kill_grace_seconds": 1}, "bootstrap": {"commands": ["echo ready"]}, "job": {"results": "out/"}},
    )
    sshd_nosftp.authorize(ensure_ssh_key(s.data_path())[1])
    prov = SshProvider(sshd_nosftp.host, sshd_nosftp.port, sshd_nosftp.user)
    job = tmp_path / "job.sh"
    job.write_text(
        'mkdir -p out/sub && echo 42 > out/sub/answer.txt && ln -s /etc/passwd out/leak && echo \'{"tokens": 7}\' >> "$GPUOPS_METRICS"\n'
    )
    summ = run_up(UpRequest(job=job, provider="emulated"), s, Reporter(), provider=prov)
    assert summ["end_reason"] == "job_end" and summ["exit_code"] == 0, summ
    assert Path(summ["results"], "sub", "answer.txt").read_text() == "42\n"
    assert not Path(summ["results"], "leak").exists()
    assert prov.destroyed == ["pod-1"]
    row = Ledger(s.ledger_url()).get(summ["session"])
    assert row.tokens == 7
    steps = Ledger(s.ledger_url()).steps(summ["session"])
    assert steps[0].name == "system" and steps[0].status == "done"
    assert json.loads(steps[0].detail)["warning"].startswith("nvidia-smi exited 14: WARNING: infoROM")


@pytest.mark.parametrize("sftp", [True, False])
def test_results_with_control_characters_in_names_come_home_escaped_and_listed(
    tmp_path, smi_bin, client_key, make_box, sftp
):
    """Results whose names hold a newline or ESC are copied home under their escaped names (the
    one escaping, gpuops.textsafe.safe) and listed; what the box left out for safety (a symlink
    out of the results, a FIFO) is named in the summary line with why."""
    from gpuops.rental import results

    s = SshServer(tmp_path / "sshd", extra_path=[smi_bin], sftp=sftp)
    s.authorize(client_key[1])
    s.start()
    try:
        box = make_box(s)
        box.put(REPO / "onbox" / "manifest.py", results.MANIFEST)
        out = Path(box.root) / "out"
        out.mkdir(parents=True)
        (out / "plain.txt").write_text("P")
        (out / "two\nlines.txt").write_text("N")
        (out / "red\x1b[31m.txt").write_text("E")
        os.symlink("/etc/passwd", out / "leak")
        os.mkfifo(out / "pipe")
        dest = tmp_path / "home"
        rep = results.fetch_results(box, "out", dest)
        assert rep.ok and rep.files == 3, rep
        home = sorted(p.name for p in dest.iterdir())
        assert home == ["plain.txt", "red\\x1b[31m.txt", "two\\x0alines.txt"]  # escaped by hand: \x1b, \x0a
        assert (dest / "two\\x0alines.txt").read_text() == "N" and (dest / "red\\x1b[31m.txt").read_text() == "E"
        assert sorted(rep.renamed) == [
            "'red\\x1b[31m.txt' -> red\\x1b[31m.txt",
            "'two\\nlines.txt' -> two\\x0alines.txt",
        ]
        line = rep.line()
        assert "\n" not in line and "\x1b" not in line
        assert "renamed (control characters in the name): " in line and "two\\x0alines.txt" in line
        assert "skipped for safety: " in line and "leak (symlink)" in line and "pipe (not a regular file)" in line
    finally:
        s.stop()
        s.end_box_processes()
