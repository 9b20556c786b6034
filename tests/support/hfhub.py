"""A stand-in Hugging Face Hub on 127.0.0.1 for tests: the real ``huggingface_hub`` client talks to
it through ``HF_ENDPOINT=http://127.0.0.1:PORT``; nothing reaches the internet.

It serves what ``hf_hub_download``, ``get_safetensors_metadata`` and ``snapshot_download`` ask for
(huggingface_hub 2.4.0, ``file_download.py`` / ``hf_api.py``):

- ``HEAD|GET /{repo}/resolve/{revision}/{path}``: the file, with ``X-Repo-Commit``, ``ETag`` and
  ``Content-Length``; ``Range: bytes=a-b`` answers 206 with that slice (how safetensors headers are
  read without the weights); a missing file is 404 ``X-Error-Code: EntryNotFound``, a missing repo
  404 ``X-Error-Code: RepoNotFound``; a gated repo 401 ``X-Error-Code: GatedRepo``.
- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{revision}``: ``{"id", "sha",
  "siblings": [{"rfilename", "size"}]}``; with ``?blobs=true`` each sibling also has ``blobId`` and,
  for an LFS file, ``lfs: {"sha256", "size"}`` (as the hub's API answers).
- LFS files (the weight suffixes of the hub's default .gitattributes, ``LFS_SUFFIXES``) are served
  with ``X-Linked-Etag: "<sha256>"`` and ``X-Linked-Size`` beside ``ETag`` (their sha1), as the hub
  does on the redirect to its CDN; huggingface_hub names the cached blob by the sha256.
- ``GET /api/models/{repo}/tree/{revision}[/{path}]``: ``[{"type": "file", "path", "size", "oid"}]``.

Weights are never real: ``safetensors_file(tensors)`` writes a valid header (dtype, shape,
data_offsets) followed by ``padding`` zero bytes only (the offsets may point past the end; the
header is all a planner reads). Every request is recorded in ``hub.requests`` as
``(method, path, range or None)`` so a test can assert that no weight bytes were fetched.

Use::

    with HubServer() as hub:
        hub.add_repo("org/name", {"config.json": json.dumps(cfg).encode(),
                                  "model.safetensors": safetensors_file({...})})
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


def safetensors_file(tensors: dict[str, tuple[str, list[int]]], padding: int = 0) -> bytes:
    """A safetensors file of ``{name: (dtype, shape)}``: 8-byte little-endian header length, the JSON
    header with contiguous ``data_offsets``, then ``padding`` zero bytes (no real tensor data)."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = SAFETENSORS_DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"\0" * padding


LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")


def _lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


class HubServer:
    """The stand-in hub; a context manager that starts and always stops its server thread."""

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.gated: set[str] = set()
        self.requests: list[tuple[str, str, str | None]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._digests: dict[tuple[str, int], tuple[bytes, str]] = {}

    def _digest(self, algo: str, data: bytes) -> str:
        """hashlib's hex digest of ``data``, computed once per body (a ranged download asks for a
        big file's ETag on every range: hashing 512 MB each time would be the stand-in's cost, not
        the client's). The body is kept with its digest, so its id is not reused while cached."""
        hit = self._digests.get((algo, id(data)))
        if hit is None or hit[0] is not data:
            hit = self._digests[(algo, id(data))] = (data, hashlib.new(algo, data).hexdigest())
        return hit[1]

    # -- content ---------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes | str | dict], gated: bool = False) -> str:
        """Publish ``files`` (bytes, text, or a dict written as JSON) under ``repo_id``; returns its commit sha."""
        out = {}
        for path, data in files.items():
            if isinstance(data, dict):
                data = json.dumps(data)
            out[path] = data.encode() if isinstance(data, str) else bytes(data)
        self.repos[repo_id] = out
        if gated:
            self.gated.add(repo_id)
        return self.sha(repo_id)

    def sha(self, repo_id: str) -> str:
        h = hashlib.sha1(repo_id.encode())
        for path in sorted(self.repos.get(repo_id, {})):
            h.update(path.encode())
            h.update(bytes.fromhex(self._digest("sha1", self.repos[repo_id][path])))
        return h.hexdigest()

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start the hub first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- lifecycle --------------------------------------------------------------------------------
    def __enter__(self) -> HubServer:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

            def do_GET(self) -> None:
                hub._handle(self, head=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- HTTP ----------------------------------------------------------------------------------------
    _RESOLVE = re.compile(r"^/(?:models/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
    _INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?/?$")
    _TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")

    def _handle(self, req: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(req.path.split("?", 1)[0])
        rng = req.headers.get("Range") or req.headers.get("range")
        self.requests.append(("HEAD" if head else "GET", path, rng))
        m = self._RESOLVE.match(path)
        if m:
            return self._file(req, m["repo"], m["path"], rng, head)
        m = self._TREE.match(path)
        if m:
            return self._tree(req, m["repo"], m["path"] or "")
        m = self._INFO.match(path)
        if m:
            return self._info(req, m["repo"])
        self._send(req, 404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, head)

    def _repo_or_error(self, req, repo: str, head: bool) -> dict | None:
        if repo not in self.repos:
            self._send(req, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head)
            return None
        if repo in self.gated and not req.headers.get("authorization"):
            self._send(req, 401, b'{"error": "gated"}', {"X-Error-Code": "GatedRepo"}, head)
            return None
        return self.repos[repo]

    def _file(self, req, repo: str, path: str, rng: str | None, head: bool) -> None:
        files = self._repo_or_error(req, repo, head)
        if files is None:
            return
        if path not in files:
            self._send(req, 404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"}, head)
            return
        data = files[path]
        etag = '"' + self._digest("sha1", data) + '"'
        headers = {"X-Repo-Commit": self.sha(repo), "ETag": etag, "Accept-Ranges": "bytes"}
        if _lfs(path):
            headers.update({"X-Linked-Etag": '"' + self._digest("sha256", data) + '"', "X-Linked-Size": str(len(data))})
        if rng and not head:
            m = re.match(r"bytes=(\d+)-(\d*)$", rng.strip())
            if m:
                start = int(m[1])
                end = min(int(m[2]) if m[2] else len(data) - 1, len(data) - 1)
                part = data[start : end + 1]
                headers["Content-Range"] = f"bytes {start}-{start + len(part) - 1}/{len(data)}"
                self._send(req, 206, part, headers, head)
                return
        self._send(req, 200, data, headers, head)

    def _info(self, req, repo: str) -> None:
        files = self._repo_or_error(req, repo, False)
        if files is None:
            return
        blobs = "blobs=true" in req.path.partition("?")[2].lower()

        def sibling(p: str, d: bytes) -> dict:
            row: dict = {"rfilename": p, "size": len(d)}
            if blobs:
                row["blobId"] = self._digest("sha1", d)
                if _lfs(p):
                    row["lfs"] = {"sha256": self._digest("sha256", d), "size": len(d), "pointerSize": 134}
            return row

        body = {
            "id": repo,
            "modelId": repo,
            "sha": self.sha(repo),
            "private": False,
            "gated": repo in self.gated,
            "siblings": [sibling(p, d) for p, d in sorted(files.items())],
        }
        self._send(req, 200, json.dumps(body).encode(), {"Content-Type": "application/json"}, False)

    def _tree(self, req, repo: str, prefix: str) -> None:
        files = self._repo_or_error(req, repo, False)
        if files is None:
            return
        rows = [
            {"type": "file", "path": p, "size": len(d), "oid": self._digest("sha1", d)}
            for p, d in sorted(files.items())
            if p.startswith(prefix)
        ]
        self._send(req, 200, json.dumps(rows).encode(), {"Content-Type": "application/json"}, False)

    @staticmethod
    def _send(req, status: int, body: bytes, headers: dict, head: bool) -> None:
        req.send_response(status)
        for k, v in headers.items():
            req.send_header(k, v)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        if not head:
            req.wfile.write(body)
