"""A sweep file: its jobs expanded and each built by `up`'s own request.build; bad input one line, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuops.errors import BadInput
from gpuops.sweep.spec import load_sweep


def _files(tmp_path: Path, text: str) -> Path:
    (tmp_path / "job.sh").write_text("#!/usr/bin/env bash\necho hi\n")
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


def test_jobs_times_the_matrix_each_built_as_up_builds_it(gpuops_home, tmp_path):
    p = _files(
        tmp_path,
        'run = "job.sh"\nexperiment = "lr"\nenv = ["A=1"]\nmax_parallel = 2\nmax_usd = 3.5\nmax_hours = 2\n'
        "[limits]\nmax_hours = 0.5\n"
        '[[jobs]]\nname = "base"\n[[jobs]]\nname = "big"\nenv = ["A=2"]\n[jobs.limits]\nmax_hours = 1\n'
        '[matrix]\nenv = { LR = ["1e-3", "1e-4"] }\n',
    )
    spec = load_sweep(p)
    assert (spec.name, spec.experiment, spec.max_parallel, spec.max_usd, spec.max_hours) == ("s", "lr", 2, 3.5, 2.0)
    assert [j.name for j in spec.jobs] == ["base,LR=1e-3", "base,LR=1e-4", "big,LR=1e-3", "big,LR=1e-4"]
    big = spec.jobs[2]
    assert big.args.env == ("A=1", "A=2", "LR=1e-3") and big.params == ("LR=1e-3",)
    assert (big.req.max_hours, spec.jobs[0].req.max_hours) == (1.0, 0.5)  # a job's [limits] over the top level's
    assert big.req.job == tmp_path / "job.sh" and big.req.experiment == "lr"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('run = "job.sh"\nmax_parallel = 0\n', "max_parallel must be a whole number from 1 to 64, got 0"),
        ('run = "job.sh"\nmax_usd = -1.0\n', "sweep max_usd must be a finite number > 0"),
        ('run = "job.sh"\nmax_parralel = 2\n', "max_parralel"),
        ('run = "job.sh"\n[[jobs]]\nname = "a"\n[[jobs]]\nname = "a"\n', "two jobs are named 'a'"),
        ('run = "job.sh"\n[[jobs]]\nname = "x"\n[jobs.resources]\ncard = "a1000000"\n', "sweep job x:"),
        ('run = "nope.sh"\n[limits]\nmax_hours = 0\n', "sweep job"),
        ("[matrix]\nenv = { LR = [] }\n", "matrix.env.LR is empty"),
    ],
)
def test_bad_input_is_one_line_naming_the_fix(gpuops_home, tmp_path, text, says):
    with pytest.raises(BadInput) as e:
        load_sweep(_files(tmp_path, text))
    assert says in str(e.value) and "\n" not in str(e.value) and e.value.fix


def test_the_cli_refuses_before_anything_is_written(cli, gpuops_home, tmp_path):
    _files(tmp_path, 'run = "job.sh"\nmax_parallel = 100\n')
    r = cli("sweep", str(tmp_path / "s.toml"))
    assert r.returncode == 2 and "max_parallel" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (gpuops_home / "ledger.db").exists()  # nothing enqueued, no ledger made


def test_detach_keeps_no_env_value_in_the_queue(cli, gpuops_home, tmp_path):
    _files(tmp_path, 'run = "job.sh"\n')
    r = cli("sweep", str(tmp_path / "s.toml"), "--detach", "--env", "HF_TOKEN=hf_secret")
    assert r.returncode == 2 and "--detach keeps no env value in the queue" in r.stderr
    assert "hf_secret" not in r.stderr + r.stdout


def test_the_example_sweep_file_reads(gpuops_home):
    from tests.conftest import REPO

    spec = load_sweep(REPO / "examples" / "sweep.toml")
    assert [j.name for j in spec.jobs] == [
        "short,--copy-mb 64", "short,--copy-mb 256", "long,--copy-mb 64", "long,--copy-mb 256"
    ]  # fmt: skip
    assert (spec.max_parallel, spec.max_usd, spec.max_hours) == (2, 5.0, 4.0)
    assert spec.jobs[3].args.env == ("WEIGHTS_MB=64", "TOKENS=500") and spec.jobs[3].req.recover == 1
    assert spec.jobs[3].req.job_args == ("--copy-mb", "256")


@pytest.mark.parametrize(
    "cost, simulated, said",
    [
        (0.0068, 0.0068, "spent $0.0068 simulated,"),
        (0.5, 0.1, "spent $0.5000 ($0.1000 simulated),"),
        (0.5, 0.0, "spent $0.5000,"),
    ],
)
def test_a_sweeps_simulated_spend_is_said_so(cost, simulated, said):
    from gpuops.render.sweep import status_text

    rep = {
        "sweep": "sweep-x", "name": "x", "experiment": "e", "status": "closed", "end_reason": None, "detail": "",
        "max_parallel": 2, "max_usd": 5.0, "max_hours": None, "counts": {"done": 1}, "cost_usd": cost,
        "simulated_usd": simulated, "billed_hours": 0.01, "held_usd": 0.0, "tokens": 0, "usd_per_mtoken": None,
        "jobs": [],
    }  # fmt: skip
    assert said in status_text(rep).splitlines()[1]


def test_a_matrix_of_argv_lists_each_after_the_jobs_own_args(gpuops_home, tmp_path):
    p = _files(
        tmp_path,
        'run = "job.sh"\nargs = ["--epochs", "3"]\n'
        '[[jobs]]\nname = "top"\n[[jobs]]\nname = "own"\nargs = ["--data", "my set"]\n'
        '[matrix]\nargs = [["--lr", "1e-3"], ["--lr", "1e-4"], ["it\'s", "a\\nb"], []]\nenv = { SEED = ["1"] }\n',
    )
    spec = load_sweep(p)
    assert [j.name for j in spec.jobs] == [
        "top,SEED=1,--lr 1e-3", "top,SEED=1,--lr 1e-4", "top,SEED=1,'it'\"'\"'s' 'a\\x0ab'", "top,SEED=1,(no args)",
        "own,SEED=1,--lr 1e-3", "own,SEED=1,--lr 1e-4", "own,SEED=1,'it'\"'\"'s' 'a\\x0ab'", "own,SEED=1,(no args)",
    ]  # fmt: skip
    assert [j.req.job_args for j in spec.jobs] == [
        ("--epochs", "3", "--lr", "1e-3"), ("--epochs", "3", "--lr", "1e-4"), ("--epochs", "3", "it's", "a\nb"),
        ("--epochs", "3"),
        ("--data", "my set", "--lr", "1e-3"), ("--data", "my set", "--lr", "1e-4"), ("--data", "my set", "it's", "a\nb"),
        ("--data", "my set"),
    ]  # fmt: skip  # a [[jobs]] entry's args replace the top level's; the matrix's come after
    assert spec.jobs[0].params == ("SEED=1",)  # the queue's env entries: the matrix's env alone


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            'run = "job.sh"\n[matrix]\nargs = ["--lr", "1e-3"]\n',
            "matrix.args.0: Input should be a valid list (got the text '--lr'",
        ),
        ('run = "job.sh"\n[matrix]\nargs = [["a"], ["a"]]\n', "two jobs are named 'a'"),
        ('run = "job.sh"\n[matrix]\nargs = [["ok"], ["x\\u0000"]]\n', "sweep job 'x\\x00': job argument 1 holds a NUL"),
    ],
)
def test_bad_matrix_args_are_one_line(gpuops_home, tmp_path, text, says):
    with pytest.raises(BadInput) as e:
        load_sweep(_files(tmp_path, text))
    assert says in e.value.message and "\n" not in str(e.value) and e.value.fix


def test_provider_is_laid_over_every_job_as_ups_flag_over_a_task_file(cli, gpuops_home, tmp_path):
    _files(tmp_path, 'run = "job.sh"\n[resources]\nprovider = "local"\n[[jobs]]\nname = "a"\n[[jobs]]\nname = "b"\n')
    r = cli("sweep", str(tmp_path / "s.toml"), "--provider", "nope")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "sweep job a: unknown provider 'nope'" in r.stderr  # the flag, not the file's local, reached the job
    assert not (gpuops_home / "ledger.db").exists()


def test_given_flags_win_over_the_file_and_leave_the_rest(gpuops_home, tmp_path):
    p = _files(tmp_path, 'run = "job.sh"\n[resources]\nprovider = "local"\nspot = true\ncard = "a100"\n')
    spec = load_sweep(p, {"provider": "vast", "spot": False})
    (job,) = spec.jobs
    assert (job.req.provider, job.req.spot, job.req.spot_explicit, job.req.card) == ("vast", False, True, "a100")
