"""`ledger sessions --format csv` on an empty ledger: the header line, as the README promises."""

from __future__ import annotations


def test_ledger_sessions_csv_with_no_sessions_is_its_header(gpuops_home, cli):
    # Seen: `gpuops ledger sessions --format csv` on an empty ledger printed an empty line, not the
    # header the README promises ("--format csv: header first").
    out = cli("ledger", "sessions", "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ("session,started,date,experiment,provider,card,gpu_count,status,end_reason,"
                          "hours,usd_per_hour,cost_usd,simulated,tokens,usd_per_mtoken,conclusion\n")
