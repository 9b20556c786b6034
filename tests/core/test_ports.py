"""tests.support.ports: numbers for servers that bind later (and the emulators') never come from the ephemeral range."""

from __future__ import annotations

import socket

from tests.support import ports


def test_reserved_ports_are_below_the_ephemeral_range_and_free():
    low = ports._ephemeral_low()
    seen = {ports.reserved_port() for _ in range(20)}
    assert len(seen) == 20 and all(ports.LOWEST <= p < low for p in seen)
    with socket.socket() as s:  # a bind(0) never lands in the reserved range
        s.bind(("127.0.0.1", 0))
        assert s.getsockname()[1] >= low


def test_a_taken_port_is_skipped():
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.reserved_port()))
        taken = s.getsockname()[1]
        assert not ports.is_free(taken)
        assert all(ports.reserved_port() != taken for _ in range(len(ports._BLOCK) - 1))


def test_an_emulator_listens_on_a_reserved_port():
    """Not on one a ``bind(0)`` gave up a moment ago, where another test's process may still send."""
    from tests.emulators import VastEmulator

    emu = VastEmulator().start()
    try:
        port = int(emu.url.rsplit(":", 1)[1])
        assert port in ports._BLOCK and port < ports._ephemeral_low(), emu.url
    finally:
        emu.stop()
