"""A job's arguments: `up ... -- ARG ...`, a task file's ``args``, the checks before renting, the job's
command line; end to end on the local provider, the job sees them byte for byte and the ledger books them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import gpuops
from gpuops.errors import BadInput
from gpuops.rental import request
from gpuops.rental.launcher import MAX_JOB_LINE_BYTES, _job_command, job_line_bytes
from gpuops.rental.request import UpArgs, build, load_task
from ledger import Ledger
from tests.conftest import gpuops_cmd

# What a shell would act on, were any of it unquoted: a command substitution, a separator, a space,
# both quotes, a newline, a glob, a variable, an empty argument, an option-looking word.
TRICKY = ["$(touch PWNED)", ";", "a b", "it's", 'say "hi"', "x\ny", "*", "$HOME", "", "--lr"]


@pytest.fixture
def job(tmp_path: Path) -> Path:
    p = tmp_path / "job.sh"
    p.write_text("#!/usr/bin/env bash\necho hi\n")
    return p


@pytest.fixture
def asked(monkeypatch) -> list[UpArgs]:
    """The UpArgs `gpuops up` hands to request.build (which then stops it: nothing is rented)."""
    seen: list[UpArgs] = []

    def stop(args: UpArgs):
        seen.append(args)
        raise BadInput("stopped by the test", "-")

    monkeypatch.setattr(request, "build", stop)
    return seen


@pytest.mark.parametrize(
    ("argv", "task", "job", "job_args"),
    [
        (["--job", "j.sh", "--", "--lr", "1e-3", "x"], None, "j.sh", ("--lr", "1e-3", "x")),
        (["--job", "j.sh", "--", "--"], None, "j.sh", ("--",)),  # only the first -- separates
        (["--job", "j.sh", "--", "task.toml"], None, "j.sh", ("task.toml",)),  # after --: the job's, not TASK
        (["--note", "--", "--job", "j.sh", "--", "a"], None, "j.sh", ("a",)),  # --note's value is "--"
        (["--job", "j.sh", "--"], None, "j.sh", ()),  # a -- with nothing after: no arguments, said so
    ],
)
def test_everything_after_the_separator_is_the_jobs_argv(cli, asked, argv, task, job, job_args):
    r = cli("up", *argv)
    assert r.returncode == 2 and "stopped by the test" in r.stderr, r
    assert (asked[0].job, asked[0].job_args) == (job, job_args)


def test_without_a_separator_no_arguments_are_given(cli, asked):
    assert cli("up", "--job", "j.sh").returncode == 2
    assert asked[0].job_args == ()


def test_a_task_file_and_the_separator(cli, asked, tmp_path):
    task = tmp_path / "task.toml"
    task.write_text('run = "job.sh"\nargs = ["--lr", "1e-3", "--epochs", "3"]\n')
    assert cli("up", str(task)).returncode == 2
    assert cli("up", str(task), "--", "a").returncode == 2
    assert cli("up", str(task), "--").returncode == 2
    assert [a.job_args for a in asked] == [("--lr", "1e-3", "--epochs", "3"), ("a",), ()]  # replaced, not added
    assert {a.job for a in asked} == {str(tmp_path / "job.sh")}


def test_usage_and_help_say_it(cli):
    r = cli("up", "--help")
    assert r.returncode == 0
    assert "Usage: gpuops up [OPTIONS] [TASK.toml] [-- ARG...]" in r.stdout
    assert "Everything after -- is the job's argv" in " ".join(r.stdout.split())


def test_the_task_files_args_key(tmp_path):
    path = tmp_path / "task.toml"
    path.write_text('run = "job.sh"\nargs = ["--lr", "1e-3", ""]\n')
    assert load_task(path) == {"job": str(tmp_path / "job.sh"), "job_args": ("--lr", "1e-3", "")}
    path.write_text('run = "job.sh"\nargs = "--lr 1e-3"\n')
    with pytest.raises(BadInput) as e:
        load_task(path)
    assert e.value.message == (
        f"{path}:2: args: Input should be a valid list (got the text '--lr 1e-3': write a list of texts, "
        'e.g. ["--lr", "1e-3"])'
    )


def test_each_argument_is_quoted_onto_the_jobs_line():
    assert _job_command("job.sh", ["--lr", "1e-3"]) == "bash .gpuops/job/job.sh --lr 1e-3"
    assert _job_command("job.py", ["a b", "", "it's", "$(x)"]) == (
        "python3 .gpuops/job/job.py 'a b' '' 'it'\"'\"'s' '$(x)'"
    )
    assert _job_command("run", []) == "./.gpuops/job/run"


def test_the_arguments_reach_build_and_the_request(gpuops_home, job):
    req, _ = build(UpArgs(job=str(job), job_args=("--lr", "1e-3")))
    assert req.job_args == ("--lr", "1e-3")


@pytest.mark.parametrize(
    ("fields", "message", "fix"),
    [
        (
            {"interactive": True, "job": None, "job_args": ("a",)},
            "job arguments and --interactive exclude each other",
            "an interactive box runs no job: drop the arguments after --, or drop --interactive",
        ),
        (
            {"job_args": ("ok", "a\0b")},
            "job argument 2 holds a NUL byte, which no command line can carry",
            "pass it in a file instead (--workdir DIR carries it) and give the job the file's path",
        ),
        (
            {"job_args": ("\udcff",)},  # a byte that is not UTF-8, as Python decodes it from argv
            "job argument 1 is not UTF-8 text",
            "pass it in a file instead (--workdir DIR carries it) and give the job the file's path",
        ),
        (
            {"job_args": ("--lr", 0.001)},
            "job argument 2 is a float, not text",
            "write it as text, e.g. '1e-3'",
        ),
        (
            {"job_args": "--lr 1e-3"},
            "job arguments must be a list of strings, got the string '--lr 1e-3'",
            "give each argument apart, e.g. args = ['--lr', '1e-3']",
        ),
    ],
)
def test_bad_arguments_are_one_line_before_anything_is_rented(gpuops_home, job, fields, message, fix):
    with pytest.raises(BadInput) as e:
        build(UpArgs(**{"job": str(job), **fields}))
    assert (e.value.message, e.value.fix) == (message, fix)
    assert not (gpuops_home / "ledger.db").exists()


def test_a_line_over_the_bound_is_refused_and_one_at_it_is_not(gpuops_home, job):
    assert MAX_JOB_LINE_BYTES == 65536
    # the job's line quoted twice, as jobio.start_job and an SSH box quote it: 36 bytes around one "a"
    assert job_line_bytes("job.sh", ["a"]) == len("''\"'\"'bash .gpuops/job/job.sh a'\"'\"''") == 37
    base = 36
    fits = ["a" * (65536 - base)]
    assert job_line_bytes("job.sh", fits) == 65536
    assert build(UpArgs(job=str(job), job_args=tuple(fits)))[0].job_args == tuple(fits)
    with pytest.raises(BadInput) as e:
        build(UpArgs(job=str(job), job_args=("a" * (65537 - base),)))
    assert e.value.message == (
        "the job's arguments make a command line of 65,537 bytes on the box (quoted), more than 65,536"
    )
    # a single quote costs far more than its byte: three layers of quoting multiply it
    with pytest.raises(BadInput, match=r"^the job's arguments make a command line of 70,\d\d\d bytes"):
        build(UpArgs(job=str(job), job_args=("'" * 1320,)))


def test_the_python_api_takes_args(gpuops_home, job):
    with pytest.raises(BadInput) as e:
        gpuops.up(job, args="--lr 1e-3")
    assert e.value.message == "job arguments must be a list of strings, got the string '--lr 1e-3'"
    with pytest.raises(BadInput) as e:
        gpuops.up(job, args=["a\0"])
    assert e.value.message == "job argument 1 holds a NUL byte, which no command line can carry"


ARGV_JOB = """#!/usr/bin/env python3
import json, os, sys
print("ARGV=" + json.dumps(sys.argv[1:]))
print("SECRET in env:", os.environ.get("ARGS_SECRET") == "s3cr3t-value")
"""


@pytest.mark.e2e  # a rental on the local provider, the CLI in a subprocess
def test_up_passes_tricky_arguments_byte_for_byte_and_books_them(cli_env, gpuops_home, tmp_path):
    job = tmp_path / "argv.py"
    job.write_text(ARGV_JOB)
    r = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--card", "t4", "--max-hours", "0.5", "--env", "ARGS_SECRET",
                   "--json", "--", *TRICKY),
        env={**cli_env, "ARGS_SECRET": "s3cr3t-value"}, capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    summ = json.loads(r.stdout)
    assert summ["end_reason"] == "job_end"
    log = Path(summ["log"]).read_text()
    got = json.loads(next(ln for ln in log.splitlines() if ln.startswith("ARGV="))[5:])
    assert got == ["$(touch PWNED)", ";", "a b", "it's", 'say "hi"', "x\ny", "*", "$HOME", "", "--lr"]
    assert "SECRET in env: True" in log  # the env value reached the job
    assert not list(tmp_path.rglob("PWNED")) and not list(gpuops_home.rglob("PWNED"))  # nothing ran
    show = subprocess.run(gpuops_cmd("ledger", "show", summ["session"], "--json"), env=cli_env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["job_args"] == TRICKY
    table = subprocess.run(gpuops_cmd("ledger", "show", summ["session"]), env=cli_env, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert "args: '$(touch PWNED)' ';' 'a b' 'it'\"'\"'s' 'say \"hi\"' 'x\\x0ay' '*' '$HOME' '' --lr\n" in table.stdout
    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    assert [e.kind for e in led.events(summ["session"])].count("job_started") == 1
    led.engine.dispose()
    for f in gpuops_home.rglob("ledger.db*"):  # the arguments are booked; the env value never is
        assert b"s3cr3t-value" not in f.read_bytes()


@pytest.mark.e2e  # the dry run's offers start the local provider's containment probe
def test_the_dry_run_says_the_argv_it_would_run(cli, tmp_path):
    (tmp_path / "job.sh").write_text("echo hi\n")
    (tmp_path / "task.toml").write_text('run = "job.sh"\nargs = ["--from", "file"]\n[resources]\ncard = "t4"\n')
    r = cli("up", str(tmp_path / "task.toml"), "--dry-run", "--json", "--", "--lr", "1e-3", "a b")
    assert r.returncode == 0, r
    assert json.loads(r.stdout)["job_args"] == ["--lr", "1e-3", "a b"]
    r = cli("up", str(tmp_path / "task.toml"), "--dry-run")
    assert f"would run: {tmp_path / 'job.sh'} --from file\n" in r.stdout, r.stdout
