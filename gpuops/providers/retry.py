"""Bounded retries for provider calls (tenacity): only rate limits and server errors, never a create.

A create is not blindly retried: a 5xx can hide a create that did happen (providers' create is not
idempotent). The providers instead look the label up after an ambiguous create failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from gpuops.providers.base import ProviderError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all, waits growing from ``wait_s`` x2 each time up to ``max_wait_s``,
    and never more than ``budget_s`` seconds of trying (so the retry loop has a deadline too)."""

    attempts: int = 4
    wait_s: float = 1.0
    max_wait_s: float = 8.0
    budget_s: float = 60.0
    # One provider call (its retries included) ends within this many seconds, and reads at most
    # this many bytes per HTTP reply (gpuops/providers/http_guard.py has the sources of both).
    call_deadline_s: float = 60.0
    max_reply_bytes: int = 16 * 2**20


# A server's Retry-After is honoured up to this many seconds (the vastai SDK's own cap, 60 s).
MAX_RETRY_AFTER_S = 60.0


def _retryable(e: BaseException) -> bool:
    return isinstance(e, ProviderError) and e.retryable


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy) -> T:
    """``fn()``; a retryable ProviderError (rate limit, 5xx) is retried per ``policy``; the last
    error is re-raised when attempts or time run out. Other exceptions pass through at once."""
    backoff = wait_exponential(multiplier=policy.wait_s, min=policy.wait_s, max=policy.max_wait_s)

    def wait(state) -> float:
        # A rate limit that says when to come back (ProviderError.retry_after_s, from Retry-After)
        # wins over our own backoff.
        asked = getattr(state.outcome.exception(), "retry_after_s", None) if state.outcome else None
        return max(backoff(state), min(float(asked), MAX_RETRY_AFTER_S)) if asked else backoff(state)

    r = Retrying(
        retry=retry_if_exception(_retryable),
        stop=stop_after_attempt(max(1, policy.attempts)) | stop_after_delay(policy.budget_s),
        wait=wait,
        reraise=True,
    )
    try:
        return r(fn)
    except RetryError as e:  # pragma: no cover - reraise=True re-raises the ProviderError itself
        raise e.last_attempt.exception() from None
