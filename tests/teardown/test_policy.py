"""The pure rules in onbox/policy.py: nvidia-smi parsing and the keep/destroy decision."""

from __future__ import annotations

import sys

import pytest

from onbox import policy
from onbox.policy import BoxState, classify, decide, parse_smi

SETTINGS = {
    "max_hours": 1.0,
    "idle_minutes": 1.0,
    "idle_util_percent": 5.0,
    "sample_seconds": 10.0,
    "job_end_grace_seconds": 30.0,
    "max_session_usd": None,
}


def s(t, utils, **kw):
    gpus = [{"index": i, "util": u, "mem_used_mib": 100.0, "mem_total_mib": 81920.0} for i, u in enumerate(utils)]
    d = {"t": t, "gpus": gpus, "error": None, "bootstrap": False, "ssh": 0}
    d.update(kw)
    return d


def test_parse_two_gpus():
    r = parse_smi("0, 97, 10240, 81920\n1, 0, 3, 81920\n")
    assert r["error"] is None
    assert r["gpus"] == [
        {"index": 0, "util": 97.0, "mem_used_mib": 10240.0, "mem_total_mib": 81920.0},
        {"index": 1, "util": 0.0, "mem_used_mib": 3.0, "mem_total_mib": 81920.0},
    ]


def test_parse_na_cells_are_unknown_not_idle():
    r = parse_smi("0, [N/A], 1, 81559\n1, [Not Supported], [N/A], 81559\n")
    assert r["error"] is None
    assert [g["util"] for g in r["gpus"]] == [None, None]
    assert r["gpus"][1]["mem_used_mib"] is None
    assert classify({"t": 0, **r, "bootstrap": False, "ssh": 0}, 5.0) == "unknown"


def test_parse_driver_failure():
    out = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    r = parse_smi(out, returncode=9)
    assert r["gpus"] == []
    assert r["error"].startswith("nvidia-smi exited 9: NVIDIA-SMI has failed")
    assert classify({"t": 0, **r, "bootstrap": False, "ssh": 0}, 5.0) == "unknown"


def test_parse_no_devices_and_garbage():
    assert parse_smi("No devices were found\n", returncode=6)["error"] == "nvidia-smi exited 6: No devices were found"
    assert parse_smi("")["error"] == "no GPU reported"
    assert parse_smi("Unable to determine the device handle for GPU0000:01:00.0: Unknown Error\n")["error"].startswith(
        "unparsed"
    )


def test_one_busy_gpu_beats_an_unknown_one():
    assert classify(s(0, [80.0, None]), 5.0) == "busy"
    assert classify(s(0, [0.0, None]), 5.0) == "unknown"
    assert classify(s(0, [5.0, 0.0]), 5.0) == "idle"  # at the threshold is idle; above is busy
    assert classify(s(0, [5.1, 0.0]), 5.0) == "busy"


def test_bootstrap_and_ssh_are_busy_even_at_zero_percent():
    assert classify(s(0, [0.0], bootstrap=True), 5.0) == "busy"
    assert classify(s(0, [0.0], ssh=1), 5.0) == "busy"


def test_idle_fires_at_the_window_and_not_before():
    st = BoxState(started_at=0.0)
    samples = [s(t, [0.0]) for t in range(100, 170, 10)]  # idle since t=100
    d = decide(samples[:6], 150.0, st, SETTINGS)
    assert (d.action, d.idle_since, d.next_due) == ("keep", 100.0, 160.0)
    d = decide(samples, 160.0, st, SETTINGS)
    assert (d.action, d.reason) == ("destroy", "idle")
    assert "60 s" in d.explanation


def test_busy_sample_restarts_the_window():
    st = BoxState(started_at=0.0)
    samples = [s(100, [0.0]), s(110, [0.0]), s(120, [50.0]), s(130, [0.0]), s(140, [0.0])]
    d = decide(samples, 175.0, st, SETTINGS)
    assert (d.action, d.idle_since, d.next_due) == ("keep", 130.0, 190.0)


def test_long_bootstrap_at_zero_percent_is_not_idle():
    st = BoxState(started_at=0.0)
    samples = [s(t, [0.0], bootstrap=True) for t in range(0, 600, 10)]
    d = decide(samples, 600.0, st, SETTINGS)
    assert d.action == "keep" and d.idle_since is None
    assert "bootstrap step running" in d.explanation


def test_unknown_readings_never_idle_but_ttl_still_applies():
    st = BoxState(started_at=0.0)
    samples = [
        {"t": t, "gpus": [], "error": "nvidia-smi exited 9: NVIDIA-SMI has failed", "bootstrap": False, "ssh": 0}
        for t in range(0, 3600, 10)
    ]
    d = decide(samples, 3599.0, st, SETTINGS)
    assert d.action == "keep" and "unknown" in d.explanation
    d = decide(samples, 3600.0, st, SETTINGS)
    assert (d.action, d.reason) == ("destroy", "ttl")


def test_gap_in_samples_breaks_the_idle_streak():
    st = BoxState(started_at=0.0)
    samples = [s(100, [0.0]), s(110, [0.0]), s(200, [0.0]), s(210, [0.0])]  # 90 s hole > 3*10+5
    d = decide(samples, 215.0, st, SETTINGS)
    assert d.idle_since == 200.0 and d.action == "keep"


def test_idle_off_disables_idle_only():
    off = dict(SETTINGS, idle_minutes="off")
    st = BoxState(started_at=0.0)
    samples = [s(t, [0.0]) for t in range(0, 3600, 10)]
    assert decide(samples, 3000.0, st, off).action == "keep"
    assert decide(samples, 3600.0, st, off).reason == "ttl"
    st_job = BoxState(started_at=0.0, job_ended_at=1000.0, job_exit_code=0)
    assert decide(samples, 1030.0, st_job, off).reason == "job_end"


def test_job_end_after_grace_and_failed_exit():
    samples = [s(t, [90.0]) for t in range(0, 100, 10)]
    st = BoxState(started_at=0.0, job_ended_at=95.0, job_exit_code=0)
    d = decide(samples, 120.0, st, SETTINGS)
    assert d.action == "keep" and d.next_due == 125.0
    assert decide(samples, 125.0, st, SETTINGS).reason == "job_end"
    st = BoxState(started_at=0.0, job_ended_at=95.0, job_exit_code=137)
    assert decide(samples, 125.0, st, SETTINGS).reason == "job_failed"


def test_session_cap_at_charged_price():
    capped = dict(SETTINGS, max_session_usd=1.0)
    st = BoxState(started_at=0.0, usd_per_hour=2.0)  # $1 reached after 1800 s
    samples = [s(0, [99.0])]
    d = decide(samples, 1799.0, st, capped)
    assert d.action == "keep" and d.next_due == pytest.approx(1800.0, abs=1e-6)
    d = decide(samples, 1800.0, st, capped)
    assert d.reason == "session_cap" and "$1.0000 spent at $2.0000/h" in d.explanation


def test_ttl_wins_over_everything():
    st = BoxState(started_at=0.0, job_ended_at=10.0, job_exit_code=0, usd_per_hour=100.0)
    d = decide([s(3600, [0.0], ssh=2)], 3600.0, st, dict(SETTINGS, max_session_usd=1.0))
    assert d.reason == "ttl"


def test_settings_object_works_like_dict():
    from gpuops.config import TeardownSettings

    t = TeardownSettings(max_hours=1, idle_minutes=1, sample_seconds=10, job_end_grace_seconds=30)
    samples = [s(t_, [0.0]) for t_ in range(100, 170, 10)]
    assert decide(samples, 160.0, BoxState(started_at=0.0), t).reason == "idle"
    assert policy.idle_minutes_of(TeardownSettings(idle_minutes="off")) is None


def test_box_side_files_are_python_3_8_and_stdlib_only():
    import ast
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "onbox"
    for name in ("policy.py", "agent.py", "localbox.py", "jobwrap.py", "bootstrap.py"):
        tree = ast.parse((root / name).read_text(), feature_version=(3, 8))
        top = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                top |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                top.add(node.module.split(".")[0])
        # optional, imported inside a try and used only when the image has them: pynvml (agent),
        # torch and huggingface_hub (bootstrap's verify and weights steps)
        optional = {"pynvml", "torch", "huggingface_hub"}
        assert (
            top - set(sys.stdlib_module_names) - {"__future__", "policy", "localbox", "vocabulary"} - optional == set()
        ), name


def test_nvml_reading_when_pynvml_is_there(monkeypatch):
    import types

    from onbox import agent

    class NVMLError(Exception):
        pass

    class Util:
        gpu = 37

    class Mem:
        used, total = 3 * 2**30, 80 * 2**30

    def util(h):
        if h == 1:
            raise NVMLError("Not Supported")
        return Util()

    fake = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetMemoryInfo=lambda h: Mem(),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    r = agent.sample_nvml()
    assert r == {
        "error": None,
        "gpus": [
            {"index": 0, "util": 37.0, "mem_used_mib": 3072.0, "mem_total_mib": 81920.0},
            {"index": 1, "util": None, "mem_used_mib": 3072.0, "mem_total_mib": 81920.0},
        ],
    }
    assert classify({"t": 0, **r, "bootstrap": False, "ssh": 0}, 5.0) == "busy"  # 37 % on GPU 0

    def no_driver():
        raise NVMLError("Driver Not Loaded")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=no_driver))
    assert agent.sample_nvml() is None  # then the agent asks nvidia-smi
