"""The money checks `up` makes before renting: does price x max_hours fit, and is renting refused.

Pure arithmetic in ``check_budget``; ``assert_not_refused`` reads the refusals the watchdog sets
when a balance floor or the monthly cap is crossed (ledger/limits.py).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING

from gpuops.errors import BadInput

if TYPE_CHECKING:
    from gpuops.providers.base import Balance
    from ledger.books import Books


def check_budget(
    price_usd_h: float,
    max_hours: float,
    balance: float | None,
    floor: float | None,
    month_spent: float | None,
    cap: float | None,
) -> float:
    """Refuse a rental whose worst case does not fit the money left; return the worst case (USD).

    Worst case = ``price_usd_h`` (USD/hour, whole box) x ``max_hours`` (the TTL, hours). It must
    fit in ``balance - floor`` (USD; the provider's credit minus ``balance_floor_usd``, floor 0
    when unset; skipped when the provider reports no balance) and in ``cap - month_spent`` (USD;
    ``monthly_cap_usd`` minus the ledger's month-to-date spend; skipped when no cap).

    Raises BadInput naming the shortfall in USD and the largest ``max_hours`` that would fit, and
    for a price, TTL, balance or spend that is not a finite number (NaN compares false with
    everything, so it would pass every limit), a negative price or a TTL that is not positive.
    """
    import math

    if not isinstance(price_usd_h, (int, float)) or not math.isfinite(price_usd_h) or price_usd_h < 0:
        raise BadInput(
            f"price {price_usd_h!r} USD/h is not a finite number >= 0: refusing to rent",
            "the provider's price is not a price; pick another offer, --card or --provider",
        )
    if not isinstance(max_hours, (int, float)) or not math.isfinite(max_hours) or max_hours <= 0:
        raise BadInput(f"max_hours {max_hours!r} is not a finite number > 0", "pass --max-hours, e.g. --max-hours 2")
    for what, v in (("balance", balance), ("floor", floor), ("month-to-date spend", month_spent), ("monthly cap", cap)):
        if v is not None and (not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise BadInput(
                f"{what} {v!r} is not a finite number: cannot check the budget, refusing to rent",
                "check the provider balance and `gpuops ledger month` for a row with a broken cost",
            )
    need = price_usd_h * max_hours
    limits = []
    if balance is not None:
        fl = floor or 0.0
        limits.append(
            (
                balance - fl,
                f"balance ${balance:.2f} minus floor ${fl:.2f}",
                "top up the account, or lower balance_floor_usd",
                "balance_floor",
            )
        )
    if cap is not None:
        spent = month_spent or 0.0
        limits.append(
            (
                cap - spent,
                f"monthly cap ${cap:.2f} minus ${spent:.2f} spent this month",
                "raise monthly_cap_usd",
                "monthly_cap",
            )
        )
    for room, what, remedy, limit in limits:
        if need > room + 1e-9:
            short = need - room
            fits_h = max(0.0, room) / price_usd_h if price_usd_h > 0 else 0.0
            err = BadInput(
                f"${price_usd_h:.4f}/h x {max_hours:g} h = ${need:.2f} does not fit in {what} = ${room:.2f}: short by ${short:.2f}",
                f"use --max-hours {fits_h:.2f} or less, a cheaper offer, or {remedy}"
                if fits_h >= 0.01
                else f"{remedy}; nothing fits now",
            )
            err.limit = limit
            raise err
    return round(need, 6)


def month_start_end(now: float | None = None) -> tuple[float, float]:
    """[start, end) epoch seconds of the local calendar month containing ``now``."""
    from ledger.periods import month_bounds  # not ledger.reports: the cap needs no report code

    now = time.time() if now is None else now
    return month_bounds(datetime.fromtimestamp(now).strftime("%Y-%m"))


def assert_not_refused(ledger: Books, provider: str, account: str | None = None, owner: str | None = None) -> None:
    """Raise BadInput when the watchdog refuses new boxes for ``provider`` to this account and owner.

    Raise BadInput when the watchdog refuses new boxes for ``provider`` (or for all) to this
    provider ``account`` / ``owner`` (a refusal recorded for another account or user does not count;
    one recorded for everyone does: gpuops.ownership.refused_by)."""
    from gpuops.ownership import refused_by
    from ledger.limits import active_refusals

    for r in active_refusals(ledger):
        if refused_by(r, provider, account, owner or ""):
            since = datetime.fromtimestamp(r.set_at).strftime("%Y-%m-%d %H:%M")
            err = BadInput(
                f"new boxes refused ({r.reason}, since {since}): {r.detail}",
                "top up the account"
                if r.reason == "balance_floor"
                else "raise teardown.monthly_cap_usd or wait for next month",
            )
            err.limit = r.reason if r.reason in ("balance_floor", "monthly_cap") else None
            raise err


def floor_unenforced(provider: str, floor: float, cap: float | None, why: str) -> str:
    """The one line every view that shows the balance floor says when the balance cannot be read.

    ``floor``/``cap``: ``balance_floor_usd``/``monthly_cap_usd`` (USD; ``cap`` None when unset);
    ``why``: the provider's note (``Balance.note``) or error. The floor cannot be enforced; the
    monthly cap, which the books enforce, stands in, and without one `up` refuses."""
    stands = (
        f"the monthly cap ${cap:.2f} (monthly_cap_usd, enforced by the books) stands in"
        if cap is not None
        else "no monthly_cap_usd is set to stand in, so `up` refuses to rent"
    )
    return (
        f"{provider}: the balance floor ${floor:.2f} cannot be enforced: the balance cannot be read ({why}); {stands}"
    )


def read_balance(provider) -> Balance:
    """``provider.balance()``, where every failure but a rejected key is the one "cannot be read".

    Returns the provider's ``Balance``; a ProviderError other than AUTH (5xx, rate limit, an
    unreachable host, all retried first; a web page or a 404 where JSON was asked, not retried)
    becomes ``Balance(usd=None, note=its message)``
    (``Balance.unreadable``). Raises ProviderError(AUTH): a rejected key is the user's to fix."""
    from gpuops.providers.base import Balance, ProviderError, ProviderErrorKind

    try:
        return provider.balance()
    except ProviderError as e:
        if e.kind == ProviderErrorKind.AUTH:
            raise
        return Balance(usd=None, note=e.message)


def budget_for_up(ledger: Books, settings, provider, price_usd_h: float) -> float:
    """What `up` calls before the intent row.

    Refusals, then ``check_budget`` with the provider's balance and the ledger's month-to-date
    spend. Returns the worst case USD. A balance that cannot be read (``read_balance``: a note, an
    error page, a retired API) with ``balance_floor_usd`` set: the floor cannot be enforced, and
    the monthly cap stands in (a warning says so, ``floor_unenforced``); with no
    ``monthly_cap_usd`` either, BadInput (limit ``balance_floor``) naming ``monthly_cap_usd``,
    before anything is rented. Without a floor the balance check is skipped. Raises
    ProviderError(AUTH) for a rejected key."""
    from gpuops.ownership import account_of
    from ledger.limits import month_spend

    owner = settings.owner()
    assert_not_refused(ledger, provider.name, account_of(provider), owner)
    t = settings.teardown
    bal = read_balance(provider)
    balance = bal.usd
    if bal.unreadable and t.balance_floor_usd is not None:
        line = floor_unenforced(provider.name, t.balance_floor_usd, t.monthly_cap_usd, bal.note)
        if t.monthly_cap_usd is None:
            err = BadInput(line, "set [teardown] monthly_cap_usd (the books enforce it), or unset balance_floor_usd")
            err.limit = "balance_floor"
            raise err
        import logging

        logging.getLogger("gpuops.teardown.budget").warning("%s", line)
    spent = None
    if t.monthly_cap_usd is not None:
        spent = month_spend(ledger, *month_start_end(), owner=None if t.limits_scope == "team" else owner)
    return check_budget(price_usd_h, t.max_hours, balance, t.balance_floor_usd, spent, t.monthly_cap_usd)
