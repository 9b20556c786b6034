"""Real notification receivers on 127.0.0.1 for the notify tests: apprise's JSON webhook posts and SMTP mail.

``JsonReceiver``: an HTTP server that records every POST (path, JSON body); ``mode`` ``ok``
answers 200, ``fail`` 500, ``hang`` holds the request unanswered until the receiver stops.
``SmtpReceiver``: aiosmtpd's server, recording every message. Both are context managers that
end what they start."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonReceiver:
    """Records apprise's ``json://`` posts; ``url(path)`` is the apprise URL that reaches it."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.posts: list[dict[str, Any]] = []
        self.gets: list[str] = []
        self.arrived = threading.Condition()
        self._release = threading.Event()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with rec.arrived:
                    rec.posts.append(
                        {
                            "path": self.path,
                            "body": json.loads(body or b"{}"),
                            "at": time.monotonic(),
                            "wall": time.time(),
                        }
                    )
                    rec.arrived.notify_all()
                if rec.mode == "hang":
                    rec._release.wait(60)
                    return
                self.send_response(500 if rec.mode == "fail" else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802  a dead-man ping
                with rec.arrived:
                    rec.gets.append(self.path)
                    rec.arrived.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "hook/SECRET-TOKEN-123") -> str:
        return f"json://127.0.0.1:{self.port}/{path}"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The posts once ``count`` have arrived (AssertionError at ``timeout`` seconds)."""
        end = time.monotonic() + timeout
        with self.arrived:
            while len(self.posts) < count:
                left = end - time.monotonic()
                assert left > 0, f"{len(self.posts)} post(s) arrived, {count} expected"
                self.arrived.wait(left)
            return list(self.posts)

    def __enter__(self) -> JsonReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)


class SmtpReceiver:
    """aiosmtpd on 127.0.0.1: ``messages`` holds (from, to list, message text)."""

    def __init__(self) -> None:
        import socket

        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult

        with socket.socket() as probe:  # aiosmtpd's controller needs its port named before it starts
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.logins: list[str] = []
        self.messages: list[tuple[str, list[str], str]] = []
        rec = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                rec.messages.append(
                    (envelope.mail_from, list(envelope.rcpt_tos), envelope.content.decode("utf-8", "replace"))
                )
                return "250 OK"

        def accept(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
            rec.logins.append(mechanism)
            return AuthResult(success=True)

        self.controller = Controller(
            Handler(), hostname="127.0.0.1", port=self.port, authenticator=accept, auth_require_tls=False
        )

    def url(self) -> str:
        return f"mailto://127.0.0.1:{self.port}?from=gpuops@example.com&to=ops@example.com&user=bot&pass=MAILPASS-456"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[tuple[str, list[str], str]]:
        end = time.monotonic() + timeout
        while len(self.messages) < count:
            assert time.monotonic() < end, f"{len(self.messages)} mail(s) arrived, {count} expected"
            time.sleep(0.02)
        return list(self.messages)

    def __enter__(self) -> SmtpReceiver:
        self.controller.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.controller.stop()
