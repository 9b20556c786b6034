"""The demo's background process: ``python -m gpuops.demo.server HOME DEADLINE``.

Starts the emulated RunPod and Vast.ai (gpuops/emulators/, each with one demo account of
``BALANCE_USD``) on 127.0.0.1 and, where OpenSSH's ``sshd`` and ``ssh-keygen`` are installed, a
real sshd on 127.0.0.1 that every emulated instance answers on (the box: its own home and the
stand-in ``nvidia-smi``, gpuops' demo key authorized), writes ``demo.json`` and serves until
DEADLINE (epoch s) or SIGTERM / SIGINT / SIGHUP; then it ends the box's processes, its sshd and
the emulators, and removes ``demo.json``.

RunPod's pods log in as the user running the demo (a non-root sshd can let in no one else); Vast's
as root, as on Vast, so a Vast box needs the demo run as root (``box_note`` says so).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpuops.demo.demo import BALANCE_USD, RUNPOD_KEY, VAST_KEY, DemoPaths, DemoState, prepare, write_state
from gpuops.emulators.base import EmuInstance
from gpuops.emulators.box_key import BoxKeyRunPod, BoxKeyVast, environ_file

if TYPE_CHECKING:  # sshd is imported where the box starts (_start_box)
    from gpuops.emulators.sshd import SshServer


class DemoRunPod(BoxKeyRunPod):
    """RunPod whose pods' direct SSH logs in as ``ssh_user`` (the demo's sshd runs as that user)."""

    ssh_user = "root"

    def _pod(self, inst: EmuInstance) -> dict:
        pod = super()._pod(inst)
        direct = (pod.get("ssh") or {}).get("direct")
        if direct:
            direct["username"] = self.ssh_user
            direct["command"] = f"ssh {self.ssh_user}@{direct['host']} -p {direct['port']}"
        return pod


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _start_box(paths: DemoPaths) -> tuple[SshServer | None, str]:
    """(the started SshServer, "") or (None, why there is no box)."""
    from gpuops.box.ssh import ensure_ssh_key
    from gpuops.emulators import nvidia_smi
    from gpuops.emulators.sshd import SSH_KEYGEN, SSHD, SshServer

    missing = [p for p in (SSHD, SSH_KEYGEN) if not os.access(p, os.X_OK)]
    if missing:
        return (
            None,
            f"no box: {' and '.join(missing)} not found (install OpenSSH's server: offers, plan and the ledger work without it)",
        )
    bin_dir = paths.box / "bin"
    nvidia_smi.install(bin_dir)
    shutil.rmtree(paths.box / "sshd", ignore_errors=True)  # a host key and config of its own each start
    sshd = SshServer(paths.box / "sshd", extra_path=[bin_dir], home=paths.box_home)
    sshd.authorize(ensure_ssh_key(paths.data)[1])
    sshd.start(timeout=10.0)
    return sshd, ""


def serve(paths: DemoPaths, deadline: float) -> int:
    """Run the demo until ``deadline`` (epoch s) or a signal; returns the exit code."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    prepare(paths)
    emulators: list = []
    sshd = None
    try:
        runpod = DemoRunPod(api_key=RUNPOD_KEY, balance_usd=BALANCE_USD)
        runpod.ssh_user = _user()
        vast = BoxKeyVast(api_key=VAST_KEY, balance_usd=BALANCE_USD)
        for emu in (runpod, vast):
            emulators.append(emu.start())
        sshd, note = _start_box(paths)
        if sshd is not None:
            for emu in emulators:
                emu.market.ssh_endpoint = (sshd.host, sshd.port)
            if os.getuid() != 0:
                note = "Vast.ai boxes log in as root: run the demo as root for them (RunPod's boxes work)"
        paths.environ.write_bytes(environ_file())
        os.chmod(paths.environ, 0o600)
        write_state(
            paths,
            DemoState(
                pid=os.getpid(),
                started_at=time.time(),
                deadline=deadline,
                runpod_url=runpod.url,
                vast_url=vast.url,
                box=f"{sshd.host}:{sshd.port}" if sshd is not None else "",
                box_note=note,
            ),
        )
        print(f"serving until {deadline:.0f}: runpod {runpod.url}, vast {vast.url}, box {note or 'sshd'}", flush=True)
        while not stop.is_set() and time.time() < deadline:
            stop.wait(max(0.0, min(1.0, deadline - time.time())))
        return 0
    finally:
        if sshd is not None:
            sshd.stop()
        from gpuops.emulators.sshd import end_processes_under

        if paths.box_home.is_dir():
            end_processes_under(paths.box_home)
        for emu in emulators:
            emu.stop()
        try:
            if json.loads(paths.state.read_text(encoding="utf-8")).get("pid") == os.getpid():
                paths.state.unlink()  # ours: a demo started after this one keeps its own
        except (OSError, ValueError, AttributeError):
            pass
        print("ended", flush=True)


def main(argv: list[str]) -> int:
    """``HOME DEADLINE``: the demo's folder and its end (epoch s)."""
    home, deadline = Path(argv[0]), float(argv[1])
    return serve(DemoPaths(home), deadline)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
