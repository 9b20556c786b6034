"""The ledger refuses writes mid-job (another process holds SQLite's write lock past the busy
timeout): the job's exit and its tokens are spooled to a local file and replayed by the next write
that succeeds, so the session closes job_end with its tokens instead of losing them."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time

import pytest

from gpuops.config import load_settings
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from tests.teardown.conftest import wait_for


def test_job_exit_and_tokens_survive_a_locked_ledger(gpuops_home, fake_smi, tmp_path, monkeypatch):
    import ledger.engine
    from ledger.store import Ledger

    monkeypatch.setattr(ledger.engine, "SQLITE_BUSY_TIMEOUT_MS", 300)  # a writer gives up after 0.3 s
    monkeypatch.setenv("GPUOPS_SPOOL_DIR", str(tmp_path / "spool"))
    fake_smi.util(70)
    settings = load_settings(
        None,
        {
            "teardown": {"kill_grace_seconds": 0.5, "idle_minutes": "off"},
            "providers": {"local": {"price_per_hour": 1.0}},
        },
    )
    led = Ledger(settings.ledger_url())
    go = tmp_path / "go"
    job = tmp_path / "job.sh"
    job.write_text(f'echo \'{{"tokens": 1000}}\' >> "$GPUOPS_METRICS"\nwhile [ ! -f {go} ]; do sleep 0.05; done\n')
    db = settings.ledger_url()[len("sqlite:///") :]
    release = threading.Event()
    state: dict = {}

    def competitor():
        rows = wait_for(lambda: led.rows_between(0, 2e10), 60)
        wait_for(lambda: any(e.kind == "job_started" for e in led.events(rows[0].id)), 60)
        con = sqlite3.connect(db, isolation_level=None, timeout=10)
        con.execute("BEGIN IMMEDIATE")  # holds the write lock: every gpuops write now fails after 0.3 s
        state["locked"] = True
        go.write_text("")  # the job exits while the ledger refuses writes
        release.wait(60)
        con.execute("ROLLBACK")
        con.close()

    t = threading.Thread(target=competitor, daemon=True)
    t.start()

    def releaser():
        wait_for(lambda: len(led.spooled()) >= 2, 60)  # job_exited and the tokens are in the spool
        state["spooled"] = [e["op"] for e in led.spooled()]
        release.set()

    r = threading.Thread(target=releaser, daemon=True)
    r.start()
    try:
        summ = run_up(UpRequest(job=job), settings, Reporter(), ledger=led)
    finally:
        release.set()
        go.write_text("")
        t.join(10)
        r.join(10)
    assert state.get("locked") and "event" in state["spooled"]
    # `up` tries the spool once, right after its destroy; when the competitor's rollback comes later
    # (a loaded machine), the next command's replay applies it. What matters: nothing is lost.
    led.try_replay()
    row = led.get(summ["session"])
    assert (row.status, row.end_reason, row.exit_code, row.tokens) == ("closed", "job_end", 0, 1000)
    kinds = [e.kind for e in led.events(row.id)]
    assert "job_exited" in kinds and "spool_replayed" in kinds and kinds.count("closed") == 1
    assert kinds[-1] in ("closed", "spool_replayed")  # the close itself may be what waited in the spool
    assert led.spooled() == [] and not led.spool_path.exists()


# The rows below were written 1000 s ago: a spooled time must fall in the rental's life, and not
# more than 5 s after now (ledger.spool.check_line).
T0 = float(int(time.time()) - 1000)


def _ledger_with_open_row(home):
    """``(url, ledger, session id, spool path)``: a SQLite ledger under ``home`` holding one open row, the spool's folder made."""
    from ledger.store import Ledger

    url = f"sqlite:///{home / 'ledger.db'}"
    led = Ledger(url)
    sid = _open_row(led)
    spool = led.spool_path
    spool.parent.mkdir(parents=True, mode=0o700)
    return url, led, sid, spool


def _open_row(led, sid: str = "20261201-100000-aaaa") -> str:

    led.add_session(
        dict(
            id=sid,
            experiment="e",
            job="j",
            provider="local",
            card="a100-80gb",
            gpu_count=1,
            spot=False,
            label=f"gpuops-{sid}",
            simulated=False,
            status="running",
            created_at=T0,
            instance_created_at=T0 + 10,
            instance_id=f"gpuops-{sid}",
            usd_per_hour=3.6,
        )
    )
    return sid


def _locked(url: str):
    con = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None, timeout=10)
    con.execute("BEGIN IMMEDIATE")
    return con


def test_a_spooled_close_is_finished_by_the_next_ps(gpuops_home, cli):
    from ledger.store import Ledger

    url = f"sqlite:///{gpuops_home / 'ledger.db'}"
    led = Ledger(url)
    sid = _open_row(led)
    con = _locked(url)
    try:
        with led.bounded(0.2):
            assert led.close(sid, T0 + 370, "job_end", exit_code=0, tokens=12) is None  # spooled
        assert led.held(sid).status == "closed" and led.held(sid).cost_usd == pytest.approx(0.36, abs=1e-9)
    finally:
        con.execute("ROLLBACK")
        con.close()
    out = cli("ps", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == []  # the close was booked before the listing
    row = Ledger(url).get(sid)
    assert (row.status, row.end_reason, row.tokens, row.ended_at, row.cost_usd) == (
        "closed",
        "job_end",
        12,
        T0 + 370,
        pytest.approx(0.36, abs=1e-6),
    )
    assert not led.has_spool()


# A loaded ledger (test_a_slow_ledger_...): every statement answers, this much later (seconds).
SLOW_STATEMENT_S = 0.06
SLOW_LINES = 24  # events spooled ahead of the close: the replay far outlasts one write's deadline


def test_a_slow_ledger_is_replayed_whole_before_the_listing(gpuops_home):
    """A ledger that answers every write within the bound, on a machine so loaded that the replay
    of many lines outlasts one bound: the deadline is each write's, so ``open_sessions`` replays
    the whole spool -- the close booked before the listing, no spool left, the ledger not taken as
    refusing. (The whole replay under one deadline left it half done in a thread that went on
    after the listing, and the next writes went to the spool.)"""
    import sqlalchemy as sa

    from ledger.store import Ledger

    url, led, sid, spool = _ledger_with_open_row(gpuops_home)
    now = time.time()
    lines = [
        _line("event", now - 60 + k, session_id=sid, kind="note", detail=f"n{k}", at=T0 + 100 + k)
        for k in range(SLOW_LINES)
    ]
    lines.append(_line("close", now - 1, session_id=sid, ended_at=T0 + 370, reason="job_end", exit_code=0, tokens=12))
    spool.write_text("\n".join(lines) + "\n")
    os.chmod(spool, 0o600)

    def slow(*_args) -> None:
        time.sleep(SLOW_STATEMENT_S)  # the fault injected: a slow disk, not a wait for an outcome

    bound = 0.2  # each write may wait bound + 1 s (``Ledger._run``)
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", slow)
    try:
        t0 = time.monotonic()
        with led.bounded(bound):
            listed = led.open_sessions()
            took = time.monotonic() - t0
            led.event(sid, "note", "after")  # not refused: booked, not spooled
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", slow)
    assert took > bound + 1.0, took  # the case: the replay took longer than one write's deadline
    assert listed == []  # the spooled close was booked before the listing
    assert not led.has_spool() and led.spooled() == []
    row = Ledger(url).get(sid)
    assert (row.status, row.end_reason, row.tokens, row.ended_at) == ("closed", "job_end", 12, T0 + 370)
    details = [e.detail for e in Ledger(url).events(sid) if e.kind == "note"]
    assert details == [f"n{k}" for k in range(SLOW_LINES)] + ["after"]  # each once, in order


def test_a_listing_the_replay_could_not_finish_says_so(gpuops_home):
    """The ledger refuses the replay (another process holds the write lock past the bound):
    ``open_sessions`` lists the row as the books hold it -- open, its close still spooled -- and
    ``notices`` (which ``ps`` prints on stderr) says that writes still wait and why, instead of a
    listing that looks complete."""
    from ledger.store import Ledger

    url, led, sid, spool = _ledger_with_open_row(gpuops_home)
    spool.write_text(_line("close", time.time() - 1, session_id=sid, ended_at=T0 + 370, reason="job_end") + "\n")
    os.chmod(spool, 0o600)
    lister = Ledger(url)  # what `ps` opens
    con = _locked(url)
    try:
        listed = [r.id for r in lister.open_sessions()]  # its replay waits one bound (``BOUNDED_S``), then stops
    finally:
        con.execute("ROLLBACK")
        con.close()
    assert listed == [sid]  # the books do not hold the close yet
    (told,) = [n for n in lister.notices if "still wait in the spool" in n]
    assert told.startswith("1 ledger write(s) still wait in the spool") and "database is locked" in told, told
    assert [e["op"] for e in led.spooled()] == ["close"]  # nothing lost: the next listing books it
    again = Ledger(url)
    assert again.open_sessions() == [] and again.notices == []


# Importing ``ledger.models`` takes this long in the child of the test below (seconds): longer
# than one write's deadline there (bound 0.2 s + 1 s), as a loaded machine's first import can be.
SLOW_IMPORT_S = 2.0
_SLOW_IMPORT_CHILD = """
import json, sys, time

class SlowModels:  # the fault injected: a loaded machine's first import of the write tables
    def find_spec(self, name, path=None, target=None):
        if name == "ledger.models":
            time.sleep(float(sys.argv[3]))
        return None

sys.meta_path.insert(0, SlowModels())
from ledger.store import Ledger

led = Ledger(sys.argv[1], spool_path=sys.argv[2])
before = "ledger.models" in sys.modules
with led.bounded(0.2):
    listed = [r.id for r in led.open_sessions()]
print(json.dumps({"loaded_before": before, "listed": listed, "notices": led.notices}))
"""


def test_a_first_write_s_own_import_does_not_spend_the_replay_deadline(gpuops_home, tmp_path):
    """A fresh process (``ps``) replays a spooled close as its first write, and a first write loads
    the write tables (``ledger/models.py``) -- seconds on a loaded machine. The deadline bounds the database,
    not that import: the close is booked before the listing. (Counted inside the deadline, the
    import made the write late, the close went back to the spool and ``ps`` listed the box as
    running, on a ledger that answered at once.)"""
    import subprocess
    import sys

    url, led, sid, spool = _ledger_with_open_row(gpuops_home)
    spool.write_text(_line("close", time.time() - 1, session_id=sid, ended_at=T0 + 370, reason="job_end") + "\n")
    os.chmod(spool, 0o600)
    child = tmp_path / "child.py"
    child.write_text(_SLOW_IMPORT_CHILD)
    p = subprocess.run(
        [sys.executable, str(child), url, str(spool), str(SLOW_IMPORT_S)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["loaded_before"] is False  # the case: the replay's close is the child's first write
    assert got["listed"] == [] and got["notices"] == [], got
    from ledger.store import Ledger

    row = Ledger(url).get(sid)
    assert (row.status, row.end_reason, row.ended_at) == ("closed", "job_end", T0 + 370)
    assert not spool.exists()


def test_a_write_no_spool_can_hold_is_one_replayable_line(gpuops_home, cli, tmp_path, monkeypatch):
    from ledger.store import Ledger

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("GPUOPS_SPOOL_DIR", str(blocker / "spool"))  # mkdir fails: ENOTDIR
    monkeypatch.setenv("GPUOPS_SPOOL_FALLBACK_DIR", str(blocker / "fallback"))
    url = f"sqlite:///{gpuops_home / 'ledger.db'}"
    led = Ledger(url)
    sid = _open_row(led)
    con = _locked(url)
    try:
        with led.bounded(0.2):
            assert led.close(sid, T0 + 370, "job_end", exit_code=0, tokens=12) is None
    finally:
        con.execute("ROLLBACK")
        con.close()
    assert len(led.lost) == 1 and "\n" not in led.lost[0]
    out = cli("ledger", "replay", led.lost[0])
    assert out.returncode == 0, out
    row = Ledger(url).get(sid)
    assert (row.status, row.end_reason, row.tokens) == ("closed", "job_end", 12)
    bad = cli("ledger", "replay", "not a spool line")
    assert bad.returncode == 2 and bad.stderr.startswith("error: line 1 is not a spooled ledger write")


# -- the spool is ours alone, and every line is checked --------------------------------------------
def _line(op: str, t: float | None = None, **args) -> str:
    return json.dumps({"op": op, "args": args, "t": time.time() if t is None else t}, sort_keys=True)


def test_a_fallback_spool_another_user_made_first_is_refused_by_ps(gpuops_home, cli_env, tmp_path):
    """Another local user makes /dev/shm/gpuops-<uid>/spool first (the fallback when
    XDG_RUNTIME_DIR is unset) and writes a line into it: ``ps`` neither reads nor applies it and
    names the folder. Run in a private mount namespace with its own /dev/shm (the suite runs as
    root), so no other test's /dev/shm is touched."""
    import subprocess

    from ledger.store import Ledger
    from tests.conftest import gpuops_cmd

    url = f"sqlite:///{gpuops_home / 'ledger.db'}"
    sid = _open_row(Ledger(url))
    uid = os.getuid()
    hostile = _line("update", session_id=sid, cost_usd=9999.0, experiment='=HYPERLINK("http://x","y")')
    script = tmp_path / "attack.sh"
    script.write_text(
        "set -e\nmount -t tmpfs -o mode=1777 tmpfs /dev/shm\n"
        f"mkdir -p /dev/shm/gpuops-{uid}/spool && chmod 777 /dev/shm/gpuops-{uid} /dev/shm/gpuops-{uid}/spool\n"
        f"chown -R 65534:65534 /dev/shm/gpuops-{uid}\n"
        f"f=/dev/shm/gpuops-{uid}/spool/$SPOOL_NAME\n"
        f"printf '%s\\n' \"$HOSTILE\" > $f && chown 65534 $f && chmod 666 $f\n"
        '"$@"\nls /dev/shm/gpuops-*/spool >&2\n'
    )
    env = dict(cli_env)
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("GPUOPS_SPOOL_FALLBACK_DIR", None)
    env["HOSTILE"] = hostile
    env["SPOOL_NAME"] = hashlib.sha256(url.encode()).hexdigest()[:12] + ".jsonl"
    p = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", str(script), *gpuops_cmd("ps", "--json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    row = Ledger(url).get(sid)
    assert (row.cost_usd, row.experiment) == (None, "e")  # nothing of the line was applied
    (refusal,) = [ln for ln in p.stderr.splitlines() if ln.startswith("warning: spool folder")]
    assert f"/dev/shm/gpuops-{uid}/spool" in refusal and "owned by uid 65534" in refusal, p.stderr
    assert f"{env['SPOOL_NAME']}" in p.stderr  # the line is still where the other user left it


def test_a_spool_folder_with_open_mode_is_refused_before_anything_is_written(gpuops_home, tmp_path, monkeypatch):
    from ledger.store import Ledger

    spool = tmp_path / "spool"
    spool.mkdir(mode=0o777)
    os.chmod(spool, 0o777)
    monkeypatch.setenv("GPUOPS_SPOOL_DIR", str(spool))
    url = f"sqlite:///{gpuops_home / 'ledger.db'}"
    led = Ledger(url)
    sid = _open_row(led)
    con = _locked(url)
    try:
        with led.bounded(0.2):
            assert led.close(sid, T0 + 370, "job_end", exit_code=0) is None
    finally:
        con.execute("ROLLBACK")
        con.close()
    assert os.listdir(spool) == []  # not one byte in the open folder
    assert any(f"spool folder {spool} is owned by uid" in n and "mode 0777" in n for n in led.notices), led.notices
    fallback = led.fallback_spool_path  # the second place took the line: made 0700, the file 0600
    assert oct(os.stat(fallback.parent).st_mode & 0o777) == "0o700"
    assert oct(os.stat(fallback).st_mode & 0o777) == "0o600"


def test_a_bad_spool_line_is_quarantined_and_the_write_behind_it_applied(gpuops_home, cli, monkeypatch):
    """A line from another version (an unknown argument) ahead of a real close: ``ps`` exits 0,
    the close is applied, the bad line is kept in the quarantine file and named, and nothing is
    left as a ``.replay`` file."""
    from ledger.store import Ledger

    url, led, sid, spool = _ledger_with_open_row(gpuops_home)
    now = time.time()
    lines = [
        _line("event", now - 3, session_id=sid, kind="live", detail="", at=now - 3, colour="blue"),
        _line("frobnicate", now - 2, session_id=sid),
        _line("close", now - 1, session_id=sid, ended_at=T0 + 370, reason="job_end", exit_code=0, tokens=12),
    ]
    spool.write_text("\n".join(lines) + "\n")
    os.chmod(spool, 0o600)
    out = cli("ps", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == [], out
    row = Ledger(url).get(sid)
    assert (row.status, row.end_reason, row.tokens, row.ended_at) == ("closed", "job_end", 12, T0 + 370)
    q = spool.with_name(spool.name + ".quarantine")
    kept = [json.loads(x) for x in q.read_text().splitlines() if x.strip()]
    assert [k["line"] for k in kept] == lines[:2]
    assert "unknown argument(s) colour" in kept[0]["why"] and "op 'frobnicate'" in kept[1]["why"]
    assert out.stderr.count("a spool line was not applied") == 2 and str(q) in out.stderr
    assert sorted(os.listdir(spool.parent)) == [q.name]  # no spool, no stranded .replay file


def test_a_replay_left_by_a_process_that_died_is_picked_up(gpuops_home, cli):
    from ledger.store import Ledger

    url, led, sid, spool = _ledger_with_open_row(gpuops_home)
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no process has now
    left = spool.with_name(f"{spool.name}.{dead.pid}.replay")
    left.write_text(_line("close", session_id=sid, ended_at=T0 + 370, reason="job_end", exit_code=0) + "\n")
    os.chmod(left, 0o600)
    out = cli("ps", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == [], out
    assert Ledger(url).get(sid).status == "closed" and not left.exists()


@pytest.mark.parametrize(
    "args, why",
    [
        ({"cost_usd": float("nan")}, "not a finite number"),
        ({"cost_usd": -1e308}, "negative"),
        ({"usd_per_hour": "9999"}, "not a finite number"),
        ({"status": "running", "ended_at": None}, "only a close books"),
        ({"status": "running"}, "would reopen session"),
        ({"last_heartbeat_at": 1e18}, "more than 5 s after now"),
        ({"instance_created_at": 1.0}, "before the row was written"),
    ],
)
def test_ledger_replay_refuses_a_hostile_line(gpuops_home, cli, args, why):
    from ledger.store import Ledger

    url = f"sqlite:///{gpuops_home / 'ledger.db'}"
    led = Ledger(url)
    sid = _open_row(led)
    led.close(sid, T0 + 370, "job_end", exit_code=0)
    before = Ledger(url).get(sid)
    line = json.dumps({"op": "update", "args": {"session_id": sid, **args}, "t": time.time()})
    out = cli("ledger", "replay", line)
    assert out.returncode == 2 and why in out.stderr, out
    assert Ledger(url).get(sid) == before  # nothing changed
    assert cli("ledger", "show", sid).returncode == 0


@pytest.mark.parametrize(
    "args, why",
    [
        ({"ended_at": 1e18}, "more than 5 s after now"),
        ({"ended_at": float("nan")}, "not a finite number"),
        ({"ended_at": 1.0}, "before the row was written"),
        ({"ended_at": T0 + 370, "reason": "because"}, "not an end reason"),
        ({"ended_at": T0 + 370, "tokens": -5}, "a negative count"),
    ],
)
def test_ledger_replay_refuses_a_hostile_close(gpuops_home, cli, args, why):
    from ledger.store import Ledger

    url = f"sqlite:///{gpuops_home / 'ledger.db'}"
    sid = _open_row(Ledger(url))
    line = json.dumps({"op": "close", "args": {"session_id": sid, "reason": "job_end", **args}, "t": time.time()})
    out = cli("ledger", "replay", line)
    assert out.returncode == 2 and why in out.stderr, out
    row = Ledger(url).get(sid)
    assert (row.status, row.ended_at) == ("running", None)
    assert cli("ledger", "show", sid).returncode == 0


def test_ledger_replay_of_a_close_on_a_closed_row_is_refused(gpuops_home, cli):
    from ledger.store import Ledger

    url = f"sqlite:///{gpuops_home / 'ledger.db'}"
    led = Ledger(url)
    sid = _open_row(led)
    led.close(sid, T0 + 370, "job_end", exit_code=0)
    line = _line("close", session_id=sid, ended_at=T0 + 400, reason="manual")
    out = cli("ledger", "replay", line)
    assert out.returncode == 2 and "is closed already" in out.stderr, out
    assert Ledger(url).get(sid).ended_at == T0 + 370
