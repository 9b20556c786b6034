"""Renting the first offer that still exists: try ranked offers in order, at most ``max_offers``.

The one next-offer loop, for one provider or several (``up --provider any``): the ranked offers
may come from every provider taking part, each created on its own provider.

- The offer's reason (``ProviderError.try_next_offer``: out of stock, taken, the bid under its
  minimum) moves on to the next offer, on any provider; it costs nothing (no instance was made,
  or the one made is destroyed first).
- The account's reason (``ProviderError.account_refused``: a rejected key, no credit) skips that
  provider's remaining offers for this rent (``on_provider_skipped``, once per provider); the
  other providers' offers are still tried.
- A 5xx that the create's own retries could not clear up moves on too, after its label look-up
  (below): the next offer may be on a provider that answers.
- Anything else stops at once (a refused request, a bad image: no other offer would take it).

A create that answered an error and may have made the instance anyway is looked up by its label
before the next try (the create's own retries already do this after a 5xx:
``retry.create_with_retries``); an instance found, or named by the error
(``ProviderError.instance_id``), is booked (``on_leftover``) and destroyed before going on. A
leftover whose destroy fails, or whose look-up fails, stops the loop with that error: a second box
is never rented beside one that may still bill.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuops.providers.base import CreateSpec, Instance, Offer, Provider, ProviderError, ProviderErrorKind


@dataclass
class RentResult:
    """The instance, the offer it came from, and the offers skipped with their error kind."""

    instance: Instance
    offer: Offer
    skipped: list[tuple[Offer, str]] = field(default_factory=list)


def rent_first(
    provider: Provider | Mapping[str, Provider],
    ranked: list[Offer],
    spec: CreateSpec | Callable[[Offer], CreateSpec],
    max_offers: int = 3,
    on_attempt: Callable[[Offer], None] | None = None,
    on_skip: Callable[[Offer, ProviderError], None] | None = None,
    on_leftover: Callable[[Offer, ProviderError], None] | None = None,
    on_provider_skipped: Callable[[str, ProviderError], None] | None = None,
    deadline_s: float | None = None,
) -> RentResult:
    """Create an instance from the first of ``ranked`` (already ranked) that works.

    ``provider``: one provider, or the providers taking part by name (an offer of a provider not
    among them is not tried). ``spec``: one CreateSpec, or a function of the offer (the bid
    differs per offer). ``on_attempt(offer)`` runs before each create (write/refresh the ledger
    intent there); ``on_skip(offer, error)`` after each offer that failed for the offer's reason;
    ``on_leftover(offer, error)`` when a failed create still left ``error.instance_id`` (book it),
    before it is destroyed; ``on_provider_skipped(name, error)`` once when a provider refused the
    account. ``deadline_s``: seconds from the first create after which no new create starts
    (None: no limit but ``max_offers``). At most ``max_offers`` creates in all.

    Raises the create's ProviderError when it is neither the offer's nor the account's reason, the
    account error when every provider left refused the account, or one error (the offers' kind
    when they all failed alike, else NO_CAPACITY) when the tries ran out.
    """
    providers: Mapping[str, Provider] = provider if isinstance(provider, Mapping) else {provider.name: provider}
    spec_for = spec if callable(spec) else (lambda _offer: spec)
    names = ", ".join(providers)
    pool = [o for o in ranked if o.provider in providers]
    if not pool:
        raise ProviderError(
            ProviderErrorKind.NO_CAPACITY,
            f"no {names} offer to rent",
            "widen the search: another card, --max-price, or another provider",
        )
    skipped: list[tuple[Offer, str]] = []
    refused: dict[str, ProviderError] = {}
    offer_errors: list[ProviderError] = []
    tries = 0
    end = None if deadline_s is None else time.monotonic() + deadline_s
    for offer in pool:
        if offer.provider in refused:
            continue
        if tries >= max(1, max_offers) or (end is not None and tries and time.monotonic() >= end):
            break
        prov = providers[offer.provider]
        tries += 1
        if on_attempt is not None:
            on_attempt(offer)
        try:
            return RentResult(prov.create(offer, spec_for(offer)), offer, skipped)
        except ProviderError as e:
            if e.account_refused and not e.instance_id:
                # Refused before anything was made (the key, the credit): the other providers go on.
                refused[offer.provider] = e
                if on_provider_skipped is not None:
                    on_provider_skipped(offer.provider, e)
                continue
            if not (e.try_next_offer or e.kind == ProviderErrorKind.SERVER):
                try:
                    _end_leftover(prov, offer, e, on_leftover)
                except ProviderError:
                    pass  # the caller sees e.instance_id booked and destroys it again in its teardown
                raise
            if not e.instance_id:
                # An answer from a create that may have made the instance anyway (a 5xx; Vast's 200
                # {"success": false}): the next offer gets the same label, so find this one first.
                # A look-up that fails is doubt: stop here (the caller's teardown looks again).
                try:
                    found = prov.find_by_label(spec_for(offer).label)
                except ProviderError:
                    raise e from None
                if found is not None:
                    e.instance_id = found.id
            if e.instance_id:
                _end_leftover(prov, offer, e, on_leftover)  # raises when the destroy fails: no second box
            skipped.append((offer, e.kind.value))
            offer_errors.append(e)
            if on_skip is not None:
                on_skip(offer, e)
    if not offer_errors and refused:
        raise next(iter(refused.values()))
    last = offer_errors[-1] if offer_errors else None
    kinds = {e.kind for e in offer_errors}
    alike = last is not None and len(kinds) == 1 and last.kind == ProviderErrorKind.BID_TOO_LOW
    raise ProviderError(
        last.kind if alike and last is not None else ProviderErrorKind.NO_CAPACITY,
        f"{len(offer_errors)} {names} offers in a row failed for the offer's reason by the time we rented them"
        + (f" (last: {last.message})" if last is not None else ""),
        (last.fix if alike and last is not None else None) or "run again (offers move fast), or widen the search",
    )


def _end_leftover(
    prov: Provider, offer: Offer, e: ProviderError, on_leftover: Callable[[Offer, ProviderError], None] | None
) -> None:
    """Book and destroy the instance a failed create left (``e.instance_id``); nothing when there is none.

    A destroy that fails raises it: the caller's teardown destroys the booked instance again."""
    if not e.instance_id:
        return
    if on_leftover is not None:
        on_leftover(offer, e)
    prov.destroy(e.instance_id)
