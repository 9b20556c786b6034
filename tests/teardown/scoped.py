"""The provider emulators, plus the narrow keys a box has: RunPod's pod-scoped ``RUNPOD_API_KEY``
(served by the RunPod emulator itself: what it may do is its ``pod_key_may`` switch) and Vast's
per-instance ``CONTAINER_API_KEY`` (it may destroy its own instance). The shared Vast emulator
accepts only the account key."""

from __future__ import annotations

import re

from gpuops.emulators.runpod import pod_key as runpod_pod_key  # noqa: F401  (re-exported for the tests)
from tests.emulators import RunPodEmulator, VastEmulator


def vast_instance_key(instance_id: str) -> str:
    return f"inst-{instance_id}-scoped"  # what the Vast emulator's create returns as instance_api_key


class ScopedRunPodEmulator(RunPodEmulator):
    """The RunPod emulator (its pod-scoped keys are its own)."""


class ScopedVastEmulator(VastEmulator):
    def authorized(self, req: dict) -> bool:
        if super().authorized(req):
            return True
        m = re.fullmatch(r"Bearer inst-(\d+)-scoped", req["auth"])
        return bool(m) and req["method"] == "DELETE" and req["path"] == f"/api/v0/instances/{m.group(1)}/"
