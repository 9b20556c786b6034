"""Provider emulators held to the providers' published specs (RunPod REST v2 plus its GraphQL balance,
Vast.ai REST; tests/emulators/contract.py); see tests/support/emulators.py for the fixtures that
start them."""

from tests.emulators import contract
from gpuops.emulators.runpod import RunPodEmulator
from gpuops.emulators.vast import VastEmulator

__all__ = ["RunPodEmulator", "VastEmulator", "contract"]
