"""Bad input a new user gave through a setting or a flag value (found by hand, 2026-12-01): one line
naming the fix, exit 2, before anything is rented or booked."""

from __future__ import annotations

import pytest


@pytest.fixture
def job(tmp_path):
    p = tmp_path / "ok.sh"
    p.write_text("true\n")
    return str(p)


def _nothing_rented(home) -> None:
    assert not (home / "ledger.db").exists() and not (home / "boxes").exists()


CARD_EMPTY = (
    "card is empty: name one, e.g. a100 (`gpuops cards` lists them), or leave it unset for the cheapest card that fits"
)


@pytest.mark.parametrize("value", ['""', '"  "'])
def test_an_empty_card_in_the_file_is_refused_not_read_as_any_card(value, job, gpuops_home, cli, tmp_path):
    # Seen: `[up] card = ""` rented the cheapest card that fits, as if card were left out.
    cfg = tmp_path / "conf" / "infra.toml"
    cfg.parent.mkdir()
    cfg.write_text(f"[up]\ncard = {value}\n")
    out = cli("up", "--job", job, "--config", str(cfg))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == f"error: {cfg}:2: up.card: {CARD_EMPTY} (see infra.example.toml for the keys and units)\n"
    _nothing_rented(gpuops_home)


@pytest.mark.parametrize("command", [["up", "--job", "{job}"], ["offers"]])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_card_variable_is_refused_not_read_as_any_card(command, value, job, gpuops_home, cli):
    # Seen: `GPUOPS_UP_CARD=$CARD gpuops up ...` with CARD unset rented the cheapest card.
    out = cli(*[job if a == "{job}" else a for a in command], env={"GPUOPS_UP_CARD": value})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == f"error: environment variable GPUOPS_UP_CARD: {CARD_EMPTY} (fix or unset the variable)\n"
    _nothing_rented(gpuops_home)


def test_an_empty_card_variable_is_a_warning_for_ps(gpuops_home, cli):
    out = cli("ps", env={"GPUOPS_UP_CARD": ""})
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert out.stderr.startswith(f"warning: environment variable GPUOPS_UP_CARD: {CARD_EMPTY}; ignored"), out.stderr


def test_the_example_config_leaves_card_unset(gpuops_home, cli, job):
    from tests.conftest import REPO

    out = cli("up", "--job", job, "--dry-run", "--config", str(REPO / "infra.example.toml"))
    assert out.returncode == 0, (out.stdout, out.stderr)
