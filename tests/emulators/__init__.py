"""Provider emulators that the real SDKs talk to (RunPod GraphQL, Vast.ai REST); see
tests/support/emulators.py for the fixtures that start them."""

from tests.emulators.runpod import RunPodEmulator
from tests.emulators.vast import VastEmulator

__all__ = ["RunPodEmulator", "VastEmulator"]
