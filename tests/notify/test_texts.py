"""Each notification's line and figures (gpuops/notify/texts.py), the redaction of URLs, the settings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuops.config import BadInput, load_settings, redact_url, setting_origins
from gpuops.notify import texts
from gpuops.notify.notifier import Notifier, Target

T0 = 1_796_000_000.0


def row(**kw):
    base = dict(
        id="20261202-0100-ab12",
        experiment="exp1",
        provider="runpod",
        end_reason="job_end",
        exit_code=0,
        created_at=T0 - 10,
        instance_created_at=T0,
        ended_at=T0 + 3725.0,
        cost_usd=1.2345,
        simulated=False,
        tokens=2_000_000,
        run_id=None,
        instance_id="pod-1",
        usd_per_hour=1.19,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_a_job_end_says_exit_duration_cost_and_dollars_per_mtoken():
    event, key, text = texts.rental_ended(row(), "up:laptop:1")
    per_m = 1.2345 / 2_000_000 * 1e6  # the arithmetic: USD over millions of tokens
    assert (event, key) == ("job_end", "20261202-0100-ab12:ended")
    assert text == (
        "gpuops: 20261202-0100-ab12 (exp1, runpod) ended (job_end): exit 0, 1h 02m, $1.2345,"
        f" ${per_m:,.4f}/Mtoken (2,000,000 tokens)"
    )


def test_each_ending_has_its_event_and_what_to_do():
    assert texts.rental_ended(row(end_reason="job_failed", exit_code=3), "up")[2].endswith(
        "exit 3, 1h 02m, $1.2345, $0.6172/Mtoken (2,000,000 tokens); read `gpuops logs 20261202-0100-ab12`"
    )
    ev, _, text = texts.rental_ended(row(end_reason="idle", tokens=0), "watchdog:h:1")
    assert ev == "layer_ended" and "the idle layer ended the box: exit 0, 1h 02m, $1.2345; raise" in text
    assert texts.rental_ended(row(end_reason="ttl"), "agent")[0] == "layer_ended"
    ev, _, text = texts.rental_ended(row(end_reason="agent_ended", exit_code=None), "reconcile:h:2")
    assert ev == "reconciled" and "reconcile found the box and ended it (agent_ended): no exit code" in text
    ev, _, text = texts.rental_ended(row(end_reason="preempted", run_id="run-1"), "up")
    assert ev == "preempted" and "spot box taken back after" in text and "run run-1 re-rents" in text


def test_destroy_failed_names_the_bill_and_the_fix():
    ev, key, text = texts.destroy_failed(row(), "502 Bad Gateway")
    assert (ev, key) == ("destroy_failed", "20261202-0100-ab12:destroy_failed")
    assert "may still bill at $1.1900/h: 502 Bad Gateway; run `gpuops down 20261202-0100-ab12`" in text


def test_money_events_are_keyed_by_month_and_day():
    ev, key, text = texts.monthly_cap(80, 8.5, 10.0, "alice's", "2026-12", "alice")
    assert (ev, key) == ("monthly_cap", "monthly_cap_80:alice:2026-12")
    assert text.startswith("gpuops: alice's spend in 2026-12 is $8.5000, 80 % of the monthly cap $10.0000")
    assert texts.monthly_cap(100, 10.0, 10.0, "alice's", "2026-12", "alice")[1] == "monthly_cap_100:alice:2026-12"
    ev, key, text = texts.balance_floor("vast", 4.2, 5.0, "ab12cd34", "2026-12-02")
    assert key == "balance_floor:vast:ab12cd34:2026-12-02" and "$4.2000 is below the floor $5.0000" in text
    ev, key, text = texts.watchdog_silent(T0, 3 * 3600 + 60, 30)
    assert key == f"watchdog_silent:{int(T0)}" and "no watchdog pass for 3h 01m (limit 30 min)" in text
    ran = SimpleNamespace(id="run-1", end_reason="attempts_spent", attempts=3, detail="")
    assert texts.run_ended(ran, 2.5)[2] == "gpuops: run run-1 ran out of attempts after 3 rental(s), $2.5000"


@pytest.mark.parametrize(
    "url, shown",
    [
        ("json://user:pw@127.0.0.1:8080/hook/TOKEN?x=1", "json://127.0.0.1:8080/***"),
        ("mailto://bot:MAILPASS@smtp.example.com?to=a@b", "mailto://smtp.example.com/***"),
        ("slack://TokenA/TokenB/TokenC/#chan", "slack://***"),
        ("tgram://123456:ABC-DEF/987", "tgram://***"),
        ("not a url", "(not a URL)"),
    ],
)
def test_a_url_is_shown_without_its_token(url, shown):
    assert redact_url(url) == shown
    t = Target(url)
    assert url not in repr(t) and t.shown.startswith(shown) and len(t.id) == 8


def test_settings_take_urls_from_the_environment_and_never_show_them(gpuops_home, monkeypatch):
    monkeypatch.setenv("GPUOPS_NOTIFY_URLS", "json://127.0.0.1:1/hook/TOKEN-1, slack://TokA/TokB")
    s = load_settings(None)
    assert s.notify.urls == ["json://127.0.0.1:1/hook/TOKEN-1", "slack://TokA/TokB"]
    shown = {k: v for k, v, _ in setting_origins(s)}
    assert shown["notify.urls"] == ["json://127.0.0.1:1/***", "slack://***"]
    assert "TOKEN-1" not in repr(s.notify) and "TokA" not in repr(Notifier(s.notify.urls, [], 1, None, None))


def test_a_bad_notify_setting_is_one_line_naming_the_fix(gpuops_home, monkeypatch):
    monkeypatch.setenv("GPUOPS_NOTIFY_EVENTS", "job_end,jobend")
    with pytest.raises(BadInput, match="notify event 'jobend' is not one of: job_end"):
        load_settings(None)
    monkeypatch.delenv("GPUOPS_NOTIFY_EVENTS")
    monkeypatch.setenv("GPUOPS_NOTIFY_URLS", "hooks.example.com/SECRET")
    with pytest.raises(BadInput) as got:
        load_settings(None)
    assert "SECRET" not in str(got.value) and "is not an apprise URL" in str(got.value)


def test_the_dashboard_shows_the_last_notifications_from_this_machine(gpuops_home, monkeypatch):
    import time

    from gpuops.accounting.dashboard import NOTIFICATIONS_SHOWN, build
    from gpuops.notify.notifier import DELIVERIES_FILE, Delivery
    from gpuops.render.dashboard import page

    monkeypatch.setenv("GPUOPS_NOTIFY_URLS", "json://127.0.0.1:1/hook/TOKEN-9")
    settings = load_settings(None)
    told = Notifier(settings.notify.urls, [], 1.0, None, settings.private_data_path() / DELIVERIES_FILE)
    for i in range(NOTIFICATIONS_SHOWN + 2):  # as a sender thread books each message it sent
        told._record("job_end", [Delivery(told.targets[0], i % 2 == 0, T0 + i)], f"gpuops: message {i}")
    d = build(settings, None, "UTC", now=time.time(), read_status=lambda row: None)
    shown = [m["text"] for m in d["notifications"]]
    assert shown == [f"gpuops: message {i}" for i in range(NOTIFICATIONS_SHOWN + 1, 1, -1)]  # the newest five
    assert [m["delivered"] for m in d["notifications"]][:2] == [1, 0]  # message 6 delivered, 5 not
    html = page.render(d, inline=True)
    assert 'id="notifications"' in html and "gpuops: message 6" in html and "TOKEN-9" not in html
    kept = (settings.data_path() / DELIVERIES_FILE).stat().st_mode & 0o777
    assert kept == 0o600 and "TOKEN-9" not in (settings.data_path() / DELIVERIES_FILE).read_text()


def test_a_process_is_armed_by_settings_with_a_target_and_disarmed_by_settings_without(gpuops_home, monkeypatch):
    from gpuops.notify import notifier

    monkeypatch.setenv("GPUOPS_NOTIFY_URLS", "json://127.0.0.1:1/hook/TOKEN-2")
    armed = load_settings(None)
    try:
        first = notifier.use(armed)
        assert first is not None and notifier.use(armed) is first  # `up`'s own reconcile: the same notifier
        monkeypatch.delenv("GPUOPS_NOTIFY_URLS")
        assert notifier.use(load_settings(None)) is None and notifier.active() is None
        assert not notifier.post(("job_end", "k", "text"))  # nothing armed: nothing sent
    finally:
        notifier._active = None
