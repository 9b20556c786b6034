"""RunPod's own billing, parsed into ``ledger.billing.ChargeLine`` records.

Pure: no HTTP (``RunPodProvider.billing`` fetches the records).

v2 billing: ``GET /v2/billing/pods`` and ``GET /v2/billing/network-volumes`` with startTime,
endTime (date-time) and bucketSize (hour: the finest, so a month boundary falls between
records), answering ``{"records": [...], "metadata": {...}}``; a pod record is
{startTime, endTime, podId, totalAmount, gpuAmount, cpuAmount, diskAmount}, a volume record
{startTime, endTime, networkVolumeId, totalAmount, standardAmount, highPerformanceAmount}
(RunPod's OpenAPI spec, api-reference-v2/openapi.json). Billing unit: per second
(docs.runpod.io/pods/pricing; the registry's ``billing_increment_s``).

The route has no pagination and no per-pod filter: one reply holds every record of the window,
one per pod per hour. Past the reply cap (``RetryPolicy.max_reply_bytes``, 16 MiB: about 140
pod-months of hourly records) the call fails (ProviderError SERVER, "over the cap"): ``ledger
sync`` then says RunPod was not compared, never a partial sum."""

from __future__ import annotations

import math
from typing import Any

from gpuops.providers.runpod.client import NAME, parse_time
from ledger.billing import ChargeLine

BUCKET = "hour"
# A record's totalAmount and the sum of its parts may differ by rounding; a cent or more is a
# difference (USD): the part outside GPU + CPU + disk is booked as ``other`` and flagged.
PARTS_TOLERANCE_USD = 0.005


def money(rec: dict, k: str) -> float:
    """The USD amount ``rec[k]``; 0.0 when it is missing or not a finite number."""
    v = rec.get(k)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0


def charge_lines(pod_records: list[Any], volume_records: list[Any]) -> list[ChargeLine]:
    """Charge lines of RunPod's pod and network-volume billing records.

    Per pod record a ``gpu`` line (gpuAmount + cpuAmount: compute time), a ``storage`` line
    (diskAmount: the pod's disk, billed running or stopped) and, when ``totalAmount`` exceeds those
    parts by a cent or more, an ``other`` line of the rest (a fee outside the three; booked with the
    compute) with a ``note``; parts that exceed ``totalAmount`` leave a ``note`` on the first line.
    ``ledger sync`` flags every note;
    per volume record an account-level ``storage`` line (instance_id None, the volume named in its
    description). Amounts USD; each record's own window (epoch s). A record with no time, pod or
    amount is skipped: not a charge we can attribute."""
    out = []
    for rec in pod_records:
        if not isinstance(rec, dict):
            continue
        start, end, pod = parse_time(rec.get("startTime")), parse_time(rec.get("endTime")), rec.get("podId")
        if start is None or end is None or not isinstance(pod, str):
            continue  # a record we cannot place in time or on a pod is not a charge we can attribute
        compute, disk = money(rec, "gpuAmount") + money(rec, "cpuAmount"), money(rec, "diskAmount")
        total = money(rec, "totalAmount")
        rest = round(total - compute - disk, 6)  # what totalAmount holds beyond GPU + CPU + disk
        when = f"{rec.get('startTime')}..{rec.get('endTime')}"
        note = (
            f"pod {pod} {when}: GPU + CPU + disk ${compute + disk:.4f} exceed totalAmount ${total:.4f} by ${-rest:.4f}"
            if rest <= -PARTS_TOLERANCE_USD
            else ""
        )
        if compute > 0:
            out.append(
                ChargeLine(NAME, pod, compute, start, end, kind="gpu", description=f"pod {pod} compute", note=note)
            )
            note = ""
        if disk > 0:
            out.append(
                ChargeLine(NAME, pod, disk, start, end, kind="storage", description=f"pod {pod} disk", note=note)
            )
            note = ""
        if rest >= PARTS_TOLERANCE_USD:  # a fee outside the three parts: booked with the compute, and flagged
            out.append(
                ChargeLine(
                    NAME,
                    pod,
                    rest,
                    start,
                    end,
                    kind="other",
                    description=f"pod {pod}: totalAmount beyond GPU + CPU + disk",
                    note=f"pod {pod} {when}: totalAmount ${total:.4f} is ${rest:.4f} more than GPU + CPU + disk "
                    f"${compute + disk:.4f}: booked as other",
                )
            )
    for rec in volume_records:
        if not isinstance(rec, dict):
            continue
        start, end = parse_time(rec.get("startTime")), parse_time(rec.get("endTime"))
        usd = money(rec, "totalAmount")
        if start is None or end is None or usd <= 0:
            continue
        out.append(
            ChargeLine(
                NAME,
                None,
                usd,
                start,
                end,
                kind="storage",
                description=f"network volume {rec.get('networkVolumeId') or '?'}",
            )
        )
    return out
