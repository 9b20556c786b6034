"""`gpuops check` offline and its refusals: one line per check with its verdict and fix; where
each setting came from; key files and their modes; the ledger's schema; an open box of ours named
first as a warning; and what `--rent` refuses before anything is rented."""

from __future__ import annotations

import json
import os
import re
import time

from ledger import Ledger


def checks(res) -> dict[str, dict]:
    return {c["check"]: c for c in json.loads(res.stdout)["checks"]}


def test_settings_say_where_they_came_from_and_keys_their_modes(cli, gpuops_home, tmp_path, monkeypatch):
    cfg = tmp_path / "infra.toml"
    cfg.write_text('[teardown]\nmax_hours = 2.0\nidle_minutes = 5.0\n[providers.vast]\napi_key = "vast-secret-key"\n')
    cfg.chmod(0o644)
    runpod = tmp_path / "home" / ".runpod" / "config.toml"
    runpod.parent.mkdir(parents=True)
    runpod.write_text('[default]\napi_key = "rp-secret-key"\n')
    runpod.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    res = cli("check", "--format", "json", env={"GPUOPS_TEARDOWN_IDLE_MINUTES": "7"})
    assert res.returncode == 0, res
    c = checks(res)
    assert c["settings.file"]["detail"] == f"read {cfg}"
    assert c["settings.teardown.max_hours"]["data"] == {"value": 2.0, "origin": str(cfg)}
    assert c["settings.teardown.idle_minutes"]["data"] == {"value": 7.0, "origin": "$GPUOPS_TEARDOWN_IDLE_MINUTES"}
    assert c["settings.providers.vast.api_key"]["data"] == {"value": "(set)", "origin": str(cfg)}
    assert "settings.teardown.sample_seconds" not in c  # at its default: counted, not listed
    assert c["keys.runpod"]["verdict"] == "ok" and f"{runpod} is mode 0600" in c["keys.runpod"]["detail"]
    assert c["keys.vast"]["verdict"] == "warn" and c["keys.vast"]["fix"] == f"chmod 600 {cfg}"
    assert "secret" not in res.stdout
    assert (
        c["agent.runpod"]["verdict"] == "ok"
        and "RUNPOD_API_KEY" in c["agent.runpod"]["detail"]
        and "stops the pod" in c["agent.runpod.refused"]["detail"]
    )
    assert "REST v2" in c["routes.runpod"]["detail"] and "REST v0" in c["routes.vast"]["detail"]


def test_an_open_box_of_ours_is_named_first_as_a_warning(cli, gpuops_home):
    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    from gpuops.config import load_settings

    me = load_settings().owner()
    led.add_session(
        dict(
            id="20261201-090000-abcd",
            experiment="e",
            job="j.sh",
            provider="runpod",
            card="rtx-4090",
            gpu_count=1,
            spot=False,
            label="gpuops-20261201-090000-abcd",
            usd_per_hour=0.34,
            status="running",
            created_at=time.time() - 60,
            instance_id="pod-1",
            instance_created_at=time.time() - 50,
            owner=me,
        )
    )
    res = cli("check", "--format", "json")
    doc = json.loads(res.stdout)
    assert res.returncode == 0 and doc["warnings"] >= 1, res
    first = doc["checks"][0]
    assert (first["check"], first["verdict"]) == ("open.20261201-090000-abcd", "warn"), first
    assert "pod-1" in first["detail"] and first["fix"].startswith("gpuops down 20261201-090000-abcd")
    led_check = next(c for c in doc["checks"] if c["check"] == "ledger")
    assert led_check["verdict"] == "ok" and led_check["data"]["schema"] == led_check["data"]["latest"]
    table = cli("check")
    assert table.stdout.splitlines()[0].startswith("WARN  open.20261201-090000-abcd")
    assert (
        table.stdout.splitlines()[-1]
        == "check: nothing failed (2 warning(s)); 2 skipped (keys.runpod, keys.vast: no API key)"
    )  # the box, no watchdog; no keys


def test_rent_refuses_before_renting(cli, gpuops_home):
    res = cli("check", "--rent")
    assert res.returncode == 2 and "--rent rents boxes: it needs --live" in res.stderr
    res = cli("check", "--max-usd", "1")
    assert res.returncode == 2 and "--max-usd caps the rentals of --rent" in res.stderr
    res = cli("check", "--live", "--rent", "--max-minutes", "-1")
    assert res.returncode == 2 and "--max-minutes must be a positive number" in res.stderr
    res = cli("check", "--live", "--rent", "--provider", "local")
    assert res.returncode == 2 and "the local provider has none" in res.stderr
    res = cli("check", "--live", "--rent", env={"RUNPOD_API_KEY": "", "VAST_API_KEY": "", "HOME": str(gpuops_home)})
    assert res.returncode == 2 and "add --provider runpod or --provider vast" in res.stderr


def test_the_cap_is_refused_above_without_the_flags():
    from gpuops.check.check_layers import plan_cap
    from gpuops.config import load_settings
    from gpuops.errors import BadInput

    s = load_settings(env={k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")})
    cap = plan_cap(0.2, s, None, None)  # 10 + 10 + 5 box-minutes at 0.20 USD/h
    assert abs(cap["worst_usd"] - 0.2 * 25 / 60) < 1e-6 and cap["wall_s"] == 600 and cap["max_hours"]["ttl"] == 5 / 60
    try:
        plan_cap(0.3, s, None, None)
    except BadInput as e:
        assert "worst case is 0.1250 USD" in str(e) and "--max-usd 0.13" in e.fix
    else:
        raise AssertionError("a 0.125 USD worst case passed a 0.10 USD cap")
    assert plan_cap(0.3, s, 0.13, None)["max_usd"] == 0.13
    try:
        plan_cap(0.01, s, None, 4)
    except BadInput as e:
        assert "does not fit the check's wall cap" in str(e) and "--max-minutes 10" in e.fix
    else:
        raise AssertionError("a TTL layer longer than the wall cap passed")


def test_a_broken_setting_is_a_failed_check_with_its_fix(cli, gpuops_home, tmp_path):
    (tmp_path / "infra.toml").write_text("[teardown]\nmax_hour = 2.0\n")
    res = cli("check", "--format", "json")
    doc = json.loads(res.stdout)
    assert res.returncode == 1, res
    bad = next(c for c in doc["checks"] if c["check"] == "settings")
    assert bad["verdict"] == "fail" and "max_hour: unknown key (did you mean max_hours?)" in bad["detail"], bad
    res = cli("check", "--live", "--rent")
    assert res.returncode == 2 and "did you mean max_hours?" in res.stderr  # nothing rented on a broken file


def test_the_last_watchdog_pass_is_one_line(cli, gpuops_home):
    from ledger.passes import record_pass

    res = cli("check", "--format", "json")
    assert checks(res)["watchdog"]["verdict"] == "warn" and "no watchdog pass" in checks(res)["watchdog"]["detail"]
    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    record_pass(led, "laptop-1", "alice", at=time.time() - 20, interval_seconds=30, checked=2, ended=1)
    w = checks(cli("check", "--format", "json"))["watchdog"]
    assert (
        w["verdict"] == "ok"
        and re.match(r"last pass \d+ s ago", w["detail"])
        and "on laptop-1 by alice (checked 2 sessions, ended 1, 0 errors)" in w["detail"]
    ), w
    record_pass(led, "laptop-1", "alice", at=time.time() - 600, interval_seconds=30)  # older: the newest still counts
    record_pass(led, "laptop-2", "bob", at=time.time() - 3600, interval_seconds=30)
    assert checks(cli("check", "--format", "json"))["watchdog"]["data"]["host"] == "laptop-1"


def test_a_data_dir_that_cannot_be_made_is_a_failed_check(cli, gpuops_home, tmp_path):
    # Seen: with a read-only HOME, `check` said "data dir ...: not there yet (made at the first rental)"
    # and "nothing failed"; the first `up` then refused ("the SQLite ledger cannot be created").
    afile = tmp_path / "a-file"
    afile.write_text("")
    res = cli("check", "--format", "json", env={"GPUOPS_DATA_DIR": str(afile / "gpuops"), "GPUOPS_LEDGER_URL": None})
    assert res.returncode == 1, res
    c = checks(res)["data_dir"]
    assert c["verdict"] == "fail", c
    assert (
        c["detail"]
        == f"data dir (ledger, logs, results, keys) {afile / 'gpuops'} cannot be made: {afile} is not a folder"
    )
    assert c["fix"] == "point GPUOPS_DATA_DIR (or data_dir in infra.toml) at a folder you can write"
