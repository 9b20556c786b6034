"""The `local` provider: this machine, no account needed.

An "instance" is a directory ``<data dir>/boxes/<session>/`` holding ``instance.json``; bootstrap
and job run there as child process groups (``gpuops.box.local.LocalBox``). Destroy ends those groups
(TERM, then KILL after ``kill_grace_seconds``), writes ``destroyed.json`` and keeps the logs; after
``[providers.local] keep_box_days`` the rest of a destroyed box is pruned (``boxes.py``).

Containment: where the platform allows it (``contained``: one probe per provider object, a trial
run of onbox/contain.py under a deadline) the job runs in its own user, mount and PID
namespace that covers ``hide`` (the data dir, the spool dirs, config and key files) and shows no
parent's /proc; elsewhere, or with ``[providers.local] contain = false``, it runs with the user's
own rights and ``containment_note`` says so (the launcher warns it once per `up`).

Price: ``[providers.local] price_per_hour`` when set (a real cost, e.g. your own workstation);
otherwise the card's catalog reference price, and the offer is marked simulated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gpuops.box.local import LocalBox
from gpuops.catalog import Card, cards
from gpuops.providers.base import (
    Balance,
    CreateSpec,
    Instance,
    InstanceStatus,
    Offer,
    OfferQuery,
    Provider,
    ProviderError,
    ProviderErrorKind,
)
from onbox.localbox import end_box
from onbox.policy import KILL_GRACE_SECONDS


def detect_gpus(timeout_s: float = 5.0) -> list[str]:
    """Names of this machine's NVIDIA GPUs from ``nvidia-smi`` (empty when none or it fails)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


SPOT_REFUSED = "the local provider has no interruptible (spot) boxes; gpuops will not rent on-demand in their place"


def _spot_fix() -> str:
    """The fix line for a spot request here: the providers with spot, or on-demand.

    Read from Vast's entry, not the registry (which imports this folder) and not RunPod's (whose
    own spot fix reads this folder's entry: reading it back would be an import circle, and RunPod
    rents no spot)."""
    from gpuops.providers import vast

    spot = " or ".join(f"--provider {e.name}" for e in (vast.ENTRY,) if e.spot)
    return f"use {spot} for interruptible offers, or --on-demand to rent on this machine"


class LocalProvider(Provider):
    """This machine as a provider. ``boxes_dir``: where session directories live."""

    name = "local"
    http_calls = False  # processes on this machine only: no HTTP for http_guard to bound

    def __init__(
        self,
        boxes_dir: Path,
        price_per_hour: float | None = None,
        kill_grace_seconds: float = KILL_GRACE_SECONDS,
        keep_box_days: float = 7.0,
        hide: Sequence[Path] = (),
        spool_dirs: Sequence[Path] = (),
        contain: bool = True,
    ):
        """The provider over ``boxes_dir``; what its jobs must not see, and whether to contain them.

        ``hide``: paths the job must not see (the data dir, config and key files); ``spool_dirs``:
        the ledger's spool folders, made (0700, ours) before they are hidden; ``contain``: False
        runs jobs uncontained whatever the platform allows."""
        self.boxes_dir = Path(boxes_dir)
        self.hide = [os.path.abspath(p) for p in hide]
        self.spool_dirs = [os.path.abspath(p) for p in spool_dirs]
        self.contain = contain
        self._contained: bool | None = None
        self._trial: _Probe | None = None  # the containment trial, started with the first offers()
        self.keep_box_days = (
            keep_box_days  # a destroyed box keeps only its logs after this (gpuops/providers/local/boxes.py)
        )
        self.price_per_hour = price_per_hour
        self.kill_grace_seconds = kill_grace_seconds
        # "Account" on this machine: who and where (gpuops.ownership.local_account). A box of another
        # machine, user or data dir is never seen here, so it is never an orphan here either.
        from gpuops.ownership import local_account

        self.account = local_account(self.boxes_dir)

    def contained(self) -> bool:
        """Whether this provider's jobs run contained: ``contain`` and the probe said yes.

        Probed once per object (``_probe``: onbox/contain.py runs ``true`` with a folder of its
        own covered and a box under it kept, under a deadline of ``PROBE_TIMEOUT_S`` seconds); any
        failure means no, and ``containment_note`` says so. The trial starts with the first
        ``offers()`` (planning overlaps it), else here; it touches nothing of gpuops' data."""
        if self._contained is None:
            trial = self._start_probe()
            self._contained = trial is not None and trial.passed()
        return self._contained

    def _start_probe(self) -> _Probe | None:
        """The probe (started once; None when ``contain`` is off or it cannot start)."""
        if self.contain and self._trial is None and self._contained is None:
            self._trial = _Probe.start()
        return self._trial

    def _hidden(self) -> list[str]:
        from ledger.spool import own_dir

        for d in self.spool_dirs:
            try:
                own_dir(Path(d))
            except OSError:
                pass  # not ours or not makeable: hidden where it exists, refused by the ledger anyway
        return self.hide + self.spool_dirs

    @property
    def containment_note(self) -> str:
        """What `up` says once when it rents a local box: "" when its job is contained.

        Otherwise the job is not a separate user or namespace, so one that looks (its parents'
        /proc/PID/environ, the layout of the data dir) can read and delete what the user can,
        gpuops' own data included. README ("Local boxes") says the same."""
        if self.contained():
            return ""
        return (
            "a local job runs with your own user's rights: it can read and delete whatever you can, "
            "gpuops' data dir and ledger included; run a job you do not trust on a rented box"
        )

    def _offer(self, card: Card, gpu_count: int) -> Offer:
        simulated = self.simulated or self.price_per_hour is None  # the demo's, or the catalog's price
        price = card.reference_usd_per_hour * gpu_count if self.price_per_hour is None else float(self.price_per_hour)
        return Offer(
            provider="local",
            offer_id=f"local:{card.name}:{gpu_count}",
            card=card.name,
            gpu_count=gpu_count,
            vram_bytes=card.vram_bytes,
            usd_per_hour=round(price, 6),
            spot=False,
            reliability=1.0,
            region="this machine",
            simulated=simulated,
        )

    def offers(self, query: OfferQuery) -> list[Offer]:
        """Every catalog card the query names (all cards when it names none), at one price.

        Raises ProviderError(UNSUPPORTED) when ``query.spot`` is True: this machine has no
        interruptible boxes, and an on-demand one is never rented in their place (as RunPod)."""
        if query.spot is True:
            raise ProviderError(ProviderErrorKind.UNSUPPORTED, SPOT_REFUSED, _spot_fix())
        self._start_probe()  # a rental may follow: its containment trial runs while the plan is made
        chosen = [c for c in cards() if not query.cards or c.name in query.cards]
        return [self._offer(c, query.gpu_count) for c in chosen]

    def _dir(self, instance_id: str) -> Path:
        if not instance_id or "/" in instance_id or instance_id.startswith("."):
            raise ProviderError(ProviderErrorKind.BAD_REQUEST, f"bad local instance id {instance_id!r}")
        return self.boxes_dir / instance_id

    def create(self, offer: Offer, spec: CreateSpec) -> Instance:
        instance_id = spec.label
        d = self._dir(instance_id)
        if not self.boxes_dir.exists():
            self.boxes_dir.mkdir(parents=True, mode=0o700)
            os.chmod(self.boxes_dir, 0o700)
        d.mkdir(mode=0o700, exist_ok=False)
        os.chmod(d, 0o700)  # the box's HOME: its .netrc and tokens are the user's alone
        meta = {
            "id": instance_id,
            "label": spec.label,
            "offer": offer.as_json(),
            "usd_per_hour": offer.usd_per_hour,
            "simulated": offer.simulated,
            "created_at": time.time(),
        }
        (d / "instance.json").write_text(json.dumps(meta, indent=1))
        inst = self._instance(d, meta)
        # What the job of this box must not see (``box``, gpuops.box.remote.open_box); None: uncontained.
        inst.extra["local_hide"] = self._hidden() if self.contained() else None
        return inst

    def _instance(self, d: Path, meta: dict) -> Instance:
        gone = (d / "destroyed.json").exists()
        return Instance(
            id=meta["id"],
            label=meta["label"],
            status=InstanceStatus.GONE if gone else InstanceStatus.RUNNING,
            usd_per_hour=meta["usd_per_hour"],
            created_at=meta["created_at"],
            raw_status="destroyed" if gone else "running",
            extra={"local_root": str(d), "simulated": meta.get("simulated", False)},
        )

    def get(self, instance_id: str) -> Instance | None:
        d = self._dir(instance_id)
        try:
            meta = json.loads((d / "instance.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return self._instance(d, meta)

    def list(self, label_prefix: str = "gpuops-") -> list[Instance]:
        out = []
        if self.boxes_dir.is_dir():
            for d in sorted(self.boxes_dir.iterdir()):
                if d.name.startswith(label_prefix):
                    inst = self.get(d.name)
                    if inst is not None and inst.status != InstanceStatus.GONE:
                        out.append(inst)
        return out

    def destroy(self, instance_id: str) -> None:
        """End every process the box started and mark it destroyed; idempotent.

        The rule is onbox/localbox.py's, which the on-box agent applies too; a gone box is
        success."""
        d = self._dir(instance_id)
        if not d.exists():
            return
        end_box(str(d), self.kill_grace_seconds)  # groups, then strays that left them (setsid)
        from gpuops.providers.local.boxes import sweep

        sweep(self.boxes_dir, self.keep_box_days)  # bounded: this box when its time is up, and older ones

    def destroyed_at(self, instance_id: str) -> float | None:
        try:
            return json.loads((self._dir(instance_id) / "destroyed.json").read_text())["destroyed_at"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None

    def balance(self) -> Balance:
        return Balance(usd=None)

    def box(self, instance: Instance) -> LocalBox:
        return LocalBox(Path(instance.extra["local_root"]), hide=instance.extra.get("local_hide"))


PROBE_TIMEOUT_S = 10.0  # the containment trial's deadline: a namespace that does not start by then is not used
CONTAIN_PY = Path(__file__).resolve().parents[3] / "onbox" / "contain.py"


class _Probe:
    """One trial of onbox/contain.py, the folder it used removed after.

    ``true`` runs with a temp folder of its own covered and a box under it bound back: every step
    a job's containment takes, on nothing of gpuops' data."""

    def __init__(self, proc: subprocess.Popen, folder: str):
        self.proc, self.folder = proc, folder
        self._result: bool | None = None
        import atexit

        atexit.register(self.passed)  # a trial nobody asked about (a dry run) is still waited on and removed

    @classmethod
    def start(cls) -> _Probe | None:
        """The trial, started; None when it cannot start (no temp folder, no interpreter)."""
        import tempfile

        folder = None
        try:
            folder = tempfile.mkdtemp(prefix="gpuops-contain-")
            box = os.path.join(folder, "hidden", "box")
            os.makedirs(box, mode=0o700)
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(CONTAIN_PY), "--keep", box, "--hide", os.path.join(folder, "hidden")]
                + ["--", "true"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            return None
        return cls(proc, folder)

    def passed(self) -> bool:
        """True when the trial exited 0 within ``PROBE_TIMEOUT_S`` of the first call (killed past it)."""
        if self._result is None:
            try:
                self._result = self.proc.wait(timeout=PROBE_TIMEOUT_S) == 0
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._result = False
            shutil.rmtree(self.folder, ignore_errors=True)
        return self._result
