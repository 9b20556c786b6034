"""`gpuops check --live` against the emulated providers: the key accepted, the balance, offers in
stock, an instance of ours named first as a warning (billing), and the month's billing against
the books without applying."""

from __future__ import annotations

import json

from gpuops.providers.base import CreateSpec, OfferQuery
from tests.support.emulators import emulator_env, runpod_emulator, runpod_provider, vast_emulator  # noqa: F401


def test_live_names_an_instance_of_ours_first(cli, emulator_env, runpod_provider):
    o = min(runpod_provider.offers(OfferQuery(spot=None)), key=lambda o: o.usd_per_hour)
    inst = runpod_provider.create(
        o, CreateSpec(label="gpuops-20261201-080000-beef", image="img", ssh_public_key="ssh-ed25519 AAAA t")
    )
    res = cli("check", "--live", "--provider", "runpod", "--format", "json")
    doc = json.loads(res.stdout)
    assert res.returncode == 0, res
    first = doc["checks"][0]
    assert first["check"] == f"instances.runpod.{inst.id}" and first["verdict"] == "warn", first
    assert "no row in this ledger" in first["detail"] and "is billing" in first["detail"]
    c = {x["check"]: x for x in doc["checks"]}
    assert (
        c["auth.runpod"]["verdict"] == "ok" and 99.0 < c["balance.runpod"]["data"]["usd"] <= 100.0
    )  # 100 USD less what the box billed so far
    assert (
        c["offers.runpod"]["verdict"] == "ok" and c["offers.runpod"]["data"]["cheapest_usd_per_hour"] == o.usd_per_hour
    )
    assert c["billing"]["verdict"] == "ok"  # no ledger yet: nothing booked to compare
    assert "auth.vast" not in c  # --provider runpod: the one provider asked


def test_live_with_a_refused_key_fails_auth(cli, emulator_env):
    res = cli("check", "--live", "--provider", "vast", "--format", "json", env={"VAST_API_KEY": "not-this-key"})
    c = {x["check"]: x for x in json.loads(res.stdout)["checks"]}
    assert res.returncode == 1 and c["auth.vast"]["verdict"] == "fail", res


def test_live_without_any_key_names_what_it_skipped(cli):
    """With no provider key `check --live` said "every check holds", then "nothing failed" with exit
    0, though nothing was checked live: in cron or CI that reads as success. Each provider not
    checked is a skip, the summary says nothing was checked live, and the exit status is 4 (named
    in --help)."""
    res = cli("check", "--live", "--format", "json")
    doc = json.loads(res.stdout)
    c = {x["check"]: x for x in doc["checks"]}
    assert res.returncode == 4 and doc["failed"] == 0 and doc["exit"] == 4 and doc["nothing_live"] is True, res
    assert (
        c["live.runpod"]["verdict"] == "skip"
        and c["live.runpod"]["detail"] == "runpod not checked live: no runpod API key"
    )
    assert c["live.vast"]["verdict"] == "skip" and doc["skipped"] >= 2
    table = cli("check", "--live")
    last = table.stdout.splitlines()[-1]
    assert table.returncode == 4
    assert "every check holds" not in last and "nothing failed" not in last
    assert last.startswith("check --live: nothing was checked live: no provider has an API key")
    assert "skipped (" in last and "live.runpod" in last and "live.vast" in last and last.endswith(": no API key)")
    assert "4 --live checked nothing" in " ".join(cli("check", "--help").stdout.split())


def test_offline_check_without_a_key_is_not_a_failure(cli):
    """Offline `check` checks settings, the ledger and what is open; no key there is a skip, exit 0."""
    res = cli("check", "--format", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["nothing_live"] is False, res
