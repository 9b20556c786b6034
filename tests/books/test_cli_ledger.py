"""The `gpuops ledger ...` commands end to end through the real entry point, in process (the ``cli``
fixture: their output and exit codes; SQLite ledger of gpuops_home)."""

from __future__ import annotations

import csv
import io
import json

from tests.books.conftest import build_books


def run(cli, *args, ok=True, env=None):
    p = cli(*args, env=env)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def _seed(gpuops_home):
    from ledger import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    build_books(led)
    led.engine.dispose()


def test_month_json_csv_table_plot(cli, gpuops_home):
    _seed(gpuops_home)
    rep = json.loads(run(cli, "ledger", "month", "2026-11", "--tz", "UTC", "--json").stdout)
    for key in (
        "month",
        "total_usd",
        "simulated_usd",
        "gpu_hours",
        "sessions",
        "tokens",
        "usd_per_mtoken",
        "by_experiment",
        "by_card",
        "by_provider",
    ):
        assert key in rep
    assert (rep["total_usd"], rep["simulated_usd"], rep["sessions"], rep["usd_per_mtoken_job"]) == (
        9.531764,
        0.45,
        6,
        0.15,
    )
    assert set(rep["by_experiment"][0]) >= {"name", "cost_usd", "gpu_hours", "sessions", "tokens", "usd_per_mtoken"}
    rows = list(
        csv.DictReader(
            io.StringIO(run(cli, "ledger", "month", "2026-11", "--tz", "UTC", "--by", "day", "--csv").stdout)
        )
    )
    assert (
        rows[2]["date"] == "2026-11-03" and rows[2]["cost_usd"] == "7.146667"
    )  # s5 runs past midnight: split by the hour
    table = run(cli, "ledger", "month", "2026-11", "--tz", "UTC", "--by", "day", "--plot").stdout
    assert (
        "9.53" in table and "9.5318" not in table and "by day" in table and "daily spend" in table and "11-03 " in table
    )
    bad = run(cli, "ledger", "month", "2026-11", "--json", "--csv", ok=False)
    assert bad.returncode == 2 and "exclude each other" in bad.stderr
    bad = run(cli, "ledger", "month", "Nov", ok=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: month must look like 2026-11")


def test_show_tokens_note_experiments(cli, gpuops_home):
    _seed(gpuops_home)
    d = json.loads(run(cli, "ledger", "show", "s3", "--json", "--tz", "UTC").stdout)
    assert (
        d["end_source"] == "heartbeat"
        and d["cost_usd"] == 0.525097
        and d["times"]["ended_at"] == "2026-11-05T09:30:30.500Z"
    )
    out = run(cli, "ledger", "show", "s4").stdout
    assert "bootstrap steps" in out and "events" in out and "log:" in out
    assert run(cli, "ledger", "tokens", "s3", "2100000").stdout.strip() == "s3: 2,100,000 tokens, $0.2500/Mtoken"
    assert run(cli, "ledger", "note", "s3", "cheap but flaky").stdout.strip() == "s3: cheap but flaky"
    ex = {e["name"]: e for e in json.loads(run(cli, "ledger", "experiments", "--json").stdout)["experiments"]}
    assert ex["llama-serve"]["latest_conclusion"] == "cheap but flaky"
    assert ex["llama-serve"]["tokens"] == 14_100_000
    assert run(cli, "ledger", "tokens", "nope", "5", ok=False).returncode == 2


def test_export_import_via_cli(cli, gpuops_home, tmp_path):
    _seed(gpuops_home)
    text = run(cli, "ledger", "export", "--csv").stdout
    f = tmp_path / "all.csv"
    f.write_text(text)
    env2 = {"GPUOPS_LEDGER_URL": f"sqlite:///{tmp_path / 'second.db'}"}
    out = run(cli, "ledger", "import", str(f), env=env2)
    assert out.stdout.strip() == f"imported 5 sessions from {f}: $9.7251 + $0.4500 simulated"
    assert run(cli, "ledger", "export", env=env2).stdout == text
    bad = tmp_path / "bad.csv"
    bad.write_text(text.replace(",2.4,1.0,2.4,", ",2.4,one,2.4,", 1))
    p = run(cli, "ledger", "import", str(bad), ok=False, env=env2)
    assert p.returncode == 2
    assert (
        p.stderr
        == "error: 1 bad row(s): bad.csv:3: hours 'one' is not a number (fix those lines and import again; nothing was imported)\n"
    )
