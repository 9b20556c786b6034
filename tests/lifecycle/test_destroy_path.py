"""A destroy that needs nothing but the provider: each fault put at its real boundary -- a stopped
PostgreSQL server this test started, a small full tmpfs under the SQLite ledger, a held SQLite
lock, an id the emulator hands to someone else's instance, a job that escapes with setsid, a job
that deletes the ledger, a 300 MB output stream -- and afterwards: 0 instances billing (with at
most one reconcile pass once the fault clears), the row's true reason, its end time within 2 s of
the provider's billing clock, the tokens the job wrote, nothing of another owner touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpuops.config import load_settings
from gpuops.providers import get_provider
from gpuops.providers.base import InstanceStatus
from gpuops.rental.launcher import Reporter, UpRequest, run_up
from gpuops.teardown.reconcile import Context, reconcile
from ledger.store import Ledger
from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401  (fixtures)
from tests.lifecycle.upproc import no_box_processes, tag, tagged
from tests.support.emulators import runpod_provider, vast_provider  # noqa: F401  (fixtures)
from tests.support.local_bill import local_bill
from tests.support.postgres import halting_postgres_server, own_postgres  # noqa: F401  (fixtures)
from tests.teardown.conftest import wait_for

END_TOLERANCE_S = 2.0  # booked end vs the provider's billing clock (absolute, seconds)
TEARDOWN = {"kill_grace_seconds": 0.5, "idle_minutes": "off", "sample_seconds": 0.3, "job_end_grace_seconds": 30}


def _settings(url: str | None = None, contain: bool = True, **up):
    over = {"teardown": TEARDOWN, "providers": {"local": {"price_per_hour": 1.5, "contain": contain}}}
    if url:
        over["ledger"] = {"url": url}
    if up:
        over["up"] = up
    return load_settings(None, over)


def _job(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "job.sh"
    p.write_text(body)
    return p


def _waiting_job(tmp_path: Path, tokens: int) -> tuple[Path, Path]:
    """A job that books ``tokens`` at once, says it started, then waits for ``go`` (the test makes
    the fault meanwhile) and exits 0."""
    go = tmp_path / "go"
    started = tmp_path / "started"
    return _job(
        tmp_path,
        f'echo \'{{"tokens": {tokens}}}\' >> "$GPUOPS_METRICS"\ntouch {started}\n'
        f"while [ ! -f {go} ]; do sleep 0.05; done\necho done\n",
    ), go


def _one_reconcile(settings) -> Ledger:
    """One pass of `gpuops reconcile` with a fresh process's view (a new Ledger: nothing held)."""
    led = Ledger(settings.ledger_url())
    reconcile(Context(settings, ledger=led, arm_margin_s=0.5))
    return Ledger(settings.ledger_url())


def _assert_local_truth(settings, row, reason: str, tokens: int) -> None:
    """0 billing, the true reason, tokens kept, the end within 2 s of destroyed.json, no process left."""
    provider = get_provider("local", settings)
    inst = provider.get(row.instance_id)
    assert inst is None or inst.status == InstanceStatus.GONE  # 0 instances billing
    assert (row.status, row.end_reason, row.tokens) == ("closed", reason, tokens)
    assert abs(row.ended_at - provider.destroyed_at(row.instance_id)) <= END_TOLERANCE_S
    # the money by the box's own record (its created/destroyed files) at the test's 1.5 USD/h, within the end's tolerance
    secs, usd = local_bill(provider.boxes_dir, row.instance_id, 1.5)
    assert secs > 0 and abs(row.billed_seconds - secs) <= END_TOLERANCE_S + 1.0, (row.billed_seconds, secs)
    assert row.cost_usd == pytest.approx(usd, abs=(END_TOLERANCE_S + 1.0) * 1.5 / 3600)
    no_box_processes(Path(settings.data_path()) / "boxes" / row.label)


def _run_with(tmp_path, settings, job, fault, led=None):
    """run_up in this process with ``fault()`` run in a thread once the job has started."""
    started = tmp_path / "started"
    errors: list = []

    def act():
        try:
            wait_for(started.exists, 120)
            fault()
        except BaseException as e:  # noqa: BLE001  shown by the test
            errors.append(e)
        finally:
            (tmp_path / "go").write_text("")  # the job ends whatever the fault did

    t = threading.Thread(target=act, daemon=True)
    t.start()
    try:
        summ = run_up(UpRequest(job=job), settings, Reporter(), ledger=led)
    finally:
        (tmp_path / "go").write_text("")
        t.join(60)
    assert not errors, errors
    return summ


# -- the team ledger's server stops mid-job --------------------------------------------------------
def test_postgres_stopped_mid_job_destroys_and_one_reconcile_books_it(own_postgres, gpuops_home, fake_smi, tmp_path):  # noqa: F811
    fake_smi.util(70)
    settings = _settings(own_postgres.new_database())
    job, go = _waiting_job(tmp_path, 77)

    def fault():
        own_postgres.halt()
        go.write_text("")

    t0 = time.monotonic()
    summ = _run_with(tmp_path, settings, job, fault)
    # `up` destroyed the box with the ledger down and tells the truth from memory
    assert (summ["end_reason"], summ["tokens"], summ["exit_code"], summ["status"]) == ("job_end", 77, 0, "closed")
    assert summ["seconds"] > 0 and summ["ledger"]["spooled"] > 0
    provider = get_provider("local", settings)
    assert provider.get(summ["session"] and f"gpuops-{summ['session']}").status == InstanceStatus.GONE
    assert time.monotonic() - t0 < 60
    own_postgres.resume()
    row = _one_reconcile(settings).get(summ["session"])
    _assert_local_truth(settings, row, "job_end", 77)
    assert row.exit_code == 0


# -- the ledger's filesystem fills mid-job --------------------------------------------------------
@pytest.fixture
def small_tmpfs(tmp_path):
    """A 4 MiB tmpfs (the tests run as root, as CI does); unmounted whatever happens."""
    d = tmp_path / "small"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: Path) -> Path:
    """Fill the filesystem of ``d`` to the last byte; returns the filler (delete it to free)."""
    filler = d / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 512, 1):
            try:
                while os.write(fd, b"\0" * size) == size:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_ledger_disk_full_mid_job_keeps_reason_time_and_tokens(
    small_tmpfs, gpuops_home, fake_smi, tmp_path, monkeypatch
):
    fake_smi.util(70)
    # The ledger and its first spool on one small disk (as ~/.cache and the data dir usually are);
    # the fallback spool is elsewhere (tmp_path: another filesystem).
    monkeypatch.setenv("GPUOPS_SPOOL_DIR", str(small_tmpfs / "spool"))
    settings = _settings(f"sqlite:///{small_tmpfs / 'ledger.db'}")
    job, go = _waiting_job(tmp_path, 77)
    filler: list[Path] = []

    def fault():
        filler.append(_fill(small_tmpfs))
        go.write_text("")

    summ = _run_with(tmp_path, settings, job, fault)
    assert (summ["end_reason"], summ["tokens"], summ["exit_code"]) == ("job_end", 77, 0), json.dumps(summ)
    assert summ["seconds"] > 0
    led = Ledger(settings.ledger_url())
    assert not (small_tmpfs / "spool").exists() or not list((small_tmpfs / "spool").iterdir()) or led.spooled()
    assert led.fallback_spool_path.exists()  # the refused writes went to the other filesystem
    filler[0].unlink()
    row = _one_reconcile(settings).get(summ["session"])
    _assert_local_truth(settings, row, "job_end", 77)
    _, usd = local_bill(get_provider("local", settings).boxes_dir, row.instance_id, 1.5)
    assert summ["cost_usd"] == pytest.approx(
        usd, abs=(END_TOLERANCE_S + 1.0) * 1.5 / 3600
    )  # what `up` told, by the box's record


# -- another process holds the SQLite ledger's write lock ------------------------------------------
def test_a_held_sqlite_lock_does_not_delay_the_destroy(gpuops_home, fake_smi, tmp_path):
    import sqlite3

    fake_smi.util(70)
    settings = _settings()
    job, go = _waiting_job(tmp_path, 1000)
    db = settings.ledger_url()[len("sqlite:///") :]
    holder: dict = {}

    def fault():
        con = sqlite3.connect(db, isolation_level=None, timeout=10, check_same_thread=False)
        con.execute("BEGIN IMMEDIATE")  # the write lock, held past every busy timeout (30 s)
        holder["con"] = con
        holder["job_end"] = time.time()
        go.write_text("")

    try:
        summ = _run_with(tmp_path, settings, job, fault)
        provider = get_provider("local", settings)
        destroyed = provider.destroyed_at(f"gpuops-{summ['session']}")
        # the job's end (plus the wrapper's and the agent's own seconds) to the destroy: not 30 s per write
        assert destroyed - holder["job_end"] < 12.0, destroyed - holder["job_end"]
        assert (summ["end_reason"], summ["tokens"]) == ("job_end", 1000)
    finally:
        if "con" in holder:
            holder["con"].execute("ROLLBACK")
            holder["con"].close()
    row = _one_reconcile(settings).get(summ["session"])
    _assert_local_truth(settings, row, "job_end", 1000)


# -- a local job that escapes: setsid, env -i, TERM ignored ---------------------------------------
def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def test_a_local_job_that_escapes_with_setsid_is_ended(gpuops_home, fake_smi, tmp_path):
    fake_smi.util(70)
    settings = _settings()
    started = tmp_path / "escaped.pid"
    name = tag()  # followed by name: in its own PID namespace the job's $$ is not this machine's pid
    job = _job(
        tmp_path,
        f'echo \'{{"tokens": 5}}\' >> "$GPUOPS_METRICS"\n'
        f"setsid env -i bash -c 'trap \"\" TERM HUP INT; echo $$ > {started}; exec -a {name} sleep 300' &\n"
        f"while [ ! -s {started} ]; do sleep 0.05; done\necho left-it-running\n",
    )
    try:
        summ = run_up(UpRequest(job=job), settings, Reporter())
        assert started.read_text().strip()
        wait_for(lambda: not tagged(name), 15)
        row = Ledger(settings.ledger_url()).get(summ["session"])
        _assert_local_truth(settings, row, "job_end", 5)
    finally:
        for pid in tagged(name):
            os.kill(pid, signal.SIGKILL)


# -- a local job that deletes the ledger ----------------------------------------------------------
def test_a_local_job_cannot_find_gpuops_data_and_a_removed_ledger_is_rebooked(gpuops_home, fake_smi, tmp_path):
    """Uncontained (``contain = false``): the environment leads nowhere, and a ledger the job
    removes through the box's layout is made again with this run's session rebooked."""
    fake_smi.util(70)
    settings = _settings(contain=False)
    envfile = tmp_path / "box.env"
    # the box's HOME is <data dir>/boxes/<label>: a job that knows the layout can still reach the
    # ledger two levels up; its environment must not lead it there
    job = _job(
        tmp_path,
        f'env > {envfile}\necho \'{{"tokens": 42}}\' >> "$GPUOPS_METRICS"\n'
        'rm -f "$GPUOPS_DATA_DIR"/ledger.db* ../../ledger.db*\necho removed\n',
    )
    lines: list[str] = []

    class R(Reporter):
        def warn(self, text):
            lines.append(text)

    summ = run_up(UpRequest(job=job), settings, R())
    env = dict(line.split("=", 1) for line in envfile.read_text().splitlines() if "=" in line)
    data = str(gpuops_home)
    assert not [
        k
        for k in env
        if k.startswith("GPUOPS_")
        and k not in ("GPUOPS_SESSION", "GPUOPS_EXPERIMENT", "GPUOPS_METRICS", "GPUOPS_LOCAL_BOX")
    ]
    assert not [k for k, v in env.items() if v.rstrip("/") == data or "ledger.db" in v or "spool" in v], env
    assert any("vanished" in w and "booked into it again" in w for w in lines), lines
    assert summ["ledger"]["notices"] and (summ["end_reason"], summ["tokens"]) == ("job_end", 42)
    led = Ledger(settings.ledger_url())
    row = led.get(summ["session"])
    assert "rebooked" in [e.kind for e in led.events(row.id)]
    _assert_local_truth(settings, row, "job_end", 42)


# The walker a hostile job runs: up its parent links (pid 1 included), printing the data dir the
# first environment that names one holds. Never another process's books.
WALKER = (
    "import os\n"
    "pid = os.getppid()\n"
    "while pid >= 1:\n"
    "    try:\n"
    "        env = open(f'/proc/{pid}/environ', 'rb').read().split(b'\\0')\n"
    "        status = open(f'/proc/{pid}/status').read()\n"
    "    except OSError:\n"
    "        break\n"
    "    hit = [e[len(b'GPUOPS_DATA_DIR='):] for e in env if e.startswith(b'GPUOPS_DATA_DIR=')]\n"
    "    if hit:\n"
    "        print(hit[0].decode())\n"
    "        break\n"
    "    pid = int(status.split('PPid:')[1].split()[0])\n"
)


def test_a_contained_local_job_that_walks_its_parents_proc_finds_no_books(cli_env, gpuops_home, fake_smi, tmp_path):
    """Where the platform allows it (the suite's, as root): the local job runs in its own user,
    mount and PID namespace. Its parents' /proc entries are not there, the data dir (which the job
    names outright, as one that read the layout would) shows only the box's folder, the ledger can
    be neither read nor deleted; the earlier session stays in the books, `up` exits 0 with this
    one booked normally (not rebooked) and says no containment note."""
    from gpuops.providers.local.compute import LocalProvider
    from tests.conftest import gpuops_cmd
    from tests.lifecycle.upproc import FAST_ENV

    if not LocalProvider(tmp_path / "probe-boxes").contained():
        pytest.skip("this platform allows no user + mount + PID namespace: the fallback test covers it")
    fake_smi.util(70)
    env = dict(cli_env, **FAST_ENV)
    first = subprocess.run(
        gpuops_cmd("up", "--job", str(_job(tmp_path, 'echo \'{"tokens": 2}\' >> "$GPUOPS_METRICS"\n'))),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    earlier = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").rows_between(0, time.time() + 3600)
    assert [(r.status, r.end_reason, r.tokens) for r in earlier] == [("closed", "job_end", 2)]
    walker = tmp_path / "walk.py"
    walker.write_text(WALKER)
    seen = tmp_path / "seen"  # outside the data dir: what the job saw comes back here
    seen.mkdir()
    data = str(gpuops_home)
    job = tmp_path / "hostile.sh"
    job.write_text(
        'echo \'{"tokens": 3}\' >> "$GPUOPS_METRICS"\n'
        f"python3 {walker} > {seen}/found\n"
        f"cat /proc/1/environ > {seen}/init-environ 2>/dev/null\n"
        f"ls -A {data} > {seen}/data-listing\n"
        f"cat {data}/ledger.db > {seen}/ledger-copy 2>/dev/null\n"
        f"rm -f {data}/ledger.db* ../../ledger.db*\n"
        f"umount -l {data} 2>/dev/null; ls -A {data} > {seen}/after-umount\n"
        f"ls /proc | grep -c '^[0-9]' > {seen}/pids\n"
        "echo walked\n"
    )
    p = subprocess.run(gpuops_cmd("up", "--job", str(job)), env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "own user's rights" not in p.stderr and "vanished" not in p.stderr, p.stderr[-3000:]
    assert (seen / "found").read_text() == ""  # no parent's environment names the data dir
    assert data.encode() not in (seen / "init-environ").read_bytes()
    assert (seen / "data-listing").read_text().split() == ["boxes"]  # the box's own folder, nothing else
    assert (seen / "ledger-copy").read_bytes() == b""
    assert (seen / "after-umount").read_text().split() == ["boxes"]  # what covers the books stays put
    assert int((seen / "pids").read_text()) <= 6  # the namespace's own few processes, not the machine's
    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    rows = {r.id: r for r in led.rows_between(0, time.time() + 3600)}
    assert earlier[0].id in rows and rows[earlier[0].id].tokens == 2  # the earlier history is still there
    (now,) = [r for i, r in rows.items() if i != earlier[0].id]
    assert (now.status, now.end_reason, now.exit_code, now.tokens) == ("closed", "job_end", 0, 3)
    assert "rebooked" not in [e.kind for e in led.events(now.id)]
    assert "walked" in (gpuops_home / "boxes" / now.label / ".gpuops" / "run" / "job.log").read_text()


def test_a_local_job_that_walks_its_parents_proc_is_told_of_once(cli_env, gpuops_home, fake_smi, tmp_path):
    """The fallback branch, on a platform that refuses the namespace: `up` runs in a user namespace
    whose ``user.max_user_namespaces`` is 0 (as a kernel or distribution that allows none), so the
    containment trial fails. A local job is then not a separate user or namespace: one that reads
    its parents' /proc/PID/environ finds the data dir and can delete the ledger. `up` says so once
    (and README says it plainly); the session is still booked (rebooked)."""
    import shutil

    from tests.conftest import gpuops_cmd
    from tests.lifecycle.upproc import FAST_ENV

    if not shutil.which("unshare"):
        pytest.skip("util-linux unshare is needed to make a namespace-less platform")
    fake_smi.util(70)
    found = tmp_path / "found"
    walker = tmp_path / "walk.py"  # up the parent links only: never another process's books
    walker.write_text(WALKER)
    job = _job(
        tmp_path,
        'echo \'{"tokens": 3}\' >> "$GPUOPS_METRICS"\n'
        f"python3 {walker} > {found}\n"
        f'd=$(cat {found}); [ "$d" = "{gpuops_home}" ] && rm -f "$d"/ledger.db*\necho walked\n',
    )
    p = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"']
        + ["sh"]
        + gpuops_cmd("up", "--job", str(job)),
        env=dict(cli_env, **FAST_ENV),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    said = [ln for ln in p.stderr.splitlines() if "a local job runs with your own user's rights" in ln]
    assert len(said) == 1, p.stderr[-3000:]
    assert found.read_text().strip() == str(gpuops_home)  # what the warning is about: the job found the books
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "**a local job runs with your own user's rights**" in readme


# -- 300 MB of job output, streamed with bounded memory --------------------------------------------
def test_a_job_printing_300_mb_is_streamed_in_bounded_memory(cli_env, gpuops_home, fake_smi, tmp_path):
    from tests.conftest import gpuops_cmd
    from tests.lifecycle.upproc import FAST_ENV

    fake_smi.util(70)
    total = 300 * 1024 * 1024
    job = _job(
        tmp_path,
        'echo \'{"tokens": 9}\' >> "$GPUOPS_METRICS"\n'
        f"python3 -c \"import sys; line = b'x' * 65535 + b'\\\\n'\n"
        f'for _ in range({total // 65536}): sys.stdout.buffer.write(line)"\n',
    )
    env = dict(cli_env, **FAST_ENV)
    p = subprocess.Popen(
        gpuops_cmd("up", "--job", str(job)),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    peak = 0
    try:
        deadline = time.monotonic() + 300
        while p.poll() is None:
            try:
                status = Path(f"/proc/{p.pid}/status").read_text()
                peak = max(
                    peak, int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM:")).split()[1]) * 1024
                )
            except (OSError, StopIteration, ValueError):
                pass
            assert time.monotonic() < deadline, "up did not finish"
            time.sleep(0.05)
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 0, err[-2000:]
    print(f"up peak RSS {peak / 2**20:.0f} MiB for {total / 2**20:.0f} MiB of output")
    assert 0 < peak < 200 * 1024 * 1024, f"up peaked at {peak / 2**20:.0f} MiB for {total / 2**20:.0f} MiB of output"
    settings = _settings()
    led = Ledger(settings.ledger_url())
    row = led.rows_between(0, 2e10)[0]
    log = Path(row.log_path)
    assert log.stat().st_size >= total  # every byte reached the session log
    _assert_local_truth(settings, row, "job_end", 9)


# -- an instance id that now answers for someone else's instance -----------------------------------
# The single-instance read of each emulator (its ``OPS`` name): a fault there is a failed look-up.
GET_OP = {"runpod": "pod", "vast": "show"}


def _booked(name, request, monkeypatch):
    """A rental booked and created on ``name``'s emulator (``get_provider`` answers its provider).

    Returns (emulator, provider, settings, session id, instance id)."""
    from gpuops.providers.base import CreateSpec, OfferQuery

    emu = request.getfixturevalue(f"{name}_emulator")
    prov = request.getfixturevalue(f"{name}_provider")
    monkeypatch.setattr("gpuops.providers.get_provider", lambda n, s=None: prov)
    settings = _settings()
    led = Ledger(settings.ledger_url())
    offer = prov.offers(OfferQuery(cards=("rtx-4090",), gpu_count=1, spot=False))[0]
    sid = "20261201-090000-ab12"
    label = f"gpuops-{sid}"
    led.add_session(
        dict(
            id=sid,
            experiment="e",
            job="j",
            provider=name,
            card=offer.card,
            gpu_count=1,
            spot=False,
            label=label,
            simulated=False,
            status="provisioning",
            created_at=time.time(),
            owner=settings.owner(),
            account=prov.account,
        )
    )
    inst = prov.create(offer, CreateSpec(label=label, image=settings.up.image))
    led.update(
        sid,
        instance_id=inst.id,
        instance_created_at=inst.created_at or time.time(),
        usd_per_hour=offer.usd_per_hour,
        status="running",
    )
    return emu, prov, settings, sid, inst.id


def _booked_then_reused(name, request, monkeypatch, foreign_label: str):
    """``_booked``, then the instance deleted (as from the console) and its id handed to a
    teammate's running instance labelled ``foreign_label``.

    Returns (emulator, settings, session id, our old instance id, the foreign instance)."""
    emu, _, settings, sid, iid = _booked(name, request, monkeypatch)
    deleted_at = emu.market.now()
    other = emu.market.reuse_id(iid, label=foreign_label)
    Ledger(settings.ledger_url()).heartbeat(sid, deleted_at)  # the agent's last word came as the box went
    return emu, settings, sid, iid, other


def _assert_foreign_untouched_and_ours_closed_gone(emu, settings, sid, iid, other, foreign_label):
    assert other.state == "running" and emu.market.instances[iid] is other  # not touched
    led2 = Ledger(settings.ledger_url())
    row = led2.get(sid)
    kinds = [e.kind for e in led2.events(sid)]
    assert "destroy_refused" in kinds and row.status == "closed" and row.end_reason == "manual"
    old = emu.market.instances[f"{iid}~old"]
    assert abs(row.ended_at - old.ended_t) <= END_TOLERANCE_S  # the billing clock of OUR instance
    assert [i.label for i in emu.live()] == [foreign_label]  # ours: 0 billing; theirs: untouched


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_an_id_reused_by_another_instance_is_never_destroyed(name, gpuops_home, request, monkeypatch):
    from gpuops.rental.sessions import down

    emu, settings, sid, iid, other = _booked_then_reused(name, request, monkeypatch, "team-b-training")
    got = down(settings, Ledger(settings.ledger_url()), sid, False)
    assert got[0]["session"] == sid and got[0]["closed"] and not got[0]["destroyed"]
    _assert_foreign_untouched_and_ours_closed_gone(emu, settings, sid, iid, other, "team-b-training")


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_an_id_reused_by_an_instance_with_no_label_is_never_destroyed(name, gpuops_home, request, monkeypatch):
    from gpuops.rental.sessions import down

    emu, settings, sid, iid, other = _booked_then_reused(name, request, monkeypatch, "")
    got = down(settings, Ledger(settings.ledger_url()), sid, False)
    assert "answers with no label" in got[0]["refused"] and got[0]["closed"]
    _assert_foreign_untouched_and_ours_closed_gone(emu, settings, sid, iid, other, "")


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_a_reused_id_whose_read_answers_500_is_never_destroyed(name, gpuops_home, request, monkeypatch):
    from gpuops.rental.sessions import down

    emu, settings, sid, iid, other = _booked_then_reused(name, request, monkeypatch, "team-b-training")
    emu.faults.inject[GET_OP[name]] = [500] * 100  # every read of the id fails, the list answers
    try:
        got = down(settings, Ledger(settings.ledger_url()), sid, False)
    finally:
        emu.faults.inject.pop(GET_OP[name], None)
    assert "cannot tell it is ours" in got[0]["refused"]
    _assert_foreign_untouched_and_ours_closed_gone(emu, settings, sid, iid, other, "team-b-training")


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_a_reused_id_with_every_read_failing_leaves_the_row_open_and_says_so(
    name, gpuops_home, request, monkeypatch, cli
):
    emu, settings, sid, iid, other = _booked_then_reused(name, request, monkeypatch, "team-b-training")
    list_op = {"runpod": "pods", "vast": "list"}[name]
    emu.faults.inject[GET_OP[name]] = [500] * 100
    emu.faults.inject[list_op] = [500] * 100
    try:
        res = cli("down", sid)
    finally:
        emu.faults.inject.clear()
    assert other.state == "running" and emu.market.instances[iid] is other
    row = Ledger(settings.ledger_url()).get(sid)
    assert row.status != "closed" and res.returncode == 1
    assert "not touched" in res.stdout and "the row stays open" in res.stdout, res.stdout
    kinds = [e.kind for e in Ledger(settings.ledger_url()).events(sid)]
    assert "destroy_refused" in kinds and "destroy_gave_up" in kinds and "destroyed" not in kinds


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_down_on_a_reused_id_says_what_the_row_says(name, gpuops_home, request, monkeypatch, cli):
    emu, settings, sid, iid, other = _booked_then_reused(name, request, monkeypatch, "team-b-training")
    res = cli("down", sid)
    row = Ledger(settings.ledger_url()).get(sid)
    assert row.status == "closed" and row.end_reason == "manual"
    assert "stays open" not in res.stdout and "failed" not in res.stdout, res.stdout
    assert f"{iid} not touched: instance {iid} is labelled 'team-b-training'" in res.stdout, res.stdout
    assert "the row is closed (manual)" in res.stdout and res.returncode == 0, res.stdout
    _assert_foreign_untouched_and_ours_closed_gone(emu, settings, sid, iid, other, "team-b-training")


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_a_destroy_is_booked_only_once_the_provider_reads_it_back_gone(name, gpuops_home, request, monkeypatch):
    from gpuops.teardown.lifecycle import end_rental

    emu, prov, settings, sid, iid = _booked(name, request, monkeypatch)
    emu.faults.destroy_ignored = 1  # the first terminate is acknowledged and dropped
    waits: list[float] = []
    got = end_rental(Ledger(settings.ledger_url()), prov, sid, "manual", by="down:test", sleep=waits.append)
    assert (got.destroyed, got.closed, waits) == (True, True, [1.0])  # tried again after the read-back
    assert emu.live() == [] and Ledger(settings.ledger_url()).get(sid).status == "closed"


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_a_destroy_the_provider_never_carries_out_leaves_the_row_open(name, gpuops_home, request, monkeypatch):
    from gpuops.teardown.lifecycle import DESTROY_ATTEMPTS, end_rental

    emu, prov, settings, sid, iid = _booked(name, request, monkeypatch)
    emu.faults.destroy_ignored = 100
    got = end_rental(Ledger(settings.ledger_url()), prov, sid, "manual", by="down:test", sleep=lambda s: None)
    emu.faults.destroy_ignored = 0
    assert (got.destroyed, got.closed) == (False, False) and f"still shows instance {iid}" in got.error
    led = Ledger(settings.ledger_url())
    kinds = [e.kind for e in led.events(sid)]
    assert led.get(sid).status != "closed" and "destroyed" not in kinds and "destroy_gave_up" in kinds
    assert kinds.count("destroy_failed") == DESTROY_ATTEMPTS
    assert [i.id for i in emu.live()] == [iid]  # what the provider shows: still billing, and the row says so


# -- a Vast spot box outbid mid-job ----------------------------------------------------------------
def test_a_vast_box_outbid_mid_job_is_booked_preempted_from_the_providers_state(
    gpuops_home, sshd, vast_emulator, vast_provider, tmp_path, monkeypatch
):
    import gpuops.rental.launcher as launcher
    from gpuops.box.ssh import ensure_ssh_key

    monkeypatch.setattr(launcher, "READY_POLL_S", 0.05)
    emu = vast_emulator
    emu.market.ssh_endpoint = (sshd.host, sshd.port)
    emu.faults.boot_s = 0.0
    settings = _settings()
    sshd.authorize(ensure_ssh_key(settings.data_path())[1])
    frozen, go = tmp_path / "frozen", tmp_path / "go"
    # The box prints until the market takes it back (then nothing more comes out of it); our sshd
    # is not the instance, so SSH keeps answering and the job even exits 0: the old `up` booked that
    # as job_end at full price.
    job = _job(
        tmp_path,
        f'echo \'{{"tokens": 31}}\' >> "$GPUOPS_METRICS"\n'
        f"while [ ! -f {frozen} ]; do echo tick; sleep 0.1; done\n"
        f"while [ ! -f {go} ]; do sleep 0.05; done\n",
    )
    seen: dict = {}

    class R(Reporter):
        def job_line(self, text):
            if text == "tick" and "preempted_at" not in seen:
                (inst,) = emu.live()
                emu.market.preempt(inst.id)
                seen["preempted_at"] = emu.market.now()
                seen["id"] = inst.id
                frozen.write_text("")
                threading.Timer(1.0, lambda: go.write_text("")).start()

    summ = run_up(
        UpRequest(job=job, provider="vast", card="rtx-4090", spot=True), settings, R(), provider=vast_provider
    )
    assert summ["end_reason"] == "preempted", summ
    assert emu.live() == []  # 0 billing: the stopped box (still billing disk) was destroyed
    inst = emu.market.instances[seen["id"]]
    gpu_end = max(t1 for _, t1, _, kind in inst.segments if kind == "gpu")
    assert abs(gpu_end - seen["preempted_at"]) <= 0.5
    row = Ledger(settings.ledger_url()).get(summ["session"])
    assert (row.status, row.end_reason, row.tokens, row.spot) == ("closed", "preempted", 31, True)
    assert abs(row.ended_at - gpu_end) <= END_TOLERANCE_S  # when the GPU stopped billing, not the destroy
    # the money: the emulator's bill for the GPU time (the stopped box's disk is booked apart), within
    # the end's tolerance and one increment
    gpu_usd = inst.billed_cost("gpu")
    assert row.cost_usd == pytest.approx(gpu_usd, abs=(END_TOLERANCE_S + 1.0) * inst.usd_per_hour / 3600)
