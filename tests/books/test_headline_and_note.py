"""The month's headline divides each money by the tokens of its own sessions (real by real,
simulated by simulated, labelled), and `up --note` is shown where no conclusion is set."""

from __future__ import annotations

import json
import os

import pytest

from tests.books.conftest import build_books


@pytest.fixture
def books(gpuops_home):
    from ledger import Ledger

    led = Ledger(os.environ["GPUOPS_LEDGER_URL"])
    build_books(led)
    return led


def test_month_headline_keeps_real_and_simulated_tokens_apart(books, cli):
    # Seen: "232,200 tokens | $0.0370/Mtoken all-in": real dollars over every token, computable from neither column.
    rep = json.loads(cli("ledger", "month", "2026-11", "--tz", "UTC", "--json").stdout)
    assert (rep["tokens"], rep["simulated_tokens"]) == (13_000_000, 1_000_000)  # s1 real 12e6, s4 simulated 1e6
    out = cli("ledger", "month", "2026-11", "--tz", "UTC", env={"COLUMNS": "200"})
    head = " ".join(out.stdout.split("\n\n")[0].split())
    assert "| 12,000,000 tokens real, 1,000,000 simulated |" in head, head
    assert f"${rep['usd_per_mtoken']:,.4f}/Mtoken all-in, ${rep['usd_per_mtoken_job']:,.4f} job only (real)" in head
    assert rep["usd_per_mtoken"] == pytest.approx(rep["total_usd"] / 12, abs=5e-5)  # real dollars over real tokens
    assert f"${rep['simulated_usd_per_mtoken']:,.4f}/Mtoken all-in" in head and head.count("(simulated)") == 1
    assert rep["simulated_usd_per_mtoken"] == pytest.approx(0.45, abs=1e-6)  # s4: $0.45 simulated over 1e6 tokens
    assert "no cost yet" not in head and "1 open, still accruing: `gpuops ps`" in head


def test_up_note_shows_where_no_conclusion_is_set(books, cli):
    books.update("s3", note="retry of s2 on a smaller card", conclusion="")
    rows = {r["session"]: r for r in json.loads(cli("ledger", "sessions", "--json").stdout)["sessions"]}
    assert rows["s3"]["note"] == "retry of s2 on a smaller card" and rows["s3"]["conclusion"] == ""
    table = " ".join(cli("ledger", "sessions", env={"COLUMNS": "160"}).stdout.split())
    assert "note: retry of s2 on a smaller card" in table
    assert "vLLM 7B fp16: 1,100 tok/s at batch 1" in table  # s1's conclusion, not its note
