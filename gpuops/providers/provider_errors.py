"""How a provider call fails: ``ProviderErrorKind`` (what retry and next-offer decide on) and ``ProviderError``.

Below both the base (``gpuops.providers.base``, which re-exports them) and the HTTP guard
(``gpuops.providers.http_guard``, which raises them)."""

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
    # Whether another try may help, where the provider's own client says (None: by ``kind``).
    # Vast: a 500 is its application's answer and is not retried, a 502/503/504 its gateway's.
    transient: bool | None = None

    def __init__(self, kind: ProviderErrorKind, message: str, fix: str | None = None, instance_id: str | None = None):
        super().__init__(message, fix)
        self.kind = kind
        self.instance_id = instance_id

    @property
    def retryable(self) -> bool:
        """Worth another try: a rate limit or a server error, unless ``transient`` says otherwise."""
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
