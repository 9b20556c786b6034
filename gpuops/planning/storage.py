"""``gpuops plan storage``: keep the weights on a volume, or fetch them again every run?

Every kind of data gets a home, chosen by "is keeping it cheaper than
fetching it again?". Code lives in git (a clone takes seconds: refetch). Results are copied home
after every run (gpuops.rental.results), and also kept on the volume when one is mounted. Weights are the
only real question, answered with these numbers:

- weights bytes: the checkpoint's stored size when the model names one (safetensors), else
  parameters x bytes per ``dtype`` (gpuops.planning.sizing);
- volume: ``ceil(weights GB x VOLUME_HEADROOM)`` GB at the provider's storage price per GB-month
  (its volume service's ``usd_per_month``, gpuops.providers.volumes, unless
  ``--usd-per-gb-month``), billed every month whether or not a box runs;
- refetch: ``bytes x 8 / (Gbit/s x 10^9)`` seconds per run, paid at the box's hourly price
  (the box bills while it downloads); per month x ``runs_per_month``;
- break-even: volume USD/month / refetch USD per run (runs per month above which the volume wins).

The bootstrap target (a box ready to run code within five minutes) is checked too: a download longer
than ``BOOTSTRAP_TARGET_S`` alone misses it, which argues for the volume whatever the money says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuops.errors import BadInput

VOLUME_HEADROOM = 1.10  # the volume also holds the HF cache metadata and the uv/pip wheel cache
BOOTSTRAP_TARGET_S = 300.0  # from boot to running GPU code in at most 5 minutes
DEFAULT_GBPS = 1.0  # Gbit/s (10^9 bit/s) from the box to the Hugging Face CDN; measure yours with the bench


@dataclass(frozen=True)
class StoragePlan:
    """The keep-or-refetch arithmetic for one model. Bytes; GB = 10^9 B; USD; seconds."""

    model: str
    weights_bytes: int
    weights_source: str
    provider: str
    volume_gb: int
    usd_per_gb_month: float
    volume_usd_per_month: float
    price_source: str
    download_gbps: float
    download_seconds: float
    card: str
    box_usd_per_hour: float
    refetch_usd_per_run: float
    runs_per_month: int
    refetch_usd_per_month: float
    break_even_runs: float | None
    recommendation: str
    reasons: tuple[str, ...]

    def as_json(self) -> dict:
        return {
            k: getattr(self, k) if not isinstance(getattr(self, k), tuple) else list(getattr(self, k))
            for k in self.__dataclass_fields__
        }


def _positive(value, flag: str, example: str, integer: bool = False) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{flag} must be a number, got {value!r}", f"e.g. {flag} {example}") from None
    if not math.isfinite(x) or x <= 0 or (integer and x != int(x)):
        raise BadInput(
            f"{flag} must be a positive {'whole ' if integer else ''}number, got {value!r}", f"e.g. {flag} {example}"
        )
    return x


def storage_plan(
    model: str,
    *,
    runs_per_month="20",
    download_gbps=str(DEFAULT_GBPS),
    provider: str = "runpod",
    dtype: str = "bf16",
    card: str | None = None,
    usd_per_hour=None,
    usd_per_gb_month=None,
) -> StoragePlan:
    """The plan for ``model`` (anything ``gpuops plan --model`` takes).

    ``runs_per_month``: boxes started per month that need the weights; ``download_gbps``: Gbit/s
    from the box to the hub; ``provider``: one with volumes (the registry's ``WITH_VOLUMES``, whose
    storage price applies); ``card``:
    the box whose price a download burns (default: the cheapest catalog card the model fits, at its
    reference price); ``usd_per_hour`` / ``usd_per_gb_month`` override the prices. Raises BadInput
    (bad numbers, a model that cannot be read, a card that cannot hold it)."""
    from gpuops.planning import sizing as planner
    from gpuops.planning.models import load_model
    from gpuops.providers import REGISTRY, WITH_VOLUMES

    runs = int(_positive(runs_per_month, "--runs-per-month", "20", integer=True))
    gbps = _positive(download_gbps, "--download-gbps", "1")
    if provider not in WITH_VOLUMES:
        raise BadInput(
            f"--provider must be {' or '.join(WITH_VOLUMES)}, got {provider!r}",
            f"volumes exist on {' and '.join(WITH_VOLUMES)}",
        )
    service = REGISTRY[provider].volume_type
    src = load_model(model)
    p = planner.plan(src, dtype=dtype, card=card)
    if src.weights_total_size:
        wbytes, wsrc = int(src.weights_total_size), f"checkpoint ({src.stored_dtype or 'stored dtype'}), as downloaded"
    else:
        wbytes, wsrc = int(p.weights_bytes), f"{p.weights_source} ({dtype})"
    fitting = sorted((c for c in p.cards if c.fits), key=lambda c: c.usd_per_hour)
    if usd_per_hour is not None:
        price = _positive(usd_per_hour, "--usd-per-hour", "1.5")
        card_name = card or "given"
    elif fitting:
        price, card_name = float(fitting[0].usd_per_hour), fitting[0].card.name
    else:
        raise BadInput(
            f"no catalog card{' ' + card if card else ''} holds {p.model}",
            "pass --usd-per-hour, or --card with one that fits",
        )
    gb = wbytes / 1e9
    vol_gb = max(1, math.ceil(gb * VOLUME_HEADROOM))
    if usd_per_gb_month is not None:
        per_gb = _positive(usd_per_gb_month, "--usd-per-gb-month", "0.07")
        vol_usd, psrc = vol_gb * per_gb, "given (--usd-per-gb-month)"
    else:
        vol_usd, per_gb, psrc = service.usd_per_month(vol_gb), service.usd_per_gb_month, service.price_source
    secs = wbytes * 8 / (gbps * 1e9)
    per_run = secs / 3600.0 * price
    per_month = per_run * runs
    breakeven = vol_usd / per_run if per_run > 0 else None
    reasons = [
        "code: in git, cloned on every box (seconds; nothing to keep)",
        "results: copied home with sha256 after every run, and kept on the volume when one is mounted (gpuops.rental.results)",
    ]
    keep = breakeven is not None and runs > breakeven
    if keep:
        reasons.append(
            f"weights: {runs} runs/month x {per_run:.4f} USD = {per_month:.2f} USD/month refetching > "
            f"{vol_usd:.2f} USD/month for a {vol_gb} GB volume (break-even {breakeven:.1f} runs)"
        )
    else:
        reasons.append(
            f"weights: {runs} runs/month x {per_run:.4f} USD = {per_month:.2f} USD/month refetching <= "
            f"{vol_usd:.2f} USD/month for a {vol_gb} GB volume (break-even {breakeven:.1f} runs)"
            if breakeven
            else "weights: free to refetch"
        )
    slow = secs > BOOTSTRAP_TARGET_S
    if slow:
        reasons.append(
            f"time: the download alone takes {secs / 60:.1f} min, over the 5-minute bootstrap target (boot to running GPU code): "
            "only a warm volume meets it"
        )
    if service.plan_note:
        reasons.append(f"note: {service.plan_note}")
    rec = "keep the weights on a volume" if keep or slow else "refetch the weights every run (no volume)"
    return StoragePlan(
        model=p.model,
        weights_bytes=wbytes,
        weights_source=wsrc,
        provider=provider,
        volume_gb=vol_gb,
        usd_per_gb_month=per_gb,
        volume_usd_per_month=round(vol_usd, 4),
        price_source=psrc,
        download_gbps=gbps,
        download_seconds=round(secs, 1),
        card=card_name,
        box_usd_per_hour=price,
        refetch_usd_per_run=round(per_run, 6),
        runs_per_month=runs,
        refetch_usd_per_month=round(per_month, 4),
        break_even_runs=round(breakeven, 2) if breakeven else None,
        recommendation=rec,
        reasons=tuple(reasons),
    )
