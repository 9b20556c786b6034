"""Notifications to real receivers the tests start (a JSON webhook server, an SMTP server): each event
once with its figures, never in a destroy's way, once across two watchdogs, never a URL in any output."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from gpuops.config import load_settings
from gpuops.notify import notifier
from gpuops.providers.base import CreateSpec, OfferQuery
from gpuops.providers.keys import Credential
from gpuops.teardown.lifecycle import end_rental
from ledger.store import Ledger
from onbox.vocabulary import EndReason
from tests.conftest import gpuops_cmd
from tests.support.emulators import FAST_RETRY
from tests.support.local_bill import local_bill
from tests.support.receivers import JsonReceiver, SmtpReceiver

pytestmark = pytest.mark.e2e  # every test here starts a receiver

TOKENS = ("SECRET-TOKEN-123", "MAILPASS-456")


def _rent(emu, sid: str, rented_s_ago: float = 0.0):
    from gpuops.providers.runpod.compute import RunPodProvider

    p = RunPodProvider(Credential(emu.market.api_key, "test"), emu.url, retry=FAST_RETRY)
    o = min(p.offers(OfferQuery(cards=("rtx-4090",), spot=False)), key=lambda o: o.usd_per_hour)
    inst = p.create(o, CreateSpec(label=f"gpuops-{sid}", image="img", ssh_public_key="ssh-ed25519 AAAA t"))
    led = Ledger(load_settings().ledger_url())
    led.add_session(
        dict(
            id=sid,
            experiment="exp1",
            provider="runpod",
            card=o.card,
            label=f"gpuops-{sid}",
            instance_id=inst.id,
            instance_created_at=inst.created_at - rented_s_ago,
            usd_per_hour=inst.usd_per_hour,
            status="running",
            created_at=time.time(),
            account=p.account,
        )
    )
    return p, led, inst


def _arm(monkeypatch, *urls: str, deadline: float = 20.0):
    monkeypatch.setenv("GPUOPS_NOTIFY_URLS", ",".join(urls))
    monkeypatch.setenv("GPUOPS_NOTIFY_DEADLINE_SECONDS", str(deadline))
    told = notifier.use(load_settings())
    assert told is not None
    return told


@pytest.fixture(autouse=True)
def _disarm():
    yield
    if notifier.active() is not None:
        notifier.drain()
    notifier._active = None


def _dollars(text: str) -> float:
    """The rental's cost in a job-end line: ``exit N, <duration>, $X.XXXX``."""
    m = re.search(r"exit \d+, [^,]+, \$([0-9,]+\.[0-9]{4})", text)
    assert m, text
    return float(m.group(1).replace(",", ""))


def test_a_job_end_is_told_once_to_a_webhook_and_by_mail_with_the_bills_figures(
    gpuops_home, runpod_emulator, monkeypatch
):
    with JsonReceiver() as hook, SmtpReceiver() as mail:
        _arm(monkeypatch, hook.url(), mail.url())
        p, led, inst = _rent(runpod_emulator, "s1", rented_s_ago=1800)  # booked as rented half an hour ago
        led.set_tokens("s1", 30_000)
        got = end_rental(led, p, "s1", EndReason.JOB_END, by="up:test", exit_code=0, sleep=lambda s: None)
        assert got.closed
        again = end_rental(led, p, "s1", EndReason.MANUAL, by="down:test", sleep=lambda s: None)  # idempotent: silent
        assert again.closed
        notifier.drain()
        (post,) = hook.wait_for(1)
        (msg,) = mail.wait_for(1)
        text = post["body"]["message"]
        assert post["path"] == "/hook/SECRET-TOKEN-123" and post["body"]["title"] == "gpuops"
        assert text.startswith("gpuops: s1 (exp1, runpod) ended (job_end): exit 0, ")
        r = led.get("s1")
        assert 1800 <= r.ended_at - r.instance_created_at <= 1800 + 30 and "exit 0, 30m " in text
        # The money: the emulator's own bill for the pod (create to destroy) plus the half hour the
        # row was booked as rented before it, at the price the provider answered; within 2 s of it
        # (whole-second stamps on both sides).
        pod = runpod_emulator.market.instances[inst.id]
        cost = (1800 + pod.billed_s()) * pod.usd_per_hour / 3600
        assert _dollars(text) == pytest.approx(cost, abs=2 * pod.usd_per_hour / 3600 + 1e-4)
        m = re.search(r"\$([0-9.]+)/Mtoken \(30,000 tokens\)", text)
        assert m and float(m.group(1)) == pytest.approx(
            cost / 30_000 * 1e6, abs=(2 * pod.usd_per_hour / 3600 + 1e-4) * 1e6 / 30_000
        )
        assert "job_end" in msg[2] and msg[1] == ["ops@example.com"]
        assert len(hook.posts) == 1 and len(mail.messages) == 1  # once, not again for the second end


def test_a_destroy_that_keeps_failing_is_told_once(gpuops_home, runpod_emulator, monkeypatch):
    with JsonReceiver() as hook:
        _arm(monkeypatch, hook.url())
        p, led, _ = _rent(runpod_emulator, "s2")
        runpod_emulator.market.faults.inject["terminate"] = [502] * 200
        for _ in range(2):  # the watchdog's retry fails again: the same event, told once
            got = end_rental(led, p, "s2", EndReason.IDLE, by="watchdog:test", attempts=2, sleep=lambda s: None)
            assert not got.closed
        notifier.drain()
        (post,) = hook.wait_for(1)
        assert "destroying s2 (runpod " in post["body"]["message"]
        assert "failed and is being retried; the box may still bill at $" in post["body"]["message"]


@pytest.mark.parametrize("mode", ["hang", "fail"])
def test_a_receiver_that_hangs_or_fails_delays_no_destroy_and_loses_no_booking(
    gpuops_home, runpod_emulator, monkeypatch, mode
):
    def timed_end(sid: str) -> tuple[float, float]:
        p, led, _ = _rent(runpod_emulator, sid)
        t0 = time.monotonic()
        got = end_rental(led, p, sid, EndReason.JOB_END, by="up:test", sleep=lambda s: None)
        took = time.monotonic() - t0
        assert got.closed and led.get(sid).cost_usd is not None  # booked
        return took, time.monotonic()

    plain, _ = timed_end("base")  # no notifier armed
    with JsonReceiver(mode) as hook:
        _arm(monkeypatch, hook.url(), deadline=6.0)
        told, returned = timed_end("told")
        (post,) = hook.wait_for(1)
        assert post["at"] >= returned - 0.05  # the send started after end_rental had returned
        t0 = time.monotonic()
        notifier.drain()
        assert time.monotonic() - t0 <= 6.0 + 0.5  # exit waits no longer than the deadline
    assert told <= plain + 0.5, (told, plain)  # the destroy took no longer with a bad receiver


def test_two_watchdogs_tell_the_monthly_cap_once(gpuops_home, cli_env):
    now = time.time()
    start = now - 600
    led = Ledger(load_settings().ledger_url())
    led.add_session(
        dict(
            id="spent",
            provider="local",
            status="closed",
            created_at=start,
            instance_created_at=start,
            ended_at=now - 60,
            cost_usd=8.5,
            owner="alice",
            end_reason="job_end",
        )
    )
    with JsonReceiver() as hook:
        env = dict(
            cli_env,
            GPUOPS_USER_NAME="alice",
            GPUOPS_TEARDOWN_MONTHLY_CAP_USD="10",
            GPUOPS_NOTIFY_URLS=hook.url(),
            # Once across watchdogs is the subject, not the deadline: apprise loads every plugin
            # before its first send (4 s of CPU at load 5 here), which a loaded machine stretches
            # past the default 15 s; drain returns at the delivery, so an idle run is no longer.
            GPUOPS_NOTIFY_DEADLINE_SECONDS="90",
        )
        procs = [
            subprocess.Popen(gpuops_cmd("watchdog", "--once"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        third = subprocess.run(gpuops_cmd("watchdog", "--once"), env=env, capture_output=True, timeout=120)
        assert third.returncode == 0
        assert len(hook.posts) == 1, hook.posts  # every watchdog has exited: all sends are done
        month = time.strftime("%Y-%m", time.gmtime(now))
        assert hook.posts[0]["body"]["message"].startswith(
            f"gpuops: alice's spend in {month} is $8.5000, 80 % of the monthly cap $10.0000"
        )
        for out, err in outs:
            assert b"SECRET-TOKEN" not in out + err


def test_a_message_that_runs_out_of_time_gives_its_claim_back_by_its_deadline(gpuops_home):
    """A message whose deadline is spent before any target took it (here a receiver that hangs;
    under load, the claim and apprise's import) gives its claim back by the deadline, when
    ``drain`` lets the process exit -- so the next pass (the next watchdog) tells the event once,
    instead of skipping it while a claim of a process that has exited still holds it."""
    import apprise

    from ledger.limits import lease_holder

    url = load_settings().ledger_url()
    deadline = 8.0
    with JsonReceiver("hang") as hung, JsonReceiver() as hook:
        apprise.Apprise().add(hook.url())  # apprise's plugins loaded (seconds under load): the deadline is the send's
        first = notifier.Notifier([hung.url()], ["monthly_cap"], deadline, url, None)
        t0 = time.monotonic()
        assert first.post("monthly_cap", "monthly_cap_80:alice:2026-12", "gpuops: first try")
        first.drain()
        took = time.monotonic() - t0
        assert hung.posts  # it reached the receiver (each try), which never answered: not delivered
        assert [t.is_alive() for t, _ in first._flights] == [False]  # settled by the deadline...
        assert lease_holder(Ledger(url), "notify:monthly_cap_80:alice:2026-12") is None  # ...the claim given back
        assert took <= deadline + 0.5, took  # and drain waited no longer than the deadline
        second = notifier.Notifier([hook.url()], ["monthly_cap"], deadline, url, None)
        assert second.post("monthly_cap", "monthly_cap_80:alice:2026-12", "gpuops: next pass")
        second.drain()
        assert [p["body"]["message"] for p in hook.posts] == ["gpuops: next pass"]
        hung._release.set()


def test_a_silent_watchdog_is_told_by_the_next_ps_once_and_each_pass_pings_the_dead_man(gpuops_home, cli_env):
    from ledger.passes import record_pass

    led = Ledger(load_settings().ledger_url())
    record_pass(led, "team-host", "ops", at=time.time() - 7200, interval_seconds=60)
    with JsonReceiver() as hook:
        env = dict(
            cli_env,
            GPUOPS_NOTIFY_URLS=hook.url(),
            GPUOPS_NOTIFY_WATCHDOG_SILENT_MINUTES="30",
            GPUOPS_NOTIFY_DEADMAN_URL=f"http://127.0.0.1:{hook.port}/ping/DEADMAN-789",
        )
        for _ in range(2):
            ps = subprocess.run(gpuops_cmd("ps"), env=env, capture_output=True, text=True, timeout=60)
            assert ps.returncode == 0, ps.stderr
        assert len(hook.posts) == 1
        assert "no watchdog pass for 2h 00m (limit 30 min)" in hook.posts[0]["body"]["message"]
        wd = subprocess.run(gpuops_cmd("watchdog", "--once"), env=env, capture_output=True, text=True, timeout=120)
        assert wd.returncode == 0, wd.stderr
        assert hook.gets == ["/ping/DEADMAN-789"]
        assert "DEADMAN-789" not in wd.stdout + wd.stderr + ps.stdout + ps.stderr


def test_up_tells_its_end_and_no_url_reaches_any_output_log_or_the_ledger(gpuops_home, cli_env, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text('#!/usr/bin/env bash\necho hi; echo \'{"tokens": 2000}\' >> "$GPUOPS_METRICS"\n')
    with JsonReceiver() as hook, SmtpReceiver() as mail:
        env = dict(cli_env, GPUOPS_NOTIFY_URLS=f"{hook.url()} {mail.url()}")
        t0 = time.time()
        up = subprocess.run(
            gpuops_cmd("up", "--card", "a100", "--job", str(job), "--json"),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        wall_s = time.time() - t0
        assert up.returncode == 0, up.stderr
        summ = json.loads(up.stdout)
        (post,) = hook.posts  # `up` has exited: its send is done (or it waited its deadline)
        assert len(mail.messages) == 1
        row = Ledger(load_settings().ledger_url()).get(summ["session"])
        text = post["body"]["message"]
        # The message tells the booked cost; the booking spans no more than `up` ran by this test's
        # clock (a local box has no provider bill to judge it by), in whole seconds.
        assert "exit 0, " in text and f"${row.cost_usd:,.4f} (simulated)" in text and "(2,000 tokens)" in text
        assert 0 < row.billed_seconds <= math.ceil(wall_s) + 1
        # by the box's own record (its created/destroyed files) at the local a100's reference price, 0.60 USD/h
        # (the README's first `up` shows it), within the end's 2 s tolerance
        _, usd = local_bill(Path(load_settings().data_path()) / "boxes", row.instance_id, 0.60)
        assert row.cost_usd == pytest.approx(usd, abs=3.0 * 0.60 / 3600)
        test = subprocess.run(gpuops_cmd("notify", "test"), env=env, capture_output=True, text=True, timeout=60)
        assert test.returncode == 0 and "2 of 2 target(s) took the message" in test.stdout
        check = subprocess.run(gpuops_cmd("check", "--json"), env=env, capture_output=True, text=True, timeout=60)
        found = {f["check"]: f for f in json.loads(check.stdout)["checks"] if f["check"].startswith("notify")}
        assert len(found) == 2 and all(f["verdict"] == "ok" and "delivered" in f["detail"] for f in found.values())
        assert any(f["detail"].startswith(f"json://127.0.0.1:{hook.port}/***") for f in found.values())
        seen = up.stdout + up.stderr + test.stdout + test.stderr + check.stdout + check.stderr
        seen += Path(summ["log"]).read_text(errors="replace")
        for f in gpuops_home.rglob("*"):
            if f.is_file() and not f.name.startswith("ledger.db"):
                seen += f.read_text(errors="replace")
        con = sqlite3.connect(gpuops_home / "ledger.db")
        seen += "\n".join(con.iterdump())
        con.close()
        for secret in TOKENS:
            assert secret not in seen


def test_notify_test_exits_nonzero_when_no_target_took_it(gpuops_home, cli_env):
    with JsonReceiver("fail") as hook:
        env = dict(cli_env, GPUOPS_NOTIFY_URLS=hook.url(), GPUOPS_NOTIFY_DEADLINE_SECONDS="2")
        out = subprocess.run(gpuops_cmd("notify", "test"), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "FAILED json://127.0.0.1:" in out.stdout and "0 of 1" in out.stdout
    assert "SECRET-TOKEN" not in out.stdout + out.stderr


def test_the_balance_floor_and_the_cap_are_told_after_their_destroys(gpuops_home, emulator_env, monkeypatch):
    from gpuops.teardown import watchdog as wd

    emu = emulator_env["runpod"]
    with JsonReceiver() as hook:
        monkeypatch.setenv("GPUOPS_TEARDOWN_BALANCE_FLOOR_USD", "150")  # both emulated accounts hold 100 USD
        monkeypatch.setenv("GPUOPS_TEARDOWN_MONTHLY_CAP_USD", "10")
        _arm(monkeypatch, hook.url())
        p, led, inst = _rent(emu, "floor")
        now = time.time()
        led.add_session(
            dict(
                id="spent",
                provider="local",
                status="closed",
                created_at=now - 600,
                instance_created_at=now - 600,
                ended_at=now - 60,
                cost_usd=12.0,
                owner=load_settings().owner(),
                end_reason="job_end",
            )
        )
        wd.run(load_settings(), once=True, emit=lambda a: None)
        notifier.drain()
        texts_ = sorted(post["body"]["message"] for post in hook.posts)
        assert len(texts_) == 4, texts_  # two floors, the cap at 100 % (not 80 % too), the box's end
        floors = [t for t in texts_ if "below the floor" in t]
        tail = " is below the floor $150.0000: its boxes are destroyed and new ones refused; top the account up"
        assert [re.sub(r"\$[0-9.]+ is below", "$X is below", t) for t in floors] == [
            "gpuops: runpod balance $X" + tail[tail.index(" is below") :],
            "gpuops: vast balance $X" + tail[tail.index(" is below") :],
        ]
        said = float(re.search(r"runpod balance \$([0-9.]+)", floors[0]).group(1))
        billed = emu.market.instances[inst.id].billed_cost()  # the emulator's own bill, read before the destroy
        assert 100.0 - billed - 1e-4 <= said <= 100.0 + 1e-4  # the balance the emulator answered: 100 USD less the bill
        assert "vast balance $100.0000" in floors[1]  # nothing rented there
        (cap,) = [t for t in texts_ if "monthly cap" in t]
        spent = float(
            re.search(r"is \$([0-9.]+), 100 % of the monthly cap \$10\.0000; new boxes are refused", cap).group(1)
        )
        assert 12.0 - 1e-4 <= spent <= 12.0 + billed + 1e-4  # the closed $12 and the open box accrued to then
        (end,) = [t for t in texts_ if t.startswith("gpuops: floor ")]
        assert "ended (balance_floor)" in end or "ended (monthly_cap)" in end
        closed = led.get("floor")
        assert closed.status == "closed" and emu.live() == []
        closed_at = max(e.at for e in led.events("floor") if e.kind == "closed")
        assert min(post["wall"] for post in hook.posts) >= closed_at - 0.05  # every send after the destroy and close
        wd.run(load_settings(), once=True, emit=lambda a: None)  # the next pass: told already
        notifier.drain()
        assert len(hook.posts) == 4


def test_a_run_tells_each_box_taken_back_each_re_rent_and_its_end_once(
    rig, sshd, gpuops_home, vast_provider, monkeypatch
):
    from gpuops.rental.launcher import Reporter, UpRequest, run_up
    from tests.lifecycle.test_spot_recover import JOB, TakeBack, _settings

    with JsonReceiver() as hook:
        monkeypatch.setenv("GPUOPS_NOTIFY_URLS", hook.url())
        req = UpRequest(job=JOB, provider="vast", card="rtx-4090", spot=True, spot_explicit=True, recover=1)
        with TakeBack(rig, sshd, gpuops_home, at_step=[2, 4], modes=["outbid", "outbid"]) as tb:
            summ = run_up(req, _settings(), Reporter(), provider=vast_provider)
        assert tb.error is None, tb.error
        notifier.drain()
        run, (first, second) = summ["run"]["id"], [r["session"] for r in summ["rentals"]]
        said = [post["body"]["message"] for post in hook.posts]
        assert len(said) == 4, said
        ends = {sid: [t for t in said if t.startswith(f"gpuops: {sid} (")] for sid in (first, second)}
        for sid in (first, second):  # each box taken back: told once (the threads may arrive in any order)
            (one,) = ends[sid]
            assert "spot box taken back after" in one and f"run {run} re-rents if attempts and money remain" in one
        (again,) = [t for t in said if " re-rented after " in t]
        assert again.startswith(f"gpuops: run {run} re-rented after its rental ended preempted: attempt 2 of 2 at $")
        (over,) = [t for t in said if " ran out of attempts " in t]
        assert (
            over
            == f"gpuops: run {run} ran out of attempts after 2 rental(s), ${summ['cost_usd']:,.4f}; "
            + (summ["run"]["detail"])
        )
