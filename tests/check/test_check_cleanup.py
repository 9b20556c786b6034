"""`check --rent`'s cleanup ends every child and tries every row, whatever one layer raises, and a Ctrl-C
that cuts the first import of the ledger's models still leaves it the ledger to close every row with."""

import sys
from pathlib import Path

from gpuops.check import check_layers
from gpuops.check.check_layers import CheckRun, Layer
from tests.support.emulators import runpod_emulator, runpod_provider  # noqa: F401  (fixtures)


class _Provider:
    def list(self, prefix):
        return []


def _rent_layers(provider, ledger, run: CheckRun, tmp_path: Path, with_rows: bool = True) -> list[Layer]:
    """What each layer's `up` leaves for the cleanup: a child in its own session (here ``sleep``),
    and on the emulator a box labelled with the layer's session id; its row in the ledger (as `up`
    writes it before the create) unless ``with_rows`` is False."""
    import subprocess
    import time

    from gpuops.providers.base import CreateSpec, OfferQuery

    offer = min(provider.offers(OfferQuery(spot=False)), key=lambda o: o.usd_per_hour)
    layers = []
    for name in check_layers.LAYERS:
        sid = f"check-{run.run_id}-{name}".replace("_", "-")
        label = f"gpuops-{sid}"
        if with_rows:
            ledger.add_session(
                dict(
                    id=sid,
                    experiment=check_layers.EXPERIMENT,
                    job="job.sh",
                    provider=provider.name,
                    card=offer.card,
                    gpu_count=1,
                    spot=False,
                    label=label,
                    simulated=offer.simulated,
                    status="provisioning",
                    created_at=time.time(),
                    account=provider.account,
                    note=f"gpuops check {run.run_id} {name}",
                )
            )
        inst = provider.create(
            offer, CreateSpec(label=label, image="img", disk_gb=20, ssh_public_key="ssh-ed25519 AAAA test")
        )
        if with_rows:
            ledger.update(
                sid, instance_id=inst.id, instance_created_at=inst.created_at or time.time(), status="running"
            )
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)  # the layer's `up`
        layer = Layer(name, f"gpuops check {run.run_id} {name}", tmp_path / name, "off", 1.0, tmp_path / name)
        layer.proc, layer.session, layer.instance_id = child, sid, inst.id
        layer.row_id = sid if with_rows else None
        layers.append(layer)
    return layers


def _check_run(ledger, provider) -> CheckRun:
    from gpuops.config import load_settings

    return CheckRun(load_settings(), ledger, provider, 1.0, {"wall_s": 60.0, "max_minutes": 1})


def _gone(emulator, instance_id: str) -> bool:
    inst = emulator.market.instances.get(instance_id)
    return inst is None or inst.state == "destroyed"


def test_a_layer_whose_row_cannot_be_closed_does_not_keep_the_others_alive(
    gpuops_home, tmp_path, runpod_emulator, runpod_provider, monkeypatch
):
    """The real cleanup against the RunPod emulator: the ledger fails every read of the job_end
    layer's row; the other two rows close (their boxes destroyed, the provider says so), every
    child ends, and the job_end layer's box is still destroyed, found by its label."""
    import sqlalchemy.exc

    from ledger import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    run = _check_run(led, runpod_provider)
    run.layers = _rent_layers(runpod_provider, led, run, tmp_path)
    locked = run.layers[0].row_id
    real_get = led.get

    def get(session_id):
        if session_id == locked:
            raise sqlalchemy.exc.OperationalError("SELECT sessions", {}, Exception("database is locked"))
        return real_get(session_id)

    monkeypatch.setattr(led, "get", get)  # a fault of the ledger (the check's input), not of the check
    run._cleanup()
    assert all(layer.proc.poll() is not None for layer in run.layers)  # every child ended
    assert all(_gone(runpod_emulator, layer.instance_id) for layer in run.layers), runpod_emulator.market.instances
    job, *others = run.layers
    assert job.finding.verdict.value == "fail" and "database is locked" in job.finding.detail
    assert "reconcile" in job.finding.fix
    monkeypatch.setattr(led, "get", real_get)
    for layer in others:
        row = led.get(layer.row_id)
        assert row.status == "closed" and row.end_reason == "interrupted", row
        assert layer.finding.detail == "interrupted before the layer was proven; its box is destroyed"
    assert led.get(locked).status == "running"  # left to reconcile, as the finding says


def test_every_layers_box_is_found_by_its_session_id_when_the_ledger_cannot_be_read(
    gpuops_home, tmp_path, runpod_emulator, runpod_provider
):
    # Each layer's `up` is given its session id (--name), so the box's label is known without any
    # row: a ledger that fails every read (its sessions table gone) still leaves the provider able
    # to find and destroy them, and only them.
    import sqlite3

    from gpuops.providers.base import CreateSpec, OfferQuery
    from ledger import Ledger

    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")
    run = _check_run(led, runpod_provider)
    run.layers = _rent_layers(runpod_provider, led, run, tmp_path, with_rows=False)
    offer = min(runpod_provider.offers(OfferQuery(spot=False)), key=lambda o: o.usd_per_hour)
    theirs = runpod_provider.create(
        offer, CreateSpec(label="gpuops-someone-else", image="img", disk_gb=20, ssh_public_key="ssh-ed25519 AAAA x")
    )
    led.engine.dispose()
    with sqlite3.connect(gpuops_home / "ledger.db") as db:
        db.execute("DROP TABLE sessions")
    run._cleanup()
    assert all(layer.proc.poll() is not None for layer in run.layers)
    assert all(_gone(runpod_emulator, layer.instance_id) for layer in run.layers)  # every box of the check
    assert not _gone(runpod_emulator, theirs.id)  # none of theirs
    # each layer says its row could not be closed, with the database's own error: "no such table",
    # or "database is locked" when a layer's child `up` still held the file as the table went
    assert all(
        layer.finding.verdict.value == "fail"
        and layer.finding.detail.startswith("its row could not be closed: (sqlite3.OperationalError)")
        for layer in run.layers
    ), [layer.finding for layer in run.layers]


def test_each_layers_up_is_given_a_session_id_that_up_accepts(tmp_path, monkeypatch):
    from gpuops.rental.launcher import SESSION_NAME

    run = object.__new__(CheckRun)
    run.run_id, run.dir = "20261201-235959-4194304", tmp_path  # the longest: a 7-digit pid
    started = []
    from types import SimpleNamespace

    monkeypatch.setattr(
        check_layers.subprocess, "Popen", lambda argv, **kw: started.append(argv) or SimpleNamespace(pid=1)
    )
    run.provider = type("P", (), {"name": "local", "supports_spot": False})()
    run.cap, run.max_price, run.config = {"max_hours": {n: 1.0 for n in check_layers.LAYERS}}, 1.0, None
    run.on_line = lambda line: None
    c = type("C", (), {"job_seconds": 20.0, "idle_minutes": 1.0})()
    for name in check_layers.LAYERS:
        layer = run._start(name, c)
        argv = started[-1]
        assert argv[argv.index("--name") + 1] == layer.session and SESSION_NAME.match(layer.session), layer.session


# A `gpuops check` process whose Ctrl-C lands in the watch's first ledger read, inside the first
# import of ledger.models (seconds on a loaded machine): the cut is made with a trace hook that
# raises KeyboardInterrupt in that module's body, once its first table is defined.
CUT_CHECK = r"""
import json, sys
from gpuops.config import load_settings
from gpuops.check import check_layers
from gpuops.check.check_layers import CheckRun, Layer
from gpuops.rental.sessions import open_ledger

class Provider:
    name, supports_spot, account = "stub", False, None
    def list(self, prefix):
        return []
    def billing(self, start, end):
        return []

def cut(frame, event, arg):
    if frame.f_code.co_filename.endswith("ledger/models.py") and event == "line" and "Session" in frame.f_globals:
        sys.settrace(None)
        raise KeyboardInterrupt
    return cut

def start(self, name, c):
    p = self.dir / name
    return Layer(name, f"check-cut {name}", p, "off", 1.0, p)

def watch_all(self, c):
    sys.settrace(cut)  # fires only if this process has not imported ledger.models yet
    self._row(self.layers[0])
    sys.settrace(None)
    raise KeyboardInterrupt

CheckRun._start, CheckRun._watch_all = start, watch_all
settings = load_settings(None)
ledger = open_ledger(settings)
first = "ledger.models" in sys.modules
run = CheckRun(settings, ledger, Provider(), 1.0, {"wall_s": 60.0})
found = run.run()
print(json.dumps({"loaded_before": first, "findings": [[f.check, f.verdict.value, f.detail] for f in found]}))
"""


def test_a_ctrl_c_in_the_first_import_of_the_ledger_models_still_closes_every_row(cli_env, gpuops_home):
    import json
    import subprocess
    import time

    from ledger import Ledger
    from tests.conftest import REPO

    led = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}")  # made here: the check process imports nothing of it
    for name in check_layers.LAYERS:  # each layer's `up` wrote its row; none got its box yet
        led.add_session(
            {"id": f"cut-{name}", "created_at": time.time(), "experiment": "check", "note": f"check-cut {name}"}
        )
    p = subprocess.run(
        [sys.executable, "-c", CUT_CHECK], env=cli_env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr[-4000:]
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["loaded_before"] is False, got  # the cut can land: nothing before the check imported it
    findings = {c: (v, d) for c, v, d in got["findings"]}
    assert findings["rent.interrupted"][0] == "fail", findings
    for name in check_layers.LAYERS:
        assert findings[f"layer.{name}"] == ("fail", "interrupted before the layer was proven; its box is destroyed"), (
            findings,
            p.stderr[-4000:],
        )
        row = Ledger(f"sqlite:///{gpuops_home / 'ledger.db'}").get(f"cut-{name}")
        assert row.status == "closed" and row.end_reason == "interrupted", (row, p.stderr[-4000:])


def test_a_ctrl_c_whose_exception_python_drops_still_ends_the_watch(monkeypatch):
    """The handler's KeyboardInterrupt raised in a ``__del__`` (or a weakref callback, as one of
    SQLAlchemy's was under load) is printed and dropped; the next watch round raises it."""
    import signal
    from types import SimpleNamespace

    run = object.__new__(CheckRun)
    run.settings = SimpleNamespace(check=SimpleNamespace(poll_seconds=0.0))
    run.ledger = SimpleNamespace(rows_between=lambda start, end: [], get=lambda sid: None)
    run.provider, run.cap, run.started = _Provider(), {"wall_s": 3600.0, "max_minutes": 60}, 0.0
    run.clock, run.sleep, run.layers, run.interrupted, run.signalled = (lambda: 0.0), (lambda s: None), [], False, []
    monkeypatch.setattr(CheckRun, "_start", lambda self, name, c: Layer(name, "", Path(name), "off", 1.0, Path(name)))
    dropped, rounds = [], []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))

    class Drop:
        def __del__(self):
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # as if Ctrl-C came while this ran

    def step(layer):
        rounds.append(layer.name)
        if len(rounds) == 1:
            Drop()
        assert len(rounds) <= 3, "the watch went on after the Ctrl-C"

    monkeypatch.setattr(run, "_step", step)
    found = run.run()
    assert dropped == [KeyboardInterrupt]  # Python dropped the handler's exception
    assert rounds == ["job_end", "idle", "ttl"]  # the round it came in ends, the next one raises it
    assert found[0].check == "rent.interrupted" and run.interrupted
