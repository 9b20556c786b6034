"""`gpuops check --live --rent` end to end: a `gpuops check` process against the emulated
provider, every box a real sshd, each layer's box gone by itself after its child `gpuops up` was
SIGKILLed; and each layer broken on purpose, named by its verdict, with nothing left billing."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpuops.emulators import nvidia_smi as fake_nvidia_smi
from ledger import Ledger
from tests.conftest import gpuops_cmd

CHECK_TIMEOUT_S = 400  # the wall cap is 5 min here; a loaded machine runs the three ups side by side
BOOKED_SHORT_S = 10.0  # how much shorter than billed a row may be booked (see its use)


def run_check(env, name: str) -> tuple[int, dict, str]:
    p = subprocess.run(
        gpuops_cmd("check", "--live", "--rent", "--provider", name, "--format", "json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )
    return p.returncode, parsed(p.returncode, p.stdout, p.stderr), p.stderr


def parsed(rc: int | None, out: str, err: str) -> dict:
    """check's JSON document; without one, its exit and its stderr (the traceback) are the failure."""
    try:
        return json.loads(out)
    except ValueError:
        raise AssertionError(f"no JSON document (exit {rc}): stdout {out[-2000:]!r}\nstderr:\n{err[-6000:]}") from None


def shown(doc: dict) -> str:
    return "\n".join(f"{c['verdict']} {c['check']} {c['detail']} {c['fix']}" for c in doc["checks"])


def why(doc: dict, err: str) -> str:
    """An assertion's message: every finding, then check's stderr (a traceback, the layers' lines)."""
    return f"{shown(doc)}\ncheck's stderr:\n{err[-6000:]}"


def verdicts(doc: dict) -> dict[str, str]:
    return {c["check"]: c["verdict"] for c in doc["checks"]}


def assert_nothing_left(emu, gpuops_home, said: str) -> None:
    """No box live, every row of the check closed; ``said`` (``why``: the findings, check's stderr) if not."""
    assert emu.live() == [], f"{emu.live()}\n{said}"
    rows = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").rows_between(0, 2**40)
    assert rows and all(r.experiment == "check" and r.status == "closed" for r in rows), (
        f"{[(r.id, r.status) for r in rows]}\n{said}"
    )


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_every_layer_holds_with_the_laptop_gone(name, check_env, sshd, gpuops_home):
    emu, env = check_env(name, sshd=sshd)
    rc, doc, err = run_check(env, name)
    v = verdicts(doc)
    assert rc == 0, why(doc, err)
    assert (v["layer.job_end"], v["layer.idle"], v["layer.ttl"]) == ("ok", "ok", "ok"), why(doc, err)
    layers = {c["check"]: c["data"] for c in doc["checks"] if c["check"].startswith("layer.")}
    assert {d["agent_reason"] for d in layers.values()} == {"job_end", "idle", "ttl"}, why(doc, err)
    for d in layers.values():  # gone after its trigger, within the grace + a sample + the slack
        # idle may start a moment before the job (bootstrap over)
        assert -5.0 <= d["seconds_to_gone"] <= 2 + 0.5 + 30, f"{d}\n{why(doc, err)}"
    assert v["books.check"] in ("ok", "pending"), why(doc, err)
    assert_nothing_left(emu, gpuops_home, why(doc, err))
    rows = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").rows_between(0, 2**40)
    assert len(rows) == 3, why(doc, err)  # one rental per layer
    for r in rows:  # each row booked as long as the emulator billed its box, by the emulator's own record
        billed_s = emu.market.instances[str(r.instance_id)].billed_s()
        # Booked up to the last fresh status the check read before the agent's destroy: short by at
        # most one watch round on a loaded machine plus the agent's destroy call (BOOKED_SHORT_S);
        # never longer than billed, but for the billing increment (1 s).
        assert billed_s - BOOKED_SHORT_S <= r.billed_seconds <= billed_s + 1.0, (r.id, r.billed_seconds, billed_s)


def test_an_agent_that_cannot_destroy_fails_every_layer_and_the_check_destroys(check_env, sshd, gpuops_home):
    emu, env = check_env("runpod", sshd=sshd)
    emu.pod_key_may = set()  # the pod's own key may neither terminate nor stop it
    # No box goes by itself here, so every layer runs to its due time; the slack past it is only
    # waited out. 10 s still holds the job layer's claim: the agent's first refused destroy (2 s
    # after the job's end) is on its status, read over SSH each round (a round is under a second
    # on a lightly loaded machine), well before its due time.
    env["GPUOPS_CHECK_SLACK_SECONDS"] = "10"
    rc, doc, err = run_check(env, "runpod")
    v = verdicts(doc)
    assert rc == 1, why(doc, err)
    assert (v["layer.job_end"], v["layer.idle"], v["layer.ttl"]) == ("fail", "fail", "fail"), why(doc, err)
    job = next(c for c in doc["checks"] if c["check"] == "layer.job_end")
    asked = "the agent asked for job_end but its destroy failed" in job["detail"]
    assert asked and "HTTP 403" in job["detail"], why(doc, err)
    assert_nothing_left(emu, gpuops_home, why(doc, err))


def test_a_pod_key_that_may_only_stop_is_a_warning_and_the_check_terminates(check_env, sshd, gpuops_home):
    emu, env = check_env("runpod", sshd=sshd)
    emu.pod_key_may = {"stop"}  # what the one public watchdog using this key does: stop, never terminate
    rc, doc, err = run_check(env, "runpod")
    v = verdicts(doc)
    assert rc == 0, why(doc, err)
    assert (v["layer.job_end"], v["layer.idle"], v["layer.ttl"]) == ("warn", "warn", "warn"), why(doc, err)
    layers = [c for c in doc["checks"] if c["check"].startswith("layer.")]
    assert all("stopped the box" in c["detail"] for c in layers), why(doc, err)
    assert_nothing_left(emu, gpuops_home, why(doc, err))
    rows = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").rows_between(0, 2**40)
    # booked with the agent's reasons
    assert sorted(r.end_reason for r in rows) == ["idle", "job_end", "ttl"], why(doc, err)


def test_a_busy_idle_sampler_fails_the_idle_layer_alone(check_env, sshd, smi_bin, gpuops_home):
    fake_nvidia_smi.utilization(smi_bin, 100)
    emu, env = check_env("vast", sshd=sshd)
    # The busy GPU never lets the idle layer fire, so its window can be short and its slack is only
    # waited out: its verdict comes at 3 s + grace + a sample + 10 s after its job starts, before
    # the TTL layer's box goes (18 s after its create: the check's end), not 10 s after it. The
    # other two layers keep their windows; 10 s of slack still holds their boxes going by
    # themselves, as the check that cannot destroy holds its job layer's claim with it (each agent
    # destroys within a sample of its trigger, seen by the next watch round).
    env["GPUOPS_CHECK_IDLE_MINUTES"] = "0.05"
    env["GPUOPS_CHECK_SLACK_SECONDS"] = "10"
    rc, doc, err = run_check(env, "vast")
    v = verdicts(doc)
    assert rc == 1, why(doc, err)
    assert (v["layer.job_end"], v["layer.idle"], v["layer.ttl"]) == ("ok", "fail", "ok"), why(doc, err)
    idle = next(c for c in doc["checks"] if c["check"] == "layer.idle")
    assert "idle window ran out" in idle["detail"] and "never asked for the end" in idle["detail"], why(doc, err)
    assert_nothing_left(emu, gpuops_home, why(doc, err))


def test_a_refused_account_key_fails_auth_and_rents_nothing(check_env, gpuops_home):
    emu, env = check_env("runpod")
    env["RUNPOD_API_KEY"] = "rp_not_this_account"
    rc, doc, err = run_check(env, "runpod")
    v = verdicts(doc)
    assert rc == 1 and v["auth.runpod"] == "fail", why(doc, err)
    assert not any(k.startswith("layer.") for k in v), why(doc, err)
    assert emu.market.instances == {} or emu.live() == [], why(doc, err)


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
        live = emu.live()
        p.send_signal(signal.SIGINT)  # also when the boxes are not all up: check then cleans up what is
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"check ran on 120 s after Ctrl-C (killed now); stderr:\n{err[-6000:]}") from None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert len(live) == 3, f"{live} (check's exit {p.returncode})\ncheck's stderr:\n{err[-6000:]}"
    doc = parsed(p.returncode, out, err)
    assert p.returncode == 130 and verdicts(doc)["rent.interrupted"] == "fail", why(doc, err)
    assert_nothing_left(emu, gpuops_home, why(doc, err))
