"""Ports for test servers that bind later than we pick the number (sshd, PostgreSQL).

``bind(0)`` hands out a port from the kernel's ephemeral range, and so does every other socket a
parallel test opens: a number probed free with ``bind(0)`` can be taken by another xdist worker's
outgoing connection or emulator before sshd binds it (sshd then exits "Cannot bind", or a
connection check reaches the wrong listener). ``reserved_port()`` picks below the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), where no ``bind(0)`` lands, from a block of its
own per xdist worker, and checks the number is free right now (another run on this machine).
The provider emulators listen on one too (gpuops/emulators/base.py ``port_for``, plugged in by tests/emulators): a port ``bind(0)`` gave up
goes to the next ``bind(0)`` while a process of the test that used it may still call it.
"""

from __future__ import annotations

import itertools
import os
import socket

LOWEST = 10_000  # below: well-known and registered services a developer may run


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default range starts here


def _block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    workers = max(8, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), index + 1)
    size = max(16, (_ephemeral_low() - LOWEST) // workers)
    start = LOWEST + index * size
    return range(start, start + size)


_BLOCK = _block()
# Start at a point of the block that depends on the process, so two runs on one machine (two
# checkouts) rarely walk the same numbers; the free check below catches the rest.
_NEXT = itertools.cycle(range(len(_BLOCK)))
for _ in range(os.getpid() % len(_BLOCK)):
    next(_NEXT)


def is_free(port: int) -> bool:
    """True when nothing is bound to 127.0.0.1:``port`` (nor listening on any address)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserved_port() -> int:
    """A TCP port on 127.0.0.1, free now, that no ``bind(0)`` in this run can be handed. Raises
    RuntimeError when the worker's whole block is taken."""
    for _ in range(len(_BLOCK)):
        port = _BLOCK[next(_NEXT)]
        if is_free(port):
            return port
    raise RuntimeError(f"no free port in {_BLOCK.start}-{_BLOCK.stop - 1}")
