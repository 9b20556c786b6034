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


# An injected error's reply per provider: (method, path, status, body, content type), each judged by
# ``documented`` and the Vast 5xx rule, which read the spec as plain data (``contract.spec_dict``).
INJECTED = {
    "vast": [
        ("GET", "/api/v1/instances/", 429, {"success": False, "error": "rate_limited", "msg": "x"}, "application/json"),
        ("GET", "/api/v1/instances/", 500, {"success": False, "error": "server_error", "msg": "x"}, "application/json"),
    ],
    "runpod": [
        (
            "GET",
            "/v2/pods",
            429,
            {"status": 429, "title": "Too Many Requests", "detail": "x"},
            "application/problem+json",
        ),
    ],
}


@pytest.mark.parametrize("provider", ["runpod", "vast"])
def test_warm_loads_all_that_an_injected_errors_check_reads(provider, monkeypatch, tmp_path):
    """``Contract.warm`` (run by an emulator's ``start``) loads every spec table ``check`` reads, so
    no reply waits on a spec file's parse: ``check`` runs in the emulator's request thread before
    the reply is sent, and Vast's YAML spec, first parsed on an injected 429, took over 10 s on a
    loaded 2-core machine (the client's read timeout: "cannot reach Vast.ai"). After ``warm`` the
    spec directory is emptied: a check that still loaded a file would raise FileNotFoundError."""
    for cached in (contract.spec, contract.spec_dict, contract._operations):
        cached.cache_clear()
    judge = contract.Contract(provider)
    judge.warm()
    monkeypatch.setattr(contract, "SPEC_DIR", tmp_path)  # nothing left to load from
    for method, path, status, body, ctype in INJECTED[provider]:
        req = {
            "method": method,
            "path": path,
            "query_raw": "",
            "headers": {"Authorization": "Bearer k"},
            "raw_body": b"",
        }
        judge.check(req, status, json.dumps(body).encode(), ctype, injected=True)
    assert judge.violations == []


# A reply's deadline (s): the emulator's first reply loads and checks the spec (openapi-core), which
# took over 10 s on a loaded 2-core CI machine.
REPLY_DEADLINE_S = 60


def _send(url: str, method: str, path: str, body: dict | None, key: str) -> int:
    req = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=REPLY_DEADLINE_S) as r:
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


def _search_then_create(emu, kind: str, price: float | None) -> list[str]:
    """A ``type: kind`` search, then a create of its first ask with ``price`` (the SDK's body
    shape: every unset key null), as a client would send them; the violations recorded."""
    key, before = emu.market.api_key, len(emu.contract.violations)
    req = urllib.request.Request(
        emu.url + "/api/v0/bundles/",
        data=json.dumps({"type": kind, "limit": 1}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(req, timeout=REPLY_DEADLINE_S) as r:
        ask = json.loads(r.read())["offers"][0]["id"]
    body = {"client_id": "me", "image": "img", "price": price, "disk": 10.0, "label": "gpuops-x", "onstart": None}
    _send(emu.url, "PUT", f"/api/v0/asks/{ask}/", body, key)
    return _taken(emu)[before:]


def test_a_spot_create_without_a_price_fails_the_contract():
    """A bid search followed by a create with ``price: null`` rents on-demand, silently: no
    tolerance hides it (the SDK's null for an unset key is tolerated on an on-demand create only)."""
    emu = VastEmulator().start()
    try:
        spot_without_price = _search_then_create(emu, "bid", None)
        emu.market.instances.clear()
        for o in emu.offers.values():
            o["rented"] = False
        on_demand = _search_then_create(emu, "on-demand", None)
        for o in emu.offers.values():
            o["rented"] = False
        spot_with_price = _search_then_create(emu, "bid", 0.5)
    finally:
        emu.stop()
    assert any(
        v.startswith("vast PUT /api/v0/asks/") and ": request: InvalidRequestBody: price: None is not of type" in v
        for v in spot_without_price
    ), spot_without_price
    assert on_demand == [] and spot_with_price == []


def test_graphql_documents_are_judged_by_runpods_own_clients():
    """No GraphQL schema is published: every document sent to /graphql must select only fields (and
    pass only arguments) that RunPod's own clients do (tests/data/graphql, each with its origin).
    Ours passes; a misspelled field, a field no client reads and a broken document are violations."""
    from gpuops.providers.runpod.compute import BALANCE_QUERY
    from tests.emulators import graphql_contract

    origins = [o for o, _ in graphql_contract.documents()]
    assert any(o.startswith("runpod 1.11.0 runpod/api/queries/user.py") for o in origins)
    assert any(o.startswith("runpodctl v2.7.2") for o in origins)
    assert graphql_contract.violations(BALANCE_QUERY) == []
    emu = RunPodEmulator().start()
    try:
        for query in (
            BALANCE_QUERY,
            "query myself { myself { clientBalanse } }",
            "query { myself { clientBalance creditLimit } }",
            'query { myself(input: {id: "x"}) { id } }',
            "query { myself { ",
        ):
            _send(emu.url, "POST", "/graphql", {"query": query}, emu.market.api_key)
        got = _taken(emu)
    finally:
        emu.stop()
    assert got == [
        "runpod POST /graphql: document: query myself.clientBalanse: a field no client of RunPod's selects",
        "runpod POST /graphql: document: query myself.creditLimit: a field no client of RunPod's selects",
        "runpod POST /graphql: document: query myself: arguments no client of RunPod's passes: ['input']",
        "runpod POST /graphql: document: not a GraphQL document: Syntax Error: Expected Name, found <EOF>.",
    ]


def test_injected_errors_and_their_headers_are_judged_by_the_spec():
    """A 429 or 5xx a test injects is the API's own error where the route documents that status
    (RunPod: every route's 429 and ``default``): its body and its headers are judged. RunPod's spec
    types ``Retry-After`` as integer seconds and every error as a problem with ``title``, ``status``
    and ``detail``; a gateway's HTML page on a status no route documents is not the API and is not
    judged."""
    emu = RunPodEmulator().start()
    try:
        key = emu.market.api_key
        emu.faults.inject["pods"] = [429]
        emu.faults.retry_after_s = 2
        _send(emu.url, "GET", "/v2/pods", None, key)
        fine = _taken(emu)
        emu.faults.inject["pods"] = [429]
        emu.faults.retry_after_s = 0.5  # not integer seconds
        _send(emu.url, "GET", "/v2/pods", None, key)
        emu.faults.retry_after_s = None
        problem = emu.problem
        emu.problem = lambda status, detail, title=None: (
            status,
            {"status": status, "title": "x"},
            "application/problem+json",
        )
        emu.faults.inject["pods"] = [500]
        _send(emu.url, "GET", "/v2/pods", None, key)  # a problem without its detail
        emu.problem = problem
        emu.faults.inject["pods"] = [502]
        _send(emu.url, "GET", "/v2/pods", None, key)  # a gateway's HTML page
        got = _taken(emu)
    finally:
        emu.stop()
    assert fine == []
    assert any(v.startswith("runpod GET /v2/pods: reply 429: ") and "Retry-After" in v for v in got), got
    assert any(
        v.startswith("runpod GET /v2/pods: reply 500: ") and "'detail' is a required property" in v for v in got
    ), got
    assert not any("reply 502" in v for v in got), got


def test_an_injected_vast_5xx_is_judged_by_the_spec_and_by_vastais_client():
    """Vast's documented 500s carry the spec's Error body ({"success": false, "error", "msg"}): an
    injected 500 on any route is held to it. A 502/503/504 is Vast's gateway (what vastai's client
    retries as transient): the emulator answers it as a gateway page, and a JSON body there would
    claim to be the API."""
    from gpuops.emulators.vast import VastEmulator

    emu = VastEmulator().start()
    try:
        key = emu.market.api_key
        emu.faults.inject["list"] = [500]
        status = _send(emu.url, "GET", "/api/v1/instances/", None, key)
        fine = _taken(emu)  # the emulator's own 500: the spec's Error body
        emu.faults.inject["list"] = [502]
        req = urllib.request.Request(emu.url + "/api/v1/instances/", headers={"Authorization": f"Bearer {key}"})
        try:
            urllib.request.urlopen(req, timeout=REPLY_DEADLINE_S)
        except urllib.error.HTTPError as e:
            page = (e.code, e.headers.get("Content-Type"), e.read())
        fine += _taken(emu)
        fail = emu._fail
        emu._fail = lambda status, error, msg, **extra: (status, {"error": error}, "application/json")
        emu.faults.inject["list"] = [500, 503]
        _send(emu.url, "GET", "/api/v1/instances/", None, key)  # a 500 without success and msg
        _send(emu.url, "GET", "/api/v1/instances/", None, key)
        emu._fail = fail
        got = _taken(emu)
    finally:
        emu.stop()
    assert status == 500 and fine == []
    assert page[0] == 502 and page[1] == "text/html" and page[2].startswith(b"<html>")
    assert "vast GET /api/v1/instances/: reply 500: success is not a boolean (components.schemas.Error)" in got, got
    assert "vast GET /api/v1/instances/: reply 500: msg is not a string (components.schemas.Error)" in got, got
    # the 503 stayed the gateway's page (the emulator's own, not _fail): nothing to record for it
    assert not any("reply 503" in v for v in got), got
