"""Vast.ai's SDK client (vastai 1.9.1, imported on first use).

One call, its errors mapped to ``ProviderError`` kinds, under the retry policy (the SDK's own
retries off: ``retry=1``).

Errors are ``requests.HTTPError`` whose JSON body holds ``error``/``msg`` (a 429 ``detail``); a 5xx
is a server error, tried again only when it is a gateway's 502/503/504 (``TRANSIENT_STATUSES``, what
vastai's own client retries; a 500 is not, and a create's 500 is still looked up by its label);
a 429, a timeout and a connection error are tried again too, and nothing else: a 4xx maps to a
kind never retried, a 2xx whose body is not JSON is raised at once (``unexpected_reply``, as vastai
raises its ``JSONDecodeError``; provider_errors.py has the rule);
a create's 404 or ``no_such_ask``-like code is OFFER_GONE (next offer), a refused bid (the spec's
400 ``invalid_price``, whatever its words) BID_TOO_LOW, 402 or "insufficient credit" FUNDS; an id Vast leaves in the body (``new_contract``,
``instance_id``) is kept on the error so the caller destroys what the failed call made."""

from __future__ import annotations

from typing import Any

from gpuops.providers.base import ProviderError, ProviderErrorKind
from gpuops.providers.keys import Credential, missing_key_fix, redact
from gpuops.providers.provider_errors import unexpected_reply
from gpuops.providers.retry import RetryPolicy, call_with_retries, wait_asked
from gpuops.providers.vast.account import KEYS

NAME = "vast"

# The 5xx statuses Vast's own client retries as gateway/upstream errors that usually clear
# (vastai 1.9.1 vastai/api/client.py _RETRYABLE_STATUS, with 429); a 500 is Vast's application
# answering (the spec's Error body, {"success": false, "error", "msg"}) and is not retried.
TRANSIENT_STATUSES = (502, 503, 504)
_GONE_ERRORS = ("no_such_ask", "ask_not_found", "offer_unavailable", "no_such_offer", "not_available")


class VastClient:
    """The SDK half of ``VastProvider`` (and of its volumes, which call it).

    ``_call(action, fn)`` runs ``fn(sdk client)`` once, or under the retry policy, with every
    failure a ProviderError. The provider sets ``credential``, ``url`` (REST base), ``retry``,
    ``timeout_s`` (seconds per request; the call's total deadline is ``http_guard``'s) and
    ``_client`` (None until first use)."""

    credential: Credential | None
    url: str
    retry: RetryPolicy
    timeout_s: float
    _client: Any

    def _sdk(self) -> Any:
        if self.credential is None:
            raise ProviderError(ProviderErrorKind.AUTH, "no Vast.ai API key found", missing_key_fix(KEYS))
        if self._client is None:
            import logging
            import os

            from gpuops.providers.base import require_packages

            require_packages(NAME, ("vastai",))  # the volumes' calls come here too, outside a guarded call
            from vastai import VastAI

            # vastai attaches its own stderr handler to the "vastai" logger at INFO unless
            # VAST_LOG_LEVEL is set; keep library chatter out of gpuops' output.
            if not os.environ.get("VAST_LOG_LEVEL"):
                logging.getLogger("vastai").setLevel(logging.WARNING)
            self._client = VastAI(api_key=self.credential.key, server_url=self.url, retry=1)
            self._client.client.timeout = self.timeout_s
        return self._client

    def _error(self, e: Exception, action: str, creating: bool = False) -> ProviderError:
        import requests

        key = self.credential.key if self.credential else None
        if isinstance(e, requests.HTTPError) and e.response is not None:
            status = e.response.status_code
            try:
                body = e.response.json()
            except ValueError:
                body = {}
            body = body if isinstance(body, dict) else {}
            err = self._body_error(status, body, action, creating)
            # the SDK honoured Retry-After itself; with retry=1 we do
            err.retry_after_s = wait_asked(e.response.headers.get("Retry-After"))
            return err
        if isinstance(e, (requests.ConnectionError, requests.Timeout)):
            return ProviderError(
                ProviderErrorKind.SERVER,
                f"cannot reach Vast.ai at {self.url} to {action}",
                "check the network or [providers.vast] url",
            )
        if isinstance(e, ValueError):  # 2xx with a non-JSON body (a web page): the same again on a retry
            return unexpected_reply(f"Vast.ai answered with something that is not JSON while trying to {action}")
        return ProviderError(
            ProviderErrorKind.SERVER,
            f"Vast.ai call failed while trying to {action}: {type(e).__name__}: {redact(str(e), key)}",
        )

    def _body_error(self, status: int, body: dict, action: str, creating: bool) -> ProviderError:
        key = self.credential.key if self.credential else None
        code = str(body.get("error") or "").lower()
        # Vast's {"error", "msg"}; its 429 {"detail"}; a RunPod-style {"message"} read right too.
        words = next(
            (
                body[k]
                for k in ("msg", "message", "detail", "error")
                if isinstance(body.get(k), str) and body[k].strip()
            ),
            None,
        )
        text = redact(str(words or f"HTTP {status}"), key)
        low = (code + " " + text).lower()
        left = body.get("new_contract") or body.get("instance_id")
        left_id = str(left) if left else None
        if status in (401, 403) or "auth" in code or "api key" in low:
            return ProviderError(
                ProviderErrorKind.AUTH,
                f"Vast.ai rejected the API key ({self.credential.source if self.credential else 'none'}) while trying to {action}",
                missing_key_fix(KEYS),
            )
        if status == 429:
            return ProviderError(
                ProviderErrorKind.RATE_LIMIT, f"Vast.ai rate limit while trying to {action}", "wait a minute and retry"
            )
        if status >= 500:
            gateway = status in TRANSIENT_STATUSES
            err = ProviderError(
                ProviderErrorKind.SERVER,
                f"Vast.ai {'gateway' if gateway else 'server'} error {status} while trying to {action}: {text}",
                "retry later",
                instance_id=left_id,
            )
            err.transient = gateway  # as vastai's client: only the gateway's 502/503/504 are tried again
            return err
        if code == "invalid_price":  # the spec's code for a refused bid; its words vary
            return ProviderError(
                ProviderErrorKind.BID_TOO_LOW,
                f"Vast.ai refused the bid while trying to {action}: {text}",
                "bid at least the offer's min_bid (see `gpuops offers --spot`)",
                instance_id=left_id,
            )
        if status == 402 or "insufficient" in low or "credit" in low or "balance" in low:
            return ProviderError(
                ProviderErrorKind.FUNDS,
                f"Vast.ai refused to {action}: {text}",
                "add credit at cloud.vast.ai > Billing",
                instance_id=left_id,
            )
        if creating and (status == 404 or any(g in low for g in _GONE_ERRORS) or "not available" in low):
            return ProviderError(
                ProviderErrorKind.OFFER_GONE,
                f"the Vast.ai offer is gone ({action}): {text}",
                "try the next offer",
                instance_id=left_id,
            )
        if status == 404 or "no_such_instance" in low or "not found" in low:
            return ProviderError(ProviderErrorKind.GONE, f"Vast.ai: {text} ({action})")
        return ProviderError(
            ProviderErrorKind.BAD_REQUEST,
            f"Vast.ai rejected the request to {action}: {text}",
            "check the image, disk size and bid",
            instance_id=left_id,
        )

    def _call(self, action: str, fn, retries: bool = True, creating: bool = False):
        def once():
            client = self._sdk()
            try:
                return fn(client)
            except ProviderError:
                raise
            except Exception as e:  # requests/JSON/SDK errors: all mapped to kinds
                raise self._error(e, action, creating) from None

        return call_with_retries(once, self.retry) if retries else once()
