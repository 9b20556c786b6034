"""The box: one interface to run, copy and read on a rented machine (SSH) or on this one (local).

Commands are bash command strings run in the box's root directory; every value interpolated into
them must go through ``shlex.quote`` (``q`` below). Secrets never go on a command line: they go in
a 0600 file or in ``env`` (the channel's environment).

SSH (``SSHBox``, paramiko, imported lazily): key auth with gpuops' own ed25519 key
(``<data dir>/ssh/id_ed25519``, 0600, made once; its public line goes to the provider at create)
or a key the user names; host keys trusted on first use and pinned per instance in
``<data dir>/known_hosts`` (a changed key raises HostKeyChanged); connect retried until a
deadline (a box reports "running" long before sshd answers); SSH + TCP keepalive; idempotent
operations reconnect once on a dropped connection. ``open_box`` picks the transport.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Protocol

from bootstrap.localbox import MARKER as BOX_MARKER
from gpuops.errors import BadInput, GpuopsError

q = shlex.quote

LineSink = Callable[[str], None]


class Box(Protocol):
    """A session's machine. ``root`` is the absolute directory the session owns on it."""

    root: str

    def run(self, command: str, *, timeout: float, env: dict[str, str] | None = None, on_line: LineSink | None = None) -> int:
        """Run ``command`` (bash) in ``root``, stream stdout+stderr lines to ``on_line``, return
        the exit status. Raises TimeoutError after ``timeout`` seconds (the command is killed)."""
        ...

    def run_detached(self, command: str, *, env: dict[str, str] | None = None) -> None:
        """Start ``command`` in its own session (setsid), not tied to this connection."""
        ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a file or directory to ``remote`` (relative to ``root`` unless absolute)."""
        ...

    def get(self, remote: str, local: Path) -> bool:
        """Copy ``remote`` (file or dir) to ``local``; False when it does not exist."""
        ...

    def read_file(self, remote: str, offset: int = 0) -> bytes | None:
        """Bytes of ``remote`` from ``offset`` on, or None when it does not exist."""
        ...

    def close(self) -> None: ...


class LocalBox:
    """This machine as a box: ``root`` is a directory; each process runs in its own process
    group, recorded in ``root/.gpuops/pgids`` so that the local provider's destroy ends them all."""

    def __init__(self, root: Path, base_env: dict[str, str] | None = None):
        self.root = str(root)
        self._base_env = dict(base_env or {})
        Path(self.root, ".gpuops").mkdir(parents=True, exist_ok=True)

    # The job and bootstrap see python3 = the interpreter gpuops runs on (its venv), first on PATH.
    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.update(self._base_env)
        env.update(extra or {})
        # Marks every process of this box, also those that leave its process groups (setsid,
        # daemonize): the local destroy finds them by it (bootstrap/localbox.py).
        env[BOX_MARKER] = os.path.abspath(self.root)
        return env

    def _record_pgid(self, pid: int) -> None:
        with open(Path(self.root, ".gpuops", "pgids"), "a", encoding="ascii") as f:
            f.write(f"{pid}\n")

    def _abs(self, path: str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else Path(self.root, p)

    def run(self, command, *, timeout, env=None, on_line=None):
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=self.root, env=self._env(env), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self._record_pgid(proc.pid)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                if on_line:
                    on_line(raw.decode("utf-8", "replace").rstrip("\n"))
            rc = proc.wait()
        except BaseException:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            timer.cancel()
        if expired.is_set():
            raise TimeoutError(f"command ran past {timeout:.0f} s")
        return rc

    def run_detached(self, command, *, env=None):
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=self.root, env=self._env(env), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self._record_pgid(proc.pid)

    def put(self, local, remote):
        dest = self._abs(remote)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if Path(local).is_dir():
            shutil.copytree(local, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(local, dest)

    def get(self, remote, local):
        src = self._abs(remote)
        if not src.exists():
            return False
        local.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, local, dirs_exist_ok=True)
        else:
            shutil.copy2(src, local)
        return True

    def read_file(self, remote, offset=0):
        try:
            with open(self._abs(remote), "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return None

    def close(self):
        pass


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists (or is not ours)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class SshUnreachable(GpuopsError):
    """The box's sshd did not accept us before the deadline (not listening, or auth refused)."""


class HostKeyChanged(GpuopsError):
    """The box presented a host key other than the one pinned for this instance (possible MITM)."""


class ConnectionLost(GpuopsError):
    """The SSH connection dropped while a foreground command ran; its fate on the box is unknown."""


KEY_NAME = "id_ed25519"


def ensure_ssh_key(data_dir: Path) -> tuple[Path, str]:
    """gpuops' own client key: ``<data_dir>/ssh/id_ed25519`` (OpenSSH format, mode 0600), made
    once. Returns (private key path, public key line ``ssh-ed25519 AAAA... gpuops``), the line
    being what a provider puts in the box's ``authorized_keys`` at create."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ed25519

    d = Path(data_dir) / "ssh"
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    priv, pub = d / KEY_NAME, d / (KEY_NAME + ".pub")
    if not priv.exists():
        key = ed25519.Ed25519PrivateKey.generate()
        body = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.OpenSSH, ser.NoEncryption())
        tmp = d / (KEY_NAME + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        os.replace(tmp, priv)
        line = key.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH).decode() + " gpuops"
        pub.write_text(line + "\n")
    os.chmod(priv, 0o600)
    if not pub.exists():
        pub.write_text(public_key_line(priv) + "\n")
    return priv, pub.read_text().strip()


def public_key_line(key_path: Path) -> str:
    """``type base64`` public line of a private key file (``<key>.pub`` when it sits beside it)."""
    side = Path(str(key_path) + ".pub")
    if side.is_file():
        return side.read_text().strip()
    k = _load_key(Path(key_path))
    return f"{k.get_name()} {k.get_base64()}"


def _load_key(path: Path):
    import paramiko

    if not path.is_file():
        raise BadInput(f"SSH key {path} not found", "name an existing private key, or leave it empty to use gpuops' own")
    try:
        return paramiko.PKey.from_path(str(path))
    except paramiko.PasswordRequiredException:
        raise BadInput(f"SSH key {path} is passphrase-protected", "name an unencrypted key, or leave it empty to use gpuops' own") from None
    except (paramiko.SSHException, ValueError) as e:
        raise BadInput(f"SSH key {path} cannot be read: {e}", "name an OpenSSH private key file") from None


class HostKeyPins:
    """gpuops' own known_hosts (OpenSSH format), one entry per instance (``name`` is
    ``<label>/<instance id>``, not host:port, because providers reuse addresses across boxes).
    First contact pins the key; a different key later raises HostKeyChanged."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def pinned_types(self, name: str) -> list[str]:
        """Key types pinned for ``name`` (e.g. ``["ssh-ed25519"]``); empty before first contact."""
        import paramiko

        if not self.path.exists():
            return []
        hk = paramiko.HostKeys()
        hk.load(str(self.path))
        known = hk.lookup(name)
        return list(known.keys()) if known else []

    def check(self, name: str, key) -> bool:
        """Pin or verify ``key`` (a paramiko PKey) for ``name``. True when newly pinned."""
        import fcntl

        import paramiko

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(str(self.path) + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            hk = paramiko.HostKeys()
            if self.path.exists():
                hk.load(str(self.path))
            known = hk.lookup(name)
            if known:
                pinned = known.get(key.get_name())
                if pinned is not None and pinned == key:
                    return False
                have = ", ".join(f"{k.get_name()} {_fp(k)}" for k in known.values())
                raise HostKeyChanged(
                    f"host key of {name} changed: pinned {have}, offered {key.get_name()} {_fp(key)}",
                    f"if the box was rebuilt on purpose, delete the {name} line from {self.path}",
                )
            hk.add(name, key.get_name(), key)
            tmp = self.path.with_suffix(".tmp")
            hk.save(str(tmp))
            os.replace(tmp, self.path)
            return True


def _fp(key) -> str:
    import base64
    import hashlib

    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def _pin_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_./:@" else "_" for c in text)


_ENV_NAME_OK = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class SSHBox:
    """A rented box over SSH (paramiko). ``root`` is absolute once connected (a relative root is
    taken under the remote ``$HOME``).

    ``key_path``: private key; ``pins``: HostKeyPins; ``pin_name``: the instance's pin entry.
    ``keepalive_s``: SSH keepalive interval (seconds), plus TCP keepalive so a silently dead peer
    is noticed within about ``keepalive_s + 3 x 5`` s. ``reconnect_s``: how long an operation
    that found the connection dropped keeps trying to reconnect before raising SshUnreachable.
    Secrets in ``env`` go through a 0600 file that the command sources and deletes first thing;
    they never appear on a command line.
    """

    def __init__(self, host: str, port: int, user: str, *, key_path: Path, pins: HostKeyPins, pin_name: str,
                 root: str, keepalive_s: float = 15.0, reconnect_s: float = 120.0, io_timeout_s: float = 60.0):
        self.host, self.port, self.user = host, int(port), user
        self.key_path = Path(key_path)
        self.pins, self.pin_name = pins, _pin_name(pin_name)
        self.root = root
        self.keepalive_s, self.reconnect_s, self.io_timeout_s = keepalive_s, reconnect_s, io_timeout_s
        self._key = _load_key(self.key_path)
        self._t = None
        self._sftp = None
        self.connects = 0  # how many times a connection was made (1 + reconnects)

    # -- connection ---------------------------------------------------------------------------
    def _connect_once(self, timeout: float):
        import socket

        import paramiko

        sock = socket.create_connection((self.host, self.port), timeout=max(0.5, min(timeout, 15.0)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, val in (("TCP_KEEPIDLE", int(self.keepalive_s)), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, opt):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), max(1, val))
        t = paramiko.Transport(sock)
        try:
            pinned = self.pins.pinned_types(self.pin_name)
            if pinned:  # ask for the pinned key type, so a server with several keys cannot look "changed"
                opts = t.get_security_options()
                opts.key_types = [k for k in opts.key_types if k in pinned] or list(opts.key_types)
            t.banner_timeout = max(1.0, min(timeout, 30.0))
            t.start_client(timeout=max(1.0, min(timeout, 30.0)))
            self.pins.check(self.pin_name, t.get_remote_server_key())
            t.auth_publickey(self.user, self._key)
            t.set_keepalive(max(1, int(self.keepalive_s)))
        except BaseException:
            t.close()
            raise
        return t

    def connect(self, deadline: float) -> "SSHBox":
        """Connect, retrying until ``deadline`` (a ``time.monotonic()`` value) while sshd is not
        listening or not yet accepting our key. Raises HostKeyChanged at once, SshUnreachable at
        the deadline. Creates ``root`` on the box."""
        import paramiko
        from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_exponential

        self.close()
        last: list[BaseException] = []

        def attempt():
            try:
                return self._connect_once(deadline - time.monotonic())
            except (OSError, EOFError, paramiko.SSHException) as e:
                last[:] = [e]
                raise

        budget = deadline - time.monotonic()
        try:
            retrying = Retrying(
                stop=stop_before_delay(max(0.0, budget)), wait=wait_exponential(multiplier=0.25, max=5.0),
                retry=retry_if_exception_type((OSError, EOFError, paramiko.SSHException)), reraise=True,
            )
            self._t = retrying(attempt)
        except (OSError, EOFError, paramiko.SSHException) as e:
            kind = "key refused" if isinstance(e, paramiko.AuthenticationException) else type(e).__name__
            raise SshUnreachable(
                f"ssh {self.user}@{self.host}:{self.port} did not answer within {budget:.0f} s ({kind}: {e})",
                "raise [up] ready_timeout_seconds, or check the provider's console for the box",
            ) from None
        self.connects += 1
        if not self.root.startswith("/"):
            home = self._exec_capture('printf %s "$HOME"').strip() or "/root"
            self.root = home.rstrip("/") + "/" + self.root
        self._exec_capture(f"mkdir -p {q(self.root)}/.gpuops")
        return self

    def _transport(self):
        if self._t is None or not self._t.is_active():
            self._reconnect()
        return self._t

    def _reconnect(self) -> None:
        self._drop()
        self.connect(time.monotonic() + self.reconnect_s)

    def _drop(self) -> None:
        for obj in (self._sftp, self._t):
            try:
                if obj is not None:
                    obj.close()
            except Exception:  # closing a dead connection may raise anything paramiko has; it is gone either way
                pass
        self._sftp = None
        self._t = None

    def sftp(self):
        if self._sftp is None or self._t is None or not self._t.is_active():
            t = self._transport()
            import paramiko

            self._sftp = paramiko.SFTPClient.from_transport(t)
            self._sftp.get_channel().settimeout(self.io_timeout_s)
        return self._sftp

    def _retrying(self, fn):
        """Run an idempotent operation; on a dropped connection reconnect once and run it again."""
        import paramiko

        try:
            return fn()
        except (EOFError, paramiko.SSHException, OSError) as e:
            if isinstance(e, (FileNotFoundError, PermissionError)) or (self._t is not None and self._t.is_active() and not _is_timeout(e)):
                raise
            self._reconnect()
            return fn()

    def _exec_capture(self, command: str, timeout: float = 30.0) -> str:
        chan = self._t.open_session(timeout=timeout)
        chan.settimeout(timeout)
        chan.exec_command(command)
        out = chan.makefile("rb").read().decode("utf-8", "replace")
        rc = chan.recv_exit_status()
        chan.close()
        if rc != 0:
            raise GpuopsError(f"remote command failed ({rc}): {command[:80]}")
        return out

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else self.root.rstrip("/") + "/" + path

    # -- secrets --------------------------------------------------------------------------------
    def _env_prefix(self, env: dict[str, str] | None) -> str:
        """Write ``env`` to a 0600 file on the box; return the shell text that loads and deletes it."""
        if not env:
            return ""
        for k in env:
            if not k or k[0].isdigit() or set(k) - _ENV_NAME_OK:
                raise BadInput(f"environment variable name {k!r} is not a valid name", "use letters, digits and _")
        path = f"{self.root}/.gpuops/env.{os.urandom(8).hex()}"
        body = "".join(f"export {k}={q(str(v))}\n" for k, v in env.items()).encode()

        def write():
            f = self.sftp().open(path, "wb")
            try:
                f.chmod(0o600)  # before a single secret byte is written
                f.write(body)
            finally:
                f.close()

        self._retrying(write)
        return f". {q(path)} && rm -f {q(path)} && "

    # -- Box ------------------------------------------------------------------------------------
    def run(self, command, *, timeout, env=None, on_line=None):
        import socket

        prefix = self._env_prefix(env)
        inner = f"echo $$ && cd {q(self.root)} && {prefix}exec bash -c {q(command)} 2>&1"  # one ordered stream
        t = self._transport()
        chan = t.open_session(timeout=30)
        chan.set_combine_stderr(True)
        chan.settimeout(0.5)
        chan.exec_command(f"exec bash -c {q(inner)}")
        deadline = time.monotonic() + timeout
        buf, pid = b"", None

        def emit(raw: bytes) -> None:
            nonlocal pid
            if pid is None:
                pid = raw.decode("ascii", "replace").strip()
            elif on_line:
                on_line(raw.decode("utf-8", "replace").rstrip("\r"))

        try:
            while True:
                if time.monotonic() > deadline:
                    self._kill_group(pid)
                    pid = None
                    raise TimeoutError(f"command ran past {timeout:.0f} s")
                try:
                    data = chan.recv(65536)
                except socket.timeout:
                    if not t.is_active():
                        raise ConnectionLost(f"connection to {self.host}:{self.port} dropped while a command ran",
                                             "long work belongs in run_detached; re-attach with `gpuops logs`") from None
                    continue
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    emit(line)
            if buf:
                emit(buf)
            while not chan.status_event.is_set():
                if time.monotonic() > deadline:
                    self._kill_group(pid)
                    pid = None
                    raise TimeoutError(f"command ran past {timeout:.0f} s")
                time.sleep(0.01)
            rc = chan.recv_exit_status()
            if rc == -1:  # closed without an exit status: a dropped connection (or a signal)
                settle = time.monotonic() + 1.0
                while t.is_active() and time.monotonic() < settle:
                    time.sleep(0.02)
                if not t.is_active():
                    raise ConnectionLost(f"connection to {self.host}:{self.port} dropped while a command ran",
                                         "long work belongs in run_detached; re-attach with `gpuops logs`")
            return rc
        except ConnectionLost:
            raise
        except BaseException:  # Ctrl-C, the launcher's Interrupted, a bug in on_line: do not leave it running
            self._kill_group(pid)
            raise
        finally:
            chan.close()

    def _kill_group(self, pid: str | None) -> None:
        """KILL the process group of a foreground command (sshd made its shell a session leader)."""
        if not pid or not pid.isdigit():
            return
        try:
            self._exec_capture(f"kill -KILL -- -{pid} 2>/dev/null; true", timeout=10)
        except Exception:  # best effort: the connection may be the thing that failed
            pass

    def run_detached(self, command, *, env=None):
        # Not retried once sent: a start that may have happened must not happen twice.
        import paramiko

        prefix = self._env_prefix(env)
        self._transport()
        try:
            self._exec_capture(f"cd {q(self.root)} && {prefix}(setsid nohup bash -c {q(command)} >/dev/null 2>&1 </dev/null &)")
        except (EOFError, OSError, paramiko.SSHException) as e:
            raise ConnectionLost(f"connection to {self.host}:{self.port} dropped while starting a detached command ({e})",
                                 "it may have started: look with `gpuops logs SESSION`") from None

    def put(self, local, remote):
        local = Path(local)
        dest = self._abs(remote)

        def copy():
            sftp = self.sftp()
            if local.is_dir():
                self._mkdirs(dest)
                for dirpath, dirnames, filenames in os.walk(local):
                    dirnames[:] = [d for d in dirnames if d != "__pycache__"]
                    rel = os.path.relpath(dirpath, local)
                    rdir = dest if rel == "." else dest + "/" + rel.replace(os.sep, "/")
                    self._mkdirs(rdir)
                    for fn in filenames:
                        self._put_file(sftp, Path(dirpath, fn), rdir + "/" + fn)
            else:
                self._mkdirs(dest.rsplit("/", 1)[0] or "/")
                self._put_file(sftp, local, dest)

        self._retrying(copy)

    @staticmethod
    def _put_file(sftp, src: Path, dest: str) -> None:
        tmp = dest + ".gpuops-part"
        sftp.put(str(src), tmp)
        sftp.chmod(tmp, os.stat(src).st_mode & 0o777)
        sftp.posix_rename(tmp, dest)

    def _mkdirs(self, path: str) -> None:
        sftp = self.sftp()
        parts, cur = [p for p in path.split("/") if p], ""
        for p in parts:
            cur += "/" + p
            try:
                sftp.stat(cur)
            except FileNotFoundError:
                sftp.mkdir(cur)

    def get(self, remote, local):
        import stat as st

        src = self._abs(remote)
        local = Path(local)

        def fetch() -> bool:
            sftp = self.sftp()
            try:
                attr = sftp.stat(src)
            except FileNotFoundError:
                return False
            if st.S_ISDIR(attr.st_mode):
                self._get_dir(sftp, src, local)
            else:
                local.parent.mkdir(parents=True, exist_ok=True)
                sftp.get(src, str(local))
            return True

        return self._retrying(fetch)

    def _get_dir(self, sftp, src: str, local: Path) -> None:
        import stat as st

        local.mkdir(parents=True, exist_ok=True)
        for a in sftp.listdir_attr(src):
            if a.filename in (".", ".."):
                continue
            if st.S_ISDIR(a.st_mode):
                self._get_dir(sftp, src + "/" + a.filename, local / a.filename)
            elif st.S_ISREG(a.st_mode):
                sftp.get(src + "/" + a.filename, str(local / a.filename))

    def read_file(self, remote, offset=0):
        path = self._abs(remote)

        def read():
            try:
                f = self.sftp().open(path, "rb")
            except FileNotFoundError:
                return None
            try:
                f.seek(offset)
                return f.read()
            finally:
                f.close()

        return self._retrying(read)

    def close(self):
        self._drop()


def _is_timeout(e: BaseException) -> bool:
    import socket

    return isinstance(e, (socket.timeout, TimeoutError))


def open_box(instance, *, data_dir: Path, deadline: float, ssh_key: str = "", root: str | None = None,
             keepalive_s: float = 15.0, reconnect_s: float = 120.0) -> "LocalBox | SSHBox":
    """The Box for ``instance`` (a providers.base.Instance).

    Local instances (``instance.extra["local_root"]``) get a LocalBox on that directory. Others
    get an SSHBox on ``instance.ssh``, connected with retries until ``deadline`` (a
    ``time.monotonic()`` value), key ``ssh_key`` (a path; empty: gpuops' own key in
    ``data_dir/ssh``), host key pinned in ``data_dir/known_hosts`` under ``<label>/<id>``; the
    box's root is ``root``, else ``instance.extra["workdir"]``, else ``~/gpuops/<label>``.
    Raises GpuopsError when the instance has no SSH endpoint, SshUnreachable, HostKeyChanged.
    """
    if instance.extra.get("local_root"):
        return LocalBox(Path(instance.extra["local_root"]))
    if instance.ssh is None:
        raise GpuopsError(f"instance {instance.id} has no SSH endpoint yet", "wait for the provider to publish its port")
    key_path = Path(ssh_key).expanduser() if ssh_key else ensure_ssh_key(Path(data_dir))[0]
    box = SSHBox(
        instance.ssh.host, instance.ssh.port, instance.ssh.user or "root", key_path=key_path,
        pins=HostKeyPins(Path(data_dir) / "known_hosts"), pin_name=f"{instance.label}/{instance.id}",
        root=root or instance.extra.get("workdir") or f"gpuops/{instance.label}",
        keepalive_s=keepalive_s, reconnect_s=reconnect_s,
    )
    return box.connect(deadline)
