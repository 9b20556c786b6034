"""The `local` provider: this machine, no account needed.

An "instance" is a directory ``<data dir>/boxes/<session>/`` holding ``instance.json``; bootstrap
and job run there as child process groups (``gpuops.box.local.LocalBox``). Destroy ends those groups
(TERM, then KILL after ``kill_grace_seconds``), writes ``destroyed.json`` and keeps the logs; after
``[providers.local] keep_box_days`` the rest of a destroyed box is pruned (``boxes.py``).

Price: ``[providers.local] price_per_hour`` when set (a real cost, e.g. your own workstation);
otherwise the card's catalog reference price, and the offer is marked simulated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from bootstrap.localbox import end_box
from bootstrap.policy import KILL_GRACE_SECONDS
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

    Read from the sibling folders' entries, not the registry (which imports this folder)."""
    from gpuops.providers import runpod, vast

    spot = " or ".join(f"--provider {e.name}" for e in (runpod.ENTRY, vast.ENTRY) if e.spot)
    return f"use {spot} for interruptible offers, or --on-demand to rent on this machine"


class LocalProvider(Provider):
    """This machine as a provider. ``boxes_dir``: where session directories live."""

    name = "local"
    http_calls = False  # processes on this machine only: no HTTP for http_guard to bound
    # What `up` says once when it rents a local box: the box is not a separate user or namespace,
    # so a job that looks (its parents' /proc/PID/environ, the layout of the data dir) can read and
    # delete what the user can, gpuops' own data included. README ("Local boxes") says the same.
    containment_note = (
        "a local job runs with your own user's rights: it can read and delete whatever you can, "
        "gpuops' data dir and ledger included; run a job you do not trust on a rented box"
    )

    def __init__(
        self,
        boxes_dir: Path,
        price_per_hour: float | None = None,
        kill_grace_seconds: float = KILL_GRACE_SECONDS,
        keep_box_days: float = 7.0,
    ):
        self.boxes_dir = Path(boxes_dir)
        self.keep_box_days = (
            keep_box_days  # a destroyed box keeps only its logs after this (gpuops/providers/local/boxes.py)
        )
        self.price_per_hour = price_per_hour
        self.kill_grace_seconds = kill_grace_seconds
        # "Account" on this machine: who and where (gpuops.ownership.local_account). A box of another
        # machine, user or data dir is never seen here, so it is never an orphan here either.
        from gpuops.ownership import local_account

        self.account = local_account(self.boxes_dir)

    def _offer(self, card: Card, gpu_count: int) -> Offer:
        simulated = self.price_per_hour is None
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
        return self._instance(d, meta)

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

        The rule is bootstrap/localbox.py's, which the on-box agent applies too; a gone box is
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
        return LocalBox(Path(instance.extra["local_root"]))
