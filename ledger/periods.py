"""Calendar periods of the books: months and days as [start, end) epoch seconds in a time zone.

Split out of ``ledger.reports`` (which re-exports every name) so that the monthly cap (``gpuops
watchdog``, ``up``) finds its month without importing the reports, and ``zoneinfo`` loads only for
a named zone other than UTC (CLI start-up is a hot path). Standard library only.
"""

from __future__ import annotations

import re
import time
from datetime import date, datetime, timezone

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$", re.ASCII)  # ASCII digits: int() also reads "２０２６"


# The months a report can name: the calendar of ``datetime`` runs from year 1 to 9999, and a month's
# end is the first day of the next one.
FIRST_MONTH, LAST_MONTH = "0001-01", "9999-11"

DAY_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$", re.ASCII)


def utc_iso(ts: float) -> str:
    """Epoch seconds as ISO 8601 UTC with ``Z``, to the millisecond when it has a fraction.

    The one time format of every machine output (JSON, CSV cells of ``gpuops.render.emit``, the
    dashboard's data): ``2026-11-05T09:30:30Z`` / ``2026-11-05T09:30:30.250Z``."""
    d = datetime.fromtimestamp(ts, timezone.utc)
    text = d.isoformat(timespec="milliseconds" if d.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def zone_minute(text: str | None, tz: str | None) -> str:
    """A ``utc_iso`` time as ``YYYY-MM-DD HH:MM`` in ``tz`` (None or "local": this machine's zone), for tables."""
    if not text:
        return ""
    d = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return d.astimezone(zone(None if tz == "local" else tz)).strftime("%Y-%m-%d %H:%M")


def zone(tz: str | None):
    """The tzinfo for an IANA name, or None for the machine's local zone.

    The tzinfo for an IANA name (``Europe/Berlin``, ``UTC``), or None for the machine's local zone
    (naive datetimes are local, DST included). Raises ValueError for an unknown name. ``UTC`` is
    ``datetime.timezone.utc`` (the same offsets and name as ``ZoneInfo("UTC")``, without loading the
    tz database)."""
    if not tz:
        return None
    if tz == "UTC":
        return timezone.utc
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(tz)
    except (KeyError, ValueError):
        raise ValueError(f"unknown time zone {tz!r}") from None


def month_bounds(month: str, tz: str | None = None) -> tuple[float, float]:
    """[start, end) epoch seconds of ``YYYY-MM`` in time zone ``tz`` (None = local).

    Raises ValueError for any other format, a month outside 01..12, a month outside
    ``FIRST_MONTH``..``LAST_MONTH`` (its end must be a date ``datetime`` can hold: 9999-12 would end
    in year 10000), or an unknown zone.
    """
    m = MONTH_RE.match(month)
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ValueError(f"month must look like 2026-11, got {month!r}")
    if not FIRST_MONTH <= month <= LAST_MONTH:  # same width and format: text order is date order
        raise ValueError(f"month {month} is outside the months the books can count ({FIRST_MONTH} .. {LAST_MONTH})")
    year, mon = int(m.group(1)), int(m.group(2))
    z = zone(tz)
    start = datetime(year, mon, 1, tzinfo=z)
    ny, nm = (year + 1, 1) if mon == 12 else (year, mon + 1)
    end = datetime(ny, nm, 1, tzinfo=z)
    return start.timestamp(), end.timestamp()


def this_month(tz: str | None = None, now: float | None = None) -> str:
    """``YYYY-MM`` of ``now`` (epoch s, default the current time) in ``tz`` (None = local)."""
    return datetime.fromtimestamp(time.time() if now is None else now, zone(tz)).strftime("%Y-%m")


def day_start(day: str, tz: str | None = None) -> float:
    """Epoch seconds of 00:00 on ``YYYY-MM-DD`` in ``tz`` (None = local). Raises ValueError."""
    m = DAY_RE.match(day)
    if not m:
        raise ValueError(f"date must look like 2026-11-03, got {day!r}")
    try:
        return datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=zone(tz)).timestamp()
    except ValueError as e:
        raise ValueError(f"bad date {day!r}: {e}") from None


def day_of(ts: float, tz: str | None = None) -> str:
    """``YYYY-MM-DD`` of epoch seconds ``ts`` in ``tz`` (None = local)."""
    return datetime.fromtimestamp(ts, zone(tz)).strftime("%Y-%m-%d")


def days_in_month(month: str) -> int:
    """Days in ``YYYY-MM`` (28..31)."""
    y, m = (int(x) for x in month.split("-"))
    ny, nm = (y + 1, 1) if m == 12 else (y, m + 1)
    return (date(ny, nm, 1) - date(y, m, 1)).days
