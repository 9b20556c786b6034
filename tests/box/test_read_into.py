"""``SSHBox.read_into`` against a real OpenSSH server: the bulk fetch of the rest of a job log.

Every byte from the offset to the size at the start, in order, whatever the server answers per
read; the file ending early; a sink that stops it. The expected bytes are the file's own on disk.
"""

from __future__ import annotations

import os

import pytest

import gpuops.box.ssh as ssh_mod

# Not a multiple of one read (255 KiB), nor of the reads in flight: the last pieces are short.
SIZE = 5 * 1024 * 1024 + 12345


@pytest.fixture
def remote_file(sshd):
    path = sshd.home / "gpuops" / "s1" / "big.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(SIZE))
    return path


def _read(box, offset: int) -> tuple[bool, bytes, list[int]]:
    got: list[bytes] = []
    ok = box.read_into("big.log", offset, got.append)
    return ok, b"".join(got), [len(c) for c in got]


@pytest.mark.parametrize("offset", [0, 1, 1 << 20, SIZE - 1, SIZE])
def test_every_byte_from_the_offset_in_order(sshd, make_box, remote_file, offset):
    box = make_box(sshd)
    ok, data, pieces = _read(box, offset)
    assert ok
    assert data == remote_file.read_bytes()[offset:]
    assert all(n <= ssh_mod.READ_INTO_BYTES for n in pieces)


def test_a_server_that_answers_less_per_read_is_asked_for_the_rest(sshd, make_box, remote_file, monkeypatch):
    # OpenSSH's sftp-server answers at most 255 KiB per read: asking 1 MiB gets short replies.
    monkeypatch.setattr(ssh_mod, "SFTP_READ_BYTES", 1 << 20)
    box = make_box(sshd)
    ok, data, pieces = _read(box, 3)
    assert ok and data == remote_file.read_bytes()[3:]
    assert max(pieces) < 1 << 20  # the replies were short: the rest was asked again


def test_a_file_shorter_than_asked_ends_the_transfer_at_its_end(sshd, make_box, remote_file):
    box = make_box(sshd)
    sftp = box.sftp()
    f = sftp.open(str(remote_file), "rb")
    got: list[bytes] = []
    try:
        n = ssh_mod.sftp_read_pipelined(sftp, f.handle, 100, SIZE + 10 * (1 << 20), got.append)
    finally:
        f.close()
    assert n == SIZE - 100
    assert b"".join(got) == remote_file.read_bytes()[100:]
    assert box.run("true", timeout=10) == 0  # the connection still answers after the replies in flight


def test_a_sink_that_raises_stops_the_transfer_and_the_box_still_answers(sshd, make_box, remote_file):
    box = make_box(sshd)
    seen: list[int] = []

    class Enough(Exception):
        pass

    def sink(chunk: bytes) -> None:
        seen.append(len(chunk))
        if sum(seen) >= 1 << 20:
            raise Enough

    with pytest.raises(Enough):
        box.read_into("big.log", 0, sink)
    assert sum(seen) < SIZE
    assert box.read_file("big.log", 10, 5) == remote_file.read_bytes()[10:15]


def test_a_missing_file_is_false(sshd, make_box):
    box = make_box(sshd)
    assert box.read_into("no-such.log", 0, lambda _c: None) is False
