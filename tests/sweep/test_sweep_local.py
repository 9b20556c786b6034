"""`gpuops sweep` end to end on the local provider, as a user runs it (subprocesses): K boxes at once, the
sweep's money limit, cancel, Ctrl-C twice, an executor SIGKILLed, two executors on one PostgreSQL queue.

Concurrency is judged by the boxes' own times as the ledger booked them from the provider
(``instance_created_at`` .. ``ended_at``); money by literal arithmetic on the price the test sets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledger import Ledger
from tests.conftest import gpuops_cmd
from tests.lifecycle.upproc import up_env
from tests.support.postgres import postgres_server  # noqa: F401  (fixture)
from tests.teardown.conftest import wait_for

PRICE = 1.5  # USD/h, [providers.local] price_per_hour: a real (not simulated) price the test knows


def _sweep_file(tmp_path: Path, jobs: int, k: int, sleep_s: float | str, extra: str = "", hours: float = 0.05) -> Path:
    (tmp_path / "job.sh").write_text(
        f'#!/usr/bin/env bash\necho "start $SEED"\necho \'{{"tokens": 1000}}\' >> "$GPUOPS_METRICS"\nsleep {sleep_s}\n'
    )
    seeds = ", ".join(f'"{i}"' for i in range(jobs))
    p = tmp_path / "sweep.toml"
    p.write_text(
        f'run = "job.sh"\nexperiment = "sw"\nmax_parallel = {k}\n{extra}\n[limits]\nmax_hours = {hours}\n'
        f"[matrix]\nenv = {{ SEED = [{seeds}] }}\n"
    )
    return p


def _env(cli_env: dict, **extra: str) -> dict:
    return up_env(cli_env, GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR=str(PRICE), **extra)


def _rows(url: str | None = None) -> tuple[list, list, list]:
    """(sweeps, runs, sessions) rows of the ledger."""
    led = Ledger(url or os.environ["GPUOPS_LEDGER_URL"])
    try:
        with led.engine.connect() as c:
            return tuple(  # type: ignore[return-value]
                c.execute(sa.text(f"SELECT * FROM {t}")).mappings().all() for t in ("sweeps", "runs", "sessions")
            )
    finally:
        led.engine.dispose()


def _jobs(url: str | None = None) -> list:
    led = Ledger(url or os.environ["GPUOPS_LEDGER_URL"])
    try:
        with led.engine.connect() as c:
            return c.execute(sa.text("SELECT * FROM sweep_jobs ORDER BY seq")).mappings().all()
    finally:
        led.engine.dispose()


def _most_at_once(sessions) -> int:
    edges = sorted([(s["instance_created_at"], 1) for s in sessions] + [(s["ended_at"], -1) for s in sessions])
    most = now = 0
    for _, d in edges:  # an end at the very instant of a start counts first (-1 < 1)
        now += d
        most = max(most, now)
    return most


def _running(n: int):
    """True once ``n`` rentals have their job started and are still open."""

    def pred() -> bool:
        try:
            _, _, sessions = _rows()
        except Exception:  # noqa: BLE001  the ledger not made yet
            return False
        led = Ledger(os.environ["GPUOPS_LEDGER_URL"])
        try:
            open_ = [s for s in sessions if s["status"] != "closed"]
            return len([s for s in open_ if any(e.kind == "job_started" for e in led.events(s["id"]))]) >= n
        finally:
            led.engine.dispose()

    return pred


def _start(argv: list[str], env: dict, tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    err = tmp_path / f"{name}.err"
    with open(err, "wb") as f:
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=f,
                             start_new_session=True)  # fmt: skip
    return p, err


def _end(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
        p.wait(10)


def _served_by_a_watchdog(env: dict, tmp_path: Path) -> Path:
    """`gpuops watchdog` (its loop runs the detached sweeps) until the ledger's sweep is closed, then stopped; its stderr."""
    wd, err = _start(gpuops_cmd("watchdog", "--interval", "2"), env, tmp_path, "wd")
    try:
        wait_for(lambda: _rows()[0][0]["status"] == "closed", timeout=120)
        wd.send_signal(signal.SIGINT)
        wd.wait(60)
    finally:
        _end(wd)
    return err


def test_six_jobs_with_k2_run_at_most_two_at_once_and_book_six_runs(cli_env, tmp_path):
    f = _sweep_file(tmp_path, jobs=6, k=2, sleep_s=3)
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--json"), env=_env(cli_env), capture_output=True, text=True,
                       timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    sweeps, runs, sessions = _rows()
    assert [s["end_reason"] for s in sweeps] == ["done"] and rep["counts"]["done"] == 6
    assert len(runs) == 6 and {x["sweep_id"] for x in runs} == {sweeps[0]["id"]}
    assert len(sessions) == 6 and all(s["status"] == "closed" and s["end_reason"] == "job_end" for s in sessions)
    assert _most_at_once(sessions) == 2  # never three boxes; two did run together
    for s in sessions:  # each rental's cost: its billed seconds at the price set
        assert s["cost_usd"] == pytest.approx(s["billed_seconds"] * PRICE / 3600, abs=1e-6)
    assert rep["cost_usd"] == pytest.approx(sum(s["cost_usd"] for s in sessions), abs=1e-6)
    assert rep["simulated_usd"] == 0.0  # a price the user set for the local box: real money, said so
    st = subprocess.run(gpuops_cmd("sweep", "status", rep["sweep"]), env=_env(cli_env), capture_output=True, text=True,
                        timeout=60)  # fmt: skip
    assert st.returncode == 0 and f"spent ${rep['cost_usd']:.4f}, " in st.stdout, st.stdout + st.stderr


def test_the_sweeps_money_limit_stops_it_with_the_reason(cli_env, tmp_path):
    # 360 USD/h, 0.02 h a job: a worst case of 7.20 USD each. max_usd 7.40 holds one; once the first
    # job has booked its 3 s or more (>= 0.30 USD) the next worst case no longer fits: 0.30 + 7.20 > 7.40.
    f = _sweep_file(tmp_path, jobs=3, k=2, sleep_s=3, extra="max_usd = 7.4", hours=0.02)
    env = up_env(cli_env, GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR="360")
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--json"), env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stderr
    sweeps, runs, sessions = _rows()
    assert sweeps[0]["end_reason"] == "sweep_usd" and "max_usd $7.4000" in sweeps[0]["detail"]
    assert len(runs) == 1 and len(sessions) == 1
    assert sessions[0]["cost_usd"] == pytest.approx(sessions[0]["billed_seconds"] * 360 / 3600, abs=1e-6)
    assert 0.3 <= sessions[0]["cost_usd"] <= 7.4
    assert runs[0]["max_usd"] == pytest.approx(360 * 0.02, abs=1e-9)  # the run held to its worst case
    assert [(j["state"], j["end_reason"]) for j in _jobs()] == [
        ("done", "job_end"), ("cancelled", "sweep_usd"), ("cancelled", "sweep_usd")
    ]  # fmt: skip


def test_cancel_ends_every_box_and_rents_nothing_more(cli_env, tmp_path):
    f = _sweep_file(tmp_path, jobs=3, k=2, sleep_s=120)
    p, err = _start(gpuops_cmd("sweep", str(f)), _env(cli_env), tmp_path, "sweep")
    try:
        wait_for(_running(2), timeout=90)
        sweep_id = _rows()[0][0]["id"]
        r = subprocess.run(gpuops_cmd("sweep", "cancel", sweep_id), env=_env(cli_env), capture_output=True,
                           text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert p.wait(90) == 1, err.read_text()
    finally:
        _end(p)
    sweeps, runs, sessions = _rows()
    assert sweeps[0]["status"] == "cancelled" and len(runs) == 2 and len(sessions) == 2
    assert all(s["status"] == "closed" and s["end_reason"] in ("manual", "interrupted") for s in sessions)
    assert [j["state"] for j in _jobs()][2] == "cancelled"


def test_ctrl_c_twice_ends_every_box(cli_env, tmp_path):
    f = _sweep_file(tmp_path, jobs=3, k=2, sleep_s=120)
    p, err = _start(gpuops_cmd("sweep", str(f)), _env(cli_env), tmp_path, "sweep")
    try:
        wait_for(_running(2), timeout=90)
        p.send_signal(signal.SIGINT)
        wait_for(lambda: "renting nothing new" in err.read_text(), timeout=30)
        assert p.poll() is None and len([s for s in _rows()[2] if s["status"] != "closed"]) == 2  # they go on
        p.send_signal(signal.SIGINT)
        assert p.wait(90) == 130, err.read_text()
    finally:
        _end(p)
    sweeps, runs, sessions = _rows()
    assert sweeps[0]["end_reason"] == "interrupted" and len(runs) == 2
    assert [(s["status"], s["end_reason"]) for s in sessions] == [("closed", "interrupted")] * 2
    assert [j["state"] for j in _jobs()] == ["cancelled"] * 3


def test_an_executor_sigkilled_mid_sweep_leaves_a_claim_that_expires_and_its_job_runs_again(cli_env, tmp_path):
    mark = tmp_path / "rerun-now"
    f = _sweep_file(tmp_path, jobs=1, k=1, sleep_s=f"$([ -e {mark} ] && echo 0 || echo 120)")
    a, a_err = _start(gpuops_cmd("sweep", str(f), "--claim-seconds", "3"), _env(cli_env), tmp_path, "a")
    try:
        wait_for(_running(1), timeout=90)
        a.kill()  # SIGKILL: no handler runs; its job's up sees its executor gone and ends its rental
        a.wait(10)
        wait_for(lambda: all(s["status"] == "closed" for s in _rows()[2]), timeout=60)
        assert _rows()[2][0]["end_reason"] == "interrupted"
    finally:
        _end(a)
    mark.touch()
    sweep_id = _rows()[0][0]["id"]
    b = subprocess.run(gpuops_cmd("sweep", "resume", sweep_id, "--claim-seconds", "3", "--json"), env=_env(cli_env),
                       capture_output=True, text=True, timeout=180)  # fmt: skip
    assert b.returncode == 0, b.stderr
    sweeps, runs, sessions = _rows()
    job = _jobs()[0]
    assert (job["state"], job["claims"], sweeps[0]["end_reason"]) == ("done", 2, "done")
    assert sorted(r["end_reason"] for r in runs) == ["interrupted", "job_end"]
    assert all(s["status"] == "closed" for s in sessions) and len(sessions) == 2


def test_two_executors_on_one_postgresql_queue_never_run_a_job_twice(cli_env, tmp_path, postgres_server):
    url = postgres_server.new_database()
    env = _env(cli_env, GPUOPS_LEDGER_URL=url)
    f = _sweep_file(tmp_path, jobs=4, k=2, sleep_s=1)
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--detach", "--json"), env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    sweep_id = json.loads(r.stdout)["sweep"]
    procs = [_start(gpuops_cmd("sweep", "resume", sweep_id), env, tmp_path, f"x{i}") for i in range(2)]
    try:
        for p, err in procs:
            assert p.wait(240) == 0, err.read_text()
    finally:
        for p, _ in procs:
            _end(p)
    sweeps, runs, sessions = _rows(url)
    jobs = _jobs(url)
    assert sweeps[0]["end_reason"] == "done" and [j["state"] for j in jobs] == ["done"] * 4
    assert [j["claims"] for j in jobs] == [1] * 4 and len(runs) == 4 and len(sessions) == 4
    assert len({j["run_id"] for j in jobs}) == 4 and {r["id"] for r in runs} == {j["run_id"] for j in jobs}
    assert _most_at_once(sessions) <= 4


def test_a_detached_sweep_is_run_by_the_watchdog_with_env_values_from_its_own_environment(cli_env, tmp_path):
    f = _sweep_file(tmp_path, jobs=2, k=2, sleep_s=1)
    (tmp_path / "job.sh").write_text('#!/usr/bin/env bash\n[ "$TOKEN" = "from-the-env-file" ] || exit 3\n')
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--detach", "--env", "TOKEN", "--json"),
                       env=_env(cli_env, TOKEN="x"), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["counts"]["queued"] == 2 and rep["detached"] is True
    assert "from-the-env-file" not in json.dumps(_jobs()[0]["args_json"])  # the queue keeps the name alone
    assert '"TOKEN"' in _jobs()[0]["args_json"]
    err = _served_by_a_watchdog(_env(cli_env, TOKEN="from-the-env-file"), tmp_path)
    sweeps, runs, sessions = _rows()
    assert sweeps[0]["end_reason"] == "done", err.read_text()
    assert len(runs) == 2 and [s["end_reason"] for s in sessions] == ["job_end"] * 2


def test_a_monthly_cap_refusal_ends_the_sweep_with_that_reason(cli_env, tmp_path):
    # 360 USD/h, 0.02 h a job: a worst case of 7.20 USD each; the monthly cap 7.50 holds the first
    # (nothing spent yet). Once it has booked its 4 s or more (>= 0.40 USD) the second's 7.20 no
    # longer fits in 7.50 - 0.40 = 7.10: `up` refuses it with monthly_cap, and the sweep ends so.
    f = _sweep_file(tmp_path, jobs=3, k=1, sleep_s=4, hours=0.02)
    env = up_env(cli_env, GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR="360", GPUOPS_TEARDOWN_MONTHLY_CAP_USD="7.5")
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--json"), env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stderr
    sweeps, runs, sessions = _rows()
    assert (sweeps[0]["status"], sweeps[0]["end_reason"]) == ("closed", "monthly_cap")
    assert "monthly cap $7.50" in sweeps[0]["detail"]
    assert len(sessions) == 1 and sessions[0]["end_reason"] == "job_end"
    assert 0.4 <= sessions[0]["cost_usd"] <= 7.2
    assert [(j["state"], j["end_reason"]) for j in _jobs()] == [
        ("done", "job_end"), ("cancelled", "monthly_cap"), ("cancelled", "monthly_cap")
    ]  # fmt: skip


def test_dry_run_prints_each_jobs_worst_case_and_the_total_and_queues_nothing(cli_env, tmp_path):
    # 1.50 USD/h x 0.05 h = 0.075 USD a job; two jobs 0.15 USD, more than max_usd 0.10.
    f = _sweep_file(tmp_path, jobs=2, k=2, sleep_s=1, extra="max_usd = 0.1")
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--dry-run", "--json"), env=_env(cli_env), capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert [(j["name"], j["provider"], j["worst_hours"]) for j in rep["jobs"]] == [
        ("SEED=0", "local", 0.05), ("SEED=1", "local", 0.05)
    ]  # fmt: skip
    assert [j["worst_usd"] for j in rep["jobs"]] == [pytest.approx(0.075, abs=1e-9)] * 2
    assert (rep["worst_usd"], rep["max_usd"]) == (pytest.approx(0.15, abs=1e-9), 0.1)
    t = subprocess.run(gpuops_cmd("sweep", str(f), "--dry-run"), env=_env(cli_env), capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert t.returncode == 0, t.stderr
    assert "worst case $0.0750 (0.05 h at $1.5000/h)" in t.stdout
    assert "total worst case $0.1500, more than max_usd $0.1000" in t.stdout
    sweeps, runs, sessions = _rows()
    assert (sweeps, runs, sessions) == ([], [], []) and _jobs() == []


def test_a_matrix_of_two_argv_lists_books_two_runs_whose_jobs_saw_exactly_them(cli_env, tmp_path):
    """The args go enqueue -> claim -> child (UpArgs rebuilt from the queue's JSON) -> the box, unchanged."""
    (tmp_path / "argv.py").write_text("import json, sys\nprint('ARGV=' + json.dumps(sys.argv[1:]))\n")
    f = tmp_path / "sweep.toml"
    f.write_text(
        'run = "argv.py"\nexperiment = "sw-args"\nargs = ["--epochs", "3"]\nmax_parallel = 2\n'
        "[limits]\nmax_hours = 0.05\n"
        '[matrix]\nargs = [["--lr", "1e-3"], ["--note", "it\'s $(x); a b", ""]]\n'
    )
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--json"), env=_env(cli_env), capture_output=True, text=True,
                       timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stderr
    sweeps, runs, sessions = _rows()
    assert [s["end_reason"] for s in sweeps] == ["done"] and len(runs) == 2 and len(sessions) == 2
    jobs = _jobs()
    assert [j["name"] for j in jobs] == ["--lr 1e-3", "--note 'it'\"'\"'s $(x); a b' ''"]
    assert [json.loads(j["args_json"])["job_args"] for j in jobs] == [
        ["--epochs", "3", "--lr", "1e-3"], ["--epochs", "3", "--note", "it's $(x); a b", ""]
    ]  # fmt: skip
    saw = {}
    for s in sessions:
        (line,) = [ln for ln in Path(s["log_path"]).read_text().splitlines() if ln.startswith("ARGV=")]
        saw[s["run_id"]] = json.loads(line[5:])
    by_job = {j["run_id"]: j["name"] for j in jobs}
    assert {by_job[run]: argv for run, argv in saw.items()} == {
        "--lr 1e-3": ["--epochs", "3", "--lr", "1e-3"],
        "--note 'it'\"'\"'s $(x); a b' ''": ["--epochs", "3", "--note", "it's $(x); a b", ""],
    }


def _workdir_sweep(tmp_path: Path, jobs: int = 2) -> Path:
    """A sweep of ``jobs`` jobs sharing one workdir (a file, a folder, a symlink inside, one file excluded); each job
    copies the workdir's file and its link's target into its results."""
    wd = tmp_path / "wd"
    (wd / "conf").mkdir(parents=True)
    (wd / "data.txt").write_text("hello from the workdir\n")
    (wd / "conf" / "lr.txt").write_text("1e-3\n")
    (wd / "big.ckpt").write_text("left out by workdir_exclude\n")
    os.symlink("conf/lr.txt", wd / "lr-link")
    p = _sweep_file(tmp_path, jobs, k=2, sleep_s=0, extra='workdir = "wd"\nworkdir_exclude = ["*.ckpt"]')
    (tmp_path / "job.sh").write_text(
        '#!/usr/bin/env bash\nset -e\nmkdir -p out\ncd "$GPUOPS_WORKDIR"\n'
        '{ cat data.txt; cat lr-link; ls -A | tr "\\n" " "; } > "$OLDPWD/out/got.txt"\n'
    )
    return p


def _blobs() -> list:
    led = Ledger(os.environ["GPUOPS_LEDGER_URL"])
    try:
        with led.engine.connect() as c:
            return c.execute(sa.text("SELECT sha256, name, data FROM sweep_blobs ORDER BY name")).mappings().all()
    finally:
        led.engine.dispose()


def test_a_detached_sweep_carries_its_workdir_by_content_one_blob_for_two_jobs(cli_env, gpuops_home, tmp_path):
    f = _workdir_sweep(tmp_path)
    tmp = tmp_path / "tmp"  # where the executor unpacks each job's workdir: nothing left after
    tmp.mkdir()
    env = _env(cli_env, TMPDIR=str(tmp))
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--detach", "--json"), env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    blobs = _blobs()
    assert [b["name"] for b in blobs] == ["job.sh", "workdir.tar"]  # two jobs, one workdir stored once
    (tar,) = [b for b in blobs if b["name"] == "workdir.tar"]
    assert {json.loads(j["args_json"])["workdir_sha256"] for j in _jobs()} == {tar["sha256"]}
    assert all(json.loads(j["args_json"])["workdir"] is None for j in _jobs())  # no path of this machine
    (tmp_path / "wd" / "data.txt").write_text("changed after the sweep was queued\n")  # the queue holds its own copy
    err = _served_by_a_watchdog(env, tmp_path)
    sweeps, runs, sessions = _rows()
    assert sweeps[0]["end_reason"] == "done", err.read_text()
    assert [s["end_reason"] for s in sessions] == ["job_end"] * 2
    for s in sessions:
        got = (gpuops_home / "results" / s["id"] / "got.txt").read_text()
        assert got == "hello from the workdir\n1e-3\nconf data.txt lr-link "
    assert list(tmp.glob("gpuops-workdir-*")) == []  # each unpacked workdir removed once its job ended


def test_a_tampered_workdir_blob_fails_its_job_in_one_line_and_rents_nothing(cli_env, tmp_path):
    f = _workdir_sweep(tmp_path, jobs=1)
    r = subprocess.run(gpuops_cmd("sweep", str(f), "--detach", "--json"), env=_env(cli_env), capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    sweep_id = json.loads(r.stdout)["sweep"]
    (tar,) = [b for b in _blobs() if b["name"] == "workdir.tar"]
    led = Ledger(os.environ["GPUOPS_LEDGER_URL"])
    try:
        with led.engine.begin() as c:  # one byte of data.txt changed in place: same size, another hash
            data = bytes(tar["data"]).replace(b"hello from", b"jello from")
            c.execute(sa.text("UPDATE sweep_blobs SET data = :d WHERE sha256 = :s"), {"d": data, "s": tar["sha256"]})
    finally:
        led.engine.dispose()
    b = subprocess.run(gpuops_cmd("sweep", "resume", sweep_id, "--json"), env=_env(cli_env), capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert b.returncode == 1, b.stderr
    sweeps, runs, sessions = _rows()
    (job,) = _jobs()
    assert (job["state"], job["end_reason"]) == ("failed", "error")
    assert job["detail"] == (
        f"the sweep's workdir {tar['sha256'][:12]} in the ledger does not hash to its sha256 (changed after it was "
        "queued); nothing was rented (enqueue the sweep again)"
    )
    assert (runs, sessions, sweeps[0]["end_reason"]) == ([], [], "failed")
