"""RunPod's own billing, parsed into ``ledger.billing.ChargeLine`` records.

Pure: no HTTP (``RunPodProvider.billing`` fetches the records).

v2 billing: ``GET /v2/billing/pods`` and ``GET /v2/billing/network-volumes`` with startTime,
endTime (date-time) and bucketSize (hour: the finest, so a month boundary falls between
records), answering ``{"records": [...], "metadata": {...}}``; a pod record is
{startTime, endTime, podId, totalAmount, gpuAmount, cpuAmount, diskAmount}, a volume record
{startTime, endTime, networkVolumeId, totalAmount, standardAmount, highPerformanceAmount}
(RunPod's OpenAPI spec, api-reference-v2/openapi.json). Billing unit: per second
(docs.runpod.io/pods/pricing; the registry's ``billing_increment_s``)."""

from __future__ import annotations

import math
from typing import Any

from gpuops.providers.runpod.client import NAME, parse_time
from ledger.billing import ChargeLine

BUCKET = "hour"


def money(rec: dict, k: str) -> float:
    """The USD amount ``rec[k]``; 0.0 when it is missing or not a finite number."""
    v = rec.get(k)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0


def charge_lines(pod_records: list[Any], volume_records: list[Any]) -> list[ChargeLine]:
    """Charge lines of RunPod's pod and network-volume billing records.

    Per pod record a ``gpu`` line (gpuAmount + cpuAmount: compute time) and a ``storage`` line (diskAmount: the pod's disk, billed running or stopped);
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
        if compute > 0:
            out.append(ChargeLine(NAME, pod, compute, start, end, kind="gpu", description=f"pod {pod} compute"))
        if disk > 0:
            out.append(ChargeLine(NAME, pod, disk, start, end, kind="storage", description=f"pod {pod} disk"))
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
