"""`gpuops check --live --rent` end to end: a `gpuops check` process against the emulated
provider, every box a real sshd, each layer's box gone by itself after its child `gpuops up` was
SIGKILLed; and each layer broken on purpose, named by its verdict, with nothing left billing."""

from __future__ import annotations

import json
import subprocess

import pytest

from ledger import Ledger
from tests.conftest import gpuops_cmd
from tests.support import fake_nvidia_smi

CHECK_TIMEOUT_S = 400  # the wall cap is 5 min here; a loaded machine runs the three ups side by side


def run_check(env, name: str) -> tuple[int, dict, str]:
    p = subprocess.run(
        gpuops_cmd("check", "--live", "--rent", "--provider", name, "--format", "json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise AssertionError(f"no JSON document (exit {p.returncode}): {p.stdout[-2000:]} {p.stderr[-4000:]}") from None
    return p.returncode, doc, p.stderr


def shown(doc: dict) -> str:
    return "\n".join(f"{c['verdict']} {c['check']} {c['detail']} {c['fix']}" for c in doc["checks"])


def verdicts(doc: dict) -> dict[str, str]:
    return {c["check"]: c["verdict"] for c in doc["checks"]}


def assert_nothing_left(emu, gpuops_home) -> None:
    assert emu.live() == []
    rows = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").sessions_between(0, 2**40)
    assert rows and all(r.experiment == "check" and r.status == "closed" for r in rows), [
        (r.id, r.status) for r in rows
    ]


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_every_layer_holds_with_the_laptop_gone(name, check_env, sshd, gpuops_home):
    emu, env = check_env(name, sshd=sshd)
    rc, doc, err = run_check(env, name)
    v = verdicts(doc)
    assert rc == 0, shown(doc) + err
    assert (v["layer.job_end"], v["layer.idle"], v["layer.ttl"]) == ("ok", "ok", "ok"), doc
    layers = {c["check"]: c["data"] for c in doc["checks"] if c["check"].startswith("layer.")}
    assert {d["agent_reason"] for d in layers.values()} == {"job_end", "idle", "ttl"}
    for d in layers.values():  # gone after its trigger, within the grace + a sample + the slack
        assert -5.0 <= d["seconds_to_gone"] <= 2 + 0.5 + 30, (
            d
        )  # idle may start a moment before the job (bootstrap over)
    assert v["books.check"] in ("ok", "pending")
    assert_nothing_left(emu, gpuops_home)
    assert len(Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").sessions_between(0, 2**40)) == 3  # one rental per layer


def test_an_agent_that_cannot_destroy_fails_every_layer_and_the_check_destroys(check_env, sshd, gpuops_home):
    emu, env = check_env("runpod", sshd=sshd)
    emu.pod_key_may = set()  # the pod's own key may neither terminate nor stop it
    rc, doc, err = run_check(env, "runpod")
    v = verdicts(doc)
    assert rc == 1, shown(doc) + err
    assert (v["layer.job_end"], v["layer.idle"], v["layer.ttl"]) == ("fail", "fail", "fail"), shown(doc)
    job = next(c for c in doc["checks"] if c["check"] == "layer.job_end")
    assert "the agent asked for job_end but its destroy failed" in job["detail"] and "HTTP 403" in job["detail"], job
    assert_nothing_left(emu, gpuops_home)


def test_a_pod_key_that_may_only_stop_is_a_warning_and_the_check_terminates(check_env, sshd, gpuops_home):
    emu, env = check_env("runpod", sshd=sshd)
    emu.pod_key_may = {"stop"}  # what the one public watchdog using this key does: stop, never terminate
    rc, doc, err = run_check(env, "runpod")
    v = verdicts(doc)
    assert rc == 0, shown(doc) + err
    assert (v["layer.job_end"], v["layer.idle"], v["layer.ttl"]) == ("warn", "warn", "warn"), shown(doc)
    assert all("stopped the box" in c["detail"] for c in doc["checks"] if c["check"].startswith("layer.")), shown(doc)
    assert_nothing_left(emu, gpuops_home)
    rows = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").sessions_between(0, 2**40)
    assert sorted(r.end_reason for r in rows) == ["idle", "job_end", "ttl"]  # booked with the agent's reasons


def test_a_busy_idle_sampler_fails_the_idle_layer_alone(check_env, sshd, smi_bin, gpuops_home):
    fake_nvidia_smi.utilization(smi_bin, 100)
    emu, env = check_env("vast", sshd=sshd)
    rc, doc, err = run_check(env, "vast")
    v = verdicts(doc)
    assert rc == 1, shown(doc) + err
    assert (v["layer.job_end"], v["layer.idle"], v["layer.ttl"]) == ("ok", "fail", "ok"), doc
    idle = next(c for c in doc["checks"] if c["check"] == "layer.idle")
    assert "idle window ran out" in idle["detail"] and "never asked for the end" in idle["detail"], idle
    assert_nothing_left(emu, gpuops_home)


def test_a_refused_account_key_fails_auth_and_rents_nothing(check_env, gpuops_home):
    emu, env = check_env("runpod")
    env["RUNPOD_API_KEY"] = "rp_not_this_account"
    rc, doc, err = run_check(env, "runpod")
    v = verdicts(doc)
    assert rc == 1 and v["auth.runpod"] == "fail", shown(doc) + err
    assert not any(k.startswith("layer.") for k in v)
    assert emu.market.instances == {} or emu.live() == []


def test_ctrl_c_destroys_every_box_before_the_check_returns(check_env, sshd, gpuops_home):
    import signal
    import time

    emu, env = check_env("runpod", sshd=sshd)
    env["GPUOPS_CHECK_TTL_MINUTES"] = "4"  # nothing goes by itself while the test waits
    env["GPUOPS_CHECK_IDLE_MINUTES"] = "4"
    env["GPUOPS_CHECK_JOB_SECONDS"] = "240"
    p = subprocess.Popen(
        gpuops_cmd("check", "--live", "--rent", "--provider", "runpod", "--format", "json"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        end = time.monotonic() + 120
        while len(emu.live()) < 3 and time.monotonic() < end and p.poll() is None:
            time.sleep(0.1)
        assert len(emu.live()) == 3, emu.live()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    doc = json.loads(out)
    assert p.returncode == 130 and verdicts(doc)["rent.interrupted"] == "fail", shown(doc) + err
    assert_nothing_left(emu, gpuops_home)
