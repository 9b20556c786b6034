"""`gpuops ssh` and `gpuops exec` on a live box: the real sshd on 127.0.0.1 is the box, the system
OpenSSH client and paramiko reach it with gpuops' key and the pinned host key, and each open session
holds an activity lease that the on-box agent counts."""

from __future__ import annotations

import http.server
import subprocess
import threading
import time
import urllib.request

import pytest

from gpuops.config import load_settings
from gpuops.errors import BadInput
from gpuops.providers.base import Instance, InstanceStatus, SshEndpoint
from gpuops.rental import access
from gpuops.rental.sessions import list_open
from ledger import Ledger
from onbox.vocabulary import EventKind
from tests.support.ports import reserved_port

SID = "s-access-1"
LABEL = "gpuops-" + SID


class BoxProvider:
    """Answers the row's instance id as the sshd's box (``label`` and ``status`` settable)."""

    name = "local"
    account = None

    def __init__(self, sshd):
        self.sshd, self.label, self.status = sshd, LABEL, InstanceStatus.RUNNING

    def get(self, instance_id):
        s = self.sshd
        return Instance(instance_id, self.label, self.status, 1.0, SshEndpoint(s.host, s.port, s.user), time.time())


@pytest.fixture
def live(sshd, gpuops_home, tmp_path):
    settings = load_settings()
    ledger = Ledger(settings.ledger_url())
    root = tmp_path / "box-root"
    (root / ".gpuops").mkdir(parents=True)
    now = time.time()
    ledger.add_session(
        dict(
            id=SID,
            experiment="t",
            job="-",
            provider="local",
            card="rtx-4090",
            gpu_count=1,
            spot=False,
            label=LABEL,
            status="running",
            created_at=now,
            instance_id="i-1",
            instance_created_at=now,
            max_hours=1.0,
            owner=settings.owner(),
            usd_per_hour=1.0,
        )
    )
    ledger.event(SID, EventKind.READY, {"host": sshd.host, "port": sshd.port, "user": sshd.user, "root": str(root)})
    return settings, ledger, BoxProvider(sshd), root


def captured(out: list):
    def run(argv, timeout_s):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        out.append(p.stdout + p.stderr)
        return p.returncode

    return run


def test_ssh_command_runs_in_the_box_root_with_its_output_and_exit_code(live):
    settings, ledger, provider, root = live
    out: list[str] = []
    rc = access.ssh(
        settings,
        ledger,
        SID[:8],
        ["bash", "-c", "pwd; echo hi-$((6*7)) 'a b'; exit 7"],
        [],
        provider=provider,
        run=captured(out),
    )
    assert rc == 7
    assert out == [f"{root}\nhi-42 a b\n"]
    assert not list((settings.data_path() / "ssh").glob("known_hosts.*"))  # the per-call file is gone


def test_ssh_refuses_a_changed_host_key_and_names_the_fix(live, sshd):
    settings, ledger, provider, _ = live
    access.ssh(settings, ledger, SID, ["true"], [], provider=provider, run=captured([]))  # pins it
    sshd.new_host_key()
    sshd.restart()
    from gpuops.box.ssh import HostKeyChanged

    with pytest.raises(HostKeyChanged):
        access.ssh(settings, ledger, SID, ["true"], [], provider=provider, run=captured([]))


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"served on the box"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_a_port_forward_reaches_a_server_on_the_box(live):
    settings, ledger, provider, _ = live
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)  # on the box's 127.0.0.1
    threading.Thread(target=server.serve_forever, daemon=True).start()
    local = reserved_port()
    got: list[bytes] = []

    def run(argv, timeout_s):
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not got:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=5) as r:
                        got.append(r.read())
                except OSError:
                    time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        return 0

    try:
        assert access.ssh(settings, ledger, SID, [], [f"{local}:{server.server_port}"], provider=provider, run=run) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert got == [b"served on the box"]


def test_exec_streams_its_lines_passes_the_exit_code_and_holds_an_activity_lease(live):
    settings, ledger, provider, root = live
    lines: list[str] = []
    rc = access.exec_(
        settings,
        ledger,
        SID,
        ["bash", "-c", "echo one; ls .gpuops/activity | wc -l; exit 3"],
        lines.append,
        provider=provider,
    )
    assert (rc, lines) == (3, ["one", "1"])  # the lease was there while it ran
    assert list((root / ".gpuops" / "activity").iterdir()) == []  # and removed at its end


def test_a_box_not_ours_or_not_live_is_refused_in_one_line(live):
    settings, ledger, provider, _ = live
    provider.label = "gpuops-someone-else"
    with pytest.raises(BadInput, match="not labelled ours"):
        access.exec_(settings, ledger, SID, ["true"], lambda _: None, provider=provider)
    provider.label, provider.status = LABEL, InstanceStatus.EXITED
    with pytest.raises(BadInput, match="is exited"):
        access.ssh(settings, ledger, SID, [], [], provider=provider)
    with pytest.raises(BadInput, match="is not LOCAL:REMOTE"):
        access.ssh(settings, ledger, SID, [], ["8000"], provider=provider)


def test_ps_json_gives_host_and_port(live, sshd):
    _, ledger, _, _ = live
    (row,) = list_open(ledger)
    assert (row["ssh_host"], row["ssh_port"], row["ssh_user"]) == ("127.0.0.1", sshd.port, sshd.user)


def _under_a_pty(monkeypatch, out: list[str]):
    """A run(argv, timeout_s) that starts the OpenSSH client on a pseudo-terminal, as a user's shell
    would, with this process's stdin and stdout pointed at it too (what `gpuops ssh` looks at)."""
    import io
    import os
    import pty
    import sys

    master, slave = pty.openpty()
    tty_file = io.TextIOWrapper(io.FileIO(slave, "r+", closefd=False))
    monkeypatch.setattr(sys, "stdin", tty_file)
    monkeypatch.setattr(sys, "stdout", tty_file)

    def run(argv, timeout_s):
        proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        got = b""
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                import select

                ready, _, _ = select.select([master], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(master, 4096)
                    except OSError:  # the pty's other end closed
                        break
                    got += chunk
                elif proc.poll() is not None:
                    break
            return proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(master)
            os.close(slave)
            out.append(got.decode("utf-8", "replace"))

    return run


def test_ssh_at_a_terminal_gives_the_command_a_terminal_on_the_box(live, monkeypatch):
    settings, ledger, provider, _ = live
    out: list[str] = []
    rc = access.ssh(settings, ledger, SID, ["tty"], [], provider=provider, run=_under_a_pty(monkeypatch, out))
    assert rc == 0, out
    assert out[0].strip().splitlines()[0].startswith("/dev/pts/"), out  # `tty` on the box: a pseudo-terminal


def test_ssh_not_at_a_terminal_gives_the_command_none(live):
    settings, ledger, provider, _ = live
    out: list[str] = []
    rc = access.ssh(settings, ledger, SID, ["tty"], [], provider=provider, run=captured(out))
    assert (rc, out) == (1, ["not a tty\n"])  # coreutils tty(1): exit 1 without one


def test_exec_gives_the_command_the_jobs_own_variables(live):
    settings, ledger, provider, root = live
    show = 'echo "$GPUOPS_SESSION|$GPUOPS_EXPERIMENT|$GPUOPS_METRICS|${GPUOPS_WORKDIR-unset}"'
    lines: list[str] = []
    assert access.exec_(settings, ledger, SID, ["bash", "-c", show], lines.append, provider=provider) == 0
    assert lines == [f"{SID}|t|{root}/.gpuops/metrics.jsonl|unset"]  # no --workdir went up
    ledger.add_steps(SID, [{"step": "workdir", "status": "done", "seconds": 0.1, "detail": {}}])
    lines.clear()
    assert access.exec_(settings, ledger, SID, ["bash", "-c", show], lines.append, provider=provider) == 0
    assert lines == [f"{SID}|t|{root}/.gpuops/metrics.jsonl|{root}/workdir"]
