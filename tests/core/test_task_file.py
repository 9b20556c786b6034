"""`gpuops up TASK.toml`: a task file read as infra.toml is (strict, one line naming the key and its
fix), flags over it key by key, `--dry-run` saying what would be rented and run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuops.errors import BadInput
from gpuops.rental.request import UpArgs, build, load_task
from ledger import Ledger
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "task.toml"


def test_the_example_task_file_reads_as_its_keys_say():
    assert load_task(EXAMPLE) == {
        "experiment": "bench",
        "note": "bandwidth and decode on the cheapest A100",
        "results": "out/",
        "recover": 0,
        "card": "a100",
        "gpu_count": 1,
        "max_hours": 1.0,
        "job": str(REPO / "examples" / "bench.sh"),
        "env": ("TOKENS=50", "WEIGHTS_MB=64"),
        "idle_minutes": "15",
        "setup": {"packages": ["numpy"]},
    }


def test_flags_override_the_file_key_by_key_and_env_entries_add_up(gpuops_home):
    req, settings = build(UpArgs.merged(load_task(EXAMPLE), {"card": "h100", "env": ("TOKENS=100",), "max_hours": 2.0}))
    assert (req.card, req.gpu_count, req.experiment, req.max_hours) == ("h100", 1, "bench", 2.0)
    assert req.job == REPO / "examples" / "bench.sh"
    assert req.env == ("TOKENS=50", "WEIGHTS_MB=64", "TOKENS=100")  # resolved later: the flag's TOKENS wins
    assert settings.teardown.idle_minutes == 15.0 and settings.bootstrap.packages == ["numpy"]
    assert settings.job.results == "out/"
    req, settings = build(UpArgs.merged(load_task(EXAMPLE), {}))
    assert (req.card, req.max_hours) == ("a100", 1.0)


@pytest.mark.parametrize(
    "text,message",
    [
        ('rum = "job.sh"\n', "{path}:1: rum: unknown key (did you mean run?)"),
        ("[resources]\ncard = 3\n", "{path}:2: resources.card: Input should be a valid string"),
        (
            '[resources]\ncount = "2"\n',
            "{path}:2: resources.count: Input should be a valid integer (got the text '2': write it without quotes)",
        ),
        ("[limits]\nmax_hour = 1\n", "{path}:2: limits.max_hour: unknown key (did you mean max_hours?)"),
        ('[setup]\npackage = ["x"]\n', "{path}: setup.package: unknown key"),
        ('env = ["9X=s3cr3t"]\n', "{path}:1: env: job env entry '9X'=... must be NAME or NAME=VALUE"),
        ("run = \n", "{path}: malformed TOML: "),
    ],
)
def test_a_bad_key_or_value_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "task.toml"
    path.write_text(text)
    with pytest.raises(BadInput) as e:
        load_task(path)
    assert e.value.message.startswith(message.format(path=path)), e.value.message
    assert "s3cr3t" not in e.value.message
    assert e.value.fix.startswith("see the task file's keys in README.md") or "malformed" in message


def test_workdir_and_its_excludes_are_read_relative_to_the_task_file(tmp_path):
    path = tmp_path / "task.toml"
    path.write_text('run = "job.sh"\nworkdir = "src"\nworkdir_exclude = ["data", "*.ckpt"]\n')
    got = load_task(path)
    assert got["workdir"] == str(tmp_path / "src")
    assert got["workdir_exclude"] == ("data", "*.ckpt")
    assert got["job"] == str(tmp_path / "job.sh")


def test_interactive_in_a_task_file_is_a_box_with_no_run(tmp_path):
    path = tmp_path / "task.toml"
    path.write_text("interactive = true\n")
    assert load_task(path) == {"interactive": True}


def test_a_missing_task_file_and_no_run_are_one_line(cli, tmp_path):
    r = cli("up", str(tmp_path / "nope.toml"))
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: task file {tmp_path / 'nope.toml'} not found (")
    (tmp_path / "t.toml").write_text('experiment = "x"\n')
    r = cli("up", str(tmp_path / "t.toml"))
    assert r.returncode == 2 and r.stderr.startswith(
        "error: no job: pass --job PATH, a task file with run, or --interactive ("
    )


@pytest.mark.e2e  # the dry run's offers start the local provider's containment probe
def test_dry_run_prints_what_would_be_rented_and_run(cli):
    r = cli("up", str(EXAMPLE), "--card", "h100", "--dry-run", "--json")
    assert r.returncode == 0, r
    plan = json.loads(r.stdout)
    assert (plan["card"], plan["gpu_count"], plan["max_hours"], plan["experiment"]) == ("h100-pcie", 1, 1.0, "bench")
    assert plan["job"] == str(REPO / "examples" / "bench.sh") and plan["job_env"] == ["TOKENS", "WEIGHTS_MB"]
    assert plan["setup"] == ["system", "deps", "verify"]
    r = cli("up", str(EXAMPLE), "--dry-run")
    assert "would run: " in r.stdout and "would set up: system, deps, verify" in r.stdout


@pytest.mark.e2e
def test_a_task_file_rents_runs_and_books(cli, gpuops_home, tmp_path):
    (tmp_path / "job.sh").write_text('echo "tokens=$TOKENS"; echo \'{"tokens": 7}\' >> "$GPUOPS_METRICS"\n')
    (tmp_path / "task.toml").write_text(
        'experiment = "from-task"\nrun = "job.sh"\nenv = ["TOKENS=50"]\n'
        '[resources]\ncard = "t4"\n[limits]\nmax_hours = 0.5\n'
    )
    r = cli("up", str(tmp_path / "task.toml"), "--json")
    assert r.returncode == 0, r
    summ = json.loads(r.stdout)
    row = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").get(summ["session"])
    assert (row.experiment, row.card, row.max_hours, row.tokens, row.end_reason) == (
        "from-task",
        "t4",
        0.5,
        7,
        "job_end",
    )
    assert "tokens=50" in Path(summ["log"]).read_text()
