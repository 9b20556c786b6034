"""The provider emulators, plus the narrow keys a box has: RunPod's pod-scoped ``RUNPOD_API_KEY``
(it may terminate its own pod, nothing else) and Vast's per-instance ``CONTAINER_API_KEY`` (it may
destroy its own instance). The shared emulators accept only the account key."""

from __future__ import annotations

import re

import graphql
from graphql.utilities import value_from_ast_untyped

from tests.emulators import RunPodEmulator, VastEmulator


def runpod_pod_key(pod_id: str) -> str:
    return f"rp_pod_{pod_id}_scoped"


def vast_instance_key(instance_id: str) -> str:
    return f"inst-{instance_id}-scoped"  # what the Vast emulator's create returns as instance_api_key


class ScopedRunPodEmulator(RunPodEmulator):
    def authorized(self, req: dict) -> bool:
        if super().authorized(req):
            return True
        m = re.fullmatch(r"Bearer rp_pod_(.+)_scoped", req["auth"])
        if not m:
            return False
        try:
            field = graphql.parse((req["body"] or {}).get("query", "")).definitions[0].selection_set.selections[0]
        except (graphql.GraphQLError, AttributeError, IndexError):
            return False
        args = {a.name.value: value_from_ast_untyped(a.value) for a in (field.arguments or ())}
        return field.name.value == "podTerminate" and (args.get("input") or {}).get("podId") == m.group(1)


class ScopedVastEmulator(VastEmulator):
    def authorized(self, req: dict) -> bool:
        if super().authorized(req):
            return True
        m = re.fullmatch(r"Bearer inst-(\d+)-scoped", req["auth"])
        return bool(m) and req["method"] == "DELETE" and req["path"] == f"/api/v0/instances/{m.group(1)}/"
