"""A total deadline and a reply size cap for every HTTP call a provider makes.

gpuops' own RunPod v2 client (``requests.request(..., timeout=30)``) and the SDKs (runpod 1.11.0's
GraphQL helper: ``requests.post(..., timeout=30)`` in ``runpod/api/graphql.py``; vastai 1.9.1:
``VastSession.send(prep, timeout=...)`` in ``vastai/api/client.py``) only set requests'
per-socket-operation timeouts: a server that trickles one byte every few seconds never trips them,
and a 200 MB reply is read whole into memory. Both go through ``requests.adapters.HTTPAdapter.send``,
so that is where the guard sits: inside ``with guard(deadline_s, max_bytes):`` (this thread only;
other threads and code outside the block are untouched) every request is sent with ``stream=True``
and a connect/read timeout no longer than what is left, and its body is read in chunks, stopping
at the deadline or the cap.

Raises ``ProviderError(TIMEOUT)`` when the deadline passes and ``ProviderError(SERVER)`` when a
reply is larger than ``max_bytes`` -- neither is retried by ``retry.py`` past the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from gpuops.providers.provider_errors import ProviderError, ProviderErrorKind

# Defaults for provider calls. 60 s covers the slowest legitimate call we make (a RunPod create,
# ~10-20 s on a busy day); 16 MiB is ~10x the largest reply seen (a Vast offer search with
# `limit` 1000: ~1.5 MB).
DEFAULT_DEADLINE_S = 60.0
DEFAULT_MAX_BYTES = 16 * 2**20
CHUNK_BYTES = 64 * 1024

_STATE = threading.local()
_INSTALLED = False
_LOCK = threading.Lock()


def _install() -> None:
    global _INSTALLED
    with _LOCK:
        if _INSTALLED:
            return
        from requests.adapters import HTTPAdapter

        original = HTTPAdapter.send

        def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
            g = getattr(_STATE, "guard", None)
            if g is None:
                return original(
                    self, request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
                )
            deadline, max_bytes, what = g
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProviderError(
                    ProviderErrorKind.TIMEOUT, f"{what}: no answer within the call's deadline", "retry later"
                )
            connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
            bounded = (min(connect or left, left), min(read or left, left))
            try:
                resp = original(self, request, stream=True, timeout=bounded, verify=verify, cert=cert, proxies=proxies)
            except Exception as e:  # requests' Timeout/ConnectionError: past our deadline it is ours
                if time.monotonic() >= deadline:
                    raise ProviderError(
                        ProviderErrorKind.TIMEOUT, f"{what}: no answer within the call's deadline", "retry later"
                    ) from None
                raise e
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                resp.close()
                raise ProviderError(
                    ProviderErrorKind.SERVER,
                    f"{what}: reply of {int(declared)} bytes is over the {max_bytes}-byte cap",
                    "retry later",
                )
            body = bytearray()
            try:
                while True:
                    if time.monotonic() >= deadline:
                        raise ProviderError(
                            ProviderErrorKind.TIMEOUT,
                            f"{what}: the reply did not finish within the call's deadline",
                            "retry later",
                        )
                    # read1: what has arrived (up to CHUNK_BYTES), so a trickle cannot hold one read past the deadline
                    chunk = resp.raw.read1(CHUNK_BYTES, decode_content=True)
                    if not chunk:
                        break
                    body += chunk
                    if len(body) > max_bytes:
                        raise ProviderError(
                            ProviderErrorKind.SERVER, f"{what}: reply over the {max_bytes}-byte cap", "retry later"
                        )
            except ProviderError:
                resp.close()
                raise
            except Exception:  # a socket timeout mid-body
                resp.close()
                if time.monotonic() >= deadline:
                    raise ProviderError(
                        ProviderErrorKind.TIMEOUT,
                        f"{what}: the reply did not finish within the call's deadline",
                        "retry later",
                    ) from None
                raise
            resp._content = bytes(body)
            resp._content_consumed = True
            return resp

        HTTPAdapter.send = send  # type: ignore[method-assign]  # the guard is installed on the class, once per process
        _INSTALLED = True


@contextmanager
def guard(what: str, deadline_s: float = DEFAULT_DEADLINE_S, max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[None]:
    """One total deadline and a reply-size cap for every HTTP request this thread makes in the block.

    Every HTTP request this thread makes inside the block shares one total deadline (``deadline_s``
    seconds from entry) and reads at most ``max_bytes`` per reply. ``what`` names the call in
    errors. Nested guards keep the outer (earlier) deadline."""
    _install()
    outer = getattr(_STATE, "guard", None)
    deadline = time.monotonic() + deadline_s
    if outer is not None:
        deadline = min(deadline, outer[0])
    _STATE.guard = (deadline, max_bytes, what)
    try:
        yield
    finally:
        _STATE.guard = outer


def current_deadline() -> float | None:
    """The ``time.monotonic()`` deadline of this thread's innermost guard, or None outside one."""
    g = getattr(_STATE, "guard", None)
    return g[0] if g is not None else None
