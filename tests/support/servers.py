"""Local stand-ins for what a bootstrap downloads: an HTTP file server and a git repository."""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
from pathlib import Path


class HttpFiles:
    """Serve ``directory`` on http://127.0.0.1:<port>/ from a thread; ``close()`` stops it.
    ``hits`` counts GET requests (a re-run that downloads again shows up here)."""

    def __init__(self, directory: Path):
        outer = self
        self.hits = 0

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):
                outer.hits += 1
                return super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(directory))
        )
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._t = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._t.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def git(*args: str, cwd: Path) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "PATH": "/usr/bin:/bin",
        "HOME": str(cwd),
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> str:
    """A git repository at ``path`` (branch ``main``) with one commit of ``files``; returns its sha."""
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", cwd=path)
    return commit(path, files, "first")


def commit(path: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", message, cwd=path)
    return git("rev-parse", "HEAD", cwd=path)
