"""A real OpenSSH server on 127.0.0.1 for tests, and a TCP proxy that can cut connections.

``SshServer(base_dir)`` writes its own host key (ed25519, generated with ``ssh-keygen``), its own
``sshd_config`` (free port, ``authorized_keys`` in ``base_dir``, ``internal-sftp`` unless
``sftp=False``, no PAM, no passwords) and runs ``/usr/sbin/sshd -D -e`` as the current user. Sessions get ``PATH`` (the
test's ``bin`` directories first: a stand-in ``nvidia-smi``, then the directory of the running
Python, so ``python3`` on the box is this interpreter) and ``HOME`` through ``SetEnv``, so nothing
a test runs on the "box" writes into the real home directory.

``TcpProxy(target_port)`` forwards 127.0.0.1:<its port> to the server; ``cut()`` drops every
connection at once (what a laptop going to sleep or a NAT timeout does to a live SSH session)
while it keeps accepting new ones, so a client can reconnect.

Both are used by ``tests/box`` and meant for other areas (the provider emulators point their
instances' SSH endpoints at an ``SshServer``); `gpuops demo` runs one as its box.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


def free_port() -> int:
    """A TCP port on 127.0.0.1 for a server that binds it later.

    The plugged-in one (``gpuops.emulators.base.port_for``; the suite's is tests/support/ports.py),
    else one free now."""
    from gpuops.emulators import base

    port = base.port_for()
    if port:
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str = "gpuops-test") -> str:
    """Write an ed25519 key pair at ``path`` (+ ``.pub``); returns the public key line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for p in (path, path.with_name(path.name + ".pub")):
        if p.exists():
            p.unlink()
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path.with_name(path.name + ".pub").read_text().strip()


class SshServer:
    """One sshd for one test. ``port`` is fixed at construction (the server may start later)."""

    def __init__(self, base: Path, extra_path: list[Path] | None = None, home: Path | None = None, sftp: bool = True):
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.user = os.environ.get("USER") or _whoami()
        self.home = Path(home) if home else self.base / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.host_key = self.base / "ssh_host_ed25519_key"
        self.authorized_keys = self.base / "authorized_keys"
        self.authorized_keys.touch()
        self.log = self.base / "sshd.log"
        self.extra_path = [Path(p) for p in (extra_path or [])]
        self.sftp = sftp  # False: no SFTP subsystem (images that ship sshd without sftp-server)
        self.proc: subprocess.Popen | None = None
        self._stopped = threading.Event()  # set by stop(): a start_later thread may end
        keygen(self.host_key, "gpuops-test-host")

    def authorize(self, public_key_line: str) -> None:
        """Let a client key log in."""
        with open(self.authorized_keys, "a") as f:
            f.write(public_key_line.strip() + "\n")

    def host_public_key(self) -> str:
        """The server's host public key line (``ssh-ed25519 AAAA... comment``)."""
        return self.host_key.with_name(self.host_key.name + ".pub").read_text().strip()

    def new_host_key(self) -> None:
        """Replace the host key (a rebuilt box at the same address); takes effect on restart."""
        keygen(self.host_key, "gpuops-test-host-2")

    def _config(self) -> Path:
        path_dirs = [str(p) for p in self.extra_path] + [
            str(Path(sys.executable).parent),
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ]
        cfg = self.base / "sshd_config"
        cfg.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {self.host}",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.base / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",
                    "MaxStartups 100:30:200",
                    "MaxSessions 100",
                    "LogLevel VERBOSE",
                    *(["Subsystem sftp internal-sftp"] if self.sftp else []),
                    f"SetEnv PATH={':'.join(path_dirs)} HOME={self.home} LANG=C.UTF-8",
                    "",
                ]
            )
        )
        return cfg

    def start(self, timeout: float = 10.0) -> None:
        """Start sshd and wait until it accepts TCP connections. Raises RuntimeError on failure.

        sshd gets SIGTERM when the calling THREAD ends (``lifetime.die_with_parent``): call it from
        a thread that lives as long as the server, or use ``start_later``."""
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege-separation dir sshd demands as root
        cfg = self._config()
        log = open(self.log, "ab")
        from gpuops.emulators.lifetime import die_with_parent

        # -D: a direct child, never a daemon; SIGTERM when the starting thread ends (a SIGKILLed
        # pytest runs no stop()).
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(cfg)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on {self.port} within {timeout} s")

    def start_later(self, delay: float) -> threading.Thread:
        """Start the server ``delay`` seconds from now, in a thread (a box whose sshd is late).

        The thread lives until ``stop()``: sshd ends with the thread that started it (``start``)."""

        def run() -> None:
            time.sleep(delay)
            self.start()
            self._stopped.wait()

        self._stopped.clear()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        """Stop the listening server (open sessions' own processes end when their client goes)."""
        self._stopped.set()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def end_box_processes(self) -> None:
        """Kill what tests left running on the "box" (detached jobs, on-box agents).

        Those are the processes whose working directory is under ``home``. A rented box takes them with it when it is
        destroyed; this stand-in box must end them itself, once the test is over."""
        end_processes_under(self.home)

    def restart(self) -> None:
        """Stop the server and start it again."""
        self.stop()
        self.start()


def end_processes_under(home: Path) -> None:
    """SIGKILL every process (but this one) whose working directory is ``home`` or under it."""
    where = str(Path(home).resolve())
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if cwd == where or cwd.startswith(where + "/"):
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def _whoami() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


class TcpProxy:
    """127.0.0.1:``port`` -> 127.0.0.1:``target_port``; ``cut()`` drops all live connections."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(50)
        self.port = self._listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self.accepted = 0
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Drop every live connection, both sides (RST-like: shutdown + close)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, drop every connection, and wait (``timeout`` s) for the accepting thread to end.

        A thread left behind would make the next test's process multi-threaded
        (``ledger export`` forks only a single-threaded process). On Linux a blocked
        ``accept()`` is woken by ``shutdown`` of the listener, not by ``close``."""
        self._closed = True
        self.cut()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._acceptor.join(timeout)
