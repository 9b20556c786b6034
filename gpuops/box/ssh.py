"""A rented machine over SSH (``SSHBox``, paramiko imported lazily).

gpuops' own key, host keys pinned per instance, connect retried to a deadline, keepalive, one
reconnect; SFTP or, without it, exec."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuops.box.base import (
    GET_MAX_BYTES,
    GET_MAX_DEPTH,
    GET_MAX_FILES,
    READ_INTO_BYTES,
    OutputLines,
    _CopyBudget,
    _local_dir,
    _local_file,
    q,
    safe_name,
)
from gpuops.errors import BadInput, GpuopsError

if TYPE_CHECKING:  # imported lazily at run time (start-up)
    import paramiko


def open_private(sftp, path: str):
    """Create ``path`` on the SFTP server for writing with mode 0600 from the start.

    The mode goes in the SSH_FXP_OPEN attributes (SFTP v3, draft-ietf-secsh-filexfer-02 section 6.3;
    OpenSSH's sftp-server passes it to open(2)), with CREATE|EXCL so an existing file (or a planted
    symlink) is refused, never reused. paramiko 5.1's ``SFTPClient.open`` sends empty attributes
    (0644 after umask, then a chmod), hence this request built with its own ``_request``."""
    from paramiko.sftp import CMD_HANDLE, CMD_OPEN, SFTP_FLAG_CREATE, SFTP_FLAG_EXCL, SFTP_FLAG_WRITE, SFTPError
    from paramiko.sftp_attr import SFTPAttributes
    from paramiko.sftp_file import SFTPFile

    attrs = SFTPAttributes()
    attrs.st_mode = 0o600
    t, msg = sftp._request(CMD_OPEN, path, SFTP_FLAG_WRITE | SFTP_FLAG_CREATE | SFTP_FLAG_EXCL, attrs)
    if t != CMD_HANDLE:
        raise SFTPError("Expected handle")
    return SFTPFile(sftp, msg.get_binary(), "wb")


class SshUnreachable(GpuopsError):
    """The box's sshd did not accept us before the deadline (not listening, or auth refused)."""


class HostKeyChanged(GpuopsError):
    """The box presented a host key other than the one pinned for this instance (possible MITM)."""


class BoxGone(GpuopsError):
    """The box stopped answering and its provider says the instance is gone or stopped."""


class ConnectionLost(GpuopsError):
    """The SSH connection dropped while a foreground command ran; its fate on the box is unknown."""


class NoSftp(GpuopsError):
    """The box's sshd refused the SFTP subsystem (an image without sftp-server); exec is used instead."""


KEY_NAME = "id_ed25519"


def ensure_ssh_key(data_dir: Path) -> tuple[Path, str]:
    """gpuops' own client key: ``<data_dir>/ssh/id_ed25519`` (OpenSSH format, mode 0600), made once.

    Returns (private key path, public key line ``ssh-ed25519 AAAA... gpuops``), the line being what
    a provider puts in the box's ``authorized_keys`` at create."""
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
        raise BadInput(
            f"SSH key {path} not found", "name an existing private key, or leave it empty to use gpuops' own"
        )
    try:
        return paramiko.PKey.from_path(str(path))
    except paramiko.PasswordRequiredException:
        raise BadInput(
            f"SSH key {path} is passphrase-protected", "name an unencrypted key, or leave it empty to use gpuops' own"
        ) from None
    except (paramiko.SSHException, ValueError) as e:
        raise BadInput(f"SSH key {path} cannot be read: {e}", "name an OpenSSH private key file") from None


class HostKeyPins:
    """gpuops' own known_hosts: one pinned key per instance.

    OpenSSH format; an entry's ``name`` is ``<label>/<instance id>``, not host:port, because
    providers reuse addresses across boxes. First contact pins the key; a different key later raises
    HostKeyChanged."""

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
    """A rented box over SSH (paramiko).

    ``root`` is absolute once connected (a relative root is taken under the remote ``$HOME``).

    ``key_path``: private key; ``pins``: HostKeyPins; ``pin_name``: the instance's pin entry.
    ``keepalive_s``: SSH keepalive interval (seconds), plus TCP keepalive so a silently dead peer
    is noticed within about ``keepalive_s + 3 x 5`` s. ``reconnect_s``: how long an operation
    that found the connection dropped keeps trying to reconnect before raising SshUnreachable.
    Secrets in ``env`` go through a 0600 file that the command sources and deletes first thing;
    they never appear on a command line.
    """

    def __init__(
        self,
        host: str,
        port: int,
        user: str,
        *,
        key_path: Path,
        pins: HostKeyPins,
        pin_name: str,
        root: str,
        keepalive_s: float = 15.0,
        reconnect_s: float = 120.0,
        io_timeout_s: float = 60.0,
    ):
        self.host, self.port, self.user = host, int(port), user
        self.key_path = Path(key_path)
        self.pins, self.pin_name = pins, _pin_name(pin_name)
        self.root = root
        self.keepalive_s, self.reconnect_s, self.io_timeout_s = keepalive_s, reconnect_s, io_timeout_s
        self._key = _load_key(self.key_path)
        self._t: paramiko.Transport | None = None
        self._sftp: paramiko.SFTPClient | None = None
        # Asked while the box does not answer (before every reconnect try): False when the
        # provider, the one source that knows, says the instance is gone or stopped -- then
        # BoxGone at once instead of waiting out ``reconnect_s``. None: never asked (ready, tests).
        self.still_there: Callable[[], bool] | None = None
        self.connects = 0  # how many times a connection was made (1 + reconnects)
        self.sftp_missing: str | None = None  # why SFTP is not used on this box (None: it is)
        self.skipped: list[str] = []  # what the last get() left out, and why

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

    def connect(self, deadline: float) -> SSHBox:
        """Connect, retrying until ``deadline`` while sshd is not listening or not yet accepting our key.

        Raises HostKeyChanged at once, SshUnreachable at the deadline. Creates ``root`` on the box."""
        import paramiko
        from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_exponential

        self.close()
        refused: list[BaseException] = []  # the box said no to our key: the reason worth naming

        def attempt():
            self._ask_still_there()
            try:
                return self._connect_once(deadline - time.monotonic())
            except (OSError, EOFError, paramiko.SSHException) as e:
                if isinstance(e, paramiko.AuthenticationException):
                    refused[:] = [e]
                raise

        budget = deadline - time.monotonic()
        try:
            retrying = Retrying(
                stop=stop_before_delay(max(0.0, budget)),
                wait=wait_exponential(multiplier=0.25, max=5.0),
                retry=retry_if_exception_type((OSError, EOFError, paramiko.SSHException)),
                reraise=True,
            )
            self._t = retrying(attempt)
        except (OSError, EOFError, paramiko.SSHException) as e:
            # a refusal seen on any attempt names the cause, though the last one (cut by the deadline
            # mid-handshake on a loaded machine) may say only "No existing session"
            cause = refused[0] if refused else e
            kind = "key refused" if refused else type(cause).__name__
            raise SshUnreachable(
                f"ssh {self.user}@{self.host}:{self.port} did not answer within {budget:.0f} s ({kind}: {cause})",
                "raise [up] ready_timeout_seconds, or check the provider's console for the box",
            ) from None
        self.connects += 1
        if not self.root.startswith("/"):
            home = self._exec_capture('printf %s "$HOME"').strip() or "/root"
            self.root = home.rstrip("/") + "/" + self.root
        self._exec_capture(f"mkdir -p {q(self.root)}/.gpuops")
        return self

    def another(self, deadline: float) -> SSHBox:
        """A second connection to the same box (same key, pins and root), connected by ``deadline``.

        For work beside this connection's (an upload while the bootstrap runs): each keeps its own SFTP client."""
        box = SSHBox(
            self.host,
            self.port,
            self.user,
            key_path=self.key_path,
            pins=self.pins,
            pin_name=self.pin_name,
            root=self.root,
            keepalive_s=self.keepalive_s,
            reconnect_s=self.reconnect_s,
            io_timeout_s=self.io_timeout_s,
        )
        box.still_there = self.still_there
        return box.connect(deadline)

    def is_connected(self) -> bool:
        """True while the SSH transport is up (no reconnect is tried)."""
        return self._t is not None and self._t.is_active()

    def _transport(self):
        if self._t is None or not self._t.is_active():
            self._reconnect()
        return self._t

    def _reconnect(self) -> None:
        self._drop()
        self.connect(time.monotonic() + self.reconnect_s)

    def _ask_still_there(self) -> None:
        """Raise BoxGone when ``still_there`` says the instance is gone (not asked without one)."""
        if self.still_there is not None and not self.still_there():
            raise BoxGone(
                f"ssh {self.user}@{self.host}:{self.port} stopped answering and its provider shows the instance gone",
                "nothing to do: the box is gone; its rental is booked to its last proof of life",
            )

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
        """The SFTP client. Raises NoSftp when the box's sshd has no SFTP subsystem (asked once)."""
        if self.sftp_missing is not None:
            raise NoSftp(self.sftp_missing)
        if self._sftp is None or self._t is None or not self._t.is_active():
            t = self._transport()
            import paramiko

            try:
                self._sftp = paramiko.SFTPClient.from_transport(
                    t, window_size=SFTP_WINDOW_BYTES, max_packet_size=SFTP_PACKET_BYTES
                )
            except paramiko.SSHException as e:
                if not t.is_active():
                    raise
                # The connection is fine; the server refused the subsystem.
                self.sftp_missing = f"{self.host}:{self.port} has no SFTP subsystem ({e}); copying over exec (cat, tar)"
                raise NoSftp(self.sftp_missing) from None
            channel = self._sftp.get_channel() if self._sftp is not None else None
            assert channel is not None  # paramiko's from_transport opened it (it raises when it cannot)
            channel.settimeout(self.io_timeout_s)
        return self._sftp

    def _exec_io(
        self, command: str, *, stdin=None, timeout: float | None = None, stdout=None
    ) -> tuple[int, bytes, bytes]:
        """Run ``command`` on a fresh exec channel (no shell of ours around it).

        ``stdin``: bytes, or a callable given a writer (``write(bytes)``) that streams them;
        ``stdout``: a callable given the channel's reader (``read(n)``) that consumes the output,
        else it is collected. Returns (exit status, stdout bytes, stderr bytes). Raises
        ConnectionLost when it drops."""
        t = self._transport()
        chan = t.open_session(timeout=30)
        try:
            chan.settimeout(timeout or self.io_timeout_s)
            chan.exec_command(command)
            if stdin is not None:
                if callable(stdin):
                    stdin(_ChannelWriter(chan))
                else:
                    chan.sendall(stdin)
            chan.shutdown_write()
            out = b""
            if stdout is not None:
                stdout(chan.makefile("rb"))
            else:
                out = chan.makefile("rb").read()
            err = chan.makefile_stderr("rb").read()
            rc = chan.recv_exit_status()
        except OSError as e:
            if not t.is_active():
                raise ConnectionLost(
                    f"connection to {self.host}:{self.port} dropped during a copy ({e})",
                    "run it again; the copy is idempotent",
                ) from None
            raise
        finally:
            chan.close()
        return rc, out, err

    def _exec_ok(self, command: str, what: str, **kw) -> bytes:
        rc, out, err = self._exec_io(command, **kw)
        if rc != 0:
            first = (err.decode("utf-8", "replace").strip().splitlines() or [f"exit {rc}"])[0]
            raise GpuopsError(
                f"{what} on {self.host}:{self.port} failed over exec (the box has no SFTP): {first[:200]}",
                "install openssh-sftp-server (or tar) in the image",
            )
        return out

    def _retrying(self, fn):
        """Run an idempotent operation; on a dropped connection reconnect once and run it again."""
        import paramiko

        try:
            return fn()
        except (EOFError, paramiko.SSHException, OSError) as e:
            if isinstance(e, (FileNotFoundError, PermissionError)) or (
                self._t is not None and self._t.is_active() and not _is_timeout(e)
            ):
                raise
            self._reconnect()
            return fn()

    def _exec_capture(self, command: str, timeout: float = 30.0) -> str:
        assert self._t is not None  # called once connected (connect, then _reconnect)
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
            f = open_private(self.sftp(), path)  # created 0600 (no window at 0644), O_EXCL
            try:
                f.write(body)
            finally:
                f.close()

        try:
            self._retrying(write)
        except NoSftp:
            self._exec_ok(f"umask 077 && cat > {q(path)}", "writing the env file", stdin=body)
        return f". {q(path)} && rm -f {q(path)} && "

    # -- Box ------------------------------------------------------------------------------------
    def run(self, command, *, timeout, env=None, on_line=None):

        prefix = self._env_prefix(env)
        inner = f"echo $$ && cd {q(self.root)} && {prefix}exec bash -c {q(command)} 2>&1"  # one ordered stream
        t = self._transport()
        chan = t.open_session(timeout=30)
        chan.set_combine_stderr(True)
        chan.settimeout(0.5)
        chan.exec_command(f"exec bash -c {q(inner)}")
        deadline = time.monotonic() + timeout
        pid = None

        def emit(line: str) -> None:
            nonlocal pid
            if pid is None:
                pid = line.strip()
            elif on_line:
                on_line(line.rstrip("\r"))

        lines = OutputLines(emit)  # whole characters; a line without end in pieces

        try:
            while True:
                if time.monotonic() > deadline:
                    self._kill_group(pid)
                    pid = None
                    raise TimeoutError(f"command ran past {timeout:.0f} s")
                try:
                    data = chan.recv(65536)
                except TimeoutError:
                    if not t.is_active():
                        raise ConnectionLost(
                            f"connection to {self.host}:{self.port} dropped while a command ran",
                            "long work belongs in run_detached; re-attach with `gpuops logs`",
                        ) from None
                    continue
                if not data:
                    break
                lines.feed(data)
            lines.close()
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
                    raise ConnectionLost(
                        f"connection to {self.host}:{self.port} dropped while a command ran",
                        "long work belongs in run_detached; re-attach with `gpuops logs`",
                    )
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
            self._exec_capture(
                f"cd {q(self.root)} && {prefix}(setsid nohup bash -c {q(command)} >/dev/null 2>&1 </dev/null &)"
            )
        except (EOFError, OSError, paramiko.SSHException) as e:
            raise ConnectionLost(
                f"connection to {self.host}:{self.port} dropped while starting a detached command ({e})",
                "it may have started: look with `gpuops logs SESSION`",
            ) from None

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

        try:
            self._retrying(copy)
        except NoSftp:
            self._put_exec(local, dest)

    def _put_exec(self, local: Path, dest: str) -> None:
        """put() over exec: ``cat >`` for a file, a tar stream into ``tar -x`` for a directory.

        A file goes to a temp name, then is renamed; a directory's tar stream leaves out __pycache__
        and does not keep the owner."""
        if local.is_dir():
            import tarfile

            def strip(ti):
                if "__pycache__" in ti.name.split("/"):
                    return None
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                return ti

            def send(w) -> None:
                with tarfile.open(fileobj=w, mode="w|") as tar:
                    for child in sorted(local.iterdir()):
                        tar.add(str(child), arcname=child.name, filter=strip)

            self._exec_ok(
                f"mkdir -p {q(dest)} && tar -x -o -f - -C {q(dest)}", f"copying {local}", stdin=send, timeout=3600
            )
            return
        parent = dest.rsplit("/", 1)[0] or "/"
        tmp = dest + ".gpuops-part"
        mode = os.stat(local).st_mode & 0o777

        def send_file(w) -> None:
            with open(local, "rb") as f:
                while chunk := f.read(1 << 20):
                    w.write(chunk)

        self._exec_ok(
            f"mkdir -p {q(parent)} && cat > {q(tmp)} && chmod {mode:o} {q(tmp)} && mv -f {q(tmp)} {q(dest)}",
            f"copying {local}",
            stdin=send_file,
            timeout=3600,
        )

    @staticmethod
    def _put_file(sftp, src: Path, dest: str) -> None:
        tmp = dest + ".gpuops-part"
        sftp.put(str(src), tmp)
        sftp.chmod(tmp, os.stat(src).st_mode & 0o777)
        sftp.posix_rename(tmp, dest)

    def _mkdirs(self, path: str) -> None:
        """Make ``path`` and its missing parents. One round trip when it is there (a warm box's every put)."""
        sftp = self.sftp()
        try:
            sftp.stat(path)
            return
        except FileNotFoundError:
            pass
        parts, cur = [p for p in path.split("/") if p], ""
        for p in parts:
            cur += "/" + p
            try:
                sftp.stat(cur)
            except FileNotFoundError:
                sftp.mkdir(cur)

    def get(self, remote, local, max_bytes: int = GET_MAX_BYTES):
        """Copy ``remote`` (file or directory) into ``local`` by the copy-back rules (module doc).

        False when it does not exist. Raises UnsafeCopy past ``max_bytes`` / ``GET_MAX_FILES`` (what
        was copied stays); ``self.skipped`` lists what was refused."""
        import stat as st

        src = self._abs(remote)
        local = Path(local)
        budget = _CopyBudget(max_bytes, GET_MAX_FILES)

        def fetch() -> bool:
            sftp = self.sftp()
            try:
                attr = sftp.stat(src)
            except FileNotFoundError:
                return False
            local.parent.mkdir(parents=True, exist_ok=True)
            if st.S_ISDIR(attr.st_mode or 0):
                _local_dir(local.parent, [local.name])
                self._get_dir(sftp, src, local, [], budget, src)
            else:
                self._get_file(sftp, src, local.parent, [local.name], attr, budget)
            return True

        try:
            return self._retrying(fetch)
        except NoSftp:
            return self._get_exec(src, local, budget)
        finally:
            self.skipped = budget.skipped

    @staticmethod
    def _get_file(sftp, path: str, root: Path, parts: list[str], attr, budget: _CopyBudget) -> None:
        """Copy one box file of ``attr.st_size`` bytes (as listed) to ``root/parts...`` by ``sftp_read_pipelined``.

        Each piece is charged to ``budget`` before it is written (UnsafeCopy past it)."""
        size = int(attr.st_size or 0)
        budget.file(size)

        with _local_file(root, parts) as f, sftp.open(path, "rb") as remote:

            def write(chunk: bytes) -> None:
                budget.charge(len(chunk))
                f.write(chunk)

            sftp_read_pipelined(sftp, remote.handle, 0, size, write)

    def _get_dir(self, sftp, src: str, local: Path, parts: list[str], budget: _CopyBudget, top: str) -> None:
        import posixpath
        import stat as st

        if len(parts) > GET_MAX_DEPTH:
            budget.skipped.append("/".join(parts) + " (too deep)")
            return
        for a in sftp.listdir_attr(src):
            name = a.filename
            if name in (".", ".."):
                continue
            rel = parts + [name]
            if not safe_name(name):
                budget.skipped.append(f"{name!r} (not a plain name)")
                continue
            path = src + "/" + name
            mode = a.st_mode or 0
            if st.S_ISLNK(mode):
                try:
                    target = posixpath.normpath(posixpath.join(src, sftp.readlink(path) or ""))
                    tattr = sftp.stat(target)
                except OSError:
                    budget.skipped.append("/".join(rel) + " (dangling symlink)")
                    continue
                if not target.startswith(top.rstrip("/") + "/") or not st.S_ISREG(tattr.st_mode or 0):
                    budget.skipped.append("/".join(rel) + " (symlink leaving the results)")
                    continue
                self._get_file(sftp, target, local, rel, tattr, budget)
            elif st.S_ISDIR(mode):
                _local_dir(local, rel)
                self._get_dir(sftp, path, local, rel, budget, top)
            elif st.S_ISREG(mode):
                self._get_file(sftp, path, local, rel, a, budget)
            else:
                budget.skipped.append("/".join(rel) + " (not a file)")

    def _get_exec(self, src: str, local: Path, budget: _CopyBudget) -> bool:
        """get() over exec: ``tar -c`` on the box, each member checked here and counted against the caps.

        The checks: plain relative names, files and directories only; links are skipped."""
        import tarfile

        parent, _, base = src.rstrip("/").rpartition("/")
        rc, _, _ = self._exec_io(f"test -e {q(src)}")
        if rc != 0:
            return False
        local.parent.mkdir(parents=True, exist_ok=True)

        def receive(r) -> None:
            with tarfile.open(fileobj=r, mode="r|") as tar:
                for m in tar:
                    parts = m.name.split("/")
                    if (
                        m.name.startswith("/")
                        or not parts
                        or parts[0] != base
                        or not all(safe_name(p) for p in parts[1:])
                    ):
                        budget.skipped.append(f"{m.name!r} (not a plain name)")
                        continue
                    rel = parts[1:]
                    if m.isdir():
                        _local_dir(local.parent, [local.name] + rel)
                    elif m.isreg():
                        budget.file(m.size)
                        f_in = tar.extractfile(m)
                        assert f_in is not None  # a regular member (isreg above)
                        with _local_file(local.parent, [local.name] + rel) as f_out:
                            while chunk := f_in.read(1 << 20):
                                budget.charge(len(chunk))
                                f_out.write(chunk)
                    else:
                        budget.skipped.append("/".join(rel) + " (link or special file)")

        self._exec_ok(
            f"tar -c -f - -C {q(parent or '/')} -- {q(base)}", f"copying {src} back", stdout=receive, timeout=3600
        )
        return True

    def read_file(self, remote, offset=0, limit=None):
        path = self._abs(remote)

        def read():
            try:
                f = self.sftp().open(path, "rb")
            except FileNotFoundError:
                return None
            try:
                f.seek(offset)
                return f.read() if limit is None else f.read(limit)
            finally:
                f.close()

        try:
            return self._retrying(read)
        except NoSftp:
            head = f" | head -c {int(limit)}" if limit is not None else ""
            rc, out, _ = self._exec_io(f"test -f {q(path)} || exit 3; tail -c +{int(offset) + 1} -- {q(path)}{head}")
            return None if rc == 3 else out

    def read_into(self, remote, offset, sink):
        path = self._abs(remote)

        def open_at():
            try:
                f = self.sftp().open(path, "rb")
            except FileNotFoundError:
                return None
            return f, max(0, (f.stat().st_size or 0) - offset)

        try:
            got = self._retrying(open_at)
        except NoSftp:
            return self._read_into_exec(remote, offset, sink)
        if got is None:
            return False
        f, left = got
        try:
            sftp_read_pipelined(self.sftp(), f.handle, offset, offset + left, sink)
        finally:
            f.close()
        return True

    def _read_into_exec(self, remote, offset, sink) -> bool:
        """``read_into`` on a box without SFTP: ``read_file`` (exec, ``tail -c``) piece by piece."""
        first = self.read_file(remote, offset, READ_INTO_BYTES)
        if first is None:
            return False
        chunk = first
        while chunk:
            sink(chunk)
            offset += len(chunk)
            if len(chunk) < READ_INTO_BYTES:
                break
            chunk = self.read_file(remote, offset, READ_INTO_BYTES) or b""
        return True

    def close(self):
        self._drop()


# One SFTP read's size, bytes: OpenSSH's sftp-server answers reads of up to 255 KiB
# (SFTP_MAX_READ_LENGTH); a server that answers less is asked again for the rest, and later reads
# are sized to what it answered.
SFTP_READ_BYTES = 255 * 1024
# SFTP reads in flight at once in ``sftp_read_pipelined`` (4 MiB at 255 KiB): the link stays full,
# memory stays flat.
SFTP_READS_IN_FLIGHT = 16
# The SFTP channel's window and the largest SSH packet it takes, bytes (paramiko's defaults: 2 MiB
# and 32 KiB). paramiko's per-packet work in Python is what bounds a transfer on a fast link: a
# 255 KiB read comes in one 256 KiB packet instead of eight.
SFTP_WINDOW_BYTES = 8 << 20
SFTP_PACKET_BYTES = 256 << 10


class _Replies:
    """The replies to ``sftp_read_pipelined``'s reads, by request number (paramiko's async-response hook)."""

    def __init__(self) -> None:
        self.got: dict[int, tuple[int, object]] = {}

    def _async_response(self, t: int, msg, num: int) -> None:
        self.got[num] = (t, msg)


def sftp_read_pipelined(sftp, handle: bytes, start: int, end: int, sink: Callable[[bytes], None]) -> int:
    """Hand bytes ``start``..``end`` of the open SFTP file ``handle`` to ``sink`` in order; returns the bytes handed on.

    ``SFTP_READS_IN_FLIGHT`` reads of ``SFTP_READ_BYTES`` are kept outstanding (one transfer at the
    link's rate, at most about 4 MiB held). Not paramiko's ``prefetch``: its reader marks the
    prefetch done whenever the replies catch up with the requests its own thread is still sending
    (a race a loaded machine wins), then reads the rest one round trip per 32 KiB while every
    prefetched reply still arrives and is kept in memory (measured: 1.9 MB/s and 100 MB held for
    a 100 MB log). A short reply is asked again for its rest; the file ending early (EOF) ends the
    transfer there. ``sink`` may raise to stop it (the exception propagates; replies still in flight
    are dropped when the file is closed)."""
    from collections import deque

    from paramiko.sftp import CMD_DATA, CMD_READ, CMD_STATUS, SFTPError, int64

    replies, asked = _Replies(), deque[tuple[int, int, int]]()
    piece, nxt, done = SFTP_READ_BYTES, start, 0

    def ask(at: int, n: int, first: bool = False) -> None:
        num = sftp._async_request(replies, CMD_READ, handle, int64(at), int(n))
        (asked.appendleft if first else asked.append)((num, at, n))

    while asked or nxt < end:
        while len(asked) < SFTP_READS_IN_FLIGHT and nxt < end:
            n = min(piece, end - nxt)
            ask(nxt, n)
            nxt += n
        num, at, n = asked.popleft()
        while num not in replies.got:
            sftp._read_response()
        t, msg = replies.got.pop(num)
        if t == CMD_STATUS:
            try:
                sftp._convert_status(msg)
            except EOFError:  # the file is shorter than it was: what it holds is home
                return done
        elif t != CMD_DATA:
            raise SFTPError(f"expected data, got SFTP reply type {t}")
        data = msg.get_string()  # type: ignore[attr-defined]  # a paramiko Message
        if not data:
            return done
        sink(data)
        done += len(data)
        if len(data) < n:  # the server answers less per read: the rest of this piece first, then smaller reads
            piece = min(piece, len(data))
            ask(at + len(data), n - len(data), first=True)
    return done


class _ChannelWriter:
    """``write(bytes)`` onto a paramiko channel's stdin (tarfile's stream mode needs only this)."""

    def __init__(self, chan):
        self.chan = chan

    def write(self, data: bytes) -> int:
        self.chan.sendall(data)
        return len(data)


def _is_timeout(e: BaseException) -> bool:
    import socket

    return isinstance(e, (socket.timeout, TimeoutError))
