"""`gpuops offers`: one ranked list across the configured providers.

The command body; cli.py only parses flags and calls ``find_offers`` then ``render``.

Ranking is ``gpuops.planning.offers.rank``: offers that fit the VRAM asked for, then cheapest (the minimum
bid for interruptible offers), reliability as the tie-break.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuops.errors import BadInput
from gpuops.providers.base import Offer, OfferQuery, ProviderError, ProviderErrorKind

if TYPE_CHECKING:
    from gpuops.config import Settings

GB = 10**9
GIB = 2**30
# The longest `offers` waits for one provider (all are asked at once): past it, that provider is
# named as not answering and the others' offers are shown. A marketplace search normally answers
# in 1-3 s; the SDKs' own retries can take much longer on an unreachable host.
OFFERS_DEADLINE_S = 20.0


@dataclass
class OffersResult:
    """Ranked offers, and one-line notes (a provider skipped or failing) for stderr."""

    offers: list[Offer]
    notes: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)


def find_offers(
    settings: Settings,
    card: str | None = None,
    vram_gb: float | None = None,
    gpu_count: int = 1,
    provider: str | None = None,
    spot: bool | None = None,
    max_price: float | None = None,
    limit: int = 20,
    model: str | None = None,
    dtype: str = "bf16",
    kv_dtype: str = "same",
    seq: int = 4096,
    batch: int = 1,
) -> OffersResult:
    """Offers from ``provider`` (or every configured marketplace; ``local`` when none is), ranked.

    ``vram_gb``: per-GPU need in GB (10^9 bytes); or ``model`` (+ dtype, kv_dtype, seq, batch):
    the need and the fitting cards from ``gpuops.planning.sizing.size_for_up``, as `up --model` rents.
    ``max_price``: USD/h for the whole box; ``spot``: True interruptible only, False on-demand only,
    None both. Raises BadInput for bad flags, and ProviderError when the named provider (or every
    provider asked) fails.
    """
    from gpuops.planning.offers import rank
    from gpuops.providers import NAMES, configured

    if gpu_count < 1:
        raise BadInput(f"--gpu-count {gpu_count} must be at least 1", "pass --gpu-count 1 or more")
    if limit < 1:
        raise BadInput(f"--limit {limit} must be at least 1", "pass --limit 1 or more")
    if vram_gb is not None and not (0 < vram_gb < float("inf")):  # also NaN and inf
        raise BadInput(
            f"--vram-gb {vram_gb:g} must be a positive number", "pass the per-GPU memory in GB, e.g. --vram-gb 40"
        )
    if max_price is not None and not (0 < max_price < float("inf")):
        raise BadInput(
            f"--max-price {max_price:g} must be a positive number",
            "pass USD per hour for the whole box, e.g. --max-price 2.5",
        )
    if provider is not None and provider not in NAMES:
        raise BadInput(f"unknown provider {provider!r}", f"use one of: {', '.join(NAMES)}")
    if model and vram_gb is not None:
        raise BadInput("--model and --vram-gb both say how much memory is needed", "pass one of them")
    cards: tuple[str, ...] = ()
    if card:
        from gpuops.catalog import resolve_cards

        cards = tuple(c.name for c in resolve_cards(card))
    need = int(vram_gb * GB) if vram_gb else 0
    if model:
        from gpuops.planning.sizing import size_for_up

        need, cards, _ = size_for_up(
            model,
            dtype=dtype,
            kv_dtype=kv_dtype,
            seq=seq,
            batch=batch,
            gpu_count=gpu_count,
            card=card or None,
            image=settings.up.image,
        )  # AMD cards only for a ROCm image or an AMD card named
    query = OfferQuery(cards=cards, gpu_count=gpu_count, min_vram_bytes=need, spot=spot, max_usd_per_hour=max_price)

    notes: list[str] = []
    if provider:
        names = [provider]
    else:
        names = configured(settings)
        if not names:
            from gpuops.providers import ACCOUNTLESS, MARKETPLACES, REGISTRY, titles

            names = list(ACCOUNTLESS)
            notes.append(
                f"no {titles(MARKETPLACES)} key found ({', '.join(REGISTRY[n].key_source.env_var for n in MARKETPLACES)}): showing this machine only"
            )
    pooled: list[Offer] = []
    errors: list[ProviderError] = []
    for name, got in ask_all(names, settings, query, deadline_s=OFFERS_DEADLINE_S):
        if isinstance(got, list):
            pooled.extend(got)
            continue
        e = (
            got
            if isinstance(got, ProviderError)
            else ProviderError(ProviderErrorKind.SERVER, f"{type(got).__name__}: {got}")
        )
        if provider:
            raise e
        if e.kind == ProviderErrorKind.UNSUPPORTED:
            notes.append(f"{name}: skipped: {e.message}")
        else:
            errors.append(e)
            notes.append(f"{name}: failed, its offers are not shown: {e}")
    if errors and len(errors) == len(names):
        raise errors[0]
    from gpuops.planning.offers import screen

    pooled, dropped = screen(pooled, gpu_count)  # NaN/negative prices, 0 GPUs, another GPU count: dropped, with a note
    notes.extend(dropped)
    ranked = rank(pooled, need_bytes_per_gpu=need, max_usd_per_hour=max_price, spot=spot, gpu_count=gpu_count)
    return OffersResult(offers=ranked[:limit], notes=notes, providers=names)


def ask_all(names: list[str], settings, query: OfferQuery, deadline_s: float = OFFERS_DEADLINE_S):
    """Ask every provider in ``names`` for offers at once, each in a daemon thread.

    Yields ``(name, offers list | exception)`` in ``names`` order. A provider that has not answered
    ``deadline_s`` seconds after the start yields a ProviderError (its thread is abandoned: a
    daemon, it cannot hold the process). While waiting, stderr (a terminal) shows who is still asked
    and for how long (``gpuops.render.progress``)."""
    import threading
    import time

    from gpuops.providers import get_provider
    from gpuops.render import progress

    answers: dict[str, object] = {}
    done = threading.Condition()

    def ask(name: str) -> None:
        try:
            got: object = get_provider(name, settings).offers(query)
        except Exception as e:  # named below, never raised from a thread
            got = e
        with done:
            answers[name] = got
            done.notify_all()

    for name in names:
        threading.Thread(target=ask, args=(name,), name=f"gpuops-offers-{name}", daemon=True).start()
    end = time.monotonic() + deadline_s
    with progress.waiting(f"asking {', '.join(names)} for offers") as w:
        with done:
            while len(answers) < len(names) and time.monotonic() < end:
                waiting_for = [n for n in names if n not in answers]
                w.what = f"asking {', '.join(waiting_for)} for offers ({len(answers)} of {len(names)} answered)"
                done.wait(timeout=min(0.2, max(0.0, end - time.monotonic())))
            got_all = dict(answers)
    for name in names:
        if name in got_all:
            yield name, got_all[name]
        else:
            yield name, ProviderError(ProviderErrorKind.TIMEOUT, f"no answer within {deadline_s:g} s")


def to_json(result: OffersResult) -> str:
    """The offers as a JSON list of ``Offer.as_json()`` objects (``gpuops.render.emit``: indent 2)."""
    from gpuops.render.emit import json_text

    return json_text([o.as_json() for o in result.offers]).rstrip("\n")


# Columns `offers` leaves out, first to last, when the terminal is too narrow (provider, card, the
# price as rented and kind stay: what `up --provider --card` rents and what it will cost). The
# offer id goes before the on-demand price: RunPod's ("community:NVIDIA GeForce RTX 4090") alone
# takes 33 of 80 cells, and `up` does not take one. The on-demand column is there only when a row
# (a spot one) has an on-demand price that differs from its own.
# Moved to the continuation table (keyed by the offer id) first to last when the terminal is too
# narrow; nothing is left out (GPUs, VRAM and region tell RunPod's secure and community rows
# apart). The offer, its card and its prices stay in the first table.
OFFERS_DROP_ORDER = ("reliability", "region", "VRAM/GPU GiB", "GPUs", "provider", "kind")


def render(result: OffersResult, console=None) -> None:
    """Print the offers as a table (VRAM in GiB, prices in USD/h) through ``gpuops.render.tables``.

    Offer ids, card names and prices never cut; columns moved to a continuation table by ``OFFERS_DROP_ORDER``. ``USD/h``
    is what the row costs rented as shown (``Offer.price``: the bid on spot); the on-demand price
    stands beside it only where it differs."""
    from gpuops.render import money
    from gpuops.render.tables import ID, NAME, NUM, Col, console as table_console, print_table, ranked

    console = console or table_console()
    if not result.offers:
        console.print(f"no offers match (asked: {', '.join(result.providers)})")
        return
    cols = [
        Col("offer", ID),
        Col("provider", ID),
        Col("card", ID),
        Col("GPUs", NUM),
        Col("VRAM/GPU GiB", NUM),
        Col("USD/h", NUM),
        Col("kind", ID),
        Col("on-demand USD/h", NUM),
        Col("reliability", NUM),
        Col("region", NAME),
    ]
    rows = [
        [
            o.offer_id,
            o.provider,
            o.card,
            str(o.gpu_count),
            f"{o.vram_bytes / GIB:.1f}",
            money.rate(o.price),
            "spot (bid)" if o.spot else ("simulated" if o.simulated else "on-demand"),
            money.rate(o.on_demand_usd_per_hour) if o.on_demand_usd_per_hour is not None else "",
            f"{o.reliability:.3f}",
            o.region,
        ]
        for o in result.offers
    ]
    if all(o.on_demand_usd_per_hour is None for o in result.offers):
        at = [c.header for c in cols].index("on-demand USD/h")
        cols.pop(at)
        rows = [r[:at] + r[at + 1 :] for r in rows]
    print_table(
        console,
        "offers: fit, then price (spot: the bid), then reliability",
        ranked(cols, OFFERS_DROP_ORDER),
        rows,
        fold=True,
    )
