"""A child process that ends with the thread that started it (Linux).

For the servers the suite and ``gpuops demo`` start: a SIGKILLed parent runs no ``stop()``, so the
kernel must end its children."""

from __future__ import annotations

import os
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(signum: int) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``signum`` when its starting thread ends.

    Linux ``prctl(PR_SET_PDEATHSIG)``, prctl(2): a server a test run starts
    does not outlive a SIGKILLed pytest. It runs after Popen's ``user=`` switch (a credential
    change clears the setting). A parent that died between fork and prctl is caught by comparing
    ``getppid()`` with the pid recorded before the fork (the child exits at once). The signal
    follows the starting THREAD: start servers from a thread that lives as long as they do (the
    main thread, or one that waits for the server's end, as ``SshServer.start_later`` does)."""
    import ctypes

    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child may no longer read Python's files

    def arm() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)

    return arm
