"""`gpuops logs SESSION [-f]`.

The session's job log, streamed from its box (re-attaching to a running job without touching it), or
the local copy once the box is gone."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpuops.errors import BadInput

CONNECT_SECONDS = 60.0  # a running box answers fast; this only covers a slow network


def local_log_path(settings, session_id: str) -> Path:
    """Where `up` keeps this machine's copy of a session's job log."""
    return settings.data_path() / "logs" / f"{session_id}.log"


def show_logs(settings, session: str, *, follow: bool, write: Callable[[bytes], None]) -> int | None:
    """Write the job log of ``session`` (an id or unique prefix) to ``write`` as raw bytes.

    Open sessions: read from the box, from the start; with ``follow`` keep streaming until the
    job ends (a dropped connection is re-established). Closed sessions: the local copy.
    Returns the job's exit code when known. Raises BadInput for an unknown or ambiguous id, or a
    closed session with no kept log.
    """
    from gpuops.agent.jobio import follow_log
    from gpuops.box.remote import open_box
    from gpuops.providers import get_provider
    from gpuops.providers.base import InstanceStatus
    from gpuops.rental.sessions import open_ledger, resolve_session

    ledger = open_ledger(settings)  # its replay of a spooled close tells ([notify])

    row = resolve_session(ledger, session)
    inst = None
    if row.status != "closed" and row.instance_id:
        inst = get_provider(row.provider, settings).get(row.instance_id)
    if inst is not None and inst.status not in (InstanceStatus.GONE, InstanceStatus.EXITED, InstanceStatus.STOPPED):
        box = open_box(
            inst,
            data_dir=settings.data_path(),
            deadline=time.monotonic() + CONNECT_SECONDS,
            ssh_key=settings.up.ssh_key,
        )
        try:
            _, ended = follow_log(box, write, follow=follow)
        finally:
            box.close()
        return ended.code if ended else None
    path = Path(row.log_path) if row.log_path else local_log_path(settings, row.id)
    if not path.is_file():
        raise BadInput(
            f"session {row.id} has ended and no copy of its log was kept", "logs are kept from `gpuops up` runs only"
        )
    write(path.read_bytes())
    return row.exit_code
