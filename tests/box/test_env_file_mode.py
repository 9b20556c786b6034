"""The secrets env file on an SSH box is created 0600 by the SFTP open itself (not
created 0644 and then chmodded), exclusively (an existing or planted file is refused)."""

from __future__ import annotations

import stat

import pytest


def test_env_file_is_created_0600_by_the_open_request(sshd, make_box, monkeypatch):
    from paramiko.sftp import CMD_OPEN, SFTP_FLAG_CREATE, SFTP_FLAG_EXCL

    box = make_box(sshd)
    sftp = box.sftp()
    opened = []
    real = sftp._request

    def spy(t, *args):
        if t == CMD_OPEN:
            opened.append(args)
        return real(t, *args)

    monkeypatch.setattr(sftp, "_request", spy)
    prefix = box._env_prefix({"HF_TOKEN": "hf_0600_from_the_first_byte"})
    path = prefix.split()[1]
    ((name, flags, attrs),) = opened
    assert name == path and attrs.st_mode == 0o600 and flags & SFTP_FLAG_CREATE and flags & SFTP_FLAG_EXCL
    assert stat.S_IMODE(sftp.stat(path).st_mode) == 0o600
    from gpuops.box.ssh import open_private

    with pytest.raises(IOError):  # EXCL: never writes into a file that is already there
        open_private(sftp, path)
    box.run(f"rm -f {path}", timeout=10)
