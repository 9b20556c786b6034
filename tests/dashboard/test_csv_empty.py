"""`ledger sessions --format csv` on an empty ledger: the header line, as the README promises."""

from __future__ import annotations


def test_ledger_sessions_csv_with_no_sessions_is_its_header(gpuops_home, cli):
    # Seen: `gpuops ledger sessions --format csv` on an empty ledger printed an empty line, not the
    # header the README promises ("--format csv: header first").
    out = cli("ledger", "sessions", "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "session,run,started,date,experiment,provider,card,gpu_count,status,end_reason,"
        "hours,usd_per_hour,cost_usd,simulated,tokens,usd_per_mtoken,conclusion\n"
    )


def test_ps_reconcile_and_volumes_csv_with_nothing_listed_is_the_header(gpuops_home, cli):
    # Seen: `ps`, `reconcile` and `volumes list` with --format csv printed an empty line when there
    # was nothing to list, so a script reading the header first broke on a quiet day.
    ps = cli("ps", "--format", "csv")
    assert ps.returncode == 0, ps.stderr
    header = ps.stdout.splitlines()
    assert len(header) == 1 and header[0].startswith("session,experiment,job,provider,card,gpu_count,spot,")
    assert header[0].endswith(
        ",owner,account,run_id,attempt,max_session_usd,usd_per_mtoken,seconds,accrued_usd,ttl_left_seconds,idle_seconds,status_at,status_age_seconds,"
        "ssh_host,ssh_port,ssh_user"
    )
    rec = cli("reconcile", "--format", "csv")
    assert (rec.returncode, rec.stdout) == (0, "session,kind,detail\n"), rec.stderr
    vols = cli("volumes", "list", "--format", "csv")
    assert (vols.returncode, vols.stdout) == (
        0,
        "provider,id,name,size_gb,region,usd_per_month,kind,machine_id,mount_path\n",
    ), vols.stderr


def test_ps_csv_header_is_the_same_with_an_open_session(gpuops_home, cli):
    import os

    from gpuops.rental.sessions import ACCESS_COLUMNS, LIVE_COLUMNS, open_session_columns, row_json
    from ledger import Ledger

    led = Ledger(os.environ["GPUOPS_LEDGER_URL"])  # the header is the ledger's columns: the model's, in its order
    led.add_session(
        dict(id="s-1", experiment="e", job="j.sh", provider="local", card="a100-80gb", status="open", created_at=1.0)
    )
    try:
        assert tuple(row_json(led.get("s-1"))) + LIVE_COLUMNS + ACCESS_COLUMNS == open_session_columns(led)
    finally:
        led.engine.dispose()
