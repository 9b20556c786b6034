"""One output convention (gpuops/render/emit.py): --format table|json|csv on every reporting command,
--json/--csv shorthands, ISO-8601 UTC times, stable key order, indent 2, totals in day CSV.

The commands run in process through the real entry point (the ``cli`` fixture): what is judged is
what they print and their exit codes, the same code path a `gpuops` process runs."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime, timedelta

import pytest

from gpuops.errors import BadInput
from gpuops.render import emit
from tests.books.conftest import build_books

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$")


def run(cli, *args, ok=True):
    p = cli(*args)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def books_cli(cli, gpuops_home):
    """The ``cli`` runner on a ledger holding tests/books' sample books."""
    from ledger import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    build_books(led)
    led.engine.dispose()
    return cli


def test_pick_resolves_shorthands_and_refuses_two():
    assert emit.pick(None) == "table" and emit.pick(None, json_out=True) == "json" and emit.pick("CSV") == "csv"
    assert emit.pick("json", json_out=True) == "json"  # the same format twice is one format
    with pytest.raises(BadInput, match="exclude each other"):
        emit.pick(None, json_out=True, csv_out=True)
    with pytest.raises(BadInput, match="--format csv and --json exclude each other"):
        emit.pick("csv", json_out=True)
    with pytest.raises(BadInput, match="unknown --format 'yaml'"):
        emit.pick("yaml")
    with pytest.raises(BadInput, match="writes no csv"):
        emit.pick("csv", allowed=("table", "json"))


def test_machine_times_are_iso_utc_and_key_order_is_kept():
    from datetime import datetime, timezone

    t0 = datetime(2026, 11, 5, 9, 30, 30, 250000, tzinfo=timezone.utc).timestamp()
    doc = emit.machine({"z": 1, "created_at": t0, "a": {"ended_at": int(t0) + 3600, "ok_at": None}, "flag_at": True})
    assert list(doc) == ["z", "created_at", "a", "flag_at"]
    assert doc["created_at"] == "2026-11-05T09:30:30.250Z" and doc["a"]["ended_at"] == "2026-11-05T10:30:30Z"
    assert doc["a"]["ok_at"] is None and doc["flag_at"] is True
    assert emit.json_text({"b": 1, "a": [1]}) == '{\n  "b": 1,\n  "a": [\n    1\n  ]\n}\n'
    assert (
        emit.records_csv([{"a": 1.1, "n": {"x": None, "y": [1, 2]}}, {"a": 2, "b": True}])
        == 'a,n_x,n_y,b\n1.1,,"[1, 2]",\n2,,,true\n'
    )


def test_ledger_show_machine_outputs_have_no_epoch(books_cli):
    d = json.loads(run(books_cli, "ledger", "show", "s3", "--format", "json", "--tz", "UTC").stdout)
    for k in ("created_at", "instance_created_at", "ended_at"):
        assert ISO_UTC.match(d[k]), (k, d[k])
    assert d["ended_at"] == "2026-11-05T09:30:30.500Z" and d["times"]["ended_at"] == "2026-11-05T09:30:30.500Z"
    row = next(csv.DictReader(io.StringIO(run(books_cli, "ledger", "show", "s3", "--format", "csv").stdout)))
    assert row["ended_at"] == "2026-11-05T09:30:30.500Z" and ISO_UTC.match(row["created_at"])


def test_by_day_csv_keeps_the_total_and_plot_needs_a_table(books_cli):
    rows = list(
        csv.DictReader(
            io.StringIO(
                run(books_cli, "ledger", "month", "2026-11", "--tz", "UTC", "--by", "day", "--format", "csv").stdout
            )
        )
    )
    rep = json.loads(
        run(books_cli, "ledger", "month", "2026-11", "--tz", "UTC", "--by", "day", "--format", "json").stdout
    )
    assert (
        rows[-1]["date"] == "total"
        and float(rows[-1]["cost_usd"]) == rep["total_usd"]
        and rows[-1]["sessions"] == str(rep["sessions"])
    )
    assert (
        abs(sum(float(r["cost_usd"]) for r in rows[:-1]) - rep["total_usd"]) < 1e-6
        and len(rows) == len(rep["days"]) + 1
    )
    for args in (["--json"], ["--format", "json"], ["--csv"]):
        bad = run(books_cli, "ledger", "month", "2026-11", "--plot", *args, ok=False)
        assert bad.returncode == 2 and "--plot draws a chart in the terminal" in bad.stderr, bad.stderr


# `ps` shows what each open box has cost so far: these move between two runs (gpuops.teardown.live)
MOVING = ("cost_usd", "accrued_usd", "usd_per_mtoken", "ttl_left_seconds", "idle_seconds", "status_age_seconds")


def still(js: str):
    """A JSON document without the figures of ``MOVING`` (they accrue while the test runs)."""
    doc = json.loads(js)
    for r in doc if isinstance(doc, list) else []:
        for k in MOVING:
            if isinstance(r, dict) and k in r and "session" in r:
                r[k] = "moving"
    return doc


@pytest.mark.e2e  # in process, but `offers --provider local` starts the local provider's containment probe (onbox/contain.py)
def test_every_reporting_command_takes_format(books_cli):
    # json and csv of the same report agree; the shorthand gives the same bytes as --format
    for args in (
        ["ledger", "month", "2026-11", "--tz", "UTC"],
        ["ledger", "experiments"],
        ["ledger", "sessions", "--tz", "UTC"],
        ["ps"],
        ["plan", "--model", "llama-3-8b", "--card", "h100-sxm"],
        ["offers", "--provider", "local", "--card", "a100"],
    ):
        js = run(books_cli, *args, "--format", "json").stdout
        assert still(js) == still(run(books_cli, *args, "--json").stdout), args
        assert js.startswith(('{\n  "', "[\n  {", "[]")), args  # indent 2
        run(books_cli, *args, "--format", "csv")
    sessions = list(
        csv.DictReader(io.StringIO(run(books_cli, "ledger", "sessions", "--format", "csv", "--tz", "UTC").stdout))
    )
    assert [r["session"] for r in sessions][:3] == ["s6", "s4", "s3"]
    plan_rows = list(
        csv.DictReader(
            io.StringIO(run(books_cli, "plan", "--model", "llama-3-8b", "--card", "a100", "--format", "csv").stdout)
        )
    )
    assert [r["card"] for r in plan_rows] == ["a100-40gb", "a100-40gb-pcie", "a100-80gb-pcie", "a100-80gb-sxm"]
    assert {r["model"] for r in plan_rows} == {"llama-3-8b"} and plan_rows[0]["usd_per_mtoken_ceiling"]
    offers = json.loads(run(books_cli, "offers", "--provider", "local", "--card", "a100", "--format", "json").stdout)
    assert {o["card"] for o in offers} >= {"a100-80gb-pcie", "a100-80gb-sxm"}
    # reconcile: the books' RunPod/Vast rows have no key here (exit 1), and still a JSON list of actions
    rec = run(books_cli, "reconcile", "--format", "json", ok=False)
    assert rec.returncode == 1 and all(a["kind"] == "error" for a in json.loads(rec.stdout))
    bad = run(books_cli, "watchdog", "--once", "--format", "csv", ok=False)
    assert bad.returncode == 2 and "writes no csv" in bad.stderr
    bad = run(books_cli, "ledger", "export", "--format", "json", ok=False)
    assert bad.returncode == 2 and "writes no json" in bad.stderr


def test_ps_json_times_iso_and_keys_in_column_order(books_cli):
    rows = json.loads(run(books_cli, "ps", "--format", "json").stdout)
    assert rows, "the books hold an open session (s6)"
    first = rows[0]
    assert list(first)[:3] == ["session", "experiment", "job"] or list(first)[0] == "session"
    assert ISO_UTC.match(first["created_at"])
    assert still(run(books_cli, "ps", "--json").stdout) == still(json.dumps(rows))


def _times(doc) -> list[str]:
    """Every string in ``doc`` that reads as a date with a time (``YYYY-MM-DDT...``)."""
    if isinstance(doc, dict):
        return [t for v in doc.values() for t in _times(v)]
    if isinstance(doc, list):
        return [t for v in doc for t in _times(v)]
    return [doc] if isinstance(doc, str) and re.match(r"^\d{4}-\d\d-\d\dT", doc) else []


def test_every_json_time_is_iso_utc_with_z_whatever_the_zone_asked(books_cli):
    # `ps` and `ledger sessions` wrote two formats (Z and +00:00): one now, the zone only for tables
    docs = {
        args: json.loads(run(books_cli, *args, "--json").stdout)
        for args in (
            ("ps",),
            ("ledger", "sessions", "--tz", "Europe/Berlin"),
            ("ledger", "sessions", "--runs", "--tz", "Europe/Berlin"),
            ("ledger", "show", "s3", "--tz", "Europe/Berlin"),
        )
    }
    seen = {args: _times(doc) for args, doc in docs.items()}
    assert (
        seen[("ledger", "show", "s3", "--tz", "Europe/Berlin")]
        and seen[("ledger", "sessions", "--tz", "Europe/Berlin")]
    )
    for args, times in seen.items():
        assert all(ISO_UTC.match(t) for t in times), (args, [t for t in times if not ISO_UTC.match(t)])
    s3 = next(s for s in docs[("ledger", "sessions", "--tz", "Europe/Berlin")]["sessions"] if s["session"] == "s3")
    started = datetime.fromisoformat(s3["started"].replace("Z", "+00:00"))
    table = run(books_cli, "ledger", "sessions", "--tz", "Europe/Berlin").stdout
    # the table keeps the asked zone: CET in November is UTC + 1 h (IANA tzdata, Europe/Berlin)
    assert (started + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M") in table
