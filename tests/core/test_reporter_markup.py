"""User text (job file names, error messages) printed by the `up` reporter is not rich markup."""

from __future__ import annotations

from gpuops.cli.up_reporter import ConsoleReporter


def test_job_name_with_brackets_is_printed_as_typed(capsys):
    # Seen: `up --job "[bold red]loud.sh"` printed "job loud.sh".
    r = ConsoleReporter()
    r.stage("job", "[bold red]loud.sh")
    assert "job [bold red]loud.sh" in capsys.readouterr().err


def test_warning_with_a_stray_closing_tag_does_not_raise(capsys):
    r = ConsoleReporter()
    r.warn("provider said: [/] unexpected")  # rich raised MarkupError here
    assert "provider said: [/] unexpected" in capsys.readouterr().err


def test_reports_survive_brackets_in_experiment_and_conclusion(gpuops_home, cli_env, cli, tmp_path):
    # Seen: one session booked under --experiment "exp[/]x" made `ledger month`, `ledger
    # experiments` and `ledger show` die with rich.errors.MarkupError for the whole month.
    import json
    import subprocess

    from tests.conftest import gpuops_cmd

    job = tmp_path / "ok.sh"
    job.write_text("true\n")
    env = dict(cli_env, COLUMNS="160")
    up = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--experiment", "exp[/]x[bold]", "--note", "[/]n", "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert up.returncode == 0, up.stderr
    sid = json.loads(up.stdout)["session"]
    note = cli("ledger", "note", sid, "[/]concl", env={"COLUMNS": "160"})  # the reports in process: quick
    assert note.returncode == 0, note.stderr
    for args in (["ledger", "month"], ["ledger", "experiments"], ["ledger", "show", sid], ["ps"]):
        out = cli(*args, env={"COLUMNS": "160"})
        assert out.returncode == 0 and "Traceback" not in out.stderr, (args, out.stderr[-500:])
        if args[:2] != ["ps"]:
            assert "exp[/]x[bold]" in out.stdout, (args, out.stdout)
