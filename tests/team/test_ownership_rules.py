"""gpuops/ownership.py in process: whose row a process may end (``standing``), whose row a user's
reports and caps count (``is_mine``), which refusals stop whom (``refused_by``), and the names an
account and an owner get. tests/team/test_two_accounts.py drives the same rules end to end."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as Row

import pytest

from gpuops import ownership
from gpuops.ownership import (
    HELD,
    LEGACY,
    OTHER,
    account_of,
    default_owner,
    is_mine,
    local_account,
    refused_by,
    standing,
)


def test_only_the_renting_account_holds_a_row():
    row = Row(account="runpod:aaaa1111")
    assert standing(row, "runpod:aaaa1111") == HELD
    assert standing(row, "runpod:bbbb2222") == OTHER  # a teammate's key
    assert standing(row, "vast:aaaa1111") == OTHER
    assert standing(row, None) == OTHER  # no credential: it owns nothing


def test_a_row_from_before_ownership_is_legacy_for_everyone():
    assert standing(Row(account=None), "runpod:aaaa1111") == LEGACY
    assert standing(Row(account=None), None) == LEGACY
    assert standing(Row(), "runpod:aaaa1111") == LEGACY  # no such column at all


def test_is_mine_by_owner_and_legacy_rows_are_everyones():
    assert is_mine(Row(owner="alice@lap"), "alice@lap")
    assert not is_mine(Row(owner="bob@lap"), "alice@lap")
    assert is_mine(Row(owner=None), "alice@lap") and is_mine(Row(), "alice@lap")


@pytest.mark.parametrize(
    "scope,account,provider,expected",
    [
        ("*", None, "runpod", True),  # everyone, every provider (team scope)
        ("runpod", None, "runpod", True),
        ("runpod", None, "vast", False),  # another provider's refusal
        ("runpod", "runpod:aaaa1111", "runpod", True),  # the fallen account
        ("runpod", "runpod:bbbb2222", "runpod", False),  # another account's floor
        ("*", "alice@lap", "vast", True),  # the user's monthly cap
        ("*", "bob@lap", "vast", False),  # another user's cap
    ],
)
def test_a_refusal_covers_its_scope_and_its_account_or_owner_only(scope, account, provider, expected):
    refusal = Row(scope=scope, account=account)
    assert refused_by(refusal, provider, "runpod:aaaa1111", "alice@lap") is expected


def test_account_of_reads_the_providers_account():
    assert account_of(Row(account="vast:12345678")) == "vast:12345678"
    assert account_of(Row()) is None


def test_local_account_is_this_login_on_this_machine_in_this_data_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(ownership.getpass, "getuser", lambda: "alice")
    monkeypatch.setattr(ownership.socket, "gethostname", lambda: "lap top")
    a, b = local_account(tmp_path / "boxes"), local_account(tmp_path / "other")
    assert a.startswith("local:alice@lap-top:") and len(a.rsplit(":", 1)[1]) == 8 and a != b
    assert local_account(Path(str(tmp_path / "boxes"))) == a  # the same dir: the same account


def test_default_owner_is_login_at_host_with_odd_characters_replaced(monkeypatch):
    monkeypatch.setattr(ownership.getpass, "getuser", lambda: "al ice/x")
    monkeypatch.setattr(ownership.socket, "gethostname", lambda: "host.example;rm")
    assert default_owner() == "al-ice-x@host.example-rm"
    monkeypatch.setattr(ownership.socket, "gethostname", lambda: "-" * 3)
    assert default_owner() == "al-ice-x@unknown"
    monkeypatch.setattr(ownership.socket, "gethostname", lambda: "h" * 100)
    assert len(default_owner()) == 64


def test_default_owner_without_a_login_name(monkeypatch):
    def no_login():
        raise KeyError("getpwuid(): uid not found: 1000")

    monkeypatch.setattr(ownership.getpass, "getuser", no_login)
    monkeypatch.setattr(ownership.socket, "gethostname", lambda: "box")
    assert default_owner() == "user@box"


def test_owner_names_keep_case_dots_and_plus_and_trim_dashes(monkeypatch):
    monkeypatch.setattr(ownership.getpass, "getuser", lambda: "Alice.B+ops")
    monkeypatch.setattr(ownership.socket, "gethostname", lambda: "XBox-")
    assert default_owner() == "Alice.B+ops@XBox"


def test_a_refusal_from_before_ownership_covers_everyone():
    assert refused_by(Row(scope="*"), "vast", "vast:12345678", "bob")  # no account attribute at all
