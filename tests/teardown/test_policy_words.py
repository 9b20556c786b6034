"""onbox/policy.py, exactly: the line each rule books (the agent's status, the watchdog's
event, what `gpuops ps` shows), when each rule is next due (the agent wakes then), the presence
lease, the sample runs the agent keeps, and every nvidia-smi reply shape. tests/teardown/test_policy.py
holds the rules' outcomes; this file pins their words and numbers."""

from __future__ import annotations

import pytest

from onbox.policy import (
    NO_JOB_SECONDS,
    BoxState,
    Decision,
    _fmt_s,
    _num,
    decide,
    idle_minutes_of,
    idle_streak,
    merge_sample,
    parse_smi,
)

SET = {
    "max_hours": 1.0,
    "idle_minutes": 1.0,
    "idle_util_percent": 5.0,
    "sample_seconds": 10.0,
    "job_end_grace_seconds": 30.0,
    "max_session_usd": None,
}


def s(t, utils=(0.0,), **kw):
    gpus = [{"index": i, "util": u, "mem_used_mib": 1.0, "mem_total_mib": 8.0} for i, u in enumerate(utils)]
    d = {"t": t, "gpus": gpus, "error": None, "bootstrap": False, "ssh": 0}
    d.update(kw)
    return d


def test_ttl_words_and_its_due_time():
    st = BoxState(started_at=1000.0)
    assert decide([s(4000.0, [90.0])], 4600.0, st, SET) == Decision(
        "destroy", "ttl", "ttl: box up 60.0 min, max_hours 1 h reached"
    )
    assert decide([s(4000.0, [90.0])], 4599.0, st, SET) == Decision(
        "keep", None, "keep: busy (GPU 0 at 90%)", None, 4600.0
    )
    assert decide([], 1000.0 + 7 * 3600, st, dict(SET, max_hours=7.25)).next_due == 1000.0 + 7.25 * 3600
    assert decide([], 1000.0 + 599, st, dict(SET, max_hours=599.5 / 3600)).explanation == "keep: no samples yet"
    assert decide([], 1000.0 + 600, st, dict(SET, max_hours=599.5 / 3600)).explanation == (
        "ttl: box up 10.0 min, max_hours 0.1665 h reached"
    )


def test_ttl_defaults_to_four_hours():
    st = BoxState(started_at=0.0)
    assert decide([], 4 * 3600 - 1, st, {}).action == "keep" and decide([], 4 * 3600 - 1, st, {}).next_due == 4 * 3600
    assert decide([], 4 * 3600, st, {"max_hours": 4}).reason == "ttl"


def test_session_cap_words_and_due_time():
    capped = dict(SET, max_session_usd=1.0, max_hours=10.0)
    st = BoxState(started_at=0.0, usd_per_hour=2.0)
    assert decide([s(1790.0, [99.0])], 1800.0, st, capped) == Decision(
        "destroy", "session_cap", "session_cap: $1.0000 spent at $2.0000/h reached max_session_usd $1.00"
    )
    d = decide([s(1790.0, [99.0])], 1000.0, st, capped)
    assert (d.action, d.next_due) == ("keep", 1800.0)
    assert decide([], 5000.0, BoxState(started_at=0.0, usd_per_hour=None), capped).action == "keep"  # no price: no cap
    assert (
        decide([], 5000.0, BoxState(started_at=0.0, usd_per_hour=0.0), capped).next_due == 36000.0
    )  # free: only the TTL


def test_job_end_words_grace_and_due_time():
    st = BoxState(started_at=0.0, job_ended_at=100.0, job_exit_code=0)
    assert decide([s(125.0, [99.0])], 130.0, st, SET) == Decision(
        "destroy", "job_end", "job_end: job exited (code 0) 30 s ago, grace 30 s", None
    )
    d = decide([s(125.0, [99.0])], 129.0, st, SET)
    assert (d.action, d.next_due) == ("keep", 130.0)
    failed = BoxState(started_at=0.0, job_ended_at=100.0, job_exit_code=3)
    assert decide([], 130.0, failed, SET).explanation == "job_failed: job exited (code 3) 30 s ago, grace 30 s"
    unknown_code = BoxState(started_at=0.0, job_ended_at=100.0, job_exit_code=None)
    assert decide([], 130.0, unknown_code, SET).reason == "job_end"  # the wrapper wrote no code: not a failure
    assert (
        decide([], 129.0, BoxState(started_at=0.0, job_ended_at=100.0), {"max_hours": 1}).action == "keep"
    )  # default grace 30 s
    assert decide([], 130.0, BoxState(started_at=0.0, job_ended_at=100.0), {"max_hours": 1}).action == "destroy"


def test_no_job_words_default_wait_and_due_time():
    st = BoxState(started_at=0.0, no_job_since=100.0)
    cfg = dict(SET, max_hours=10.0, idle_minutes="off")
    d = decide([s(50.0, [0.0])], 100.0 + NO_JOB_SECONDS, st, cfg)
    assert d == Decision(
        "destroy", "no_job", "no_job: armed with no job, no bootstrap and no laptop for 15.0 min (wait 15.0 min)", 50.0
    )  # the idle streak so far is reported, though the idle layer is off
    assert NO_JOB_SECONDS == 900.0
    assert decide([], 100.0 + NO_JOB_SECONDS - 1, st, cfg).next_due == 100.0 + NO_JOB_SECONDS
    short = dict(cfg, no_job_seconds=60.0)
    assert decide([], 160.0, st, short).reason == "no_job" and decide([], 159.0, st, short).next_due == 160.0
    assert decide([], 100.0 + NO_JOB_SECONDS, st, dict(cfg, no_job_seconds=0)).reason == "no_job"  # 0: the default wait
    # a job that started and ended is job end's business, never no_job
    ended = BoxState(started_at=0.0, no_job_since=100.0, job_ended_at=2000.0, job_exit_code=0)
    assert decide([], 2010.0, ended, cfg).next_due == 2030.0


def test_idle_words_idle_since_and_due_time():
    samples = [s(t) for t in (0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0)]
    d = decide(samples, 60.0, BoxState(started_at=0.0), SET)
    assert d == Decision(
        "destroy", "idle", "idle: no GPU above 5% for 60 s (window 60 s), no bootstrap step, no SSH session", 0.0
    )
    d = decide(samples[:6], 50.0, BoxState(started_at=0.0), SET)
    assert d == Decision("keep", None, "keep: idle for 50 s so far", 0.0, 60.0)
    assert decide(samples, 60.0, BoxState(started_at=0.0), dict(SET, idle_util_percent=2.5)).explanation.startswith(
        "idle: no GPU above 2.5% for 60 s"
    )


def test_idle_defaults_fifteen_minutes_five_percent_ten_seconds():
    samples = [s(t * 10.0, [4.0]) for t in range(91)]  # 4 % for 900 s, one sample every 10 s
    assert decide(samples, 900.0, BoxState(started_at=0.0), {"max_hours": 1}).reason == "idle"
    assert decide(samples[:90], 890.0, BoxState(started_at=0.0), {"max_hours": 1}).next_due == 900.0
    busy = [s(t * 10.0, [6.0]) for t in range(91)]
    assert decide(busy, 900.0, BoxState(started_at=0.0), {"max_hours": 1}).explanation == "keep: busy (GPU 0 at 6%)"
    assert idle_minutes_of({}) == 15.0 and idle_minutes_of({"idle_minutes": " OFF "}) is None
    assert idle_minutes_of({"idle_minutes": None}) is None and idle_minutes_of({"idle_minutes": "2.5"}) == 2.5


def test_presence_defers_job_end_no_job_and_idle_up_to_its_deadline():
    held = BoxState(started_at=0.0, job_ended_at=100.0, job_exit_code=0, presence_until=500.0)
    d = decide([], 200.0, held, SET)
    assert d == Decision(
        "keep",
        None,
        "keep: laptop present (results copy-back) for 300 s more; then "
        "job_end: job exited (code 0) 100 s ago, grace 30 s",
        None,
        500.0,
    )
    assert decide([], 500.0, held, SET).reason == "job_end"  # the lease ran out
    capped = BoxState(
        started_at=0.0, job_ended_at=100.0, job_exit_code=0, presence_until=500.0, presence_deadline=300.0
    )
    assert decide([], 250.0, capped, SET).next_due == 300.0 and decide([], 300.0, capped, SET).reason == "job_end"
    samples = [s(t) for t in (0.0, 20.0, 40.0, 60.0)]
    idle_held = BoxState(started_at=0.0, presence_until=100.0)
    d = decide(samples, 60.0, idle_held, SET)
    assert (d.action, d.idle_since, d.next_due) == ("keep", 0.0, 100.0)
    ttl = BoxState(started_at=0.0, presence_until=10_000.0)
    assert decide([], 3600.0, ttl, SET).reason == "ttl"  # the TTL never waits


def test_the_earliest_due_rule_wakes_the_agent():
    st = BoxState(started_at=0.0, usd_per_hour=2.0, job_ended_at=100.0, job_exit_code=0)
    d = decide([s(100.0, [99.0])], 110.0, st, dict(SET, max_session_usd=1.0))
    assert d.next_due == 130.0  # job end (130) before the cap (1800) and the TTL (3600)


def test_keep_lines_say_what_keeps_the_box():
    st = BoxState(started_at=0.0)
    assert decide([s(0.0, [0.0], bootstrap=True)], 1.0, st, SET).explanation == "keep: busy (bootstrap step running)"
    assert decide([s(0.0, [0.0], ssh=2)], 1.0, st, SET).explanation == "keep: busy (2 SSH session(s) open)"
    assert decide([s(0.0, [1.0, 70.0, 80.0], bootstrap=True, ssh=1)], 1.0, st, SET).explanation == (
        "keep: busy (bootstrap step running, 1 SSH session(s) open, GPU 1 at 70%)"
    )
    assert (
        decide([s(0.0, [None])], 1.0, st, SET).explanation
        == "keep: GPU state unknown (a GPU did not report utilization); not idle"
    )
    assert decide([s(0.0, [], error="nvidia-smi exited 9: no driver")], 1.0, st, SET).explanation == (
        "keep: GPU state unknown (nvidia-smi exited 9: no driver); not idle"
    )
    d = decide([s(0.0, [None])], 1.0, st, SET)
    assert (d.idle_since, d.next_due) == (None, 3600.0)


def test_state_as_a_dict_and_its_defaults():
    d = {
        "started_at": "10",
        "job_ended_at": 20.0,
        "job_exit_code": 1,
        "usd_per_hour": 2.0,
        "no_job_since": 5.0,
        "presence_until": 30.0,
        "presence_deadline": 40.0,
    }
    st = BoxState.from_dict(d)
    assert st == BoxState(10.0, 20.0, 1, 2.0, 5.0, 30.0, 40.0) and st.started_at == 10.0
    assert BoxState.from_dict({"started_at": 0}) == BoxState(started_at=0.0)
    assert (
        BoxState(0.0) != BoxState(1.0)
        and BoxState(0.0) != "BoxState"
        and BoxState(0.0, job_exit_code=1) != BoxState(0.0)
    )
    assert repr(BoxState(1.5, usd_per_hour=2.0)) == (
        "BoxState(started_at=1.5, job_ended_at=None, job_exit_code=None, usd_per_hour=2.0, no_job_since=None, "
        "presence_until=None, presence_deadline=None)"
    )
    assert decide([], 130.0, {"started_at": 0.0, "job_ended_at": 100.0, "job_exit_code": 2}, SET).reason == "job_failed"


def test_decision_as_dict_repr_and_equality():
    d = Decision("keep", None, "keep: no samples yet", 1.0, 2.0)
    assert d.as_dict() == {
        "action": "keep",
        "reason": None,
        "explanation": "keep: no samples yet",
        "idle_since": 1.0,
        "next_due": 2.0,
    }
    assert (
        repr(d)
        == "Decision(action='keep', reason=None, explanation='keep: no samples yet', idle_since=1.0, next_due=2.0)"
    )
    assert d == Decision("keep", None, "keep: no samples yet", 1.0, 2.0)
    assert d != Decision("keep", None, "keep: no samples yet", 1.0, 3.0) and d != d.as_dict()


# -- the sample runs the agent keeps ---------------------------------------------------------------
def test_equal_samples_fold_into_one_run():
    samples: list = []
    assert merge_sample(samples, s(0.0, [1.0]), 5.0, 10.0) is True
    assert merge_sample(samples, s(10.0, [2.0]), 5.0, 10.0) is False
    assert merge_sample(samples, s(45.0, [3.0]), 5.0, 10.0) is False  # a gap of 35 s = 3 x 10 s + 5 s: still one run
    assert samples == [dict(s(0.0, [3.0]), t_last=45.0, n=3)]  # the first time, the last time, the newest reading
    assert idle_streak(samples, 5.0, 10.0) == 0.0


def test_a_run_breaks_on_a_gap_or_any_change_the_rules_read():
    base = s(0.0, [1.0])
    for later in (
        s(35.1, [1.0]),
        s(10.0, [50.0]),
        s(10.0, [None]),
        s(10.0, [1.0], error="x"),
        s(10.0, [1.0], bootstrap=True),
        s(10.0, [1.0], ssh=1),
        s(10.0, [1.0, 1.0]),
    ):
        samples = [dict(base)]
        assert merge_sample(samples, later, 5.0, 10.0 if later["t"] != 35.1 else 10.0 - 0.01) is True, later
        assert len(samples) == 2 and "n" not in samples[0]
    samples = [s(0.0, [], error="boom")]
    assert merge_sample(samples, s(10.0, [], error="boom"), 5.0, 10.0) is False and samples[0]["gpus"] == []


def test_an_idle_streak_across_a_run_measures_from_its_last_sample():
    samples = [dict(s(0.0), t_last=100.0, n=11), s(135.0)]  # 35 s after the run's last sample: unbroken
    assert idle_streak(samples, 5.0, 10.0) == 0.0
    samples = [dict(s(0.0), t_last=100.0, n=11), s(135.1)]
    assert idle_streak(samples, 5.0, 10.0) == 135.1
    assert idle_streak([s(0.0), s(10.0, [9.0]), s(20.0)], 5.0, 10.0) == 20.0
    assert idle_streak([], 5.0, 10.0) is None and idle_streak([s(0.0, [9.0])], 5.0, 10.0) is None


# -- nvidia-smi, every shape -----------------------------------------------------------------------
def test_cells_with_units_and_not_numbers():
    assert [_num(x) for x in (" 97 ", "97 %", "10240 MiB", "[N/A]", "N/A", "nan", "inf", "", "3.5")] == [
        97.0,
        97.0,
        10240.0,
        None,
        None,
        None,
        None,
        None,
        3.5,
    ]


def test_a_warning_with_valid_rows_is_a_warning_not_an_error():
    out = "0, 12, 100, 81920\nWARNING: infoROM is corrupted at gpu 0000:04:00.0\n"
    assert parse_smi(out, 14) == {
        "gpus": [{"index": 0, "util": 12.0, "mem_used_mib": 100.0, "mem_total_mib": 81920.0}],
        "error": None,
        "warning": "nvidia-smi exited 14: WARNING: infoROM is corrupted at gpu 0000:04:00.0",
    }
    assert parse_smi(out, 0)["warning"] == "WARNING: infoROM is corrupted at gpu 0000:04:00.0"
    assert (
        parse_smi("0, 12, 100, 81920\n", 0, "WARNING: clocks throttled\nother noise")["warning"]
        == "WARNING: clocks throttled"
    )
    assert parse_smi("0, 12, 100, 81920\n", 3, "")["warning"] == "nvidia-smi exited 3: no message"
    assert parse_smi("0, 12, 100, 81920\n", 3, "some text\n")["warning"] == "nvidia-smi exited 3: some text"
    assert parse_smi("0, 12, 100, 81920\n", 0, "")["warning"] is None
    assert (
        parse_smi("0, 12, 100, 81920\n", 0, "W" * 300 and "WARNING: " + "x" * 300)["warning"]
        == ("WARNING: " + "x" * 300)[:200]
    )


def test_output_that_cannot_be_trusted_is_an_error():
    assert parse_smi("", 0) == {"gpus": [], "error": "no GPU reported", "warning": None}
    assert parse_smi("\n  \n", 0)["error"] == "no GPU reported"
    assert parse_smi("0, 12, 100\n", 0) == {
        "gpus": [],
        "error": "unparsed nvidia-smi line: 0, 12, 100",
        "warning": None,
    }
    assert parse_smi("0, 1, 2, 3\nGPU lost\n", 0)["error"] == "unparsed nvidia-smi line: GPU lost"
    assert parse_smi("x" * 300, 0)["error"] == "unparsed nvidia-smi line: " + "x" * 200
    assert parse_smi("", 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver\nmore") == {
        "gpus": [],
        "error": "nvidia-smi exited 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        "warning": None,
    }
    assert parse_smi("No devices were found\n", 6)["error"] == "nvidia-smi exited 6: No devices were found"
    assert parse_smi("", 6, "")["error"] == "nvidia-smi exited 6: no output"
    assert parse_smi("", 6, "e" * 300)["error"] == "nvidia-smi exited 6: " + "e" * 200
    assert parse_smi("WARNING: only a warning\n", 0)["error"] == "no GPU reported"
    assert (
        parse_smi("[N/A], 1, 2, 3\n", 0)["error"] == "unparsed nvidia-smi line: [N/A], 1, 2, 3"
    )  # no index: not a row


def test_row_index_and_cells():
    assert parse_smi("3, 0, 0, 0\n")["gpus"] == [{"index": 3, "util": 0.0, "mem_used_mib": 0.0, "mem_total_mib": 0.0}]
    assert parse_smi("  1 , 5 , 6 , 7  \n\n")["gpus"][0] == {
        "index": 1,
        "util": 5.0,
        "mem_used_mib": 6.0,
        "mem_total_mib": 7.0,
    }


@pytest.mark.parametrize(
    "seconds,text", [(0, "0 s"), (59.4, "59 s"), (599, "599 s"), (600, "10.0 min"), (5400, "90.0 min")]
)
def test_durations_in_lines(seconds, text):
    assert _fmt_s(seconds) == text


def test_blank_lines_and_warnings_between_rows_are_skipped_not_the_end():
    r = parse_smi("0, 1, 2, 3\n\nWARNING: infoROM is corrupted\n1, 4, 5, 6\n")
    assert (
        [g["index"] for g in r["gpus"]] == [0, 1]
        and r["error"] is None
        and r["warning"] == "WARNING: infoROM is corrupted"
    )


def test_the_sample_interval_sets_how_long_a_hole_breaks_the_idle_streak():
    samples = [s(0.0), s(30.0), s(60.0)]  # a 30 s hole between samples
    cfg = dict(SET, idle_minutes=0.5)
    assert (
        decide(samples, 60.0, BoxState(started_at=0.0), dict(cfg, sample_seconds=10.0)).reason == "idle"
    )  # 3 x 10 + 5 s: unbroken
    d = decide(samples, 60.0, BoxState(started_at=0.0), dict(cfg, sample_seconds=1.0))  # 3 x 1 + 5 s: broken
    assert (d.action, d.idle_since, d.next_due) == ("keep", 60.0, 90.0)


# -- edges mutmut found unpinned -------------------------------------------------------------------
def test_a_driver_error_with_readings_is_unknown_not_idle():
    from onbox.policy import classify

    assert classify(s(0.0, [0.0], error="NVML: timeout"), 5.0) == "unknown"
    assert classify(s(0.0, [0.0]), 5.0) == "idle" and classify(s(0.0, [5.0]), 5.0) == "idle"  # at the threshold: idle


def test_settings_as_an_object_fall_back_to_the_defaults():
    from types import SimpleNamespace

    from onbox.policy import _get

    only = SimpleNamespace(max_hours=1.0)
    assert _get(only, "job_end_grace_seconds", 30.0) == 30.0 and _get(only, "max_hours", 9) == 1.0
    st = BoxState(started_at=0.0, job_ended_at=100.0, job_exit_code=0)
    assert decide([], 129.0, st, only).next_due == 130.0 and decide([], 130.0, st, only).reason == "job_end"


def test_units_glued_to_numbers():
    assert (_num("97%"), _num("10240MiB"), _num("7 MiB")) == (97.0, 10240.0, 7.0)


def test_a_long_warning_is_cut_at_200_characters_after_the_exit_status():
    w = "WARNING: " + "y" * 300
    assert parse_smi("0, 1, 2, 3\n" + w + "\n", 14)["warning"] == "nvidia-smi exited 14: " + w[:200]


def test_busy_runs_break_when_a_bootstrap_step_starts_or_ends():
    for a, b in ((s(0.0, [90.0]), s(10.0, [90.0], bootstrap=True)), (s(0.0, [90.0], bootstrap=True), s(10.0, [90.0]))):
        samples = [dict(a)]
        assert merge_sample(samples, b, 5.0, 10.0) is True and len(samples) == 2
    samples = [s(0.0, [90.0], bootstrap=True)]
    assert merge_sample(samples, s(10.0, [95.0], bootstrap=True), 5.0, 10.0) is False


def test_the_numbers_in_the_lines_count_from_the_boxs_start_and_the_streaks_start():
    st = BoxState(started_at=1000.0, usd_per_hour=2.0)
    capped = dict(SET, max_session_usd=1.0, max_hours=10.0)
    assert (
        decide([], 2800.0, st, capped).explanation
        == "session_cap: $1.0000 spent at $2.0000/h reached max_session_usd $1.00"
    )
    samples = [s(t) for t in (100.0, 110.0, 120.0, 130.0, 140.0, 150.0, 160.0)]
    assert decide(samples, 160.0, BoxState(started_at=0.0), SET).explanation.startswith(
        "idle: no GPU above 5% for 60 s"
    )
    assert decide(samples[:5], 140.0, BoxState(started_at=0.0), SET).explanation == "keep: idle for 40 s so far"
    ended = BoxState(started_at=0.0, job_ended_at=100.0, job_exit_code=0)
    assert decide([], 110.0, ended, dict(SET, job_end_grace_seconds=10.0)).explanation == (
        "job_end: job exited (code 0) 10 s ago, grace 10 s"
    )
    assert decide([], 109.0, ended, dict(SET, job_end_grace_seconds=10.0)).next_due == 110.0


def test_the_default_sample_interval_is_ten_seconds():
    cfg = {"max_hours": 1.0, "idle_minutes": 1.0}
    unbroken = [s(0.0), s(35.0), s(70.0)]  # 35 s = 3 x 10 s + 5 s: one streak
    assert decide(unbroken, 70.0, BoxState(started_at=0.0), cfg).reason == "idle"
    broken = [s(0.0), s(36.0), s(72.0)]
    assert decide(broken, 72.0, BoxState(started_at=0.0), cfg).idle_since == 72.0


def test_a_gpu_at_the_threshold_is_not_named_busy():
    assert (
        decide([s(0.0, [5.0], ssh=1)], 1.0, BoxState(started_at=0.0), SET).explanation
        == "keep: busy (1 SSH session(s) open)"
    )
