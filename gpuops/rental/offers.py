"""`gpuops offers`: one ranked list across the configured providers (the service; ``gpuops.render.offers`` prints it).

The cli parses flags and calls ``find_offers``, then ``gpuops.render.offers.render``.

Ranking is ``gpuops.planning.offers.rank``: offers that fit the VRAM asked for, then cheapest (the minimum
bid for interruptible offers), reliability as the tie-break.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from gpuops.errors import BadInput
from gpuops.planning.offers import OffersResult
from gpuops.providers.base import Offer, OfferQuery, ProviderError, ProviderErrorKind

if TYPE_CHECKING:
    from gpuops.config import Settings

GB = 10**9
GIB = 2**30
# The longest `offers` waits for one provider (all are asked at once): past it, that provider is
# named as not answering and the others' offers are shown. A marketplace search normally answers
# in 1-3 s; the SDKs' own retries can take much longer on an unreachable host.
OFFERS_DEADLINE_S = 20.0

# What shows a wait while it lasts: ``waiting(text)`` is a context manager whose value's ``what`` the
# wait updates (``gpuops.render.progress.waiting``).
Waiting = Callable[[str], AbstractContextManager[Any]]


@contextmanager
def _silent(what: str) -> Iterator[SimpleNamespace]:
    yield SimpleNamespace(what=what)


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
    waiting: Waiting | None = None,
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
    for name, got in ask_all(names, settings, query, deadline_s=OFFERS_DEADLINE_S, waiting=waiting):
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


def ask_all(
    names: list[str],
    settings,
    query: OfferQuery,
    deadline_s: float = OFFERS_DEADLINE_S,
    waiting: Waiting | None = None,
    ask_one: Callable[[str], list[Offer]] | None = None,
):
    """Ask every provider in ``names`` for offers at once, each in a daemon thread.

    ``ask_one(name)``: how one provider is asked (`up --provider any`: its own provider object and
    query); default ``get_provider(name, settings).offers(query)``.

    Yields ``(name, offers list | exception)`` in ``names`` order. A provider that has not answered
    ``deadline_s`` seconds after the start yields a ProviderError (its thread is abandoned: a
    daemon, it cannot hold the process). While waiting, stderr (a terminal) shows who is still asked
    and for how long through ``waiting`` (the cli passes ``gpuops.render.progress.waiting``; None: nothing shown)."""
    import threading
    import time

    from gpuops.providers import get_provider

    answers: dict[str, object] = {}
    done = threading.Condition()
    # Built here, not in the threads: a provider that cannot be used (BadInput: a demo's data dir
    # with a real API) stops the command with its one line before anything is asked.
    built = {} if ask_one is not None else {name: get_provider(name, settings) for name in names}

    def ask(name: str) -> None:
        try:
            got: object = ask_one(name) if ask_one is not None else built[name].offers(query)
        except Exception as e:  # named below, never raised from a thread
            got = e
        with done:
            answers[name] = got
            done.notify_all()

    for name in names:
        threading.Thread(target=ask, args=(name,), name=f"gpuops-offers-{name}", daemon=True).start()
    end = time.monotonic() + deadline_s
    with (waiting or _silent)(f"asking {', '.join(names)} for offers") as w:
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
