"""Tiny pure-Python wheels built by hand (no network, no build backend) for wheelhouse tests.

``make_wheel(dir, "gpuops_probe", "1.0", requires=["other>=1"])`` writes
``gpuops_probe-1.0-py3-none-any.whl`` whose module ``gpuops_probe`` has ``VERSION = "1.0"``
(and ``BLOB`` of ``payload_bytes`` bytes, to make installs do some I/O in benchmarks).
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def make_wheel(dir: Path, name: str, version: str, requires: list[str] | None = None, payload_bytes: int = 0) -> Path:
    """Write a py3-none-any wheel into ``dir``; returns its path."""
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": (
            f'VERSION = "{version}"\n' + (f"BLOB = {'x' * payload_bytes!r}\n" if payload_bytes else "")
        ).encode(),
        f"{dist}/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {name}\n"
            f"Version: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires or [])
        ).encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: gpuops-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/top_level.txt": f"{name}\n".encode(),
    }
    record = [_record_line(p, d) for p, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files.items():
            z.writestr(p, d)
    return out
