"""Books to the cent: an emulated month of rentals on both providers, their own billing
read through the real interfaces (RunPod's REST billing records, Vast's charges through the vastai
SDK), booked by `ledger sync --apply`, on SQLite and PostgreSQL.

The emulators' clocks are driven (``advance``), never slept on. The month is a January three years
ahead: provider-side creates stamp instances no earlier than the real clock, so the emulated month
must lie in the future.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpuops.providers.base import CreateSpec, Offer
from gpuops.providers.keys import Credential
from tests.books.conftest import _session
from tests.emulators import RunPodEmulator, VastEmulator
from tests.support.emulators import FAST_RETRY

YEAR = datetime.now(timezone.utc).year + 3
MONTH = f"{YEAR}-01"
PREV = f"{YEAR - 1}-12"
H = 3600.0


def utc(*a: int) -> float:
    return datetime(*a, tzinfo=timezone.utc).timestamp()


@pytest.fixture
def emulators():
    rp, va = RunPodEmulator(balance_usd=1e6).start(), VastEmulator(balance_usd=1e6).start()
    try:
        for g in rp.gpus.values():
            g["stock"] = 1000
        start = utc(YEAR - 1, 12, 31, 22, 0)
        rp.market.set_clock(start)
        va.market.set_clock(start)
        yield rp, va
    finally:
        rp.stop()
        va.stop()


class World:
    """Both emulators on one clock, gpuops' providers on them, and the ledger."""

    def __init__(self, ledger, rp, va):
        from gpuops.providers.runpod.compute import RunPodProvider
        from gpuops.providers.vast.compute import VastProvider

        self.ledger, self.rp, self.va = ledger, rp, va
        self.prov = {
            "runpod": RunPodProvider(Credential(rp.market.api_key, "test"), rp.url, retry=FAST_RETRY),
            "vast": VastProvider(Credential(va.market.api_key, "test"), va.url, retry=FAST_RETRY, timeout_s=10),
        }
        self.n = 0
        self.vast_offer = 5000

    def now(self) -> float:
        return self.rp.market.now()

    def advance(self, s: float) -> None:
        self.rp.advance(s)
        self.va.advance(s)

    def offer(self, provider: str, spot: bool = False) -> Offer:
        if provider == "runpod":
            return Offer("runpod", "secure:NVIDIA GeForce RTX 4090", "rtx-4090", 1, 24 << 30, 0.69, False)
        self.vast_offer += 1  # an emulated Vast offer is rented once
        self.va.add_offer(self.vast_offer, "RTX 4090", 1, 24564, 0.30 + (self.vast_offer % 7) * 0.01, 0.18)
        return Offer("vast", str(self.vast_offer), "rtx-4090", 1, 24 << 30, 0.31, spot, min_bid=0.18 if spot else None)

    def start(self, provider: str, spot: bool = False) -> tuple[str, str]:
        """Intent row, then the create, then the instance booked (as `up` does)."""
        self.n += 1
        sid = f"r{self.n:02d}"
        self.ledger.add_session(
            _session(sid, self.now(), provider=provider, card="rtx-4090", spot=spot, experiment=f"exp{self.n % 3}")
        )
        inst = self.prov[provider].create(
            self.offer(provider, spot), CreateSpec(label=f"gpuops-{sid}", image="img:1", disk_gb=10)
        )
        self.ledger.update(
            sid,
            instance_id=inst.id,
            instance_created_at=inst.created_at,
            usd_per_hour=inst.usd_per_hour,
            status="running",
        )
        return sid, inst.id

    def stop(self, provider: str, sid: str, iid: str, close: bool = True) -> None:
        self.prov[provider].destroy(iid)
        if close:
            self.ledger.close(sid, self.now(), "job_end", exit_code=0)

    def emu(self, provider: str):
        return self.rp if provider == "runpod" else self.va


def _month_charge(emu, lo: float, hi: float, iid: str | None = None) -> float:
    return sum(usd for inst, _a, _b, usd, _k in emu.market.charges(lo, hi) if iid is None or inst.id == iid)


def _vast_disk(emu, lo: float, hi: float, iid: str | None = None) -> float:
    """The disk part of Vast's charges in [lo, hi): storage rate x every billed second (running or stopped)."""
    return sum(
        inst.storage_usd_per_hour * (b - a) / H
        for inst, a, b, _usd, _k in emu.market.charges(lo, hi)
        if iid is None or inst.id == iid
    )


@pytest.mark.parametrize("clipped", [False, True], ids=["whole-contracts", "clipped-to-window"])
def test_a_month_of_rentals_booked_to_the_cent(ledger, emulators, clipped):
    """The month's books come out right whether Vast cuts a charges entry to the asked window or
    answers whole contracts (undocumented): every item is attributed by time."""
    from gpuops.accounting import ledger_service as books
    from ledger.reports import month_bounds

    rp, va = emulators
    va.charges_clipped = clipped
    w = World(ledger, rp, va)
    sessions: dict[str, tuple[str, str]] = {}
    # 1. Across the month boundary: 31 Dec 22:00 -> 1 Jan 10:00 UTC on RunPod.
    sid, iid = w.start("runpod")
    boundary = (sid, iid)
    sessions[sid] = ("runpod", iid)
    w.advance(12 * H)
    w.stop("runpod", sid, iid)
    # 2. 47 rentals, alternating providers, 6 min to 5 h each, gaps between them (per-second billing:
    #    odd seconds on purpose).
    for k in range(47):
        provider = "runpod" if k % 2 else "vast"
        sid, iid = w.start(provider)
        sessions[sid] = (provider, iid)
        w.advance(360.0 + (k * 1237.0) % (5 * H) + 0.5)
        w.stop(provider, sid, iid, close=(k != 13))  # r15: the laptop never saw the destroy
        w.advance(7 * H + 11.0)
    unseen = "r15"
    # 3. An interruptible Vast instance, outbid after 2 h: stopped, billing its disk for a day, then destroyed.
    sid, iid = w.start("vast", spot=True)
    outbid = (sid, iid)
    sessions[sid] = ("vast", iid)
    w.advance(2 * H)
    va.preempt(iid)
    w.advance(24 * H)
    w.prov["vast"].destroy(iid)
    ledger.close(sid, w.now(), "preempted")
    # 4. An instance someone made in the console: not in the ledger.
    foreign = va.market.new_instance("console-box", va.offers[1001], 0.50, 0.01)
    w.advance(3 * H)
    va.market.destroy(foreign.id)
    assert len(sessions) == 49 + 0 and w.n == 49  # 49 of ours + the foreign one = 50 rentals
    assert w.now() < utc(YEAR, 2, 1)

    get = lambda name, settings: w.prov[name]  # noqa: E731
    rep = books.sync(ledger, None, MONTH, "UTC", get_provider=get, apply=True)
    assert rep["skipped"] == {}
    assert rep["applied"]["sessions"] == 49 and rep["applied"]["storage_lines"] >= 1

    # Every session's booked cost (GPU time + its storage lines) equals the emulator's charge, to the cent.
    storage = {r.session_id: 0.0 for r in ledger.cost_lines(None, None)}
    for r in ledger.cost_lines(None, None):
        storage[r.session_id] += r.usd
    by = {r["session"]: r for r in rep["sessions"]}
    for sid, (provider, iid) in sessions.items():
        row = ledger.get(sid)
        inst = w.emu(provider).market.instances[iid]
        assert row.status == "closed" and row.cost_source == "charged", sid
        assert abs(row.cost_usd + storage.get(sid, 0.0) - inst.billed_usd) < 0.005, sid
        assert row.estimated_usd is not None and abs(row.estimated_usd - inst.billed_usd) < 0.05 or sid == outbid[0], (
            sid
        )
        assert by[sid]["status"] == "match", (by[sid], row.cost_usd, storage.get(sid), inst.billed_usd)
    # The unseen end came from RunPod's billed seconds, not "now".
    u = ledger.get(unseen)
    assert u.end_source == "provider" and abs(u.ended_at - rp.market.instances[sessions[unseen][1]].ended_t) < 1.5
    assert any(e.kind == "charged" for e in ledger.events(unseen))

    # The month total equals the emulated invoice (both providers' charges in January), less the
    # foreign instance, which is listed and never booked.
    lo, hi = month_bounds(MONTH, "UTC")
    invoice = _month_charge(rp, lo, hi) + _month_charge(va, lo, hi)
    foreign_usd = _month_charge(va, lo, hi, foreign.id)
    assert round(rep["invoice_usd"], 2) == round(invoice, 2)
    assert [u["instance_id"] for u in rep["unbooked"]] == [foreign.id]
    assert abs(rep["unbooked"][0]["usd"] - foreign_usd) < 0.005
    assert ledger.find(foreign.id) == [] and all(r.instance_id != foreign.id for r in ledger.cost_lines(None, None))
    month = books.month(ledger, MONTH, "UTC")
    assert abs(month["total_usd"] - (invoice - foreign_usd)) < 0.005
    assert month["charged_sessions"] == 49
    from ledger.limits import month_spend  # the cap counts the same money, by the same rule, in SQL

    assert month_spend(ledger, lo, hi, now=w.now()) == pytest.approx(month["total_usd"], abs=1e-4)

    # The boundary rental is split by the hour: 2 h in December, 10 h in January.
    price = ledger.get(boundary[0]).usd_per_hour
    dec = books.month(ledger, PREV, "UTC")
    assert abs(dec["total_usd"] - 2 * price) < 0.005 and dec["sessions"] == 1
    jan_part = _month_charge(rp, lo, hi, boundary[1])
    assert abs(jan_part - 10 * price) < 0.005
    days = {d["date"]: d for d in books.month(ledger, MONTH, "UTC", by="day")["days"]}
    assert (
        abs(
            days[f"{MONTH}-01"]["cost_usd"]
            - (10 * price + _month_charge(va, lo, lo + 86400) + _month_charge(rp, lo, lo + 86400) - jan_part)
        )
        < 0.005
    )

    # Storage is its own line: the outbid instance's disk for the day after the stop.
    inst = va.market.instances[outbid[1]]
    stopped = sum(usd for i, _a, _b, usd, k in va.market.charges(0, 2e10) if i.id == outbid[1] and k == "storage")
    assert stopped == pytest.approx(24 * inst.storage_usd_per_hour, abs=1e-6)
    # Vast's charges (its spec) bill the disk as its own item, running or stopped: it is storage.
    disk = _vast_disk(va, 0, 2e10, outbid[1])
    assert disk == pytest.approx(26 * inst.storage_usd_per_hour, abs=1e-5)
    assert abs(storage[outbid[0]] - disk) < 0.005
    assert abs(ledger.get(outbid[0]).cost_usd - (inst.billed_usd - disk)) < 0.005
    assert abs(month["storage_usd"] - (_vast_disk(va, lo, hi) - _vast_disk(va, lo, hi, foreign.id))) < 0.005
    shown = books.show(ledger, outbid[0], "UTC")
    assert {ln["kind"] for ln in shown["cost_lines"]} == {"storage"}
    assert abs(shown["storage_usd"] - disk) < 0.005 and shown["cost_source"] == "charged"

    # Applying again books nothing new.
    again = books.sync(ledger, None, MONTH, "UTC", get_provider=get, apply=True)
    assert again["month_usd"] == rep["month_usd"] and len(ledger.cost_lines(None, None)) == len(
        storage and list(ledger.cost_lines(None, None))
    )
    assert all(r["status"] == "match" for r in again["sessions"])


def test_billing_reads_the_real_shapes(emulators):
    """Each provider's billing() through its real interface: RunPod REST records by pod and hour,
    network volumes as account-level storage; Vast charges through the SDK, paged."""
    rp, va = emulators
    w = World(None, rp, va)
    w.ledger = type("NoBooks", (), {"add_session": lambda *a: None, "update": lambda *a, **k: None})()
    t0 = w.now()
    _, pod = w.start("runpod")
    rp.add_network_volume("vol1", 100)
    w.advance(1.5 * H)
    w.prov["runpod"].destroy(pod)
    ids = []
    for _ in range(3):
        _, iid = w.start("vast")
        ids.append(iid)
    w.advance(30 * H)
    lines = w.prov["runpod"].billing(t0 - H, w.now())
    pods = [c for c in lines if c.instance_id == pod]
    assert [c.kind for c in pods] == ["gpu", "gpu"]  # the 22:00 and 23:00 buckets (22:00 -> 23:30)
    assert [(c.end - c.start) for c in pods] == [H, H]  # v2 records are whole buckets, amounts by the second
    assert sum(c.usd for c in pods) == pytest.approx(rp.market.instances[pod].billed_usd, abs=1e-6)
    vol = [c for c in lines if c.instance_id is None]
    assert vol and all(c.kind == "storage" for c in vol)
    assert sum(c.usd for c in vol) == pytest.approx(
        100 * 0.07 / 730 * (w.now() - t0) / H, abs=1e-5
    )  # ~4 s of it: whole-second query stamps
    assert any(r["path"] == "/v2/billing/pods" and r["query"].get("bucketSize") == "hour" for r in rp.market.requests)
    assert any(r["path"] == "/v2/billing/network-volumes" for r in rp.market.requests)
    va.market.faults.latency_s = 0.0
    vlines = w.prov["vast"].billing(t0, w.now())
    for iid in ids:
        mine = [c for c in vlines if c.instance_id == iid]
        # One entry per contract, its items gpu and disk (the spec's types), labelled ours.
        assert sorted(c.kind for c in mine) == ["gpu", "storage"] and mine[0].label.startswith("gpuops-")
        # (the spec's times are whole seconds: an item cut at "now" loses under a second of money)
        assert sum(c.usd for c in mine) == pytest.approx(va.market.instances[iid].billed_usd, abs=2 * 0.35 / H)
    assert any(r["path"] == "/api/v0/charges/" for r in va.market.requests)


def test_month_range_query_uses_an_index(tmp_path):
    import sqlite3

    from ledger import Ledger
    from ledger.reads import overlap_where

    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    led.engine.dispose()
    where = " AND ".join(overlap_where(1.0, 2.0))
    con = sqlite3.connect(tmp_path / "l.db")
    plan = " ".join(
        str(r)
        for r in con.execute(
            f"EXPLAIN QUERY PLAN SELECT id, cost_usd FROM sessions WHERE {where}", {"start": 1.0, "end": 2.0}
        )
    )
    con.close()
    assert "INDEX ix_sessions_books (ended_at" in plan and "SCAN sessions" not in plan, (
        plan
    )  # m011: ended_at leads the books index
    from ledger.aggregate import EXPERIMENT_KEYS, params, statements

    con = sqlite3.connect(tmp_path / "l.db")
    for sql in statements(1.0, 2.0) + statements(1.0, 2.0, EXPERIMENT_KEYS, conclusion=True):  # the reports' GROUP BYs
        plan = " ".join(str(r) for r in con.execute("EXPLAIN QUERY PLAN " + sql, params(1.0, 2.0)))
        # closed rows: the period's search on the covering index (m008), no table lookups; open rows: their partial index
        want = (
            "INDEX ix_sessions_open"
            if "WHERE status <> 'closed'" in sql
            else "COVERING INDEX ix_sessions_books (ended_at"
        )
        assert want in plan and "SCAN sessions" not in plan, plan
    con.close()


def test_sync_cli_lists_then_applies(emulators, tmp_path, cli_env):
    """`gpuops ledger sync --month M [--apply]` end to end: the real SDKs against the emulators."""
    import json

    from ledger import Ledger
    from tests.conftest import cli_in_process

    rp, va = emulators
    env = dict(
        cli_env,
        RUNPOD_API_KEY=rp.market.api_key,
        RUNPOD_API_BASE_URL=rp.url,
        VAST_API_KEY=va.market.api_key,
        VAST_URL=va.url,
    )
    led = Ledger(env["GPUOPS_LEDGER_URL"])
    w = World(led, rp, va)
    w.advance(3 * H)  # into January
    for provider in ("runpod", "vast"):
        sid, iid = w.start(provider)
        w.advance(1.25 * H)
        w.stop(provider, sid, iid)
    stranger = va.market.new_instance("console-box", va.offers[1001], 0.50, 0.01)
    w.advance(2 * H)
    led.engine.dispose()

    def run(*args):
        p = cli_in_process(*args, env=env, whole_env=True)  # HTTP and the ledger only: no process of its own
        assert p.returncode == 0, p.stderr
        return p.stdout

    rep = json.loads(run("ledger", "sync", "--month", MONTH, "--tz", "UTC", "--json"))
    assert rep["applied"] is None and {r["status"] for r in rep["sessions"]} == {"match"}  # estimates within a cent
    assert [u["instance_id"] for u in rep["unbooked"]] == [stranger.id]
    table = " ".join(run("ledger", "sync", "--month", MONTH, "--tz", "UTC", "--apply").split())
    assert "applied: 2 sessions booked at the provider's charge" in table and "not ours" in table
    assert "r01 " in table and "r02 " in table
    # Seen: "$-0.0001" and "-0.0000" (sub-cent rounding shown as money), and a second --apply that
    # said "applied: 3 sessions booked" again.
    again = " ".join(run("ledger", "sync", "--month", MONTH, "--tz", "UTC", "--apply").split())
    assert "applied: nothing new (2 sessions already booked at the provider's charge)" in again
    for text in (table, again):
        assert "-0.0000" not in text and "$-" not in text, text
    assert "difference +$" in again or "difference -$" in again  # the stranger's box: a real difference, signed
    month = json.loads(run("ledger", "month", MONTH, "--tz", "UTC", "--json"))
    assert month["charged_sessions"] == 2
    ours = sum(
        i.billed_usd
        for i in list(rp.market.instances.values()) + list(va.market.instances.values())
        if i is not stranger
    )
    assert abs(month["total_usd"] - ours) < 0.005
    assert "2 of 2 closed sessions at the provider's own charge" in " ".join(
        run("ledger", "month", MONTH, "--tz", "UTC").split()
    )


def test_billing_retries_rate_limits_and_names_a_bad_key(emulators):
    from gpuops.providers.base import ProviderError, ProviderErrorKind
    from gpuops.providers.runpod.compute import RunPodProvider

    rp, va = emulators
    w = World(type("NoBooks", (), {"add_session": lambda *a: None, "update": lambda *a, **k: None})(), rp, va)
    _, pod = w.start("runpod")
    _, iid = w.start("vast")
    w.advance(H)
    rp.market.faults.inject["billing"] = [429, 503]
    va.market.faults.inject["charges"] = [429]
    assert {c.instance_id for c in w.prov["runpod"].billing(w.now() - 2 * H, w.now())} == {pod}
    assert {c.instance_id for c in w.prov["vast"].billing(w.now() - 2 * H, w.now())} == {iid}
    bad = RunPodProvider(Credential("rp_WRONG", "test"), rp.url, retry=FAST_RETRY)
    with pytest.raises(ProviderError) as e:
        bad.billing(w.now() - H, w.now())
    assert e.value.kind == ProviderErrorKind.AUTH and "rp_WRONG" not in str(e.value)


@pytest.mark.parametrize("held", ["runpod:aaaa", "runpod:bbbb"])
def test_a_charge_is_booked_to_the_row_of_its_own_provider_account_and_instance(ledger, held):
    """Instance ids are only unique within one provider (and one account's view of it): three rows
    share the id "7" -- a RunPod one of account A, a RunPod one of account B, a Vast one. The sync
    holds one RunPod account's key (either one): its charge lands on that account's row only, the
    other account's row is not billed by it, the Vast charge lands on the Vast row."""
    from gpuops.accounting.ledger_service import sync
    from ledger.billing import ChargeLine

    t0 = utc(YEAR - 2, 3, 2, 10, 0)
    rows = [
        ("r-a", "runpod", "runpod:aaaa", 2.0),
        ("r-b", "runpod", "runpod:bbbb", 3.0),
        ("r-v", "vast", "vast:cccc", 1.0),
    ]
    for sid, provider, account, price in rows:
        ledger.add_session(_session(sid, t0, provider=provider, account=account))
        ledger.update(sid, instance_id="7", instance_created_at=t0, usd_per_hour=price, status="running")
        ledger.close(sid, t0 + H, "job_end", end_source="destroy")  # one hour each: $2, $3, $1

    class Billed:
        def __init__(self, name: str, account: str, usd: float):
            self.name, self.account, self.usd = name, account, usd

        def billing(self, since: float, until: float) -> list[ChargeLine]:
            return [ChargeLine(self.name, "7", self.usd, t0, t0 + H, kind="gpu")]

    mine, other = ("r-a", "r-b") if held == "runpod:aaaa" else ("r-b", "r-a")
    usd = {"r-a": 2.0, "r-b": 3.0}[mine]
    keys = {"runpod": Billed("runpod", held, usd), "vast": Billed("vast", "vast:cccc", 1.0)}
    rep = sync(
        ledger, None, month=f"{YEAR - 2}-03", tz="UTC", providers=("runpod", "vast"), get_provider=lambda n, s: keys[n]
    )
    got = {r["session"]: (r["theirs_usd"], r["status"]) for r in rep["sessions"]}
    assert got == {mine: (usd, "match"), other: (None, "not_billed"), "r-v": (1.0, "match")}
    assert rep["unbooked"] == []


def test_two_providers_sharing_an_instance_id_each_get_their_own_charge(ledger):
    """Rows booked before accounts were recorded (no account), a RunPod and a Vast one with the
    same instance id "7": each provider's charge lands on its own provider's row."""
    from gpuops.accounting.ledger_service import sync
    from ledger.billing import ChargeLine

    t0 = utc(YEAR - 2, 3, 2, 10, 0)
    for sid, provider, price in (("r-p", "runpod", 2.0), ("r-v", "vast", 1.0)):
        ledger.add_session(_session(sid, t0, provider=provider, account=None))
        ledger.update(sid, instance_id="7", instance_created_at=t0, usd_per_hour=price, status="running")
        ledger.close(sid, t0 + H, "job_end", end_source="destroy")  # one hour each: $2, $1

    class Billed:
        account = None  # a provider whose account is not known: its lines carry none

        def __init__(self, name: str, usd: float):
            self.name, self.usd = name, usd

        def billing(self, since: float, until: float) -> list[ChargeLine]:
            return [ChargeLine(self.name, "7", self.usd, t0, t0 + H, kind="gpu")]

    held = {"runpod": Billed("runpod", 2.0), "vast": Billed("vast", 1.0)}
    rep = sync(
        ledger, None, month=f"{YEAR - 2}-03", tz="UTC", providers=("runpod", "vast"), get_provider=lambda n, s: held[n]
    )
    got = {r["session"]: (r["theirs_usd"], r["status"]) for r in rep["sessions"]}
    assert got == {"r-p": (2.0, "match"), "r-v": (1.0, "match")}


def test_runpod_total_beyond_its_parts_is_booked_and_flagged(ledger, emulators):
    """RunPod's records carry totalAmount beside GPU + CPU + disk: a fee outside the three is booked
    (as ``other``, with the compute) and flagged by `ledger sync`, never lost."""
    from gpuops.accounting import ledger_service as books
    from ledger.reports import month_bounds

    rp, va = emulators
    rp.billing_fee_usd = 0.25  # on every hourly record of the pod
    w = World(ledger, rp, va)
    w.advance(3 * H)  # into the month: 1 Jan 01:00 UTC
    sid, iid = w.start("runpod")
    w.advance(1.5 * H)  # two hourly records
    w.stop("runpod", sid, iid)
    get = lambda name, settings: w.prov[name]  # noqa: E731
    rep = books.sync(ledger, None, MONTH, "UTC", providers=["runpod"], get_provider=get, apply=True)
    lo, hi = month_bounds(MONTH, "UTC")
    billed = _month_charge(rp, lo, hi, iid)  # the emulator's own record of the pod's GPU time
    row = next(r for r in rep["sessions"] if r["session"] == sid)
    assert row["theirs_usd"] == pytest.approx(billed + 2 * 0.25, abs=1e-6)
    assert row["ours_usd"] == pytest.approx(billed + 2 * 0.25, abs=1e-6)  # booked, fee included
    flags = [f for f in rep["flags"] if f["instance_id"] == iid]
    assert len(flags) == 2 and all("$0.2500 more than GPU + CPU + disk" in f["note"] for f in flags)
    assert ledger.get(sid).cost_usd == pytest.approx(billed + 0.5, abs=1e-6)


def test_runpod_parts_beyond_the_total_are_flagged():
    from gpuops.providers.runpod.billing import charge_lines

    rec = {
        "startTime": "2030-01-01T00:00:00Z",
        "endTime": "2030-01-01T01:00:00Z",
        "podId": "p1",
        "totalAmount": 0.50,
        "gpuAmount": 0.60,
        "cpuAmount": 0.0,
        "diskAmount": 0.02,
    }
    lines = charge_lines([rec], [])
    assert [(c.kind, c.usd) for c in lines] == [("gpu", 0.60), ("storage", 0.02)]
    assert lines[0].note == (
        "pod p1 2030-01-01T00:00:00Z..2030-01-01T01:00:00Z: GPU + CPU + disk $0.6200 exceed totalAmount $0.5000 by $0.1200"
    )
    assert lines[1].note == ""
    assert [c.note for c in charge_lines([{**rec, "totalAmount": 0.624}], [])] == ["", ""]  # under a cent: rounding


def test_vast_gpu_item_across_a_month_boundary_is_booked_by_its_running_time():
    """A Vast gpu item's period runs from the contract's start to its end, the stopped stretch
    included; the GPU bills only while running, so the months get the running hours, not a linear
    share of the period. The instance ran 20 h from Nov 30 12:00 (12 h in November, 8 h in
    December) and then stood stopped, outbid, 28 h until its destroy on Dec 2 16:00."""
    from gpuops.providers.vast.billing import charge_lines

    start = datetime(2026, 11, 30, 12, tzinfo=timezone.utc).timestamp()
    boundary = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()
    end = start + (20 + 28) * 3600
    rate = 0.389  # USD per running hour
    gpu = {"start": int(start), "end": int(end), "type": "gpu", "amount": 20 * rate}
    gpu["description"] = f"20.000 hours at ${rate}/hour"
    disk = {"start": int(start), "end": int(end), "type": "disk", "amount": 48 * 0.01}
    entry = {"type": "instance", "source": "instance-7", "metadata": {"label": "gpuops-x"}, "items": [gpu, disk]}

    november = charge_lines([entry], start - 86400, boundary)
    december = charge_lines([entry], boundary, end + 86400)
    by_kind = lambda lines: {c.kind: c for c in lines}  # noqa: E731
    nov, dec = by_kind(november), by_kind(december)
    assert nov["gpu"].usd == pytest.approx(12 * rate, abs=1e-6)  # linear would be 12/48 of 20 h
    assert dec["gpu"].usd == pytest.approx(8 * rate, abs=1e-6)
    assert (nov["gpu"].start, nov["gpu"].end) == (start, boundary)
    assert (dec["gpu"].start, dec["gpu"].end) == (boundary, start + 20 * 3600)
    # the disk bills running or stopped: linear over its whole period
    assert nov["storage"].usd == pytest.approx(12 * 0.01, abs=1e-6)
    assert dec["storage"].usd == pytest.approx(36 * 0.01, abs=1e-6)
    # a gpu item that states no hours ran over its whole period
    plain = {**gpu, "description": ""}
    assert charge_lines([{**entry, "items": [plain]}], start - 86400, boundary)[0].usd == pytest.approx(
        20 * rate * 12 / 48, abs=1e-6
    )
