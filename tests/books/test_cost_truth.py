"""Cost truth: billing increments, an end time we never saw, and our books against the provider's."""

from __future__ import annotations

import pytest

from ledger.billing import ChargeLine, billed_cost, billed_seconds, compare_billing
from tests.books.conftest import _rented, utc


def test_billed_seconds_rounding():
    assert billed_seconds(1000.0, 1000.0 + 3600.0) == 3600.0
    assert billed_seconds(1000.0, 1000.0 + 3600.2) == 3601.0  # per second: started seconds are billed
    assert billed_seconds(0.1, 0.1 + 3600.0000000004) == 3600.0  # float noise is not a second
    assert billed_seconds(0.0, 61.0, increment_s=60) == 120.0  # per-minute provider setting
    assert billed_seconds(0.0, 60.0, increment_s=60) == 60.0
    assert billed_seconds(None, 50.0) == 0.0  # never got an instance
    assert billed_seconds(50.0, None) == 0.0  # not ended yet: nothing booked, never "now"
    assert billed_seconds(50.0, 40.0) == 0.0
    assert billed_cost(2.40, 0.0, 1800.0) == (1800.0, 1.2)
    assert billed_cost(0.35, 0.0, 5400.5) == (5401.0, 0.525097)  # 5401 x 0.35 / 3600
    assert billed_cost(3.0, 0.0, 90.0, increment_s=60) == (120.0, 0.1)
    with pytest.raises(ValueError):
        billed_seconds(0.0, 1.0, increment_s=0)


def test_close_with_provider_increment_is_stored(ledger):
    t = utc(2026, 11, 7, 9, 0)
    _rented(ledger, "m1", t, price=6.0)
    row = ledger.close("m1", t + 60.0 + 61.0, "job_end", billing_increment_seconds=60.0)
    assert (row.billed_seconds, row.cost_usd, row.billing_increment_seconds, row.end_source) == (
        120.0,
        0.2,
        60.0,
        "destroy",
    )
    again = ledger.close("m1", t + 99999.0, "manual")  # closing twice changes nothing
    assert again.cost_usd == 0.2 and again.end_reason == "job_end"


class _Row:
    def __init__(self, id, provider, instance_id, cost_usd, status="closed", simulated=False, started=1.0):
        self.id, self.provider, self.instance_id, self.cost_usd = id, provider, instance_id, cost_usd
        self.status, self.simulated, self.instance_created_at = status, simulated, started


def test_compare_billing_per_session_and_total():
    rows = [
        _Row("a", "vast", "101", 1.20, started=1.0),
        _Row("b", "vast", "102", 0.50, started=2.0),  # provider billed more (storage after stop)
        _Row("c", "runpod", "pod-c", 2.00, started=3.0),  # matched by label
        _Row("d", "runpod", "pod-d", 0.30, started=4.0),  # no line at the provider
        _Row("e", "vast", "105", None, status="running", started=5.0),
        _Row("f", "local", "box", 9.99, simulated=True),  # never compared
        _Row("g", "vast", None, 0.0, started=None),  # failed launch: not a rental
    ]
    lines = [
        ChargeLine("vast", "101", 0.70, kind="gpu"),
        ChargeLine("vast", "101", 0.505),  # two days of one box
        ChargeLine("vast", "102", 0.50),
        ChargeLine("vast", "102", 0.12, kind="storage"),
        ChargeLine("runpod", None, 2.004, label="gpuops-c"),
        ChargeLine("vast", "999", 0.80, description="instance we never booked"),
        ChargeLine("vast", "105", 0.25),
    ]
    rep = compare_billing(rows, lines, ["vast", "runpod"])
    by = {r["session"]: r for r in rep["sessions"]}
    assert [r["session"] for r in rep["sessions"]] == ["a", "b", "c", "d", "e"]
    assert by["a"] == {
        "session": "a",
        "provider": "vast",
        "instance_id": "101",
        "ours_usd": 1.2,
        "theirs_usd": 1.205,
        "diff_usd": 0.005,
        "status": "match",
        "theirs_gpu_usd": 1.205,
        "theirs_storage_usd": 0,
        "cost_source": "estimated",
        "provider_end": None,
    }
    assert by["b"]["theirs_usd"] == 0.62 and by["b"]["diff_usd"] == 0.12 and by["b"]["status"] == "differs"
    assert by["c"]["status"] == "match" and by["c"]["theirs_usd"] == 2.004
    assert by["d"]["status"] == "not_billed" and by["d"]["diff_usd"] == -0.3
    assert by["e"]["status"] == "open" and by["e"]["ours_usd"] is None and by["e"]["theirs_usd"] == 0.25
    assert [u["instance_id"] for u in rep["unbooked"]] == ["999"]
    assert rep["ours_usd"] == 4.0  # 1.20 + 0.50 + 2.00 + 0.30
    assert rep["theirs_usd"] == 4.879  # 1.205 + 0.62 + 2.004 + 0.25 + 0.80 (unbooked)
    assert rep["diff_usd"] == 0.879
    prov = {p["name"]: p for p in rep["by_provider"]}
    assert prov["runpod"] == {"name": "runpod", "ours_usd": 2.3, "theirs_usd": 2.004, "diff_usd": -0.296}
    assert prov["vast"]["theirs_usd"] == 2.875  # 1.205 + 0.62 + 0.25 + 0.80


def test_sync_command_body_with_a_stand_in_provider(books):
    from gpuops.accounting import ledger_service as cmds
    from gpuops.errors import BadInput

    class Vast:
        def billing(self, since, until):
            # The window covers every rental of the month whole: s7 began on 31 Oct 23:31 UTC.
            assert since == utc(2026, 10, 31, 23, 31) and until == utc(2026, 12, 1)
            return [ChargeLine("vast", "i-s3", 0.53)]

    def get_provider(name, settings):
        if name == "vast":
            return Vast()
        raise BadInput(f"provider {name!r} is not available in this build yet")

    rep = cmds.sync(books, None, "2026-11", "UTC", get_provider=get_provider)
    assert rep["skipped"] == {"runpod": "provider 'runpod' is not available in this build yet"}
    assert rep["providers"] == ["vast"]
    by = {r["session"]: r for r in rep["sessions"]}
    assert set(by) == {"s3", "s6"}  # s2 never got an instance
    assert by["s3"]["ours_usd"] == 0.525097 and by["s3"]["diff_usd"] == 0.004903 and by["s3"]["status"] == "match"
    assert rep["diff_usd"] == 0.004903
