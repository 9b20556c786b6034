"""How a provider call fails: ``ProviderErrorKind`` (what retry and next-offer decide on) and ``ProviderError``.

Below both the base (``gpuops.providers.base``, which re-exports them) and the HTTP guard
(``gpuops.providers.http_guard``, which raises them).

What is tried again (``ProviderError.retryable``, read by ``retry.py``) is only what is transient:
a 429, a 5xx (on Vast only its gateway's 502/503/504), a timeout and a connection error. A 4xx
other than 429 maps to a kind that is never retried (AUTH, FUNDS, GONE, BAD_REQUEST, ...), and a
reply that is not the JSON the call expects -- a 2xx web page, a 404's plain page where JSON was
asked for -- is ``unexpected_reply``: raised at once, never retried, since the same request gets
the same page. That is what the providers' own clients and specs say: vastai 1.9.1 retries 429,
502, 503, 504, ``ConnectionError`` and ``Timeout`` only (``vastai/api/client.py``
``_RETRYABLE_STATUS``) and raises a 2xx's non-JSON body (``JSONDecodeError``) at once; runpod
1.12.0's GraphQL helper retries nothing (``runpod/api/graphql.py``: one ``requests.post``, a web
page is a ``JSONDecodeError``); RunPod's REST v2 spec (``createPod``: "Which failures are worth
retrying") retries 429 (``Retry-After``) and 5xx ("transient upstream failure") and nothing else
(RunPod's published REST v2 OpenAPI document).
A 408 is mapped by neither client and is not retried; a reply over the size cap (http_guard) is
SERVER and tried again like a 5xx."""

from __future__ import annotations

import enum

from gpuops.errors import GpuopsError


class ProviderErrorKind(str, enum.Enum):
    AUTH = "auth"
    NO_CAPACITY = "no_capacity"
    OFFER_GONE = "offer_gone"
    RATE_LIMIT = "rate_limit"
    SERVER = "server"
    FUNDS = "insufficient_funds"
    BAD_REQUEST = "bad_request"
    GONE = "gone"
    UNSUPPORTED = "unsupported"
    # A wait ran past its deadline (no SSH port, stuck loading); the instance must be destroyed.
    TIMEOUT = "timeout"
    # An interruptible instance was outbid/reclaimed (Vast: stopped while intended running).
    PREEMPTED = "preempted"
    # The bid was under the offer's minimum; Vast may still have made a stopped instance (id kept).
    BID_TOO_LOW = "bid_too_low"


class ProviderError(GpuopsError):
    """A provider call failed.

    ``kind`` drives retry/next-offer decisions; ``instance_id`` is set when the failed call still
    left an instance behind (it must be destroyed)."""

    exit_code = 1
    retry_after_s: float | None = None  # the server's Retry-After, seconds, when it sent one (providers.retry)
    # Whether another try may help, where the kind alone does not say (None: by ``kind``).
    # Vast: a 500 is its application's answer and is not retried, a 502/503/504 its gateway's;
    # a reply that is not the JSON asked for is SERVER and not transient (``unexpected_reply``).
    transient: bool | None = None

    def __init__(self, kind: ProviderErrorKind, message: str, fix: str | None = None, instance_id: str | None = None):
        super().__init__(message, fix)
        self.kind = kind
        self.instance_id = instance_id

    @property
    def retryable(self) -> bool:
        """Worth another try: a rate limit or a server error, unless ``transient`` says otherwise.

        A server error is a 5xx, a timeout or no connection; ``transient`` is False for Vast's 500
        and for a reply that is not the JSON asked for (``unexpected_reply``)."""
        if self.transient is not None:
            return self.transient
        return self.kind in (ProviderErrorKind.RATE_LIMIT, ProviderErrorKind.SERVER)

    @property
    def try_next_offer(self) -> bool:
        """The offer's reason (out of stock, taken, the bid under its minimum): the next offer may work."""
        return self.kind in (ProviderErrorKind.NO_CAPACITY, ProviderErrorKind.OFFER_GONE, ProviderErrorKind.BID_TOO_LOW)

    @property
    def account_refused(self) -> bool:
        """The account's reason (a rejected key, no credit): no offer of this provider can work for this `up`.

        RunPod and Vast document no separate quota answer; a quota refusal arrives as one of these."""
        return self.kind in (ProviderErrorKind.AUTH, ProviderErrorKind.FUNDS)


def unexpected_reply(message: str, fix: str | None = "retry later") -> ProviderError:
    """A reply that is not the JSON the call expects (a 2xx web page, a 404's plain page): SERVER, never retried.

    ``message``: the one line naming the call. Kind SERVER (a create answered so is still looked up
    by its label, ``retry.create_with_retries``), ``transient`` False: the call raises it at once
    (the module docstring has the rule and its sources)."""
    err = ProviderError(ProviderErrorKind.SERVER, message, fix)
    err.transient = False
    return err
