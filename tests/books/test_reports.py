"""Reports on the hand-computed sessions of conftest.build_books (SQLite and PostgreSQL).

Worked figures (November 2026, UTC). Money is split across the hours a rental ran in
(ledger/attribution.py): s7 ran 31 Oct 23:31 -> 1 Nov 00:31 UTC, so 31 of its 60 minutes are November's.
  real spend   = s1 2.40 + s3 5401 s x 0.35/3600 (= 0.525097) + s5 2 h x 3.20 (= 6.40)
                 + s7 0.40 x 31/60 (= 0.206667) = 9.531764 USD
  simulated    = s4 0.5 h x 0.90 = 0.45 USD (never added to real spend)
  sessions     = s1, s3, s4, s5, s6, s7 = 6 (s2 never got an instance; s6 is open, no cost yet)
  GPU-hours    = 1 + 5401/3600 + 0.5 + 2 h x 2 GPUs + 31/60 = 7.516944
  tokens       = 12e6 (s1) + 1e6 (s4, simulated) = 13e6
  $/Mtoken all-in (real)  = 9.531764 / 12 = 0.794314   (bootstrap, idle and token-less s3, s5, s7 shared in)
  $/Mtoken job only (real) = 2700 s x 2.40/3600 = 1.80 USD / 12 = 0.15
  simulated $/Mtoken: all-in 0.45 / 1 = 0.45, job only 1200 s x 0.90/3600 = 0.30 / 1 = 0.30
"""

from __future__ import annotations

import pytest

from gpuops.accounting import ledger_service as cmds
from gpuops.errors import BadInput


def test_month_totals_utc(books):
    rep = cmds.month(books, "2026-11", "UTC")
    assert rep["total_usd"] == 9.531764
    assert rep["simulated_usd"] == 0.45
    assert rep["sessions"] == 6
    assert rep["open_sessions"] == 1
    assert rep["gpu_hours"] == 7.516944
    assert rep["tokens"] == 13_000_000
    assert rep["usd_per_mtoken"] == 0.794314
    assert rep["usd_per_mtoken_job"] == 0.15
    assert rep["simulated_usd_per_mtoken"] == 0.45
    assert rep["simulated_usd_per_mtoken_job"] == 0.3
    exp = {r["name"]: r for r in rep["by_experiment"]}
    assert [r["name"] for r in rep["by_experiment"]] == ["finetune", "llama-serve", "cpu-sim", "old"]
    assert exp["old"]["cost_usd"] == 0.206667
    assert exp["llama-serve"]["cost_usd"] == 2.925097
    assert exp["llama-serve"]["sessions"] == 2  # s2, the failed launch, is not counted
    assert exp["llama-serve"]["usd_per_mtoken"] == 0.243758  # 2.925097 / 12
    assert exp["llama-serve"]["usd_per_mtoken_job"] == 0.15
    assert exp["finetune"] == {
        **exp["finetune"],
        "cost_usd": 6.4,
        "gpu_hours": 4.0,
        "sessions": 2,
        "open_sessions": 1,
        "tokens": 0,
        "usd_per_mtoken": None,
        "usd_per_mtoken_job": None,
    }
    assert exp["cpu-sim"]["cost_usd"] == 0.0 and exp["cpu-sim"]["simulated_usd"] == 0.45
    card = {r["name"]: r for r in rep["by_card"]}
    assert card["a100-80gb x2"]["gpu_hours"] == 4.0
    assert card["h100-sxm"]["usd_per_mtoken"] == 0.2
    prov = {r["name"]: r for r in rep["by_provider"]}
    assert prov["runpod"]["cost_usd"] == 9.006667 and prov["runpod"]["usd_per_mtoken"] == 0.750556
    assert prov["vast"]["cost_usd"] == 0.525097 and prov["vast"]["sessions"] == 2
    assert "days" not in rep


def test_month_in_another_zone_moves_sessions_across_the_boundary(books):
    # Asia/Tokyo is UTC+9: s7 (Oct 31 23:30 UTC) is Nov 1 08:30 there, in November.
    rep = cmds.month(books, "2026-11", "Asia/Tokyo")
    assert rep["total_usd"] == 9.725097
    assert rep["sessions"] == 6
    oct_utc = cmds.month(books, "2026-10", "UTC")
    assert oct_utc["total_usd"] == 0.193333 and oct_utc["sessions"] == 1  # s7's 29 minutes before midnight UTC
    assert cmds.month(books, "2026-10", "Asia/Tokyo")["sessions"] == 0


def test_by_day(books):
    days = cmds.month(books, "2026-11", "UTC", by="day")["days"]
    assert len(days) == 30 and days[0]["date"] == "2026-11-01" and days[-1]["date"] == "2026-11-30"
    d = {x["date"]: x for x in days}
    assert (
        d["2026-11-03"]["cost_usd"] == 7.146667
    )  # s1 2.40 + s5's 89 min before midnight 4.746667 (s2 failed: nothing)
    assert d["2026-11-03"]["sessions"] == 2
    assert d["2026-11-04"]["cost_usd"] == 1.653333  # s5's other 31 minutes
    assert d["2026-11-01"]["cost_usd"] == 0.206667  # s7's November part
    assert d["2026-11-05"]["cost_usd"] == 0.525097
    assert d["2026-11-10"] == {
        "date": "2026-11-10",
        "cost_usd": 0.0,
        "simulated_usd": 0.45,
        "storage_usd": 0.0,
        "gpu_hours": 0.5,
        "sessions": 1,
        "tokens": 1_000_000,
    }
    assert d["2026-11-20"]["sessions"] == 1 and d["2026-11-20"]["cost_usd"] == 0.0  # open
    assert sum(x["cost_usd"] for x in days) == pytest.approx(9.531764, abs=1e-6)
    tokyo = {x["date"]: x for x in cmds.month(books, "2026-11", "Asia/Tokyo", by="day")["days"]}
    assert tokyo["2026-11-01"]["cost_usd"] == 0.4  # s7
    assert tokyo["2026-11-04"]["cost_usd"] == 6.4  # s5 at 07:30 Tokyo time
    assert tokyo["2026-11-03"]["cost_usd"] == 2.4


def test_plot_lines():
    from gpuops.render.ledger import bar_lines

    lines = bar_lines(
        [
            {"date": "2026-11-01", "cost_usd": 4.0, "simulated_usd": 0.0},
            {"date": "2026-11-02", "cost_usd": 1.0, "simulated_usd": 1.0},
            {"date": "2026-11-03", "cost_usd": 0.0, "simulated_usd": 0.0},
        ],
        width=8,
    )
    assert lines[1] == "11-01 [green]████████[/][yellow][/] $4.00"
    assert lines[2] == "11-02 [green]██[/][yellow]██[/] $1.00 +$1.00 sim"
    assert lines[3] == "11-03 [green][/][yellow][/] $0.00"
    assert bar_lines([{"date": "2026-11-01", "cost_usd": 0.0, "simulated_usd": 0.0}]) == [
        "daily spend: nothing spent this month"
    ]


def test_experiments_with_latest_conclusion(books):
    rep = cmds.experiments(books, tz="UTC")
    exp = {r["name"]: r for r in rep["experiments"]}
    assert set(exp) == {"finetune", "llama-serve", "cpu-sim", "old"}
    assert exp["llama-serve"]["latest_conclusion"] == "box died overnight; closed from the agent heartbeat"
    assert exp["finetune"]["latest_conclusion"] == "loss 1.92 after 1 epoch"
    assert exp["cpu-sim"]["latest_conclusion"] == ""
    assert exp["old"]["cost_usd"] == 0.4
    window = cmds.experiments(books, since="2026-11-04", until="2026-11-10", tz="UTC")
    exp = {r["name"]: r for r in window["experiments"]}
    assert set(exp) == {
        "llama-serve",
        "cpu-sim",
        "finetune",
    }  # s3 (Nov 5), s4 (Nov 10, until is inclusive), s5's Nov 4 part
    assert exp["llama-serve"]["cost_usd"] == 0.525097 and exp["llama-serve"]["sessions"] == 1
    assert exp["finetune"]["cost_usd"] == 1.653333
    with pytest.raises(BadInput, match="before"):
        cmds.experiments(books, since="2026-11-10", until="2026-11-01")
    with pytest.raises(BadInput, match="2026-11-03"):
        cmds.experiments(books, since="3.11.2026")


def test_show_every_field_steps_events(books):
    d = cmds.show(books, "s4", tz="UTC")
    assert d["session"] == "s4" and d["id"] == "s4"
    assert d["simulated"] is True and d["cost_usd"] == 0.45 and d["seconds"] == 1800.0
    assert d["usd_per_mtoken"] == 0.45 and d["usd_per_mtoken_job"] == 0.3 and d["job_cost_usd"] == 0.3
    assert d["bootstrap_seconds"] == 12.75
    assert d["steps"] == [
        {"name": "system", "status": "done", "seconds": 12.5, "detail": ""},
        {"name": "pip", "status": "skipped", "seconds": 0.25, "detail": '{"cached": true}'},
    ]
    assert [e["kind"] for e in d["events"]] == ["intent", "closed"]
    assert [set(e) for e in d["events"]] == [{"time", "kind", "detail"}] * 2  # one time format: no epoch "at"
    assert d["events"][0]["time"] == "2026-11-10T12:00:00Z"
    assert d["times"]["created_at"] == "2026-11-10T12:00:00Z"
    for key in (
        "provider",
        "card",
        "usd_per_hour",
        "tokens",
        "end_reason",
        "exit_code",
        "log",
        "results",
        "status",
        "experiment",
        "log_path",
        "results_path",
        "end_source",
        "billing_increment_seconds",
        "source",
    ):
        assert key in d
    s3 = cmds.show(books, "s3", tz="UTC")
    assert s3["end_source"] == "heartbeat" and s3["times"]["ended_at"] == "2026-11-05T09:30:30.500Z"
    assert s3["usd_per_mtoken"] is None  # no tokens
    open_ = cmds.show(books, "s6")
    assert open_["cost_usd"] is None and open_["usd_per_mtoken"] is None and open_["status"] == "running"
    failed = cmds.show(books, "s2")
    assert failed["cost_usd"] == 0.0 and failed["instance_id"] is None and failed["billed_seconds"] == 0.0
    with pytest.raises(BadInput, match="no session"):
        cmds.show(books, "nope")


def test_tokens_after_the_fact_and_note(books):
    r = cmds.tokens(books, "s5", 32_000_000)
    assert r == {"session": "s5", "tokens": 32_000_000, "cost_usd": 6.4, "simulated": False, "usd_per_mtoken": 0.2}
    assert cmds.tokens(books, "s4", 1_000_000)["simulated"] is True  # the CLI prints "(simulated)" beside its $/Mtoken
    rep = cmds.month(books, "2026-11", "UTC")
    assert rep["tokens"] == 45_000_000
    assert rep["usd_per_mtoken"] == round(9.531764 / 44, 6)  # real tokens: 12e6 + 32e6
    assert rep["usd_per_mtoken_job"] == round((1.80 + 6.40) / 44, 6)  # s5 has no job time: all of it
    assert [e.kind for e in books.events("s5")][-1] == "tokens"
    with pytest.raises(BadInput):
        cmds.tokens(books, "s5", -1)
    assert cmds.note(books, "s5", "  two\nlines  ") == {"session": "s5", "conclusion": "two lines"}
    with pytest.raises(BadInput):
        cmds.note(books, "s5", "   ")


def test_tokens_beyond_64_bits_are_bad_input(books):
    # Seen: `ledger tokens S 99999999999999999999999` -> OverflowError traceback (SQLite INTEGER), exit 1.
    with pytest.raises(BadInput, match="at most 9,223,372,036,854,775,807"):
        cmds.tokens(books, "s5", 10**23)
    assert cmds.tokens(books, "s5", 2**63 - 1)["tokens"] == 2**63 - 1


def test_bad_month_and_zone(books):
    with pytest.raises(BadInput, match="2026-11"):
        cmds.month(books, "11/2026")
    with pytest.raises(BadInput, match="time zone"):
        cmds.month(books, "2026-11", "Mars/Olympus")
    with pytest.raises(BadInput, match="--by"):
        cmds.month(books, "2026-11", by="week")


def test_csv_and_json_views(books):
    import csv
    import io

    from gpuops.render.ledger import csv_text

    rep = cmds.month(books, "2026-11", "UTC")
    rows = list(csv.DictReader(io.StringIO(csv_text("month", rep))))
    assert rows[0]["group"] == "total" and rows[0]["cost_usd"] == "9.531764" and rows[0]["usd_per_mtoken_job"] == "0.15"
    assert [(r["group"], r["name"]) for r in rows[1:4]] == [
        ("experiment", "finetune"),
        ("experiment", "llama-serve"),
        ("experiment", "cpu-sim"),
    ]
    days = list(csv.DictReader(io.StringIO(csv_text("month", cmds.month(books, "2026-11", "UTC", by="day")))))
    # 30 days, then the month's total row (`--by day --csv` keeps the total)
    assert len(days) == 31 and days[-1]["date"] == "total" and days[-1]["cost_usd"] == "9.531764"
    assert days[2] == {
        "date": "2026-11-03",
        "cost_usd": "7.146667",
        "simulated_usd": "0.0",
        "gpu_hours": "3.966667",
        "sessions": "2",
        "tokens": "12000000",
        "storage_usd": "0.0",
    }
    ex = list(csv.DictReader(io.StringIO(csv_text("experiments", cmds.experiments(books)))))
    assert {r["name"]: r["latest_conclusion"] for r in ex}["finetune"] == "loss 1.92 after 1 epoch"
    show = list(csv.DictReader(io.StringIO(csv_text("show", cmds.show(books, "s1")))))
    assert show[0]["id"] == "s1" and show[0]["cost_usd"] == "2.4" and show[0]["usd_per_mtoken_job"] == "0.15"


def test_month_table_folds_the_tail():
    from gpuops.render.ledger import _fold

    rows = [
        {
            "name": f"e{i}",
            "cost_usd": 10.0 - i,
            "simulated_usd": 0.5,
            "gpu_hours": 1.0,
            "sessions": 2,
            "open_sessions": 1,
            "tokens": 100,
            "usd_per_mtoken": 1.0,
            "usd_per_mtoken_job": 1.0,
            "simulated_usd_per_mtoken": None,
            "simulated_usd_per_mtoken_job": None,
        }
        for i in range(5)
    ]
    assert _fold(rows, 5) == rows
    folded = _fold(rows, 3)
    assert [r["name"] for r in folded] == ["e0", "e1", "e2", "(2 more)"]
    assert folded[3]["cost_usd"] == 13.0 and folded[3]["sessions"] == 4 and folded[3]["usd_per_mtoken"] is None
