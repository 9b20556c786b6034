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

A box whose sshd has no SFTP subsystem is served over exec instead (``cat >`` and ``tar`` over the
channel, every path quoted); ``SSHBox.sftp_missing`` then says why. Copy-back (``get``) trusts no
name from the box: a name with ``/``, ``..``, ``.``, NUL or an absolute path is refused, symlinks
are copied only as the file they point to inside the results directory, and the total is capped
(``GET_MAX_BYTES``, ``GET_MAX_FILES``, ``GET_MAX_DEPTH``); ``skipped`` lists what was left out.
"""

from __future__ import annotations

from pathlib import Path

from gpuops.box.local import LocalBox
from gpuops.box.ssh import HostKeyPins, SSHBox, ensure_ssh_key
from gpuops.errors import GpuopsError


def open_box(
    instance,
    *,
    data_dir: Path,
    deadline: float,
    ssh_key: str = "",
    root: str | None = None,
    keepalive_s: float = 15.0,
    reconnect_s: float = 120.0,
) -> LocalBox | SSHBox:
    """The Box for ``instance`` (a providers.base.Instance).

    Local instances (``instance.extra["local_root"]``) get a LocalBox on that directory (hiding
    ``instance.extra["local_hide"]`` from its job, set by the local provider's create). Others
    get an SSHBox on ``instance.ssh``, connected with retries until ``deadline`` (a
    ``time.monotonic()`` value), key ``ssh_key`` (a path; empty: gpuops' own key in
    ``data_dir/ssh``), host key pinned in ``data_dir/known_hosts`` under ``<label>/<id>``; the
    box's root is ``root``, else ``instance.extra["workdir"]``, else ``~/gpuops/<label>``.
    Raises GpuopsError when the instance has no SSH endpoint, SshUnreachable, HostKeyChanged.
    """
    if instance.extra.get("local_root"):  # its job contained when create named what to hide
        return LocalBox(Path(instance.extra["local_root"]), hide=instance.extra.get("local_hide"))
    if instance.ssh is None:
        raise GpuopsError(
            f"instance {instance.id} has no SSH endpoint yet", "wait for the provider to publish its port"
        )
    key_path = Path(ssh_key).expanduser() if ssh_key else ensure_ssh_key(Path(data_dir))[0]
    box = SSHBox(
        instance.ssh.host,
        instance.ssh.port,
        instance.ssh.user or "root",
        key_path=key_path,
        pins=HostKeyPins(Path(data_dir) / "known_hosts"),
        pin_name=f"{instance.label}/{instance.id}",
        root=root or instance.extra.get("workdir") or f"gpuops/{instance.label}",
        keepalive_s=keepalive_s,
        reconnect_s=reconnect_s,
    )
    return box.connect(deadline)
