"""The providers' published OpenAPI specs as the emulators' contract (openapi-core, OpenAPI 3.1).

Every request an emulator receives and every reply it sends is validated against the provider's
own spec (``tests/data/specs``, origin and sha256 in its README): path and method, parameters,
body, status code and reply body. A violation is recorded (``VIOLATIONS``, and on the emulator's
``market.contract_violations``) and fails the test that caused it at teardown (the autouse
``_provider_contract`` fixture in tests/conftest.py), naming the route and what the spec says.

What is not validated, on purpose (each one written here, never silent):

- ``OUTSIDE``: routes the spec does not cover that the emulator still serves because the provider
  does (RunPod's GraphQL ``POST /graphql``: v2 has no account balance; a provider's spec is only
  about its REST API). Its documents are judged by RunPod's own clients' documents instead
  (tests/emulators/graphql_contract.py), their violations recorded here like any other.
- a reply the test injected as an infrastructure fault (``Faults.inject``) with a status the spec
  does not document for its route (a 502 HTML page from a gateway on a Vast route that lists no
  502), or a body that is not JSON (a gateway's page): such a reply is what a proxy sends, not the
  API; so is a 2xx a test shaped outside the spec on purpose (an undocumented pod status). The
  request that drew it is still validated. An injected error status the route documents (every
  RunPod route's 429 and ``default``, Vast's 429s) with a JSON body is the API's own error and is
  judged: its body and its headers (``Retry-After``, ``RateLimit``, ``RateLimit-Policy``). An
  injected Vast 5xx is always judged (``Contract._judge_vast_5xx``): a 500 must be the spec's
  ``Error`` body on any route, a 502/503/504 (its gateway's, which vastai's client retries) must not
  be a JSON API body.

Response headers are judged on every reply: the ones an emulator sends beyond ``Content-Type`` go
to the validator, which checks each header the spec declares for that status (its schema, and
that a required one is there).

Tolerated differences between what a provider serves and what its spec writes (``TOLERATED``):

- Vast's spec writes its paths without the trailing slash its own SDK always sends
  (``/api/v0/bundles`` vs ``POST /api/v0/bundles/``; vastai 1.9.1 vastai/api/*.py); its server
  answers both. The path is matched without it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from pathlib import Path
from urllib.parse import parse_qsl

SPEC_DIR = Path(__file__).resolve().parent.parent / "data" / "specs"
SPECS = {"runpod": "runpod-rest-v2.openapi.json", "vast": "vast.openapi.yaml"}
SHA256 = {
    "runpod": "b8bce61c5a2290d28a7cb2ed53173637166817249986cb18b101b2fd651fd313",
    "vast": "84fdb88342dcca514b87795a16a9751b5e6805341034ec8ca24fbf3519d42b25",
}
# The spec's own server (each spec names one): requests are matched against it, not 127.0.0.1.
SERVERS = {"runpod": "https://api.runpod.io", "vast": "https://console.vast.ai"}
# Served, not in the spec (see the module docstring): path prefixes.
OUTSIDE = {"runpod": ("/graphql",), "vast": ()}
TOLERATED = {"vast": "path matched without its trailing slash (the spec omits it; the SDK sends it)"}

# Violations that are not ours to fix, each with why (a regex over the violation's line). Two kinds:
# the spec contradicting itself, and request shapes that vastai 1.9.1 -- Vast's own client, which
# gpuops drives for Vast -- builds itself (vastai/api/instances.py build_create_instance_payload,
# api/offers.py, api/storage.py), whatever its caller passes.
_V = r"vast [A-Z]+ "
TOLERATED_VIOLATIONS: dict[str, str] = {
    # Spec against spec: show-instance's Instance schema types ``ports`` as an array of integers and
    # ``extra_env`` as an array of strings; the list route's instance (and the SDK, which indexes
    # ports["22/tcp"][0]["HostPort"] and builds a dict from [key, value] pairs) use the docker map
    # and pairs. The emulator serves the list route's shapes on both.
    _V
    + r"/api/v0/instances/\d+/: reply 200: InvalidData: instances/ports: ": "Instance.ports: array of integers vs the list's docker map",
    _V
    + r"/api/v0/instances/\d+/: reply 200: InvalidData: instances/extra_env/\d+: ": "Instance.extra_env: strings vs the list's [key, value] pairs",
    # The search body's ``order`` is documented as an array of at least 2 items of 2 strings each,
    # which rejects the SDK's one-column order [["dph_total", "asc"]]: minItems/maxItems belong to
    # the inner pair.
    _V + r"/api/v0/bundles/: request: InvalidRequestBody: order: .* is too short": "order: minItems on the outer array",
    # The search ``type``: the spec's enum spells on-demand "ondemand"; the spec's own example,
    # vastai 1.9.1 (search_offers' default) and vast-cli send "on-demand", which real accounts are
    # served every day. Where the spec and the provider's own client disagree, the client wins
    # (tests/data/specs/CAUGHT.md).
    _V
    + r"/api/v0/bundles/: request: InvalidRequestBody: type: 'on-demand' is not one of": "type: the clients' on-demand",
    # vastai 1.9.1's create body: every optional key is sent, unset ones as null; env is the SDK's
    # parsed map (docker options as keys), the spec's docker-options string never; ``runtype``
    # "ssh_direc ssh_proxy" is the SDK's spelling for ssh + direct. ``price`` is not among them: a
    # null price is a money field (the bid) and rents on-demand, so it is tolerated only on an
    # on-demand create (``ON_DEMAND_PRICE_NULL`` below), never hidden by this pattern.
    _V
    + r"/api/v0/asks/\d+/: request: InvalidRequestBody: (?!price:)[a-z_]+: None is not of type": "SDK: unset optional keys sent as null",
    _V
    + r"/api/v0/asks/\d+/: request: InvalidRequestBody: env: \{.*\} is not of type 'string'": "SDK: env sent as a map",
    _V
    + r"/api/v0/asks/\d+/: request: InvalidRequestBody: runtype: 'ssh_direc ssh_proxy' is not one of": "SDK: runtype spelling",
    # The spec gives show-instance no answer for an instance that is gone (no 404 listed, and
    # ``instances`` is an object); vastai 1.9.1 reads {"instances": null} as None, so that is what
    # the emulator sends (gpuops takes a 404 as gone too).
    _V
    + r"/api/v0/instances/\d+/: reply 200: InvalidData: instances: None is not of type 'object'": "gone instance: instances null",
    # vastai 1.9.1 delete_volume sends ``?id=N`` in the query, the spec a JSON body {"id": N}.
    _V
    + r"/api/v0/volumes/: request: InvalidRequestBody: \(root\): 'id' is a required property": "SDK: volume id in the query",
}

# A create's ``price: null`` (vastai sends every unset key as null) is the on-demand create the SDK
# builds, and only that: the Vast emulator marks a create whose ask it served to this account as an
# interruptible (``type: "bid"``) offer and never as an on-demand one (``req["spot_create"]``); there
# a null price is a silent on-demand rent and a violation like any other (tests/data/specs/CAUGHT.md).
ON_DEMAND_PRICE_NULL = _V + r"/api/v0/asks/\d+/: request: InvalidRequestBody: price: None is not of type"

VIOLATIONS: list[str] = []  # every violation of this process, in order (the fixture reads its slice)
_LOCK = threading.Lock()


@functools.cache
def spec(provider: str):
    """The provider's spec as an ``openapi_core.OpenAPI`` (loaded once per process)."""
    import copy

    from openapi_core import Config, OpenAPI

    data = copy.deepcopy(spec_dict(provider))  # the one parse of the file; openapi-core gets its own copy
    # The spec is published as it is: validating the spec document itself is not our business
    # (and some of its examples do not match its own schemas).
    # RFC 9457 problem documents (RunPod v2's errors) are JSON; openapi-core knows only application/json.
    return OpenAPI.from_dict(
        data,
        config=Config(spec_validator_cls=None, extra_media_type_deserializers={"application/problem+json": json.loads}),
    )


def _messages(err: BaseException) -> list[str]:
    """An openapi-core error as lines: one per JSON-Schema error under it (``<where in the
    document>: <what the spec wanted>``), or its kind and text when it has none."""
    lines = []
    seen = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        for se in getattr(e, "schema_errors", None) or []:
            where = "/".join(str(p) for p in se.absolute_path) or "(root)"
            lines.append(f"{type(err).__name__}: {where}: {se.message[:160]}")
        e = e.__cause__ or e.__context__
    name = getattr(err, "name", None)  # a header's or parameter's name, when the error is about one
    where = f"{name}: " if isinstance(name, str) else ""
    return list(dict.fromkeys(lines)) or [f"{type(err).__name__}: {where}{str(err)[:200]}"]


class Contract:
    """Validates one emulator's traffic against ``provider``'s spec; ``violations`` is its record."""

    def __init__(self, provider: str):
        self.provider = provider
        self.violations: list[str] = []

    def warm(self) -> None:
        """Load everything ``check`` reads before any request: the spec as openapi-core's (and
        openapi-core itself, ~2 s the first time in a process) and as plain data (``documented``
        and ``_judge_vast_5xx`` read it on an injected error's reply).

        ``check`` runs in the emulator's request thread before the reply is sent, so whatever it
        loads first is the reply's delay: Vast's YAML spec (330 kB) took 4 s to parse on a loaded
        2-core machine and over 10 s beside two CPU-bound processes, longer than a client's
        per-request timeout (2-10 s in the suite), and the first injected 429 read as "cannot
        reach Vast.ai"."""
        from openapi_core.testing import MockRequest

        list(spec(self.provider).iter_request_errors(MockRequest(SERVERS[self.provider], "get", "/")))
        _operations(self.provider)

    def check_document(self, text: str) -> None:
        """Judge a GraphQL document sent to ``POST /graphql`` by RunPod's own clients' documents
        (graphql_contract.py: no schema is published); record each violation."""
        from tests.emulators import graphql_contract

        for line in graphql_contract.violations(text):
            self._record(f"{self.provider} POST /graphql: document: {line}")

    def _record(self, text: str, req: dict | None = None) -> None:
        if any(re.match(k, text) for k in TOLERATED_VIOLATIONS):
            return
        if re.match(ON_DEMAND_PRICE_NULL, text) and not (req or {}).get("spot_create"):
            return  # an on-demand create: the SDK's null for an unset bid
        with _LOCK:
            self.violations.append(text)
            VIOLATIONS.append(text)
            log = os.environ.get("GPUOPS_CONTRACT_LOG")
            if log:  # every violation, one per line (recording what the contract catches)
                with open(log, "a", encoding="utf-8") as f:
                    f.write(text + "\n")

    def _path(self, path: str) -> str:
        if self.provider == "vast" and len(path) > 1 and path.endswith("/"):
            return path.rstrip("/")  # TOLERATED
        return path

    def check(
        self,
        req: dict,
        status: int,
        body: bytes,
        content_type: str,
        injected: bool = False,
        reply_headers: dict[str, str] | None = None,
    ) -> None:
        """Validate ``req`` (the emulator's request dict: method, path, raw query, raw body,
        headers) and the reply (``status``, ``body`` bytes, ``content_type``, its headers beyond
        Content-Type: ``reply_headers``); record violations. ``injected``: a fault the test asked for, judged only
        where the route documents its status and the body is JSON (the module docstring)."""
        from openapi_core.testing import MockRequest, MockResponse

        if any(req["path"].startswith(p) for p in OUTSIDE.get(self.provider, ())):
            return
        api = spec(self.provider)
        headers = dict(req.get("headers") or {})
        raw = req.get("raw_body") or b""
        request = MockRequest(
            SERVERS[self.provider],
            req["method"].lower(),
            self._path(req["path"]),
            args=parse_qsl(req.get("query_raw") or "", keep_blank_values=True),
            headers=headers,
            data=raw or None,
            content_type=(headers.get("Content-Type") or "application/json").split(";")[0].strip(),
        )
        where = f"{self.provider} {req['method']} {req['path']}"
        try:
            errors = list(api.iter_request_errors(request))
        except Exception as e:  # a validator failure is a violation too: never a silent pass
            errors = [e]
        for e in errors:
            for line in _messages(e):
                self._record(f"{where}: request: {line}", req)
        if errors and any(type(e).__name__ in ("PathNotFound", "OperationNotFound", "ServerNotFound") for e in errors):
            return  # no route in the spec: there is no reply contract to hold it to
        if injected and self.provider == "vast" and status >= 500:
            self._judge_vast_5xx(where, status, body, content_type)
            return
        if injected and not (
            status >= 400
            and "json" in content_type
            and documented(self.provider, req["method"], self._path(req["path"]), status)
        ):
            return
        response = MockResponse(
            body,
            status_code=status,
            headers={**(reply_headers or {}), "Content-Type": content_type},
            content_type=content_type,
        )
        try:
            rerrors = list(api.iter_response_errors(request, response))
        except Exception as e:
            rerrors = [e]
        for e in rerrors:
            for line in _messages(e):
                self._record(f"{where}: reply {status}: {line}")

    def _judge_vast_5xx(self, where: str, status: int, body: bytes, content_type: str) -> None:
        """An injected Vast 5xx, judged by what the spec documents and what vastai's client does.

        A 500 is Vast's application answering: the spec documents its 500s with
        ``components.schemas.Error`` (``{"success": false, "error", "msg"}``), so the body must be
        that, on every route (most routes list no 500, their server still sends one). A 502, 503 or
        504 is Vast's gateway, which vastai's client retries as "gateway/upstream errors"
        (vastai/api/client.py ``_RETRYABLE_STATUS``): the spec documents none, and a gateway's page
        is not JSON, so a JSON body there claims to be the API and is a violation. Other 5xx: the
        500 rule."""
        if status in (502, 503, 504):
            if "json" in content_type:
                self._record(f"{where}: reply {status}: a gateway status with an API (JSON) body")
            return
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        schema = spec_dict(self.provider)["components"]["schemas"]["Error"]
        problems = []
        if not isinstance(doc, dict) or "json" not in content_type:
            problems.append("not the spec's Error object (JSON)")
        else:
            for key, kind in schema["properties"].items():
                want = {"boolean": bool, "string": str}[kind["type"]]
                if not isinstance(doc.get(key), want):
                    problems.append(f"{key} is not a {kind['type']} (components.schemas.Error)")
            if doc.get("success") is not False:
                problems.append("success is not false")
        for line in problems:
            self._record(f"{where}: reply {status}: {line}")


@functools.cache
def spec_dict(provider: str) -> dict:
    """``provider``'s spec as plain data, loaded once (``Contract.warm``: before an emulator serves).

    YAML through libyaml's loader where PyYAML has it (the same data, ~4x faster than the pure
    Python one). Raises OSError when the file cannot be read."""
    import yaml

    path = SPEC_DIR / SPECS[provider]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def _operations(provider: str) -> list[tuple[re.Pattern, dict]]:
    """The spec's paths as (a pattern matching a request path, the path item), loaded once."""
    data = spec_dict(provider)
    return [
        (re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"), item)
        for template, item in data["paths"].items()
    ]


def documented(provider: str, method: str, path: str, status: int) -> bool:
    """Whether ``provider``'s spec documents ``status`` (or a ``default``, or its ``5XX`` range) for
    ``method path``."""
    for pattern, item in _operations(provider):
        op = item.get(method.lower()) if pattern.match(path) else None
        if isinstance(op, dict):
            responses = op.get("responses") or {}
            return any(k in responses for k in (str(status), f"{status // 100}XX", "default"))
    return False


def summary(violations: list[str]) -> str:
    """The violations as lines, identical ones counted once."""
    counts: dict[str, int] = {}
    for v in violations:
        counts[v] = counts.get(v, 0) + 1
    return "\n".join(f"  {v}" + (f"  (x{n})" if n > 1 else "") for v, n in counts.items())


# Violations recorded on today's emulators and code, not yet fixed: a prefix of the violation's
# text -> what it is. A violation matching one is collected but does not fail its test.
KNOWN: dict[str, str] = {}  # all that the first run caught is fixed (tests/data/specs/CAUGHT.md)


def known(violation: str) -> bool:
    """True when ``violation`` matches one of ``KNOWN``'s patterns (a recorded, not yet fixed one)."""
    return any(re.match(k, violation) for k in KNOWN)
