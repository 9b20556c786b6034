"""Renting the first offer that still exists: try ranked offers in order, at most ``max_offers``.

Only "this offer is no longer there" errors (NO_CAPACITY, OFFER_GONE) move on to the next offer;
they cost nothing (no instance was made, nothing to book as spend). Anything else stops at once.
If a failed create still left an instance (``ProviderError.instance_id``), it is destroyed before
going on, so a retry loop never leaves a box billing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuops.providers.base import CreateSpec, Instance, Offer, Provider, ProviderError, ProviderErrorKind


@dataclass
class RentResult:
    """The instance, the offer it came from, and the offers skipped with their error kind."""

    instance: Instance
    offer: Offer
    skipped: list[tuple[Offer, str]] = field(default_factory=list)


def rent_first(
    provider: Provider,
    ranked: list[Offer],
    spec: CreateSpec | Callable[[Offer], CreateSpec],
    max_offers: int = 3,
    on_attempt: Callable[[Offer], None] | None = None,
    on_skip: Callable[[Offer, ProviderError], None] | None = None,
    on_leftover: Callable[[Offer, ProviderError], None] | None = None,
) -> RentResult:
    """Create an instance from the first of ``ranked`` (already ranked, this provider's) that works.

    ``spec``: one CreateSpec, or a function of the offer (the bid differs per offer).
    ``on_attempt(offer)`` runs before each create (write/refresh the ledger intent there);
    ``on_skip(offer, error)`` after each offer that was gone; ``on_leftover(offer, error)`` when a
    failed create still left ``error.instance_id`` (book it), before it is destroyed. Raises the
    create's ProviderError when it is not an offer-gone kind, or NO_CAPACITY when ``max_offers``
    offers were all gone.
    """
    spec_for = spec if callable(spec) else (lambda _offer: spec)
    skipped: list[tuple[Offer, str]] = []
    tried = [o for o in ranked if o.provider == provider.name][: max(1, max_offers)]
    if not tried:
        raise ProviderError(
            ProviderErrorKind.NO_CAPACITY,
            f"no {provider.name} offer to rent",
            "widen the search: another card, --max-price, or another provider",
        )
    for offer in tried:
        if on_attempt is not None:
            on_attempt(offer)
        try:
            return RentResult(provider.create(offer, spec_for(offer)), offer, skipped)
        except ProviderError as e:
            if not e.instance_id and e.try_next_offer:
                # "Gone" answered by a create that did make the instance (Vast's 200 {"success":
                # false}): the next offer gets the same label, so find this one first.
                try:
                    found = provider.find_by_label(spec_for(offer).label)
                except ProviderError:
                    found = None
                if found is not None:
                    e.instance_id = found.id
            if e.instance_id:
                if on_leftover is not None:
                    on_leftover(offer, e)
                try:
                    provider.destroy(e.instance_id)
                except ProviderError:
                    pass  # the caller still sees e.instance_id and retries the destroy in its teardown
            if not e.try_next_offer:
                raise
            skipped.append((offer, e.kind.value))
            if on_skip is not None:
                on_skip(offer, e)
    raise ProviderError(
        ProviderErrorKind.NO_CAPACITY,
        f"{len(tried)} {provider.name} offers in a row were gone by the time we rented them",
        "run again (offers move fast), or widen the search",
    )
