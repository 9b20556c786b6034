"""The providers' published specs are the contract (tests/emulators/contract.py): the vendored
files are the ones their README names, and the validator really rejects what the spec rejects --
a request our code must never send, a reply an emulator must never make."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request

import pytest

from tests.emulators import RunPodEmulator, VastEmulator, contract


@pytest.mark.parametrize("provider", ["runpod", "vast"])
def test_vendored_specs_are_the_published_files(provider):
    data = (contract.SPEC_DIR / contract.SPECS[provider]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == contract.SHA256[provider]
    readme = (contract.SPEC_DIR / "README.md").read_text()
    assert contract.SHA256[provider] in readme and contract.SPECS[provider] in readme


def _send(url: str, method: str, path: str, body: dict | None, key: str) -> int:
    req = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _taken(emu) -> list[str]:
    """The violations this emulator recorded, taken off the run's record (this test made them on purpose)."""
    got = list(emu.contract.violations)
    with contract._LOCK:
        contract.VIOLATIONS[:] = [v for v in contract.VIOLATIONS if v not in got]
    return got


def test_a_request_the_spec_rejects_is_recorded():
    emu = RunPodEmulator().start()
    try:
        # v1's flat create body, and a route v2 does not have.
        _send(
            emu.url,
            "POST",
            "/v2/pods",
            {"name": "x", "imageName": "img", "gpuTypeId": "NVIDIA GeForce RTX 4090"},
            emu.market.api_key,
        )
        _send(emu.url, "GET", "/v1/billing/pods", None, emu.market.api_key)
        got = _taken(emu)
    finally:
        emu.stop()
    assert any(v.startswith("runpod POST /v2/pods: request: InvalidRequestBody") for v in got), got
    assert (
        "runpod GET /v1/billing/pods: request: PathNotFound: Path not found for https://api.runpod.io/v1/billing/pods"
        in got
    )


def test_a_reply_the_spec_rejects_is_recorded():
    emu = VastEmulator().start()
    try:
        emu.charge_rows = lambda lo, hi, account=None: [
            {"start": 1.5, "end": 2, "type": "instance", "items": [{"type": "storage"}]}
        ]
        _send(emu.url, "GET", '/api/v0/charges/?select_filters={"day":{"gte":0,"lte":10}}', None, emu.market.api_key)
        got = _taken(emu)
    finally:
        emu.stop()
    assert "vast GET /api/v0/charges/: reply 200: InvalidData: results/0/start: 1.5 is not of type 'integer'" in got
    assert (
        "vast GET /api/v0/charges/: reply 200: InvalidData: results/0/items/0/type: 'storage' is not one of ['gpu', 'disk', 'bwd', 'bwu']"
        in got
    )
