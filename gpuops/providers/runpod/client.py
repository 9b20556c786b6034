"""RunPod's REST API v2 client: one call, its statuses mapped to ``ProviderError`` kinds.

``https://api.runpod.io/v2`` with ``Authorization: Bearer <key>``, under the retry policy.

Errors are RFC 9457 problems (``{"title", "status", "detail"}``); a create's 400 is "this GPU
could not be placed" or a rule broken (try the next offer), 402 no funds, 403 a pool this account
cannot use (next offer), 422 a body the contract rejects (never retried), 429 Retry-After, 5xx
transient (the spec's create description). Only a 429, a 5xx, a timeout and a connection error
are tried again; any other 4xx, and a 2xx (or GraphQL's 404) whose body is not the JSON asked for,
is raised at once (``unexpected_reply``; the rule and its sources: provider_errors.py). ``ROUTES``:
every route gpuops calls (RunPod's published OpenAPI spec, api-reference-v2/openapi.json in
github.com/runpod/docs)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gpuops.providers.base import ProviderError, ProviderErrorKind
from gpuops.providers.keys import Credential, missing_key_fix, redact
from gpuops.providers.provider_errors import unexpected_reply
from gpuops.providers.retry import RetryPolicy, call_with_retries, wait_asked
from gpuops.providers.runpod.account import KEYS

NAME = "runpod"

# What gpuops calls on RunPod (method, path under the API host), for `gpuops check` and the docs.
ROUTES = (
    ("GET", "/v2/catalog/gpus"),
    ("POST", "/v2/pods"),
    ("GET", "/v2/pods"),
    ("GET", "/v2/pods/{id}"),
    ("DELETE", "/v2/pods/{id}"),
    ("POST", "/v2/pods/{id}/action"),
    ("GET", "/v2/network-volumes"),
    ("POST", "/v2/network-volumes"),
    ("DELETE", "/v2/network-volumes/{id}"),
    ("GET", "/v2/billing/pods"),
    ("GET", "/v2/billing/network-volumes"),
    ("POST", "/graphql"),  # myself { clientBalance currentSpendPerHr }: the balance, which v2 lacks
)

# The one GraphQL document gpuops sends: the fields runpodctl's GetUser reads (internal/api/gpu.go;
# RunPod publishes no GraphQL schema: tests/data/graphql holds its own clients' documents, the
# contract every document here is held to).
BALANCE_QUERY = "query myself { myself { clientBalance currentSpendPerHr } }"


def parse_time(text: Any) -> float | None:
    """Epoch seconds from an RFC 3339 date-time (``2026-06-01T12:00:00Z``), or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


def stamp(t: float) -> str:
    """RFC 3339, UTC, whole seconds (the spec's date-time query parameters)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def problem_text(body: Any, fallback: str) -> str:
    """The human text of an error body.

    V2's RFC 9457 ``detail`` (else ``title``, with ``errors``), v1's ``{"message"}``, or
    ``{"error"}``; ``fallback`` when it has none."""
    if isinstance(body, dict):
        for k in ("detail", "message", "error", "title"):
            v = body.get(k)
            if isinstance(v, str) and v.strip():
                extra = body.get("errors")
                if isinstance(extra, list) and extra:
                    return v.strip() + " (" + "; ".join(str(x) for x in extra[:5]) + ")"
                return v.strip()
    return fallback


class RunPodClient:
    """The REST v2 half of ``RunPodProvider`` (and of its volumes, which call it).

    ``_rest`` makes one call, 2xx or a ProviderError of the kind the status means. The provider sets
    ``credential``, ``url`` (the API host), ``retry`` and ``timeout_s`` (seconds per socket
    operation; the call's total deadline is ``http_guard``'s)."""

    credential: Credential | None
    url: str
    retry: RetryPolicy
    timeout_s: float

    def _key(self) -> str:
        if self.credential is None:
            raise ProviderError(ProviderErrorKind.AUTH, "no RunPod API key found", missing_key_fix(KEYS))
        return self.credential.key

    def _status_error(
        self,
        status: int,
        body: Any,
        action: str,
        creating: bool,
        retry_after: str | None,
        quota: str | None = None,
    ) -> ProviderError:
        key = self.credential.key if self.credential else None
        text = redact(problem_text(body, f"HTTP {status}"), key)
        if status == 401:
            return ProviderError(
                ProviderErrorKind.AUTH,
                f"RunPod rejected the API key ({self.credential.source if self.credential else 'none'}) while trying to {action}",
                missing_key_fix(KEYS),
            )
        if status == 403:
            if creating:  # "your account cannot access the requested pool: skip this candidate"
                return ProviderError(
                    ProviderErrorKind.OFFER_GONE,
                    f"RunPod refused this GPU pool to the account ({action}): {text}",
                    "try the next offer",
                )
            return ProviderError(
                ProviderErrorKind.AUTH,
                f"RunPod refused the key access while trying to {action}: {text}",
                missing_key_fix(KEYS),
            )
        if status == 402:
            return ProviderError(
                ProviderErrorKind.FUNDS, f"RunPod refused to {action}: {text}", "add credit at runpod.io > Billing"
            )
        if status == 429:
            err = ProviderError(
                ProviderErrorKind.RATE_LIMIT, f"RunPod rate limit while trying to {action}", "wait a minute and retry"
            )
            err.retry_after_s = wait_asked(retry_after, quota)
            return err
        if status >= 500:
            return ProviderError(
                ProviderErrorKind.SERVER,
                f"RunPod server error {status} while trying to {action}: {text}",
                "retry later; see status.runpod.io",
            )
        if status == 404:
            return ProviderError(ProviderErrorKind.GONE, f"RunPod: {text} ({action})")
        if creating and status == 400:  # no capacity for this GPU here, or a rule broken: next candidate
            return ProviderError(
                ProviderErrorKind.NO_CAPACITY,
                f"RunPod could not place the pod ({action}): {text}",
                "try another offer or card",
            )
        return ProviderError(
            ProviderErrorKind.BAD_REQUEST,
            f"RunPod rejected the request to {action} ({status}): {text}",
            "check the card, image and disk size",
        )

    def _send(self, method: str, url: str, key: str, action: str, **kw: Any) -> tuple[Any, Any]:
        """One HTTP request with the key: (``requests.Response``, its JSON or None).

        The JSON is None when the body is empty or not JSON; ``kw``: ``params``/``json`` for
        ``requests.request``. A network failure or a timeout (``timeout_s``) is
        ProviderError(SERVER); the caller judges the status."""
        import requests

        try:
            r = requests.request(
                method,
                url,
                timeout=self.timeout_s,
                headers={"Authorization": f"Bearer {key}", "Accept": "application/json"},
                **kw,
            )
        except (requests.ConnectionError, requests.Timeout):
            raise ProviderError(
                ProviderErrorKind.SERVER,
                f"cannot reach RunPod at {self.url} to {action}",
                "check the network or [providers.runpod] url (RUNPOD_API_BASE_URL)",
            ) from None
        try:
            return r, (r.json() if r.content else None)
        except ValueError:
            return r, None

    def _rest(
        self,
        method: str,
        path: str,
        action: str,
        params: dict | None = None,
        body: dict | None = None,
        retries: bool = True,
        creating: bool = False,
    ) -> tuple[int, Any]:
        """One v2 call: (status, parsed JSON or None).

        2xx only; every other status is a ProviderError of the kind the spec's status means
        (``_status_error``), retried under ``retry`` only when it is a 429, a 5xx or no answer
        (``retries``: False for one try). A 2xx whose body is not JSON raises ProviderError(SERVER)
        at once, never retried (``unexpected_reply``). ``path`` is already quoted."""

        key = self._key()
        url = self.url + path

        def once():
            r, payload = self._send(method, url, key, action, params=params, json=body)
            if not 200 <= r.status_code < 300:
                raise self._status_error(
                    r.status_code, payload, action, creating, r.headers.get("Retry-After"), r.headers.get("RateLimit")
                )
            if r.content and payload is None:  # a web page in a 2xx: the same again on a retry
                raise unexpected_reply(f"RunPod answered with something that is not JSON while trying to {action}")
            return r.status_code, payload

        return call_with_retries(once, self.retry) if retries else once()

    def _object(self, payload: Any, key: str | None, action: str) -> Any:
        if not isinstance(payload, dict) or (key is not None and key not in payload):
            raise ProviderError(
                ProviderErrorKind.SERVER, f"RunPod's answer to {action} is not the documented shape", "retry later"
            )
        return payload if key is None else payload[key]

    def _graphql(self, query: str, action: str) -> dict:
        """One ``POST <url>/graphql`` of ``{"query": query}``: the parsed JSON object, errors included.

        GraphQL answers its errors in a 200 (``{"errors": [...]}``), returned as they are for the
        caller to read (so is any other status with a JSON object). A 401 is ProviderError(AUTH),
        never retried; a 5xx is SERVER and a 429 RATE_LIMIT, both retried under the policy like
        every call (``_status_error``; a gateway's 502 page too). A reply that is not a JSON object
        (a 200 web page, a 404's plain page once GraphQL is retired) is SERVER raised at once, never
        retried (``unexpected_reply``): the same POST gets the same page, and runpod's own GraphQL
        helper retries nothing (provider_errors.py)."""

        key = self._key()
        url = self.url + "/graphql"

        def once() -> dict:
            r, payload = self._send("POST", url, key, action, json={"query": query})
            if r.status_code == 401 or r.status_code == 429 or r.status_code >= 500:
                raise self._status_error(
                    r.status_code, payload, action, False, r.headers.get("Retry-After"), r.headers.get("RateLimit")
                )
            if not isinstance(payload, dict):  # a web page or a plain 404: the same again on a retry
                raise unexpected_reply(
                    f"RunPod answered with a web page or no data while trying to {action} (HTTP {r.status_code})",
                    "retry later; see status.runpod.io",
                )
            return payload

        return call_with_retries(once, self.retry)
