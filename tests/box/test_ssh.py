"""SSHBox against a real OpenSSH server: streaming, pins, late sshd, drops, quoting, secrets."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuops.agent.jobio import LOG, follow_log, job_exit, start_job
from gpuops.box.local import LocalBox
from gpuops.box.remote import open_box
from gpuops.box.ssh import ConnectionLost, HostKeyChanged, SSHBox, SshUnreachable
from gpuops.emulators.sshd import TcpProxy
from gpuops.providers.base import Instance, InstanceStatus, SshEndpoint

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "we ird $(touch PWNED) 'q' \"d\" ;x`id`&|*.txt"


def test_run_streams_lines_exit_code_and_stderr(sshd, make_box):
    box = make_box(sshd)
    assert box.root == f"{sshd.home}/gpuops/s1"
    lines: list[str] = []
    t0 = time.monotonic()
    rc = box.run("echo one; echo two >&2; printf 'no newline'; exit 7", timeout=10, on_line=lines.append)
    assert rc == 7
    assert lines == ["one", "two", "no newline"]
    assert time.monotonic() - t0 < 5
    # the command runs in the box root, with the stand-in nvidia-smi on PATH
    out: list[str] = []
    assert (
        box.run(
            "pwd; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits",
            timeout=10,
            on_line=out.append,
        )
        == 0
    )
    assert out == [box.root, "NVIDIA H100 80GB HBM3, 81559"]


def test_host_key_pinned_on_first_use_and_a_change_is_refused(sshd, make_box, data_dir):
    make_box(sshd, pin="gpuops-a/inst-1").close()
    pins = (data_dir / "known_hosts").read_text().split()
    assert pins[0] == "gpuops-a/inst-1"
    assert " ".join(pins[1:3]) == " ".join(sshd.host_public_key().split()[:2])
    make_box(sshd, pin="gpuops-a/inst-1").close()  # same key: accepted
    sshd.new_host_key()
    sshd.restart()
    t0 = time.monotonic()
    with pytest.raises(HostKeyChanged) as e:
        make_box(sshd, pin="gpuops-a/inst-1", timeout=20)
    assert time.monotonic() - t0 < 5  # not retried until the deadline
    assert "gpuops-a/inst-1" in str(e.value) and "known_hosts" in str(e.value)
    # another instance that reuses the address is a new box: trusted on first use
    make_box(sshd, pin="gpuops-b/inst-2").close()
    assert (data_dir / "known_hosts").read_text().count("\n") == 2


def test_connect_waits_for_sshd_that_starts_late(sshd_unstarted, make_box):
    sshd_unstarted.start_later(2.5)
    t0 = time.monotonic()
    box = make_box(sshd_unstarted, timeout=30)
    waited = time.monotonic() - t0
    assert 2.5 <= waited < 15
    assert box.run("true", timeout=10) == 0


def test_connect_gives_up_at_the_deadline(sshd_unstarted, make_box):
    t0 = time.monotonic()
    with pytest.raises(SshUnreachable) as e:
        make_box(sshd_unstarted, timeout=1.5)
    assert time.monotonic() - t0 < 6
    assert "ready_timeout_seconds" in str(e.value)


def test_a_key_the_box_does_not_know_is_refused(sshd, make_box, tmp_path):
    sshd.authorized_keys.write_text("")  # nobody may log in
    with pytest.raises(SshUnreachable) as e:
        make_box(sshd, timeout=5)  # a refusal is retried to the deadline (a fresh box's key may come late)
    assert "key refused" in str(e.value)  # also when the last try was cut mid-handshake (a loaded machine)


def test_hostile_names_and_paths_are_quoted(sshd, make_box, tmp_path):
    box = make_box(sshd, root=f"gpuops/{HOSTILE}")
    assert box.root.endswith(HOSTILE)
    src = tmp_path / "src.txt"
    src.write_text("payload\n")
    box.put(src, f"sub dir/{HOSTILE}")
    assert box.read_file(f"sub dir/{HOSTILE}") == b"payload\n"
    assert box.get(f"sub dir/{HOSTILE}", tmp_path / "back.txt") and (tmp_path / "back.txt").read_text() == "payload\n"
    lines: list[str] = []
    from gpuops.box.base import q

    assert (
        box.run(f'cat -- {q("sub dir/" + HOSTILE)}; echo "$V"', timeout=10, env={"V": HOSTILE}, on_line=lines.append)
        == 0
    )
    assert lines == ["payload", HOSTILE]
    box.run_detached(f"echo started > {q(HOSTILE + '.flag')}", env={"V": HOSTILE})
    deadline = time.monotonic() + 10
    while box.read_file(HOSTILE + ".flag") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert box.read_file(HOSTILE + ".flag") == b"started\n"
    # nothing was executed by accident anywhere
    found = subprocess.run(["find", str(sshd.home), "-name", "PWNED"], capture_output=True, text=True).stdout
    assert found == ""


def test_secrets_go_through_a_0600_file_never_a_command_line(sshd, make_box):
    box = make_box(sshd)
    secret = "hf_SeCrEt" + os.urandom(8).hex()
    # the env file is 0600 from the first byte and gone once the command has read it
    prefix = box._env_prefix({"HF_TOKEN": secret})
    envfile = prefix.split()[1]
    assert stat.S_IMODE(box.sftp().stat(envfile).st_mode) == 0o600
    box.run(f"rm -f {envfile}", timeout=10)
    seen: list[str] = []
    cmdlines: list[str] = []

    def snoop(line: str) -> None:
        seen.append(line)

    # while the command runs, no process on this machine shows the secret in its argv
    import threading

    stop = threading.Event()

    def scan():
        while not stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        cmdlines.append(Path("/proc", pid, "cmdline").read_bytes().decode("utf-8", "replace"))
                    except OSError:
                        pass
            time.sleep(0.05)

    t = threading.Thread(target=scan, daemon=True)
    t.start()
    rc = box.run(
        'sleep 1; test -n "$HF_TOKEN" && echo has-token; ls -a .gpuops',
        timeout=20,
        env={"HF_TOKEN": secret},
        on_line=snoop,
    )
    stop.set()
    t.join()
    assert rc == 0
    assert seen[0] == "has-token"
    assert not any(x.startswith("env.") for x in seen)  # the file is deleted before the command starts
    assert len(cmdlines) > 20 and not any(secret in c for c in cmdlines)
    assert secret not in sshd.log.read_text()


def test_timeout_kills_the_remote_command(sshd, make_box):
    box = make_box(sshd)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        box.run("echo $$ > victim.pid; sleep 60", timeout=1.5)
    assert time.monotonic() - t0 < 6
    pid = int(box.read_file("victim.pid"))
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()


def test_put_get_directories_and_read_with_offset(sshd, make_box, tmp_path):
    box = make_box(sshd)
    src = tmp_path / "tree"
    (src / "a" / "b").mkdir(parents=True)
    (src / "top.txt").write_text("top")
    (src / "a" / "b" / "deep.bin").write_bytes(bytes(range(256)) * 100)
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "x.pyc").write_bytes(b"junk")
    box.put(src, "shipped")
    out: list[str] = []
    assert (
        box.run("./shipped/run.sh; test -e shipped/__pycache__ || echo no-cache", timeout=10, on_line=out.append) == 0
    )
    assert out == ["ran", "no-cache"]
    assert box.read_file("shipped/a/b/deep.bin", offset=25590) == (bytes(range(256)) * 100)[25590:]
    assert box.read_file("shipped/missing") is None
    assert box.get("shipped", tmp_path / "back")
    assert (tmp_path / "back" / "a" / "b" / "deep.bin").read_bytes() == (src / "a" / "b" / "deep.bin").read_bytes()
    assert (tmp_path / "back" / "top.txt").read_text() == "top"
    assert box.get("nothing-here", tmp_path / "none") is False


JOB = "for i in $(seq 1 30); do echo line-$i; sleep 0.1; done; exit 3"
JOB_LOG = b"".join(b"line-%d\n" % i for i in range(1, 31))


def _ship_runner(box):
    box.put(REPO / "onbox", ".gpuops/onbox")


def test_connection_dropped_mid_job_then_reattach(sshd, make_box):
    proxy = TcpProxy(sshd.port)
    try:
        box = make_box(sshd, port=proxy.port, reconnect_s=20)
        _ship_runner(box)
        start_job(box, JOB)
        got = bytearray()
        offset, ended = follow_log(box, got.extend, follow=True, deadline=time.monotonic() + 1.0)
        assert ended is None and offset == len(got)
        proxy.cut()  # the laptop's network goes away mid-job
        offset, ended = follow_log(box, got.extend, follow=True, offset=offset, deadline=time.monotonic() + 30)
        assert bytes(got) == JOB_LOG  # every line once, in order
        assert ended is not None and ended.code == 3
        assert box.connects == 2 and proxy.accepted == 2
    finally:
        proxy.close()


def test_foreground_command_on_a_dropped_connection_raises_instead_of_hanging(sshd, make_box):
    proxy = TcpProxy(sshd.port)
    try:
        box = make_box(sshd, port=proxy.port)
        import threading

        threading.Timer(0.7, proxy.cut).start()
        t0 = time.monotonic()
        with pytest.raises(ConnectionLost):
            box.run("sleep 20", timeout=30)
        assert time.monotonic() - t0 < 10
        assert box.run("echo back", timeout=10) == 0  # the next call reconnects
    finally:
        proxy.close()


def test_job_outlives_the_laptop_process(sshd, make_box, data_dir, client_key):
    box = make_box(sshd)
    _ship_runner(box)
    laptop = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from gpuops.box.ssh import HostKeyPins, SSHBox
        from gpuops.agent.jobio import start_job
        b = SSHBox({sshd.host!r}, {sshd.port}, {sshd.user!r}, key_path=Path({str(client_key[0])!r}),
                   pins=HostKeyPins(Path({str(data_dir / "known_hosts")!r})), pin_name="gpuops-t/i-1", root="gpuops/s1")
        b.connect(time.monotonic() + 10)
        start_job(b, "sleep 2; echo survived; exit 5")
        print("started", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", laptop], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    proc.kill()  # the laptop dies with its SSH connection open, no goodbye
    proc.wait()
    assert job_exit(box) is None  # still running
    deadline = time.monotonic() + 20
    while job_exit(box) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    ended = job_exit(box)
    assert ended is not None and ended.code == 5 and ended.ended - ended.started >= 2
    assert box.read_file(LOG) == b"survived\n"


def test_open_box_local_and_ssh(sshd, data_dir, tmp_path):
    local = Instance(
        id="gpuops-x", label="gpuops-x", status=InstanceStatus.RUNNING, extra={"local_root": str(tmp_path / "lbox")}
    )
    assert isinstance(open_box(local, data_dir=data_dir, deadline=time.monotonic() + 1), LocalBox)
    remote = Instance(
        id="pod-1", label="gpuops-y", status=InstanceStatus.RUNNING, ssh=SshEndpoint(sshd.host, sshd.port, sshd.user)
    )
    box = open_box(remote, data_dir=data_dir, deadline=time.monotonic() + 10)
    try:
        assert isinstance(box, SSHBox) and box.root == f"{sshd.home}/gpuops/gpuops-y"
        assert "gpuops-y/pod-1" in (data_dir / "known_hosts").read_text()
        assert stat.S_IMODE((data_dir / "ssh" / "id_ed25519").stat().st_mode) == 0o600
    finally:
        box.close()
    with pytest.raises(Exception, match="no SSH endpoint"):
        open_box(
            Instance(id="p2", label="l", status=InstanceStatus.PROVISIONING),
            data_dir=data_dir,
            deadline=time.monotonic() + 1,
        )


# A command that prints 300 000 multi-byte characters and no newline (a hostile or broken bootstrap
# step): its output must come in bounded pieces of whole characters, on an SSH box and a local one.
LONG_LINE = "import sys; sys.stdout.write('é€😀' * 100000); sys.stdout.flush()"


def _long_line_pieces(box) -> list[str]:
    from gpuops.box.base import MAX_LINE_CHARS

    pieces: list[str] = []
    assert box.run(f"python3 -c {LONG_LINE!r}; echo; echo after", timeout=60, on_line=pieces.append) == 0
    assert pieces[-1] == "after"  # the long line ended by the `echo`
    assert "".join(pieces[:-1]) == "é€😀" * 100000  # no U+FFFD: never cut inside a character
    assert max(len(p) for p in pieces) <= MAX_LINE_CHARS  # memory bounded whatever the box prints
    return pieces


def test_a_line_without_end_comes_in_whole_bounded_pieces_over_ssh(sshd, make_box):
    box = make_box(sshd)
    assert len(_long_line_pieces(box)) >= 300_000 // (64 * 1024) + 2


def test_a_line_without_end_comes_in_whole_bounded_pieces_on_a_local_box(tmp_path):
    assert len(_long_line_pieces(LocalBox(tmp_path / "box"))) >= 300_000 // (64 * 1024) + 2
