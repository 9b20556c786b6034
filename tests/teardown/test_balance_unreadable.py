"""One behaviour for "the balance cannot be read" (RunPod's GraphQL retired as JSON errors, a web
page or a 404; Vast's answer without its balance field): with ``balance_floor_usd`` set the floor
cannot be enforced and every view that shows the floor says so; the monthly cap stands in; with no
monthly cap `up` refuses in one line naming ``monthly_cap_usd``, before anything is rented."""

from __future__ import annotations

import logging

import pytest

from gpuops.errors import BadInput
from tests.support.emulators import emulator_env, runpod_emulator, vast_emulator  # noqa: F401  (fixtures)

UNREADABLE = ["runpod-errors", "runpod-html", "runpod-404", "vast-no-balance-field"]


@pytest.fixture
def unreadable(request, emulator_env, runpod_emulator, vast_emulator, gpuops_home, monkeypatch, tmp_path):
    """(provider name, settings maker): the named provider's balance cannot be read."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    name, how = request.param.split("-", 1)
    if name == "runpod":
        runpod_emulator.graphql_retired = how
    else:
        vast_emulator.user_without = {"balance"}
    return name


def _balance_asks(emu, name: str) -> int:
    """Requests for the balance the named provider's emulator recorded (RunPod: ``POST /graphql``, Vast: ``GET /users/current``)."""
    if name == "runpod":
        return sum(1 for r in emu.market.requests if (r["method"], r["path"]) == ("POST", "/graphql"))
    return sum(1 for r in emu.market.requests if r["method"] == "GET" and r["path"].startswith("/api/v0/users/current"))


def _settings(teardown):
    from gpuops.config import load_settings

    return load_settings(None, {"teardown": {"max_hours": 4.0, **teardown}})


def _ledger(tmp_path):
    from ledger import Ledger

    return Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")


@pytest.mark.parametrize("unreadable", UNREADABLE, indirect=True)
def test_floor_without_a_cap_refuses_in_one_line_naming_the_cap(unreadable, emulator_env, tmp_path):
    """The one read is asked once: a web page, a 404 or an answer without the balance is not transient."""
    from gpuops.providers import get_provider
    from gpuops.teardown.budget import budget_for_up

    s = _settings({"balance_floor_usd": 5.0})
    led = _ledger(tmp_path)
    with pytest.raises(BadInput) as e:
        budget_for_up(led, s, get_provider(unreadable, s), 0.5)
    msg = e.value.message
    assert "\n" not in msg and "monthly_cap_usd" in msg and "monthly_cap_usd" in e.value.fix
    assert msg.startswith(f"{unreadable}: the balance floor $5.00 cannot be enforced: the balance cannot be read (")
    assert e.value.limit == "balance_floor"
    assert _balance_asks(emulator_env[unreadable], unreadable) == 1  # never retried
    led.engine.dispose()


@pytest.mark.parametrize("unreadable", UNREADABLE, indirect=True)
def test_floor_with_a_cap_rents_under_the_cap_and_says_the_floor_is_not_enforced(unreadable, tmp_path, caplog):
    from gpuops.providers import get_provider
    from gpuops.teardown.budget import budget_for_up

    s = _settings({"balance_floor_usd": 5.0, "monthly_cap_usd": 50.0})
    led = _ledger(tmp_path)
    with caplog.at_level(logging.WARNING, logger="gpuops.teardown.budget"):
        assert budget_for_up(led, s, get_provider(unreadable, s), 0.5) == pytest.approx(2.0, abs=1e-9)  # $0.5/h x 4 h
    said = [r.getMessage() for r in caplog.records if "cannot be enforced" in r.getMessage()]
    assert len(said) == 1 and "the monthly cap $50.00 (monthly_cap_usd, enforced by the books) stands in" in said[0]
    # the cap still binds: $0.5/h x 4 h does not fit in a $1 cap
    with pytest.raises(BadInput, match=r"monthly cap \$1.00"):
        budget_for_up(
            led, _settings({"balance_floor_usd": 5.0, "monthly_cap_usd": 1.0}), get_provider(unreadable, s), 0.5
        )
    led.engine.dispose()


@pytest.mark.parametrize("unreadable", UNREADABLE, indirect=True)
def test_views_that_show_the_floor_say_it_cannot_be_enforced(unreadable, tmp_path):
    from gpuops.accounting.dashboard import balances
    from gpuops.teardown.reconcile import Context
    from gpuops.teardown.watchdog import run

    s = _settings({"balance_floor_usd": 5.0})
    line = f"{unreadable}: the balance floor $5.00 cannot be enforced"
    rows = {b["provider"]: b for b in balances(s)}
    assert rows[unreadable]["usd"] is None and rows[unreadable]["floor_note"].startswith(line)
    other = "vast" if unreadable == "runpod" else "runpod"
    assert rows[other]["usd"] == pytest.approx(100.0, abs=1e-6) and rows[other]["floor_note"] is None
    led = _ledger(tmp_path)
    said = []
    run(s, once=True, emit=said.append, ctx=Context(s, ledger=led, arm_margin_s=1e6))
    notes = [a.detail for a in said if a.detail.startswith(line)]
    assert len(notes) == 1 and "no monthly_cap_usd is set to stand in" in notes[0]
    led.engine.dispose()


def test_no_floor_no_note(emulator_env, runpod_emulator, gpuops_home, monkeypatch, tmp_path):
    """Without a floor an unreadable balance decides nothing: `up` rents, no view speaks of a floor."""
    from gpuops.accounting.dashboard import balances
    from gpuops.providers import get_provider
    from gpuops.teardown.budget import budget_for_up

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    runpod_emulator.graphql_retired = "html"
    s = _settings({})
    led = _ledger(tmp_path)
    assert budget_for_up(led, s, get_provider("runpod", s), 0.5) == pytest.approx(2.0, abs=1e-9)
    assert [b["floor_note"] for b in balances(s)] == [None, None]
    assert _balance_asks(runpod_emulator, "runpod") == 2  # `up`'s read and the dashboard's, each asked once
    led.engine.dispose()
