"""The one retry policy (tenacity) for every bounded retry on the laptop side.

Provider calls retry what is transient only (a 429, a 5xx, a timeout, no connection: a
ProviderError's ``retryable``, decided in provider_errors.py; a 4xx or a web page where JSON was
asked is raised at once), never a create: a 5xx can hide a create
that did happen (providers' create is not idempotent), so a create's retry looks the label up
before it tries again (``create_with_retries``, run by RunPod's and Vast's ``create``). The same
policy retries ``end_rental``'s destroy (its ``destroy_failed`` event is the ``after`` hook), the
launcher's look-up by label after a failed create, and a results copy's read after a dropped
connection (``rental/results.py``). Every use is bounded: by ``attempts``, by ``budget_s`` seconds
of trying, or by an absolute ``deadline``; the backoff is ``wait_s`` doubling each retry up to
``max_wait_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from gpuops.providers.base import Instance, ProviderError

if TYPE_CHECKING:
    from tenacity import RetryCallState

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is retried: how many tries, how long between them, how long in all (seconds).

    ``attempts`` tries in all (None: until the deadline), waits growing from ``wait_s`` x2 each time
    up to ``max_wait_s``, and never more than ``budget_s`` seconds of trying (None: the attempts, or
    the caller's deadline, bound it)."""

    attempts: int | None = 4
    wait_s: float = 1.0
    max_wait_s: float = 8.0
    budget_s: float | None = 60.0
    # One provider call (its retries included) ends within this many seconds, and reads at most
    # this many bytes per HTTP reply (gpuops/providers/http_guard.py has the sources of both).
    call_deadline_s: float = 60.0
    max_reply_bytes: int = 16 * 2**20
    # A create (its look-ups by label and its retries included) ends within this many seconds: one
    # call's deadline and a whole rate-limit window (MAX_RETRY_AFTER_S) waited out.
    create_deadline_s: float = 120.0

    def for_create(self) -> RetryPolicy:
        """This policy for a create's retries (each after a label look-up found nothing).

        The same attempts and backoff, no ``budget_s`` (the create's ``create_deadline_s`` bounds
        it; rate limits are waited out within it, ``create_with_retries``)."""
        return replace(self, budget_s=None)


# A server's Retry-After is honoured up to this many seconds (the vastai SDK's own cap, 60 s).
MAX_RETRY_AFTER_S = 60.0


def wait_asked(retry_after: str | None, quota: str | None = None) -> float | None:
    """Seconds a 429 asks to wait (never negative), or None when it does not say.

    Its ``Retry-After`` (seconds), else the longest reset ``t`` of an exhausted window (``r=0``) in
    a ``RateLimit`` header (the IETF draft RunPod's spec cites: ``"minute";r=0;t=12,
    "hour";r=2800;t=1812``)."""
    try:
        if retry_after is not None and retry_after.strip():
            return max(0.0, float(retry_after))
    except ValueError:
        pass
    waits = []
    for member in (quota or "").split(","):
        params = dict(p.strip().split("=", 1) for p in member.split(";")[1:] if "=" in p)
        try:
            if float(params.get("r", "1")) <= 0:
                waits.append(max(0.0, float(params.get("t", "0"))))
        except ValueError:
            continue
    return max(waits) if waits else None


def retryable(e: BaseException) -> bool:
    """Whether ``e`` is a ProviderError worth another try (``ProviderError.retryable``: rate limit, 5xx, no answer)."""
    return isinstance(e, ProviderError) and e.retryable


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    retry_on: Callable[[BaseException], bool] = retryable,
    retry_after: bool = True,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    after: Callable[[RetryCallState], None] | None = None,
    before_sleep: Callable[[RetryCallState], None] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """``fn()``, retried per ``policy`` while ``retry_on(exception)`` holds.

    The last exception is re-raised when attempts, ``budget_s`` or ``deadline`` run out, any other
    at once.

    ``retry_after``: a ProviderError's ``retry_after_s`` (the server's Retry-After, capped at
    ``MAX_RETRY_AFTER_S``) wins over a shorter backoff. ``deadline``: an absolute ``clock()``
    time no wait may end past. ``after``: called after every failed attempt that ``retry_on``
    accepts (the last one too); ``before_sleep``: before each wait; ``sleep``: how to wait
    (default ``time.sleep``). Raises ValueError for a policy with no bound at all (no attempts,
    no ``budget_s``, no ``deadline``): every wait has a deadline.
    """
    if policy.attempts is None and policy.budget_s is None and deadline is None:
        raise ValueError("a retry needs attempts, budget_s or a deadline")
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, stop_any, wait_exponential

    backoff = wait_exponential(multiplier=policy.wait_s, max=policy.max_wait_s)  # wait_s * 2**(n-1), capped

    def wait(state: RetryCallState) -> float:
        asked = getattr(state.outcome.exception(), "retry_after_s", None) if retry_after and state.outcome else None
        return max(backoff(state), min(float(asked), MAX_RETRY_AFTER_S)) if asked else backoff(state)

    def past_deadline(state: RetryCallState) -> bool:  # the next wait would end past the deadline
        return deadline is not None and clock() + state.upcoming_sleep > deadline

    stops: list[Any] = [past_deadline]  # stop_base instances and a plain predicate: stop_any calls each
    if policy.attempts is not None:
        stops.append(stop_after_attempt(max(1, policy.attempts)))
    if policy.budget_s is not None:
        stops.append(stop_after_delay(policy.budget_s))
    return Retrying(
        retry=retry_if_exception(retry_on),
        stop=stop_any(*stops),
        wait=wait,
        after=after,  # type: ignore[arg-type]  # tenacity skips a None after (Retrying._begin_iter), its annotation says a callable
        before_sleep=before_sleep,
        sleep=sleep or time.sleep,
        reraise=True,
    )(fn)


def create_with_retries(
    create: Callable[[], T],
    find: Callable[[str], Instance | None],
    label: str,
    policy: RetryPolicy,
    asked_at: float,
) -> tuple[T | None, Instance | None]:
    """A provider's create, tried again per ``policy`` only after an ambiguous failure whose label look-up finds nothing.

    Ambiguous: a retryable ProviderError (rate limit, 5xx) or any server error (a 5xx the
    provider's client does not retry, Vast's 500), after which the instance may exist: looked up,
    tried again only when retryable.
    ``find(label)``: the live instance labelled ``label``, None when there is none or the look-up
    failed. Returns ``(create()'s answer, None)``, or ``(None, the instance found)`` with
    ``extra["recovered_after"]`` the error's message and ``created_at`` no earlier than
    ``asked_at`` (epoch seconds of the first try; providers' stamps may be whole seconds). A
    ProviderError that is not retryable is raised at once. A rate limit is waited out (the
    server's Retry-After, after the look-up) and tried again until the create's deadline (the
    enclosing call guard's, ``RetryPolicy.create_deadline_s``); ``policy.attempts`` counts the other
    ambiguous failures (5xx), the last one raised when they run out."""
    from gpuops.providers.base import ProviderErrorKind
    from gpuops.providers.http_guard import current_deadline

    others = 0  # ambiguous failures that are not rate limits

    def once() -> tuple[T | None, Instance | None]:
        nonlocal others
        try:
            return create(), None
        except ProviderError as e:
            if not (e.retryable or e.kind == ProviderErrorKind.SERVER):
                raise e from None
            if e.kind != ProviderErrorKind.RATE_LIMIT:
                others += 1
            found = find(label)
            if found is None:
                raise
            found.extra["recovered_after"] = e.message
            found.created_at = max(found.created_at or 0.0, asked_at)
            return None, found

    def again(e: BaseException) -> bool:
        return retryable(e) and (policy.attempts is None or others < policy.attempts)

    deadline = current_deadline()
    unbounded = replace(policy, attempts=None) if deadline is not None else policy
    return call_with_retries(once, unbounded, retry_on=again, deadline=deadline)
