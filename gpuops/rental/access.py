"""`gpuops ssh SESSION [-L LOCAL:REMOTE] [-- CMD...]` and `gpuops exec SESSION CMD...`: into a live box.

Where a box answers is booked by `up`'s ready stage (the ``ready`` event's ``host``, ``port``,
``user``, ``root``); the box is reached only while the provider answers the row's instance id with
the row's label and a running status, and only by the user who rented it under a key held here.

``ssh`` runs the system OpenSSH client (a real terminal, its own port forwards) with an argument
list, never a shell string: gpuops' key (or ``[up] ssh_key``), no user config (``-F none``), and the
box's pinned host key only (a one-line known_hosts file written for this call from gpuops' own pins,
``StrictHostKeyChecking=yes``). ``exec`` runs over paramiko (``SSHBox.run``) and streams the output.
Either way CMD is an argument list, each argument quoted for the box's shell (``shlex.join``), run in
the box's root; a shell pipeline is ``-- bash -c '...'``. ``exec`` gives the command the job's own
variables (``GPUOPS_SESSION``, ``GPUOPS_WORKDIR``, ...: ``gpuops.agent.jobenv.job_env``, the one
function `up`'s job gets them from). While either is open, a second connection
holds an activity lease on the box (``gpuops.agent.agentctl.hold_activity``), so the agent counts it
as an SSH session and the idle layer does not end the box; the TTL and the money limits still do.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from gpuops.config import Settings
    from ledger.books import Books

CONNECT_SECONDS = 60.0  # a running box answers fast; this only covers a slow network
# OpenSSH client keepalive: a box that stops answering (destroyed at its TTL) ends the client within
# about SERVER_ALIVE_S x SERVER_ALIVE_COUNT seconds (ssh_config(5) ServerAliveInterval / CountMax).
SERVER_ALIVE_S = 15
SERVER_ALIVE_COUNT = 3
SSH_CLIENT = "ssh"  # the OpenSSH client on PATH


@dataclass
class Target:
    """A live box of ours: the row, its instance and where its sshd answers (None on a local box)."""

    session: str
    label: str
    instance_id: str
    root: str
    host: str | None
    port: int | None
    user: str | None
    ttl_left_s: float  # seconds until the row's max_hours runs out (what an exec may wait)
    instance: Any  # gpuops.providers.base.Instance, as the provider answered


def target(settings: Settings, ledger: Books, ref: str, provider=None) -> Target:
    """The live box of session ``ref`` (id or unique prefix), or BadInput naming the fix.

    Refused: a closed row, a row another user rented or under an account held elsewhere, an
    instance the provider does not answer with the row's label, one not running, a row whose `up`
    booked no endpoint. ``provider``: the Provider to ask (default: the row's, from settings)."""
    from gpuops.ownership import OTHER, account_of, is_mine, standing
    from gpuops.providers.base import InstanceStatus
    from gpuops.rental.sessions import endpoint, resolve_session
    from onbox.vocabulary import RowStatus

    row = resolve_session(ledger, ref)
    if row.status == RowStatus.CLOSED:
        raise BadInput(
            f"session {row.id} has ended ({row.end_reason})",
            "`gpuops ps` lists live boxes; `gpuops up --interactive` rents one",
        )
    me = settings.owner()
    if not is_mine(row, me):
        raise BadInput(f"session {row.id} was rented by {row.owner}, not {me}", f"ask {row.owner} to run it")
    if provider is None:
        from gpuops.providers import get_provider

        provider = get_provider(row.provider, settings)
    if standing(row, account_of(provider)) == OTHER:
        raise BadInput(
            f"session {row.id} was rented under {row.provider} account {row.account}; this machine holds no key for it",
            f"run it where the {row.provider} key of account {row.account} is configured",
        )
    if not row.instance_id:
        raise BadInput(f"session {row.id} has no instance yet", "wait for `gpuops up` to reach its ready stage")
    inst = provider.get(row.instance_id)
    if inst is None or inst.status != InstanceStatus.RUNNING or (inst.label or "") != row.label:
        what = "gone" if inst is None else (inst.status.value if inst.label == row.label else "not labelled ours")
        raise BadInput(f"session {row.id}'s instance {row.instance_id} is {what}", "`gpuops ps` lists live boxes")
    where = endpoint(ledger, row.id)
    if "root" not in where:
        raise BadInput(f"session {row.id} booked no ready endpoint", "wait for `gpuops up` to reach its ready stage")
    ttl_end = (
        float(row.created_at if row.instance_created_at is None else row.instance_created_at)
        + float(row.max_hours or 0.0) * 3600.0
    )
    port = where.get("port")
    return Target(
        session=row.id,
        label=row.label,
        instance_id=row.instance_id,
        root=str(where["root"]),
        host=where.get("host"),
        port=int(port) if port is not None else None,
        user=where.get("user"),
        ttl_left_s=max(0.0, ttl_end - time.time()),
        instance=inst,
    )


def open_target_box(settings: Settings, t: Target):
    """A connected Box on ``t`` (SSHBox with the host key pinned for the instance, or the LocalBox)."""
    from gpuops.box.remote import open_box

    inst = t.instance
    if t.host is not None and getattr(inst, "ssh", None) is not None:  # the booked endpoint, not a newer one
        from dataclasses import replace

        from gpuops.providers.base import SshEndpoint

        inst = replace(inst, ssh=SshEndpoint(t.host, int(t.port or 22), t.user or "root"))
    return open_box(
        inst,
        data_dir=settings.data_path(),
        deadline=time.monotonic() + CONNECT_SECONDS,
        ssh_key=settings.up.ssh_key,
        root=t.root,
        reconnect_s=0.0,
    )


def remote_command(root: str, command: list[str]) -> str:
    """``cd ROOT && exec CMD...`` with every argument quoted for the box's shell (an empty ``command``: a login shell)."""
    body = shlex.join(command) if command else '"${SHELL:-bash}" -l'
    return f"cd {shlex.quote(root)} && exec {body}"


def parse_forward(spec: str) -> tuple[int, int]:
    """``LOCAL:REMOTE`` (two ports, 1-65535) -> (local, remote); BadInput otherwise.

    The local end listens on 127.0.0.1 only; the remote end is the box's 127.0.0.1."""
    parts = spec.split(":")
    try:
        local, remote = (int(p) for p in parts) if len(parts) == 2 else (0, 0)
    except ValueError:
        local = remote = 0
    if not (0 < local < 65536 and 0 < remote < 65536):
        raise BadInput(
            f"-L {spec!r} is not LOCAL:REMOTE", "give two ports, e.g. -L 8000:8000 (localhost:8000 -> the box's 8000)"
        )
    return local, remote


def ssh_argv(
    t: Target,
    key_path: Path,
    known_hosts: Path,
    command: list[str],
    forwards: list[tuple[int, int]],
    *,
    terminal: bool = False,
) -> list[str]:
    """The OpenSSH client's argument list for ``t`` (see the module doc). No shell ever parses it here.

    A shell always gets a terminal on the box (``-t``); a CMD gets one when ``terminal`` (this
    process's stdin and stdout are a terminal: `gpuops ssh S -- htop` works, `gpuops ssh S -- cat f
    > f.copy` stays byte for byte)."""
    argv = [
        SSH_CLIENT,
        "-F",
        "none",
        "-i",
        str(key_path),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        f"HostKeyAlias={PIN_ALIAS}",
        "-o",
        f"ServerAliveInterval={SERVER_ALIVE_S}",
        "-o",
        f"ServerAliveCountMax={SERVER_ALIVE_COUNT}",
        "-o",
        "ExitOnForwardFailure=yes",
        "-p",
        str(t.port),
        "-l",
        str(t.user),
    ]
    for local, remote in forwards:
        argv += ["-L", f"127.0.0.1:{local}:127.0.0.1:{remote}"]
    if forwards and not command:
        argv += ["-N"]  # a forward alone: no shell, open until Ctrl-C
    elif not command or terminal:
        argv += ["-t"]  # a shell, or a command typed at a terminal: a terminal on the box
    argv += [str(t.host)]
    if command or not forwards:
        argv += [remote_command(t.root, command)]
    return argv


PIN_ALIAS = "gpuops-box"  # the HostKeyAlias of the one-line known_hosts written per call


def _known_hosts_for(settings: Settings, box) -> Path:
    """A 0600 known_hosts file holding only the key pinned for ``box``'s instance (under ``PIN_ALIAS``)."""
    import os

    import paramiko

    hk = paramiko.HostKeys()
    hk.load(str(box.pins.path))
    known = hk.lookup(box.pin_name)
    if not known:
        raise BadInput(
            f"no host key is pinned for {box.pin_name}", "run `gpuops ssh` again: the first connection pins it"
        )
    d = settings.data_path() / "ssh"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"known_hosts.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        for key in known.values():
            f.write(f"{PIN_ALIAS} {key.get_name()} {key.get_base64()}\n")
    return path


def ssh(
    settings: Settings,
    ledger: Books,
    ref: str,
    command: list[str],
    forwards: list[str],
    *,
    provider=None,
    run: Callable[[list[str], float], int] | None = None,
) -> int:
    """`gpuops ssh`: the OpenSSH client on the box of ``ref``, holding an activity lease; its exit code.

    ``run(argv, timeout_s)``: how the client is run (default: a child with this terminal, ended at
    the box's TTL + a minute). BadInput before anything is opened for a bad ``-L`` or a box not ours/not live."""
    from gpuops.agent.agentctl import hold_activity
    from gpuops.box.ssh import ensure_ssh_key

    ports = [parse_forward(f) for f in forwards]
    t = target(settings, ledger, ref, provider)
    if t.host is None:
        raise BadInput(
            f"session {t.session} is a local box (the directory {t.root}), not reached over SSH",
            f"cd {shlex.quote(t.root)}, or `gpuops exec {t.session} CMD...`",
        )
    key = Path(settings.up.ssh_key).expanduser() if settings.up.ssh_key else ensure_ssh_key(settings.data_path())[0]
    box = open_target_box(settings, t)  # verifies (or pins) the host key with gpuops' own pins
    known = _known_hosts_for(settings, box)
    try:
        with hold_activity(box):
            argv = ssh_argv(t, key, known, command, ports, terminal=_at_a_terminal())
            return (run or _run_client)(argv, t.ttl_left_s + 60.0)
    finally:
        known.unlink(missing_ok=True)
        box.close()


def _at_a_terminal() -> bool:
    """Whether this process's stdin and stdout are both a terminal."""
    import sys

    try:
        return sys.stdin is not None and sys.stdout is not None and sys.stdin.isatty() and sys.stdout.isatty()
    except (OSError, ValueError):  # a closed stream
        return False


def _run_client(argv: list[str], timeout_s: float) -> int:
    import subprocess

    proc = subprocess.Popen(argv)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:  # the box's TTL is past: it is gone, and so is this session
        proc.terminate()
        return proc.wait(timeout=10)
    except KeyboardInterrupt:  # Ctrl-C reached the client too (same terminal); let it end
        try:
            return proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def exec_(
    settings: Settings,
    ledger: Books,
    ref: str,
    command: list[str],
    on_line: Callable[[str], None],
    *,
    provider=None,
) -> int:
    """`gpuops exec`: run ``command`` (an argument list) in the box's root, each output line to ``on_line``.

    Returns its exit code; holds an activity lease meanwhile; waits at most until the box's TTL."""
    from gpuops.agent.agentctl import hold_activity

    if not command:
        raise BadInput("exec needs a command", "e.g. `gpuops exec SESSION -- nvidia-smi`")
    t = target(settings, ledger, ref, provider)
    env = exec_env(settings, ledger, t)
    box = open_target_box(settings, t)
    try:
        with hold_activity(box):
            return box.run(shlex.join(command), timeout=max(1.0, t.ttl_left_s), env=env, on_line=on_line)
    finally:
        box.close()


def exec_env(settings: Settings, ledger: Books, t: Target) -> dict[str, str]:
    """What `exec` gives its command: the job's own variables (``jobenv.job_env``), from the books.

    ``GPUOPS_WORKDIR`` when the session's ``workdir`` bootstrap step is booked done; a run's
    variables from the row's run id and attempt. The user's ``--env`` values are not among them:
    they live only in `up`'s memory and the job's env file."""
    from gpuops.agent.bootstrap_config import cache_dir_for
    from gpuops.agent.jobenv import job_env, resume_dir
    from gpuops.rental.workdir import WORKDIR

    row = ledger.get(t.session)
    volume = (getattr(t.instance, "extra", None) or {}).get("volume_path")
    uploaded = any(st.name == "workdir" and st.status == "done" for st in ledger.steps(t.session))
    run_id = getattr(row, "run_id", None) if row is not None else None
    return job_env(
        session=t.session,
        experiment=str(getattr(row, "experiment", "") or ""),
        root=t.root,
        workdir=WORKDIR if uploaded else None,
        cache_dir=cache_dir_for(settings, volume),
        run=(run_id, int(row.attempt or 1), resume_dir(t.root, settings.job.results, volume, run_id))
        if row is not None and run_id
        else None,
    )
