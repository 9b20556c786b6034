"""The stand-in Hugging Face hub (tests/support/hfhub.py) with what a weights download meets in the
field: revisions (``main`` or the repo's commit sha; any other is 404 ``X-Error-Code:
RevisionNotFound``, as huggingface_hub 2.4.0's ``hf_raise_for_status`` maps it), a bandwidth cap
per connection (``rate_bytes_s``: each file body is sent in slices paced to that rate, as one TCP
stream from a far CDN gets), a link shared by every connection (``link_bytes_s``: all bodies
together are paced to it, the box's own network; ``link_sent`` counts what went through), and dropped connections
(``drop_after``: the next ``drop_times`` GETs of a file whose path ends with ``drop_path`` stop
after that many body bytes and the socket is closed mid-body, as a reset download does). ``served_bytes`` counts body bytes sent per
path, so a test can tell a resumed download from a restart.
"""

from __future__ import annotations

import socket
import threading
import time

from tests.support.hfhub import HubServer


class FaultyHub(HubServer):
    """HubServer with revisions, a rate cap (bytes/s) and dropped downloads."""

    def __init__(self, rate_bytes_s: float | None = None, link_bytes_s: float | None = None) -> None:
        super().__init__()
        self.rate_bytes_s = rate_bytes_s
        self.link_bytes_s = link_bytes_s
        self._link = threading.Lock()
        self._link_t0: float | None = None
        self._link_due = 0  # bytes on the link's clock since _link_t0
        self.link_sent = 0
        self.drop_after: int | None = None
        self.drop_times = 0
        self.drop_path = ""
        self.served_bytes: dict[str, int] = {}

    def _handle(self, req, head: bool) -> None:
        from urllib.parse import unquote

        path = unquote(req.path.split("?", 1)[0])
        for rx in (self._RESOLVE, self._INFO):
            m = rx.match(path)
            rev = m.groupdict().get("rev") if m else None
            if m and rev and m["repo"] in self.repos and rev not in ("main", self.sha(m["repo"])):
                self.requests.append(("HEAD" if head else "GET", path, None))
                self._send(req, 404, b'{"error": "Invalid rev id"}', {"X-Error-Code": "RevisionNotFound"}, head)
                return
        req._gpuops_path = path
        super()._handle(req, head)

    def _send(self, req, status: int, body: bytes, headers: dict, head: bool) -> None:  # type: ignore[override]
        big = status in (200, 206) and not head and "/resolve/" in getattr(req, "_gpuops_path", "")
        if not big:
            return HubServer._send(req, status, body, headers, head)
        req.send_response(status)
        for k, v in headers.items():
            req.send_header(k, v)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        limit = len(body)
        if self.drop_after is not None and self.drop_times > 0 and req._gpuops_path.endswith(self.drop_path):
            self.drop_times -= 1
            limit = min(limit, self.drop_after)
        sent, t0, step = 0, time.monotonic(), 64 * 1024
        path = req._gpuops_path
        try:
            while sent < limit:
                chunk = body[sent : min(limit, sent + step)]
                req.wfile.write(chunk)
                sent += len(chunk)
                self.served_bytes[path] = self.served_bytes.get(path, 0) + len(chunk)
                if self.link_bytes_s:
                    self._pace_link(len(chunk))
                if self.rate_bytes_s:
                    ahead = sent / self.rate_bytes_s - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
            if limit < len(body):
                req.wfile.flush()
                req.close_connection = True
                req.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            req.close_connection = True

    def _pace_link(self, n: int) -> None:
        """Hold this connection until the link, shared by all of them, has had time for ``n`` more
        bytes: a virtual clock that starts at the first byte and never banks idle time."""
        with self._link:
            now = time.monotonic()
            if self._link_t0 is None or self._link_t0 + self._link_due / self.link_bytes_s < now:
                self._link_t0, self._link_due = now, 0  # an idle link banks nothing
            self._link_due += n
            self.link_sent += n
            due = self._link_t0 + self._link_due / self.link_bytes_s
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
