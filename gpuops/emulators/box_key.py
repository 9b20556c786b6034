"""Emulated providers for boxes that share one machine, and so one narrow key.

A rented box holds the narrowest key its provider offers in PID 1's environment (RunPod's
pod-scoped ``RUNPOD_API_KEY``, Vast's per-instance ``CONTAINER_API_KEY``), which its on-box agent
destroys with. Boxes that are one sshd on 127.0.0.1 (the suite's `gpuops check` boxes, `gpuops
demo`'s) share one environment file, so these emulators accept one box key for the destroy (or
stop) of any of their instances, and for nothing else.
"""

from __future__ import annotations

import re
from typing import Any

from gpuops.emulators.runpod import RunPodEmulator, pod_key
from gpuops.emulators.volumes import VastVolumeEmulator

BOX_KEY = "box-scoped-key"  # the key every box of one machine holds (its stand-in PID 1 environment)


class BoxKeyRunPod(RunPodEmulator):
    """RunPod: the box key is a pod-scoped key for whichever pod it names.

    What it may do is the emulator's own switch (``pod_key_may``: terminate, stop, both or neither)."""

    box_key = BOX_KEY

    def _pod_key_account(self, req: dict, op: str, pid: str) -> tuple[str | None, tuple[int, Any, str] | None]:
        if req["auth"] == f"Bearer {self.box_key}" and pid in self.market.instances:
            req = dict(req, auth=f"Bearer {pod_key(pid)}")
        return super()._pod_key_account(req, op, pid)


class BoxKeyVast(VastVolumeEmulator):
    """Vast (with its volumes): the box key may destroy any instance (``DELETE /api/v0/instances/{id}/``), nothing else."""

    box_key = BOX_KEY

    def authorized(self, req: dict) -> bool:
        """True for an account's key, and for the box key on a ``DELETE`` of an instance."""
        return super().authorized(req) or (
            req["auth"] == f"Bearer {self.box_key}"
            and req["method"] == "DELETE"
            and bool(re.fullmatch(r"/api/v0/instances/\d+/", req["path"]))
        )


def environ_file(box_key: str = BOX_KEY) -> bytes:
    """The stand-in ``/proc/1/environ`` of such boxes: both providers' variables holding ``box_key``."""
    return f"RUNPOD_API_KEY={box_key}".encode() + b"\0" + f"CONTAINER_API_KEY={box_key}".encode() + b"\0"
