"""A real headless browser for the tests: Debian's chromium driven over the Chrome DevTools
Protocol (CDP) through a websocket (the ``websockets`` package's sync client).

``Browser`` starts ``chromium --headless`` with its own throwaway profile and
``--remote-debugging-port=0``, reads the port chromium picked from ``DevToolsActivePort`` in that
profile, and talks to the browser target; each ``page()`` is a new tab attached with a flat CDP
session. Every wait has a deadline. ``close()`` (and the ``browser`` fixture) ends chromium
whatever happened: TERM, then KILL, then the profile is removed.

Protocol reference: https://chromedevtools.github.io/devtools-protocol/ (Target, Page, Runtime,
Log, Emulation domains).

No skipping: a missing chromium is an error that says how to install it (scripts/test.sh does).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 60.0
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
)


def chromium_path() -> str:
    """The chromium binary. Raises RuntimeError with the fix when it is not installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("chromium not found: apt-get install chromium (scripts/test.sh does)")


class CdpError(RuntimeError):
    """A CDP call answered with an error, or no answer came by the deadline."""


class Browser:
    """One headless chromium. Use as a context manager, or call ``close()``."""

    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="gpuops-chromium-"))
        self.log_path = self.profile / "chromium.log"  # removed with the profile
        self._log = open(self.log_path, "wb")
        from gpuops.emulators.lifetime import die_with_parent

        self.proc = subprocess.Popen(
            [
                chromium_path(),
                *CHROMIUM_FLAGS,
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),  # never outlives a SIGKILLed pytest
        )
        self.ws = None
        self._stack = contextlib.ExitStack()
        self._next_id = 0
        self.events: list[dict] = []
        self._tabs: list[tuple[str, str]] = []  # (target, session) of each tab page() opened
        try:
            self._connect()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        from websockets.sync.client import connect

        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"chromium exited with {self.proc.returncode}: {self.log_path.read_text(errors='replace')[-2000:]}"
                )
            lines = port_file.read_text().split("\n") if port_file.exists() else []
            if len(lines) >= 2 and lines[0].strip().isdigit() and lines[1].strip():
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"chromium gave no DevTools port in {START_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        self.ws = self._stack.enter_context(
            connect(f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}", max_size=None, open_timeout=START_TIMEOUT_S)
        )

    def call(
        self, method: str, params: dict | None = None, session: str | None = None, timeout: float = CALL_TIMEOUT_S
    ) -> dict:
        """Send one CDP command and return its result; events that arrive meanwhile are kept in
        ``events``. Raises CdpError on an error answer or after ``timeout`` seconds."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            m = self._recv(deadline, method)
            if m.get("id") == self._next_id:
                if "error" in m:
                    raise CdpError(f"{method}: {m['error']}")
                return m.get("result", {})

    def _recv(self, deadline: float, waiting_for: str) -> dict:
        left = deadline - time.monotonic()
        if left <= 0:
            raise CdpError(f"no answer to {waiting_for} by the deadline")
        try:
            raw = self.ws.recv(timeout=left)
        except TimeoutError:
            raise CdpError(f"no answer to {waiting_for} by the deadline") from None
        m = json.loads(raw)
        if "method" in m:
            self.events.append(m)
        return m

    def wait_event(self, method: str, session: str, timeout: float = CALL_TIMEOUT_S, since: int = 0) -> dict:
        """The first event ``method`` of ``session`` at index >= ``since`` in ``events``, waiting
        for it up to ``timeout`` seconds. Raises CdpError after that."""
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events[since:]:
                if e["method"] == method and e.get("sessionId") == session:
                    return e
            self._recv(deadline, method)

    def page(self, width: int, height: int) -> Page:
        """A new tab with a ``width`` x ``height`` CSS-pixel viewport (device scale 1)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self._tabs.append((target, session))
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
            session=session,
        )
        return Page(self, session, target)

    def close_pages(self) -> None:
        """Close every tab ``page()`` opened and forget their events: the browser is as it was
        before them (one browser serves many tests). A tab already gone is no error."""
        for target, _ in self._tabs:
            try:
                self.call("Target.closeTarget", {"targetId": target})
            except CdpError:
                pass
        gone = {session for _, session in self._tabs}
        self._tabs.clear()
        self.events = [e for e in self.events if e.get("sessionId") not in gone]

    def close(self) -> None:
        """End chromium whatever state it is in (TERM, then KILL) and remove its profile."""
        try:
            self._stack.close()
        except Exception:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self._log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """One tab: navigate, evaluate JavaScript, screenshot, and the errors it logged."""

    def __init__(self, browser: Browser, session: str, target: str):
        self.b, self.session, self.target = browser, session, target

    def goto(self, url: str, timeout: float = CALL_TIMEOUT_S) -> None:
        """Load ``url`` and wait for its load event. Raises CdpError when navigation fails."""
        since = len(self.b.events)
        res = self.b.call("Page.navigate", {"url": url}, session=self.session)
        if res.get("errorText"):
            raise CdpError(f"navigate {url}: {res['errorText']}")
        self.b.wait_event("Page.loadEventFired", self.session, timeout, since)

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises awaited). Raises CdpError on a throw."""
        res = self.b.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        if "exceptionDetails" in res:
            raise CdpError(f"{expression[:60]}...: {res['exceptionDetails'].get('exception', {}).get('description')}")
        return res["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (beyond the viewport) at ``path``."""
        data = self.b.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=self.session
        )["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def errors(self) -> list[str]:
        """Everything this tab reported as an error: console.error/assert calls, uncaught
        exceptions, and browser log entries of level error (failed loads, CSP violations)."""
        out = []
        for e in self.b.events:
            if e.get("sessionId") != self.session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(
                    "console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                )
            elif e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out
